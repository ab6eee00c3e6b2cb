/**
 * Conformance, the finishing writes: `complete`'s batch, fenced, with its history; retried, unstorable
 * text and results, each kind's write, and the cancel of a running message.
 */
import { assert } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import { type Attempt, type Claim, isResultTooLarge, isResultUnstorable } from "../../src/Message.ts"
import { defaults, type Finish as FinishKind, QueueStore } from "../../src/QueueStore.ts"
import * as Finish from "../support/Finish.ts"
import { claimAll, freshQueue, msg, realSleep, sendAll, type Suite } from "./support.ts"

/** complete tests of the conformance suite (see index.ts). */
export const complete = ({ it, movesTime, databaseClock }: Suite) => {
  movesTime("complete: a mixed batch writes each message as its kind says, fenced, with its history, in one call", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("complete")
      yield* TestClock.setTime(7_000_000)
      const sent = yield* sendAll(queue, ["ack", "retry", "dead", "release", "stale", "forget"].map((p) => msg(p)))
      const claims = yield* claimAll(queue, { consumer: "first" })
      assert.strictEqual(claims.length, 6)
      const [ackC, retryC, deadC, releaseC, staleC, forgetC] = claims as unknown as [Claim, Claim, Claim, Claim, Claim, Claim]
      const completion = (c: Claim, finish: FinishKind, outcome: "acked" | "retried" | "dead-lettered" | "released" | "lease-lost", error: string | null = null) => ({
        ref: c.leaseToken === staleC.leaseToken ? { id: c.id, leaseToken: "00000000-0000-4000-8000-000000000000" as Claim["leaseToken"] } : c,
        finish,
        queue,
        task: c.task,
        attempt: c.attempts,
        consumer: "first",
        startedAt: new Date(7_000_000),
        outcome,
        error
      })
      yield* TestClock.adjust("1 second")
      const held = yield* store.complete([
        completion(ackC, { _tag: "Ack" }, "acked"),
        completion(retryC, { _tag: "Retry", delayMs: 5_000, error: "boom" }, "retried", "boom"),
        completion(deadC, { _tag: "DeadLetter", reason: "bad payload", error: "decode" }, "dead-lettered", "decode"),
        completion(releaseC, { _tag: "Release" }, "released"),
        completion(staleC, { _tag: "Ack" }, "acked"), // a token that is not (or no longer) the holder's
        completion(forgetC, { _tag: "Forget" }, "lease-lost", "another consumer holds it")
      ])
      assert.deepStrictEqual([...held.held].sort(), [ackC.id, retryC.id, deadC.id, releaseC.id].sort())
      assert.deepStrictEqual(held.cancelled, [])
      // The ack deleted; the release is visible now with its attempt given back; the retry after 5 s
      // with its error; the dead letter is out of the ready set; the stale and forgotten ones untouched.
      const stats = yield* store.stats(queue)
      assert.deepStrictEqual([stats.ready, stats.delayed, stats.inFlight, stats.dead], [1, 1, 2, 1])
      const [dead] = yield* store.deadLetters({ queue })
      assert.deepStrictEqual([dead!.id, dead!.reason, dead!.lastError], [deadC.id, "bad payload", "decode"])
      const now = yield* claimAll(queue, { consumer: "second" })
      assert.deepStrictEqual(now.map((c) => [c.id, c.attempts]), [[releaseC.id, 1]])
      yield* TestClock.adjust("5 seconds")
      const later = yield* claimAll(queue, { consumer: "second" })
      assert.deepStrictEqual(later.map((c) => [c.id, c.attempts, c.lastError]), [[retryC.id, 2, "boom"]])
      // Idempotent: completing again (its first commit landed, its answer was lost) answers held, records nothing more.
      assert.deepStrictEqual(yield* store.complete([completion(ackC, { _tag: "Ack" }, "acked")]), { held: [ackC.id], cancelled: [] })
      // History: one record each, the outcome as asked where the lease was held, lease-lost where not.
      const outcomes = yield* Effect.forEach([ackC, retryC, deadC, releaseC, staleC, forgetC], (c) =>
        Effect.map(store.attempts(c.id), (a) => a.map((x) => [x.outcome, x.error, x.consumer, x.attempt])))
      assert.deepStrictEqual(outcomes, [
        [["acked", null, "first", 1]],
        [["retried", "boom", "first", 1]],
        [["dead-lettered", "decode", "first", 1]],
        [["released", null, "first", 1]],
        [["lease-lost", null, "first", 1]],
        [["lease-lost", "another consumer holds it", "first", 1]]
      ])
      assert.deepStrictEqual(yield* store.complete([]), { held: [], cancelled: [] })
      void sent
    }))

  it.effect("complete retried after its commit landed (answer lost) answers as the first did and records no second history row", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("retried-complete")
      yield* sendAll(queue, ["ack", "retry", "dead", "release", "cancel", "forget", "lost"].map((p) => msg(p)))
      const claims = yield* claimAll(queue, { consumer: "w1" })
      const [ackC, retryC, deadC, releaseC, cancelC, forgetC, lostC] = claims as unknown as [Claim, Claim, Claim, Claim, Claim, Claim, Claim]
      // Its cancel asked for while it ran: its retry is written as a cancel (deleted).
      yield* store.cancel([cancelC.id])
      const startedAt = new Date(1_700_000_000_123)
      const completion = (c: Claim, finish: FinishKind, outcome: Attempt["outcome"], error: string | null = null, token = c.leaseToken) => ({
        ref: { id: c.id, leaseToken: token },
        finish,
        queue,
        task: c.task,
        attempt: c.attempts,
        consumer: "w1",
        startedAt,
        outcome,
        error
      })
      const batch = [
        completion(ackC, { _tag: "Ack" }, "acked"),
        completion(retryC, { _tag: "Retry", delayMs: 60_000, error: "boom \u0000" }, "retried", "boom \u0000"),
        completion(deadC, { _tag: "DeadLetter", reason: "bad", error: "decode" }, "dead-lettered", "decode"),
        completion(releaseC, { _tag: "Release" }, "released"),
        completion(cancelC, { _tag: "Retry", delayMs: 0, error: "late" }, "retried", "late"),
        completion(forgetC, { _tag: "Forget" }, "lease-lost", "another consumer holds it"),
        completion(lostC, { _tag: "Ack" }, "acked", null, "00000000-0000-4000-8000-000000000000" as Claim["leaseToken"])
      ]
      const first = yield* store.complete(batch)
      const landed = [ackC.id, retryC.id, deadC.id, releaseC.id, cancelC.id].sort()
      assert.deepStrictEqual([[...first.held].sort(), first.cancelled], [landed, [cancelC.id]])
      const historyOf = () => Effect.forEach(claims, (c) => Effect.map(store.attempts(c.id), (a) => a.map((x) => x.outcome)))
      const before = yield* historyOf()
      assert.deepStrictEqual(before, [["acked"], ["retried"], ["dead-lettered"], ["released"], ["cancelled"], ["lease-lost"], ["lease-lost"]])
      // The same batch again: the same answer, and not one record more (no false lease-lost, no double run).
      const again = yield* store.complete(batch)
      assert.deepStrictEqual([[...again.held].sort(), again.cancelled], [landed, [cancelC.id]])
      assert.deepStrictEqual(yield* historyOf(), before)
      // Another run of the same message (a later start) whose token is stale is still a lost lease, recorded.
      const later = { ...completion(ackC, { _tag: "Ack" }, "acked"), startedAt: new Date(1_700_000_000_999) }
      assert.deepStrictEqual(yield* store.complete([later]), { held: [], cancelled: [] })
      assert.deepStrictEqual((yield* store.attempts(ackC.id)).map((a) => a.outcome), ["acked", "lease-lost"])
    }))

  it.effect("complete: NUL characters and lone surrogates in errors, reasons and results never fail the batch; text escaped, results marked with their path", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("unstorable")
      yield* sendAll(queue, ["good", "nul-error", "nul-reason", "nul-result", "surrogate-result", "key", "good2"].map((p) => msg(p)))
      const claims = yield* claimAll(queue)
      const [goodC, errC, reasonC, resultC, surrogateC, keyC, good2C] = claims as unknown as [Claim, Claim, Claim, Claim, Claim, Claim, Claim]
      const completion = (c: Claim, finish: FinishKind, outcome: Attempt["outcome"], error: string | null, result?: string) => ({
        ref: c,
        finish,
        queue,
        task: c.task,
        attempt: c.attempts,
        consumer: "c1",
        startedAt: new Date(),
        outcome,
        error,
        ...(result === undefined ? {} : { result })
      })
      // V8's own JSON.parse errors quote the bad character.
      const nulError = (() => {
        try {
          JSON.parse("\u0000")
          return "parsed"
        } catch (e) {
          return `upstream said \u0000: ${String(e)} \ud800 end`
        }
      })()
      const held = yield* store.complete([
        completion(goodC, { _tag: "Ack" }, "acked", null, JSON.stringify({ ok: "\u2603" })),
        completion(errC, { _tag: "Retry", delayMs: 0, error: nulError }, "retried", nulError),
        completion(reasonC, { _tag: "DeadLetter", reason: "unrecoverable: a\u0000b", error: "x\udc00y" }, "dead-lettered", "x\udc00y"),
        completion(resultC, { _tag: "Ack" }, "acked", null, JSON.stringify({ items: [1, { name: "a\u0000" }] })),
        completion(surrogateC, { _tag: "Ack" }, "acked", null, JSON.stringify(["\ud83d"])),
        completion(keyC, { _tag: "Ack" }, "acked", null, JSON.stringify({ "bad\u0000key": 1 })),
        completion(good2C, { _tag: "Ack" }, "acked", null)
      ])
      assert.strictEqual(held.held.length, 7, "every write landed")
      const only = (c: Claim) => Effect.map(store.attempts(c.id), (h) => h[0]!)
      assert.deepStrictEqual((yield* only(goodC)).result, { ok: "\u2603" })
      const escaped = nulError.replaceAll("\u0000", "\\u0000").replace("\ud800", "\ufffd")
      assert.strictEqual((yield* only(errC)).error, escaped)
      assert.include(escaped, "upstream said \\u0000")
      const [again] = yield* claimAll(queue)
      assert.deepStrictEqual([again!.id, again!.lastError], [errC.id, escaped])
      const [dead] = yield* store.deadLetters({ queue })
      assert.deepStrictEqual([dead!.reason, dead!.lastError], ["unrecoverable: a\\u0000b", "x\ufffdy"])
      const nulMarker = { leasehold: "result-unstorable", path: "result.items[1].name", reason: "contains a NUL character (\\u0000), which PostgreSQL jsonb cannot store" }
      assert.deepStrictEqual((yield* only(resultC)).result, nulMarker)
      assert.isTrue(isResultUnstorable((yield* only(resultC)).result))
      assert.deepStrictEqual((yield* only(surrogateC)).result, {
        leasehold: "result-unstorable",
        path: "result[0]",
        reason: "contains a lone UTF-16 surrogate, which PostgreSQL jsonb cannot store"
      })
      assert.strictEqual(((yield* only(keyC)).result as { path: string }).path, 'result["bad\\u0000key"]')
    }))

  it.effect("complete keeps an ack's result (encoded JSON) with its history record, bounded in UTF-8 bytes; none stores nothing", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("results")
      yield* sendAll(queue, ["json", "void", "big", "wide-ok", "wide-big", "lost"].map((p) => msg(p)))
      const claims = yield* claimAll(queue)
      assert.strictEqual(claims.length, 6)
      const [jsonC, voidC, bigC, wideOkC, wideBigC, lostC] = claims as unknown as [Claim, Claim, Claim, Claim, Claim, Claim]
      const ack = (c: Claim, result: string | undefined, token = c.leaseToken) => ({
        ref: { id: c.id, leaseToken: token },
        finish: { _tag: "Ack" as const },
        queue,
        task: c.task,
        attempt: c.attempts,
        consumer: "c1",
        startedAt: new Date(),
        outcome: "acked" as const,
        error: null,
        ...(result === undefined ? {} : { result })
      })
      // 64 KiB is measured in UTF-8 bytes: 30,000 two-byte characters fit, 40,000 do not.
      const wideOk = JSON.stringify("é".repeat(30_000))
      const wideBig = JSON.stringify("é".repeat(40_000))
      const held = yield* store.complete([
        ack(jsonC, JSON.stringify({ total: 3, items: ["x", "ü"], none: null })),
        ack(voidC, undefined),
        ack(bigC, JSON.stringify("x".repeat(70_000))),
        ack(wideOkC, wideOk),
        ack(wideBigC, wideBig),
        // A lost lease keeps the run's result on its lease-lost record too.
        ack(lostC, JSON.stringify([1]), "00000000-0000-4000-8000-000000000000" as Claim["leaseToken"])
      ])
      assert.strictEqual(held.held.length, 5)
      const only = (c: Claim) =>
        Effect.map(store.attempts(c.id), (history) => {
          assert.strictEqual(history.length, 1)
          return history[0]!
        })
      assert.deepStrictEqual((yield* only(jsonC)).result, { total: 3, items: ["x", "ü"], none: null })
      assert.isFalse("result" in (yield* only(voidC)), "no result, no key")
      const big = (yield* only(bigC)).result
      assert.isTrue(isResultTooLarge(big))
      assert.deepStrictEqual(big, { leasehold: "result-too-large", bytes: 70_002, limit: defaults.maxResultBytes })
      assert.strictEqual((yield* only(wideOkC)).result, "é".repeat(30_000))
      assert.deepStrictEqual((yield* only(wideBigC)).result, { leasehold: "result-too-large", bytes: 80_002, limit: 65_536 })
      const lost = yield* only(lostC)
      assert.deepStrictEqual([lost.outcome, lost.result], ["lease-lost", [1]])
    }))

  movesTime("a message dead-lettered on a claim beyond its last attempt shows at most maxAttempts", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("overclaim")
      yield* TestClock.setTime(9_000_000)
      const [a, b] = yield* sendAll(queue, [msg("a", { maxAttempts: 2 }), msg("b", { maxAttempts: 2 })])
      // Two holders die (their leases run out), then a third claim: attempts 3 of 2.
      let last: ReadonlyArray<Claim> = []
      for (let i = 0; i < 3; i++) {
        // A suspect is claimed alone: claim until both are held again.
        last = [...(yield* claimAll(queue, { lease: "1 second" })), ...(yield* claimAll(queue, { lease: "1 second" }))]
        if (i < 2) yield* TestClock.adjust("2 seconds")
      }
      const byPayload = (p: string) => last.find((c) => c.payload === p)!
      assert.deepStrictEqual([byPayload("a").attempts, byPayload("b").attempts], [3, 3])
      const viaComplete = byPayload("a")
      const held = yield* store.complete([{
        ref: viaComplete,
        finish: { _tag: "DeadLetter", reason: "suspected worker-killer" },
        queue,
        task: "job",
        attempt: 2,
        consumer: "c1",
        startedAt: new Date(9_004_000),
        outcome: "dead-lettered",
        error: "suspected worker-killer"
      }])
      assert.deepStrictEqual(held, { held: [a!.id], cancelled: [] })
      assert.strictEqual(yield* Finish.deadLetter(store, byPayload("b"), { reason: "attempts exhausted" }), "written")
      const dead = yield* store.deadLetters({ queue })
      assert.deepStrictEqual(dead.map((d) => [d.id, d.attempts, d.maxAttempts]).sort(), [[a!.id, 2, 2], [b!.id, 2, 2]].sort())
    }))

  movesTime("retry hides the message for the delay, keeps the attempt and records the error", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("retry")
      yield* sendAll(queue, [msg("m")])
      const [c] = yield* claimAll(queue)
      assert.strictEqual(yield* Finish.retry(store, c!, { delay: "5 seconds", error: "boom: it failed" }), "written")
      assert.strictEqual((yield* store.stats(queue)).delayed, 1)
      yield* TestClock.adjust("4 seconds")
      assert.strictEqual((yield* claimAll(queue)).length, 0)
      yield* TestClock.adjust("1 second")
      const [again] = yield* claimAll(queue)
      assert.strictEqual(again!.attempts, 2)
      assert.strictEqual(again!.lastError, "boom: it failed")
      // Error text is bounded.
      assert.strictEqual(yield* Finish.retry(store, again!, { delay: 0, error: "x".repeat(100_000) }), "written")
      const [third] = yield* claimAll(queue)
      assert.isTrue(third!.lastError!.length <= 8 * 1024)
    }))

  it.effect("a release wakes the queue's subscribers, as a send does", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("release-wake")
      yield* sendAll(queue, [msg(1)])
      const [claimed] = yield* claimAll(queue)
      const next = yield* store.sends([queue]) // subscribed after the send: nothing pending
      const waiter = yield* Effect.forkChild(next)
      assert.strictEqual(yield* Finish.release(store, claimed!, { consumer: "shutting-down" }), "written")
      yield* Fiber.join(waiter)
    }))

  it.effect("cancel of a running message: a retry, release or dead letter of it is a cancel; an ack stays an ack", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("cancel-race")
      const sent = yield* sendAll(queue, [msg("retry"), msg("release"), msg("dead"), msg("ack")])
      const claims = yield* claimAll(queue)
      assert.deepStrictEqual((yield* store.cancel(sent.map((s) => s.id))).map((r) => r.result), Array(4).fill("cancelling"))
      const finishes = [
        { _tag: "Retry", delayMs: 0, error: "boom" },
        { _tag: "Release" },
        { _tag: "DeadLetter", reason: "r" },
        { _tag: "Ack" }
      ] as const
      const outcomes = ["retried", "released", "dead-lettered", "acked"] as const
      const held = yield* store.complete(claims.map((c, k) => ({
        ref: c,
        finish: finishes[k]!,
        queue,
        task: "job",
        attempt: 1,
        consumer: "c1",
        startedAt: new Date(0),
        outcome: outcomes[k]!,
        error: null
      })))
      assert.deepStrictEqual([...held.held].sort(), sent.map((s) => s.id).sort())
      assert.deepStrictEqual([...held.cancelled].sort(), sent.slice(0, 3).map((s) => s.id).sort(), "the ack is no cancel")
      assert.deepStrictEqual(yield* store.messages(queue), [], "every one deleted")
      const history = yield* Effect.forEach(sent, (s) => Effect.map(store.attempts(s.id), (h) => h.map((a) => a.outcome)))
      assert.deepStrictEqual(history, [["cancelled"], ["cancelled"], ["cancelled"], ["acked"]])
    }))

  if (databaseClock) {
    it.effect("database clock: a retry's delay runs on the server's clock; a release is visible at once", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("db-retry")
        yield* sendAll(queue, [msg("r"), msg("l")])
        const [r, l] = yield* claimAll(queue, { lease: "1 minute" })
        assert.strictEqual(yield* Finish.retry(store, r!, { delay: "1 second", error: "boom" }), "written")
        assert.strictEqual((yield* store.stats(queue)).delayed, 1)
        // Released: visible at once, the attempt given back.
        assert.strictEqual(yield* Finish.release(store, l!), "written")
        assert.deepStrictEqual((yield* claimAll(queue)).map((c) => [c.payload, c.attempts]), [["l", 1]])
        assert.strictEqual((yield* claimAll(queue)).length, 0, "the retry waits for its delay")
        yield* realSleep(1_300)
        const again = yield* claimAll(queue)
        assert.deepStrictEqual(again.map((c) => [c.payload, c.attempts, c.lastError]), [["r", 2, "boom"]])
      }))
  }
}
