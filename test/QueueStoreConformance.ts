/**
 * The conformance suite every QueueStore must pass. It runs on the memory store
 * and on real PostgreSQL (see MemoryQueueStore.test.ts and PgQueueStore.test.ts).
 * Time is Effect's Clock, moved with TestClock; PostgreSQL also runs it on the database's
 * clock (production's path), with real-time tests in place of those that move time.
 * Each test uses its own queue.
 */
import { assert, layer } from "@effect/vitest"
import { type Duration, Effect, Fiber, type Layer, Option } from "effect"
import { TestClock } from "effect/testing"
import { type Attempt, type Claim, isResultTooLarge, isResultUnstorable, type MessageId, type MessageState, type NewMessage } from "../src/Message.ts"
import { defaults, QueueStore, type ScheduleSpec } from "../src/QueueStore.ts"

let counter = 0
/** A queue name no other test of this run uses. */
const freshQueue = (label: string) => `${label}-${++counter}-${Math.random().toString(36).slice(2, 6)}`

const msg = (payload: unknown, extra: Partial<NewMessage> = {}): NewMessage => ({ task: "job", payload, ...extra })

const sendAll = (queue: string, messages: ReadonlyArray<NewMessage>) =>
  Effect.gen(function*() {
    const store = yield* QueueStore
    return yield* store.send(queue, messages)
  })

const claimAll = (queue: string, options: { lease?: Duration.Input; limit?: number; consumer?: string } = {}) =>
  Effect.gen(function*() {
    const store = yield* QueueStore
    return yield* store.claim(queue, {
      lease: options.lease ?? "30 seconds",
      limit: options.limit ?? 100,
      consumer: options.consumer ?? "c1"
    })
  })

/** The error an operation failed with, as a refusal of bad input reads it. */
const refusal = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.map(Effect.flip(effect), (e) => e as unknown as { readonly _tag: string; readonly field: string })

/** Wait for real (the TestClock does not move a database's `now()`). */
const realSleep = (ms: number) => Effect.promise(() => new Promise<void>((done) => setTimeout(done, ms)))

/** Milliseconds by the machine's clock, which the local test server shares. */
const wallClock = Effect.sync(() => Date.now())

/**
 * Define the conformance suite for a store layer. `exactlyOnceMessages` sizes the heavy
 * exactly-once test.
 *
 * `clock` says what times the store: `"effect"` (Effect's Clock, so TestClock moves it: the
 * memory store, and PostgreSQL with `clock: "effect"`) or `"database"` (the server's `now()`,
 * as in production). On the database clock the tests that move time with TestClock are
 * skipped (`movesTime`), and a set of real-time tests below covers the same rules with short
 * leases and delays, real waits and generous bounds: lease arithmetic, delays, expiry,
 * fencing after a reclaim, renewal, retry and release delays, dead-letter times, the oldest
 * ready age and pruning.
 */
export const conformance = (
  name: string,
  storeLayer: Layer.Layer<QueueStore, unknown>,
  options: { readonly exactlyOnceMessages: number; readonly clock?: "effect" | "database" | undefined }
) =>
  layer(storeLayer)(`QueueStore conformance: ${name}`, (it) => {
    const databaseClock = options.clock === "database"
    /** A test that moves time with TestClock: skipped on the database clock (covered by the real-time tests). */
    const movesTime = databaseClock ? it.effect.skip : it.effect
    movesTime("send then claim returns the message with a fresh lease", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("basic")
        yield* TestClock.setTime(1_000_000)
        const [sent] = yield* store.send(queue, [msg({ n: 1, s: "ü" }, { headers: { trace: "abc" }, maxAttempts: 7 })])
        assert.strictEqual(sent!.deduplicated, false)
        const claims = yield* store.claim(queue, { lease: "30 seconds", limit: 10, consumer: "worker-a" })
        assert.strictEqual(claims.length, 1)
        const c = claims[0]!
        assert.strictEqual(c.id, sent!.id)
        assert.deepStrictEqual(c.payload, { n: 1, s: "ü" })
        assert.deepStrictEqual(c.headers, { trace: "abc" })
        assert.strictEqual(c.task, "job")
        assert.strictEqual(c.attempts, 1)
        assert.strictEqual(c.maxAttempts, 7)
        assert.strictEqual(c.consumer, "worker-a")
        assert.strictEqual(c.leaseExpiresAt.getTime(), 1_000_000 + 30_000)
        assert.match(c.leaseToken, /^[0-9a-f-]{36}$/)
        // Hidden while leased.
        assert.strictEqual((yield* store.claim(queue, { lease: "30 seconds", limit: 10, consumer: "worker-b" })).length, 0)
      }))

    movesTime("a message dead-lettered on a claim beyond its last attempt shows at most maxAttempts (complete and deadLetter)", () =>
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
        assert.strictEqual(yield* store.deadLetter(byPayload("b"), { reason: "attempts exhausted" }), "written")
        const dead = yield* store.deadLetters({ queue })
        assert.deepStrictEqual(dead.map((d) => [d.id, d.attempts, d.maxAttempts]).sort(), [[a!.id, 2, 2], [b!.id, 2, 2]].sort())
      }))

    it.effect("redrive records a redriven history row, and the next attempts are numbered on from there", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("redriven")
        const [sent] = yield* sendAll(queue, [msg("r", { maxAttempts: 2 })])
        const run = (finish: import("../src/QueueStore.ts").Finish, outcome: "acked" | "retried" | "dead-lettered") =>
          Effect.gen(function*() {
            const [c] = yield* claimAll(queue)
            assert.isDefined(c)
            yield* store.complete([{
              ref: c!,
              finish,
              queue,
              task: c!.task,
              attempt: c!.attempts,
              consumer: "c1",
              startedAt: new Date(),
              outcome,
              error: outcome === "acked" ? null : "boom"
            }])
            return c!
          })
        yield* run({ _tag: "Retry", delayMs: 0, error: "boom" }, "retried")
        yield* run({ _tag: "DeadLetter", reason: "attempts exhausted", error: "boom" }, "dead-lettered")
        assert.deepStrictEqual(yield* store.redrive({ queue }), [sent!.id])
        // A fresh drive: its attempts bounded by maxAttempts again, counted from 1.
        const again = yield* run({ _tag: "Ack" }, "acked")
        assert.strictEqual(again.attempts, 1)
        const history = yield* store.attempts(sent!.id)
        assert.deepStrictEqual(history.map((a) => [a.attempt, a.outcome]), [
          [1, "retried"],
          [2, "dead-lettered"],
          [2, "redriven"],
          [3, "acked"]
        ])
      }))

    it.effect("send many returns ids in input order; claim honours the limit", () =>
      Effect.gen(function*() {
        const queue = freshQueue("many")
        const sent = yield* sendAll(queue, Array.from({ length: 12 }, (_, i) => msg({ i })))
        assert.strictEqual(sent.length, 12)
        assert.strictEqual(new Set(sent.map((s) => s.id)).size, 12)
        const first = yield* claimAll(queue, { limit: 5 })
        assert.deepStrictEqual(first.map((c) => c.payload), [0, 1, 2, 3, 4].map((i) => ({ i })))
        assert.deepStrictEqual(first.map((c) => c.id), sent.slice(0, 5).map((s) => s.id))
        const rest = yield* claimAll(queue, { limit: 100 })
        assert.strictEqual(rest.length, 7)
      }))

    movesTime("claims lowest priority number first, then earliest visibility, then id", () =>
      Effect.gen(function*() {
        const queue = freshQueue("prio")
        yield* sendAll(queue, [msg("p5-a", { priority: 5 })])
        yield* TestClock.adjust("1 second")
        yield* sendAll(queue, [msg("p1-late", { priority: 1 })])
        yield* sendAll(queue, [msg("p-3", { priority: -3 }), msg("p5-b", { priority: 5 })])
        // Delayed messages become visible later: earlier visibility wins within a priority.
        yield* sendAll(queue, [msg("p1-delayed", { priority: 1, delay: 500 })])
        yield* TestClock.adjust("2 seconds")
        const claims = yield* claimAll(queue, { limit: 2 })
        assert.deepStrictEqual(claims.map((c) => c.payload), ["p-3", "p1-late"])
        const more = yield* claimAll(queue)
        assert.deepStrictEqual(more.map((c) => c.payload), ["p1-delayed", "p5-a", "p5-b"])
      }))

    movesTime("a delayed message stays invisible until due", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("delay")
        const start = 5_000_000
        yield* TestClock.setTime(start)
        yield* sendAll(queue, [msg("later", { delay: 60_000 }), msg("now")])
        assert.deepStrictEqual((yield* claimAll(queue)).map((c) => c.payload), ["now"])
        const next = yield* store.nextVisibleAt(queue)
        assert.isTrue(Option.isSome(next))
        // The in-flight "now" message's lease (30 s) expires before the delay ends.
        assert.strictEqual(Option.getOrThrow(next).getTime(), start + 30_000)
        yield* TestClock.adjust("59 seconds")
        const early = yield* claimAll(queue)
        assert.deepStrictEqual(early.map((c) => c.payload), ["now"], "only the expired lease comes back")
        assert.strictEqual((yield* store.stats(queue)).delayed, 1)
        yield* TestClock.adjust("1 second")
        assert.deepStrictEqual((yield* claimAll(queue)).map((c) => c.payload), ["later"])
      }))

    movesTime("complete: a mixed batch writes each message as its single write would, fenced, with its history, in one call", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("complete")
        yield* TestClock.setTime(7_000_000)
        const sent = yield* sendAll(queue, ["ack", "retry", "dead", "release", "stale", "forget"].map((p) => msg(p)))
        const claims = yield* claimAll(queue, { consumer: "first" })
        assert.strictEqual(claims.length, 6)
        const [ackC, retryC, deadC, releaseC, staleC, forgetC] = claims as unknown as [Claim, Claim, Claim, Claim, Claim, Claim]
        const completion = (c: Claim, finish: import("../src/QueueStore.ts").Finish, outcome: "acked" | "retried" | "dead-lettered" | "released" | "lease-lost", error: string | null = null) => ({
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
        const completion = (c: Claim, finish: import("../src/QueueStore.ts").Finish, outcome: Attempt["outcome"], error: string | null = null, token = c.leaseToken) => ({
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
        const completion = (c: Claim, finish: import("../src/QueueStore.ts").Finish, outcome: Attempt["outcome"], error: string | null, result?: string) => ({
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
        // The single writes and recordAttempt go through the same boundary.
        yield* sendAll(queue, [msg("single-retry"), msg("single-dead")])
        const [r, d] = yield* claimAll(queue)
        assert.strictEqual(yield* store.retry(r!, { delay: 0, error: "one \u0000 two" }), "written")
        assert.strictEqual(yield* store.deadLetter(d!, { reason: "why \u0000", error: "\udfff" }), "written")
        yield* store.recordAttempt({ ...(yield* only(goodC)), attempt: 2, error: "rec \u0000", result: { s: "\u0000" } })
        const [retried] = yield* claimAll(queue)
        assert.strictEqual(retried!.lastError, "one \\u0000 two")
        const singleDead = (yield* store.deadLetters({ queue })).find((x) => x.id === d!.id)!
        assert.deepStrictEqual([singleDead.reason, singleDead.lastError], ["why \\u0000", "\ufffd"])
        const recorded = (yield* store.attempts(goodC.id))[1]!
        assert.deepStrictEqual([recorded.error, recorded.result], ["rec \\u0000", { ...nulMarker, path: "result.s" }])
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
        // recordAttempt takes a result too; null and undefined store nothing.
        yield* store.recordAttempt({ ...(yield* only(voidC)), attempt: 2, result: null })
        yield* store.recordAttempt({ ...(yield* only(jsonC)), attempt: 2, result: "x".repeat(70_000) })
        const [, second] = yield* store.attempts(voidC.id)
        assert.isFalse("result" in second!)
        const [, secondJson] = yield* store.attempts(jsonC.id)
        assert.deepStrictEqual(secondJson!.result, { leasehold: "result-too-large", bytes: 70_002, limit: 65_536 })
      }))

    it.effect("dedup: a live message with the key is returned instead of a new one", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("dedup")
        const [a] = yield* sendAll(queue, [msg("first", { dedupKey: "k1" })])
        const [b, c, d] = yield* sendAll(queue, [
          msg("second", { dedupKey: "k1" }),
          msg("other", { dedupKey: "k2" }),
          msg("other-again", { dedupKey: "k2" })
        ])
        assert.deepStrictEqual(b, { id: a!.id, deduplicated: true })
        assert.strictEqual(c!.deduplicated, false)
        assert.deepStrictEqual(d, { id: c!.id, deduplicated: true })
        // Another queue does not share keys.
        const [e] = yield* sendAll(freshQueue("dedup-other"), [msg("x", { dedupKey: "k1" })])
        assert.strictEqual(e!.deduplicated, false)
        // A claimed message still holds its key; once acked the key is free.
        const claims = yield* claimAll(queue)
        assert.strictEqual(claims.length, 2)
        const [again] = yield* sendAll(queue, [msg("third", { dedupKey: "k1" })])
        assert.deepStrictEqual(again, { id: a!.id, deduplicated: true })
        const first = claims.find((x) => x.id === a!.id)!
        assert.isTrue(yield* store.ack(first))
        const [fresh] = yield* sendAll(queue, [msg("fourth", { dedupKey: "k1" })])
        assert.strictEqual(fresh!.deduplicated, false)
        assert.notStrictEqual(fresh!.id, a!.id)
        // A dead letter does not hold its key.
        const second = claims.find((x) => x.id === c!.id)!
        assert.strictEqual(yield* store.deadLetter(second, { reason: "test" }), "written")
        const [afterDead] = yield* sendAll(queue, [msg("fifth", { dedupKey: "k2" })])
        assert.strictEqual(afterDead!.deduplicated, false)
      }))

    // Uniqueness windows: the reservation outlives the message.
    it.effect("unique: a key is held for its window after the send, through ack, dead-letter and purge", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("unique")
        const [a] = yield* sendAll(queue, [msg("first", { unique: { key: "u1", for: "1 hour" } })])
        assert.strictEqual(a!.deduplicated, false)
        // In one batch too: the second of the key finds the first.
        const [b, c, d] = yield* sendAll(queue, [
          msg("second", { unique: { key: "u1", for: "1 hour" } }),
          msg("other", { unique: { key: "u2", for: "1 hour" } }),
          msg("other-again", { unique: { key: "u2", for: "1 hour" } })
        ])
        assert.deepStrictEqual(b, { id: a!.id, deduplicated: true })
        assert.strictEqual(c!.deduplicated, false)
        assert.deepStrictEqual(d, { id: c!.id, deduplicated: true })
        assert.strictEqual((yield* store.messages(queue)).length, 2, "duplicates wrote nothing")
        // Another queue does not share keys; a plain dedup key is another namespace.
        assert.isFalse((yield* sendAll(freshQueue("unique-other"), [msg("x", { unique: { key: "u1", for: "1 hour" } })]))[0]!.deduplicated)
        assert.isFalse((yield* sendAll(queue, [msg("x", { dedupKey: "u1" })]))[0]!.deduplicated)
        // Acked: the message is gone, the key is still held by its id.
        const claims = yield* claimAll(queue)
        const first = claims.find((x) => x.id === a!.id)!
        assert.isTrue(yield* store.ack(first))
        assert.deepStrictEqual((yield* sendAll(queue, [msg("after-ack", { unique: { key: "u1", for: "1 hour" } })]))[0], {
          id: a!.id,
          deduplicated: true
        })
        // Dead-lettered, then purged: still held.
        const second = claims.find((x) => x.id === c!.id)!
        assert.strictEqual(yield* store.deadLetter(second, { reason: "test" }), "written")
        assert.deepStrictEqual((yield* sendAll(queue, [msg("after-dead", { unique: { key: "u2", for: "1 hour" } })]))[0], {
          id: c!.id,
          deduplicated: true
        })
        assert.deepStrictEqual(yield* store.purge({ ids: [c!.id] }), [c!.id])
        assert.deepStrictEqual((yield* sendAll(queue, [msg("after-purge", { unique: { key: "u2", for: "1 hour" } })]))[0], {
          id: c!.id,
          deduplicated: true
        })
        assert.strictEqual(yield* store.pruneUniqueKeys, 0, "nothing expired yet")
      }))

    movesTime("unique: the window ends after `for`; the next send takes the key over and holds it anew", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("unique-window")
        yield* TestClock.setTime(5_000_000)
        const [a] = yield* sendAll(queue, [msg(1, { unique: { key: "k", for: "10 seconds" } })])
        yield* TestClock.adjust("9999 millis")
        assert.deepStrictEqual((yield* sendAll(queue, [msg(2, { unique: { key: "k", for: "10 seconds" } })]))[0], { id: a!.id, deduplicated: true })
        yield* TestClock.adjust("1 millis")
        const [b] = yield* sendAll(queue, [msg(3, { unique: { key: "k", for: "1 minute" } })])
        assert.strictEqual(b!.deduplicated, false)
        assert.notStrictEqual(b!.id, a!.id)
        yield* TestClock.adjust("30 seconds")
        assert.deepStrictEqual((yield* sendAll(queue, [msg(4, { unique: { key: "k", for: "1 second" } })]))[0], { id: b!.id, deduplicated: true })
        // An expired reservation of another key is pruned; the live one stays.
        yield* sendAll(queue, [msg(5, { unique: { key: "short", for: "1 second" } })])
        yield* TestClock.adjust("2 seconds")
        assert.isAtLeast(yield* store.pruneUniqueKeys, 1)
        assert.deepStrictEqual((yield* sendAll(queue, [msg(6, { unique: { key: "k", for: "1 second" } })]))[0], { id: b!.id, deduplicated: true })
      }))

    it.effect("unique: bad windows are refused naming the rule, and nothing is written", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("unique-bad")
        const cases: ReadonlyArray<readonly [NewMessage, string, RegExp]> = [
          [msg(1, { unique: { key: "", for: "1 hour" } }), "unique.key", /1-512/],
          [msg(1, { unique: { key: "k", for: "soon" as Duration.Input } }), "unique.for", /duration/],
          [msg(1, { unique: { key: "k", for: 0 } }), "unique.for", /between 1 ms/],
          [msg(1, { unique: { key: "k", for: "1 hour" }, dedupKey: "d" }), "unique", /not both/]
        ]
        for (const [m, field, rule] of cases) {
          const e = (yield* Effect.flip(store.send(queue, [msg("fine"), m]))) as { _tag: string; field: string; message: string }
          assert.strictEqual(e._tag, "InvalidInput")
          assert.strictEqual(e.field, field)
          assert.match(e.message, rule)
        }
        assert.strictEqual((yield* store.messages(queue)).length, 0)
      }))

    it.effect("unique: concurrent sends of one key create exactly one message", () =>
      Effect.gen(function*() {
        const queue = freshQueue("unique-race")
        const results = yield* Effect.forEach(
          Array.from({ length: 20 }, (_, i) => i),
          (i) => sendAll(queue, [msg(i, { unique: { key: "once", for: "1 hour" } })]),
          { concurrency: 20 }
        )
        const ids = new Set(results.map((r) => r[0]!.id))
        assert.strictEqual(ids.size, 1)
        assert.strictEqual(results.filter((r) => !r[0]!.deduplicated).length, 1)
        const store = yield* QueueStore
        assert.strictEqual((yield* store.messages(queue)).length, 1)
      }))

    // Schedules: the rows workers upsert, and the fence that fires each slot once. The slots are in
    // the past of both clocks (a TestClock starts at 1970): a slot ahead of the store's clock never fires.
    const spec = (key: string, queue: string, extra: Partial<ScheduleSpec> = {}): ScheduleSpec => ({
      key,
      cron: "*/5 * * * *",
      tz: "UTC",
      queue,
      task: "tick",
      payload: { n: 1 },
      nextSlot: new Date("1969-12-30T00:05:00Z"),
      ...extra
    })
    const at = (iso: string) => new Date(iso)

    it.effect("schedules: upsert, list, fire each slot once (fenced), trigger, remove", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("sched")
        const key = freshQueue("key")
        const [row] = yield* store.upsertSchedules([spec(key, queue)], { seenBy: "w1", now: at("1969-12-30T00:01:00Z") })
        assert.strictEqual(row!.lastSlot.toISOString(), "1969-12-30T00:01:00.000Z", "a new schedule starts at its declaration")
        assert.strictEqual(row!.lastSeenBy, "w1")
        assert.deepStrictEqual(row!.payload, { n: 1 })
        const fire = (iso: string, extra: { cron?: string; tz?: string } = {}) =>
          store.fireSchedule(key, { slot: at(iso), nextSlot: null, cron: extra.cron ?? "*/5 * * * *", tz: extra.tz ?? "UTC" })
        assert.isTrue(Option.isNone(yield* fire("1969-12-30T00:00:00Z")), "a slot before the declaration never fires")
        const first = yield* fire("1969-12-30T00:05:00Z")
        assert.isTrue(Option.isSome(first))
        assert.isTrue(Option.isNone(yield* fire("1969-12-30T00:05:00Z")), "the same slot fires once")
        assert.isTrue(Option.isNone(yield* fire("1969-12-30T00:10:00Z", { cron: "*/10 * * * *" })), "another definition does not fire")
        assert.isTrue(Option.isNone(yield* fire("1969-12-30T00:10:00Z", { tz: "Europe/Berlin" })))
        assert.isTrue(Option.isSome(yield* fire("1969-12-30T00:10:00Z")))
        const sent = yield* store.messages(queue)
        assert.deepStrictEqual(sent.map((m) => [m.task, m.payload, m.headers["leasehold-schedule"], m.headers["leasehold-slot"]]), [
          ["tick", { n: 1 }, key, "1969-12-30T00:05:00.000Z"],
          ["tick", { n: 1 }, key, "1969-12-30T00:10:00.000Z"]
        ])
        assert.strictEqual(sent[0]!.id, Option.getOrThrow(first).id)
        const listed = (yield* store.schedules).find((s) => s.key === key)!
        assert.strictEqual(listed.lastSlot.toISOString(), "1969-12-30T00:10:00.000Z")
        assert.isNotNull(listed.firedAt)
        // Trigger: a message now, the slots untouched.
        const triggered = yield* store.triggerSchedule(key)
        assert.isTrue(Option.isSome(triggered))
        assert.strictEqual((yield* store.messages(queue)).at(-1)!.headers["leasehold-slot"], "manual")
        assert.strictEqual((yield* store.schedules).find((s) => s.key === key)!.lastSlot.toISOString(), "1969-12-30T00:10:00.000Z")
        // Remove: gone; a fire, a trigger and a second remove find nothing.
        assert.isTrue(yield* store.removeSchedule(key))
        assert.isFalse(yield* store.removeSchedule(key))
        assert.isTrue(Option.isNone(yield* store.triggerSchedule(key)))
        assert.isTrue(Option.isNone(yield* fire("1969-12-30T00:15:00Z")))
        assert.isUndefined((yield* store.schedules).find((s) => s.key === key))
        assert.strictEqual((yield* store.messages(queue)).length, 3)
      }))

    it.effect("schedules: a changed definition replaces the row (a new cron starts from now); a heartbeat only marks it seen", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("sched-change")
        const key = freshQueue("key")
        yield* store.upsertSchedules([spec(key, queue)], { seenBy: "w1", now: at("1969-12-30T00:00:00Z") })
        yield* store.fireSchedule(key, { slot: at("1969-12-30T00:05:00Z"), nextSlot: null, cron: "*/5 * * * *", tz: "UTC" })
        // Same cron, new payload: the definition changes, the last slot stays.
        const [same] = yield* store.upsertSchedules([spec(key, queue, { payload: { n: 2 } })], { seenBy: "w2", now: at("1969-12-30T01:00:00Z") })
        assert.deepStrictEqual([same!.lastSlot.toISOString(), same!.payload, same!.lastSeenBy], ["1969-12-30T00:05:00.000Z", { n: 2 }, "w2"])
        // A heartbeat of an older worker: seen, its definition not taken.
        const [seen] = yield* store.upsertSchedules([spec(key, queue, { cron: "0 * * * *", payload: { n: 1 } })], {
          seenBy: "old",
          now: at("1969-12-30T01:30:00Z"),
          replace: false
        })
        assert.deepStrictEqual([seen!.cron, seen!.payload, seen!.lastSeenBy, seen!.lastSeenAt.toISOString()], [
          "*/5 * * * *",
          { n: 2 },
          "old",
          "1969-12-30T01:30:00.000Z"
        ])
        // A changed cron: the last slot moves up to now, so the new expression fires from now on.
        const [changed] = yield* store.upsertSchedules([spec(key, queue, { cron: "0 * * * *" })], { seenBy: "w3", now: at("1969-12-30T02:00:00Z") })
        assert.deepStrictEqual([changed!.cron, changed!.lastSlot.toISOString()], ["0 * * * *", "1969-12-30T02:00:00.000Z"])
        const stale = yield* store.fireSchedule(key, { slot: at("1969-12-30T02:00:00Z"), nextSlot: null, cron: "0 * * * *", tz: "UTC" })
        assert.isTrue(Option.isNone(stale))
        // A heartbeat for a removed schedule inserts it again (a worker still declares it).
        yield* store.removeSchedule(key)
        const [back] = yield* store.upsertSchedules([spec(key, queue)], { seenBy: "w4", now: at("1969-12-30T03:00:00Z"), replace: false })
        assert.strictEqual(back!.lastSlot.toISOString(), "1969-12-30T03:00:00.000Z")
      }))

    it.effect("schedules: a slot ahead of the store's clock never fires; a declaration ahead of it starts at the store's now", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const storeNow = (yield* store.now).getTime()
        const tolerance = defaults.scheduleClockToleranceMs
        const queue = freshQueue("sched-ahead")
        const key = freshQueue("key")
        const yearMs = 365 * 86_400_000
        // Declared by a worker whose clock runs a year ahead: the row starts at the store's now.
        const [row] = yield* store.upsertSchedules([spec(key, queue, { cron: "* * * * * *" })], { seenBy: "ahead", now: new Date(storeNow + yearMs) })
        assert.isAtMost(Math.abs(row!.lastSlot.getTime() - storeNow), 60_000, "not a year ahead")
        assert.isAtMost(Math.abs(row!.lastSeenAt.getTime() - storeNow), 60_000)
        const fire = (ms: number) => store.fireSchedule(key, { slot: new Date(ms), nextSlot: null, cron: "* * * * * *", tz: "UTC" })
        // Whole seconds (the cron's slots) well past the store's now, and well past the tolerance.
        const future = Math.ceil((storeNow + yearMs) / 1000) * 1000
        assert.isTrue(Option.isNone(yield* fire(future)), "a slot a year ahead is refused")
        assert.isTrue(Option.isNone(yield* fire(Math.ceil((storeNow + tolerance + 60_000) / 1000) * 1000)), "a minute ahead too")
        assert.strictEqual((yield* store.schedules).find((s) => s.key === key)!.lastSlot.getTime(), row!.lastSlot.getTime(), "the fence did not move")
        // A slot the store's clock has reached fires (a schedule declared a few seconds ago).
        const due = freshQueue("key")
        yield* store.upsertSchedules([spec(due, queue, { cron: "* * * * * *" })], { seenBy: "w1", now: new Date(storeNow - 5_000) })
        const fired = yield* store.fireSchedule(due, { slot: new Date(Math.floor(storeNow / 1000) * 1000), nextSlot: null, cron: "* * * * * *", tz: "UTC" })
        assert.isTrue(Option.isSome(fired), "a due slot fires")
        assert.strictEqual((yield* store.messages(queue)).length, 1)
      }))

    it.effect("schedules: bad keys and payloads are refused naming the rule; nothing is written", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("sched-bad")
        const good = freshQueue("key")
        const now = at("1969-12-30T00:00:00Z")
        const refused = (specs: ReadonlyArray<ScheduleSpec>) =>
          Effect.map(Effect.flip(store.upsertSchedules(specs, { seenBy: "w1", now })), (e) => e as { _tag: string; field: string; message: string })
        const badKey = yield* refused([spec(good, queue), spec("a b", queue)])
        assert.deepStrictEqual([badKey._tag, badKey.field], ["InvalidInput", "schedule key"])
        assert.match(badKey.message, /"a b" is not a valid name/)
        assert.strictEqual((yield* refused([spec(good, queue), spec(good, queue)])).field, "schedule key")
        assert.strictEqual((yield* refused([spec(good, "bad queue")])).field, "queue")
        assert.strictEqual((yield* refused([spec(good, queue), spec(`${good}-2`, queue, { payload: () => 1 })])).field, "payload")
        assert.isUndefined((yield* store.schedules).find((s) => s.key.startsWith(good)), "nothing written")
        for (const op of [store.triggerSchedule("x'; --") as Effect.Effect<unknown, unknown>, store.removeSchedule("")]) {
          assert.strictEqual(((yield* Effect.flip(op)) as { field: string }).field, "schedule key")
        }
      }))

    it.effect("schedules: many workers firing the same slots at once send one message per slot", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("sched-race")
        const key = freshQueue("key")
        yield* store.upsertSchedules([spec(key, queue)], { seenBy: "w1", now: at("1969-12-30T00:00:00Z") })
        const slots = Array.from({ length: 12 }, (_, i) => at("1969-12-30T00:00:00Z").getTime() + (i + 1) * 300_000)
        const worker = Effect.forEach(slots, (ms) =>
          store.fireSchedule(key, { slot: new Date(ms), nextSlot: null, cron: "*/5 * * * *", tz: "UTC" }))
        const results = yield* Effect.all(Array.from({ length: 6 }, () => worker), { concurrency: 6 })
        assert.strictEqual(results.flat().filter(Option.isSome).length, slots.length)
        const sent = yield* store.messages(queue, { limit: 1000 })
        assert.deepStrictEqual(sent.map((m) => m.headers["leasehold-slot"]), slots.map((ms) => new Date(ms).toISOString()))
      }))

    movesTime("renew extends the lease and returns exactly the ids still held", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("renew")
        yield* sendAll(queue, [msg(1), msg(2), msg(3), msg(4)])
        const claims = yield* claimAll(queue, { lease: "10 seconds" })
        const [kept, acked, stolen, forged] = claims as unknown as [Claim, Claim, Claim, Claim]
        assert.isTrue(yield* store.ack(acked))
        yield* TestClock.adjust("8 seconds")
        // Renew only `kept`, so `stolen` expires and another consumer takes it.
        assert.deepStrictEqual((yield* store.renew([kept], "10 seconds")).held, [kept.id])
        yield* TestClock.adjust("3 seconds")
        // Expired leases make suspects, claimed one at a time.
        const reclaimed = [...yield* claimAll(queue, { consumer: "c2" }), ...yield* claimAll(queue, { consumer: "c2" })]
        assert.deepStrictEqual(reclaimed.map((c) => c.id).sort(), [stolen.id, forged.id].sort())
        const held = yield* store.renew(
          [kept, acked, stolen, { id: forged.id, leaseToken: "00000000-0000-4000-8000-000000000000" as Claim["leaseToken"] }],
          "10 seconds"
        )
        assert.deepStrictEqual(held, { held: [kept.id], cancelling: [] })
        // The renewal really moved the lease: kept is not claimable 9 s later.
        yield* TestClock.adjust("9 seconds")
        const third = yield* claimAll(queue, { consumer: "c3" })
        assert.isFalse(third.some((c) => c.id === kept.id))
        assert.deepStrictEqual((yield* store.renew([], "10 seconds")).held, [])
      }))

    movesTime("after a lease expires and another consumer reclaims, the first holder can change nothing", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("fence")
        yield* sendAll(queue, [msg("m")])
        const [old] = yield* claimAll(queue, { lease: "5 seconds", consumer: "slow" })
        yield* TestClock.adjust("6 seconds")
        const [current] = yield* claimAll(queue, { lease: "30 seconds", consumer: "fast" })
        assert.strictEqual(current!.id, old!.id)
        assert.notStrictEqual(current!.leaseToken, old!.leaseToken)
        assert.strictEqual(current!.attempts, 2)
        assert.deepStrictEqual((yield* store.renew([old!], "5 minutes")).held, [])
        assert.isFalse(yield* store.ack(old!))
        assert.strictEqual(yield* store.retry(old!, { delay: 0, error: "stale" }), "lost")
        assert.strictEqual(yield* store.deadLetter(old!, { reason: "stale" }), "lost")
        assert.strictEqual(yield* store.release(old!), "lost")
        // Nothing changed: still in flight for "fast", no dead letter, no error recorded.
        const stats = yield* store.stats(queue)
        assert.deepStrictEqual([stats.inFlight, stats.ready, stats.dead], [1, 0, 0])
        assert.strictEqual((yield* claimAll(queue, { consumer: "third" })).length, 0)
        yield* TestClock.adjust("29 seconds")
        assert.strictEqual((yield* claimAll(queue, { consumer: "third" })).length, 0, "the stale renew did not extend the lease")
        assert.isTrue(yield* store.ack(current!))
        assert.strictEqual((yield* store.stats(queue)).inFlight, 0)
      }))

    movesTime("an expired lease that nobody reclaimed can still be renewed and acked by its holder", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("late")
        yield* sendAll(queue, [msg("m")])
        const [c] = yield* claimAll(queue, { lease: "1 second" })
        yield* TestClock.adjust("5 seconds")
        assert.deepStrictEqual((yield* store.renew([c!], "1 second")).held, [c!.id])
        assert.isTrue(yield* store.ack(c!))
        assert.isFalse(yield* store.ack(c!), "a second ack finds nothing")
      }))

    movesTime("release makes the message visible now and gives the attempt back", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("release")
        yield* sendAll(queue, [msg("m")])
        const [c] = yield* claimAll(queue)
        assert.strictEqual(yield* store.release(c!), "written")
        const [again] = yield* claimAll(queue)
        assert.strictEqual(again!.attempts, 1)
        assert.strictEqual(yield* store.release(again!, { delay: "10 seconds" }), "written")
        assert.strictEqual((yield* claimAll(queue)).length, 0)
        yield* TestClock.adjust("10 seconds")
        assert.strictEqual((yield* claimAll(queue)).length, 1)
      }))

    movesTime("retry hides the message for the delay, keeps the attempt and records the error", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("retry")
        yield* sendAll(queue, [msg("m")])
        const [c] = yield* claimAll(queue)
        assert.strictEqual(yield* store.retry(c!, { delay: "5 seconds", error: "boom: it failed" }), "written")
        assert.strictEqual((yield* store.stats(queue)).delayed, 1)
        yield* TestClock.adjust("4 seconds")
        assert.strictEqual((yield* claimAll(queue)).length, 0)
        yield* TestClock.adjust("1 second")
        const [again] = yield* claimAll(queue)
        assert.strictEqual(again!.attempts, 2)
        assert.strictEqual(again!.lastError, "boom: it failed")
        // Error text is bounded.
        assert.strictEqual(yield* store.retry(again!, { delay: 0, error: "x".repeat(100_000) }), "written")
        const [third] = yield* claimAll(queue)
        assert.isTrue(third!.lastError!.length <= 8 * 1024)
      }))

    movesTime("dead letters: listed with reason, redriven with a fresh budget, purged", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("dead")
        const other = freshQueue("dead-other")
        yield* TestClock.setTime(9_000_000)
        yield* sendAll(queue, [msg("a"), msg("b"), msg("c")])
        yield* sendAll(other, [msg("z")])
        const claims = yield* claimAll(queue)
        const [z] = yield* claimAll(other)
        for (const c of claims) assert.strictEqual(yield* store.deadLetter(c, { reason: "attempts exhausted", error: `err ${c.payload}` }), "written")
        assert.strictEqual(yield* store.deadLetter(z!, { reason: "unknown task" }), "written")
        assert.strictEqual((yield* store.stats(queue)).dead, 3)
        assert.strictEqual((yield* claimAll(queue)).length, 0, "dead letters are not claimable")
        const listed = yield* store.deadLetters({ queue })
        assert.deepStrictEqual(listed.map((d) => d.payload), ["a", "b", "c"])
        assert.strictEqual(listed[0]!.reason, "attempts exhausted")
        assert.strictEqual(listed[0]!.lastError, "err a")
        assert.strictEqual(listed[0]!.deadAt.getTime(), 9_000_000)
        // Redrive by id: only that one.
        const byId = yield* store.redrive({ ids: [listed[1]!.id] })
        assert.deepStrictEqual(byId, [listed[1]!.id])
        const [redriven] = yield* claimAll(queue)
        assert.strictEqual(redriven!.payload, "b")
        assert.strictEqual(redriven!.attempts, 1, "fresh attempt budget")
        // Redrive by queue leaves the other queue alone.
        const byQueue = yield* store.redrive({ queue })
        assert.strictEqual(byQueue.length, 2)
        assert.strictEqual((yield* store.stats(other)).dead, 1)
        // Purge deletes for good.
        assert.deepStrictEqual(yield* store.purge({ queue: other }), [z!.id])
        assert.strictEqual((yield* store.stats(other)).dead, 0)
        assert.strictEqual((yield* store.deadLetters({ queue: other })).length, 0)
      }))

    movesTime("stats counts ready, delayed, in flight and dead, and the oldest ready age", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("stats")
        const empty = yield* store.stats(queue)
        assert.deepStrictEqual(empty, { queue, ready: 0, delayed: 0, inFlight: 0, dead: 0, oldestReadyAgeMs: 0 })
        yield* sendAll(queue, [msg("flight"), msg("dead")])
        const [flight, dead] = yield* claimAll(queue, { limit: 2 })
        yield* store.deadLetter(dead!, { reason: "x" })
        yield* sendAll(queue, [msg("r1"), msg("r2"), msg("later", { delay: 60_000 })])
        yield* TestClock.adjust("4 seconds")
        const stats = yield* store.stats(queue)
        assert.deepStrictEqual(stats, { queue, ready: 2, delayed: 1, inFlight: 1, dead: 1, oldestReadyAgeMs: 4000 })
        assert.isTrue(yield* store.ack(flight!))
      }))

    movesTime("depths counts several queues in one call, as stats does each; an empty queue counts zeros", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const [a, b, empty] = [freshQueue("depth-a"), freshQueue("depth-b"), freshQueue("depth-empty")]
        yield* sendAll(a, [msg("flight"), msg("dead")])
        const [flight, dead] = yield* claimAll(a, { limit: 2 })
        yield* store.deadLetter(dead!, { reason: "x" })
        yield* sendAll(a, [msg("r1"), msg("later", { delay: 60_000 })])
        yield* sendAll(b, [msg("b1"), msg("b2"), msg("b3")])
        yield* TestClock.adjust("3 seconds")
        // Duplicates are answered once, in the order first given.
        const depths = yield* store.depths([b, empty, a, b])
        assert.deepStrictEqual(depths, [
          { queue: b, ready: 3, delayed: 0, inFlight: 0, dead: 0, oldestReadyAgeMs: 3000 },
          { queue: empty, ready: 0, delayed: 0, inFlight: 0, dead: 0, oldestReadyAgeMs: 0 },
          { queue: a, ready: 1, delayed: 1, inFlight: 1, dead: 1, oldestReadyAgeMs: 3000 }
        ])
        assert.deepStrictEqual(depths[2], yield* store.stats(a))
        assert.deepStrictEqual(yield* store.depths([]), [])
        const refused = yield* Effect.flip(store.depths([a, "not a queue!"]))
        assert.strictEqual(refused._tag, "InvalidInput")
        assert.isTrue(yield* store.ack(flight!))
      }))

    movesTime("a claim says when its message became ready: sent, delay over, retry backoff over, lease expired", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("ready-at")
        yield* TestClock.setTime(2_000_000)
        yield* sendAll(queue, [msg("delayed", { delay: 5_000 })])
        yield* TestClock.adjust("7 seconds")
        const [first] = yield* claimAll(queue, { lease: "10 seconds" })
        assert.strictEqual(first!.readyAt?.getTime(), 2_005_000, "ready when its delay ended")
        yield* store.retry(first!, { delay: 1_000, error: "boom" })
        yield* TestClock.adjust("4 seconds")
        const [second] = yield* claimAll(queue, { lease: "10 seconds" })
        assert.strictEqual(second!.readyAt?.getTime(), 2_008_000, "ready when its backoff ended")
        yield* TestClock.adjust("15 seconds")
        const [third] = yield* claimAll(queue, { lease: "10 seconds" })
        assert.strictEqual(third!.readyAt?.getTime(), 2_021_000, "ready when the lease expired")
      }))

    movesTime("nextVisibleAt is the earliest future visibility, none when nothing waits", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("next")
        yield* TestClock.setTime(20_000_000)
        assert.isTrue(Option.isNone(yield* store.nextVisibleAt(queue)))
        yield* sendAll(queue, [msg("ready-now")])
        assert.isTrue(Option.isNone(yield* store.nextVisibleAt(queue)), "a ready message is not in the future")
        yield* sendAll(queue, [msg("in-90s", { delay: 90_000 })])
        const [c] = yield* claimAll(queue, { lease: "20 seconds" })
        assert.strictEqual(Option.getOrThrow(yield* store.nextVisibleAt(queue)).getTime(), 20_000_000 + 20_000)
        yield* store.ack(c!)
        assert.strictEqual(Option.getOrThrow(yield* store.nextVisibleAt(queue)).getTime(), 20_000_000 + 90_000)
        // Across priorities: the earliest of them all, whichever priority holds it.
        yield* sendAll(queue, [
          msg("high-in-60s", { delay: 60_000, priority: -5 }),
          msg("low-in-30s", { delay: 30_000, priority: 9 }),
          msg("low-in-45s", { delay: 45_000, priority: 9 })
        ])
        assert.strictEqual(Option.getOrThrow(yield* store.nextVisibleAt(queue)).getTime(), 20_000_000 + 30_000)
        yield* TestClock.adjust("35 seconds")
        assert.strictEqual(Option.getOrThrow(yield* store.nextVisibleAt(queue)).getTime(), 20_000_000 + 45_000, "a due message is not in the future")
      }))

    it.effect("bad input is refused with a typed error naming the problem, and nothing is written", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("bad")
        const refused = (effect: Effect.Effect<unknown, unknown>) =>
          Effect.map(Effect.flip(effect), (e) => e as { _tag: string; field: string; message: string })
        for (const hostile of ["x\"; drop table messages; --", "", " q", "a b", "ü", "x".repeat(129), "q'or'1'='1"]) {
          const e = yield* refused(store.send(hostile, [msg(1)]))
          assert.strictEqual(e._tag, "InvalidInput")
          assert.strictEqual(e.field, "queue")
          const t = yield* refused(store.send(queue, [{ task: hostile, payload: 1 }]))
          assert.strictEqual(t.field, "task")
          assert.strictEqual((yield* refused(store.claim(hostile, { lease: "1 minute", limit: 1, consumer: "c" }))).field, "queue")
        }
        const cycle: Record<string, unknown> = {}
        cycle["self"] = cycle
        const cases: ReadonlyArray<readonly [NewMessage, string, RegExp]> = [
          [msg({ big: 10n }), "payload", /BigInt/i],
          [msg(cycle), "payload", /circular/i],
          [msg(undefined), "payload", /undefined/],
          [msg(() => 1), "payload", /function/],
          [msg("\u0000"), "payload", /NUL/],
          [msg({ ["k\u0000"]: 1 }), "payload", /NUL/],
          [msg("a\ud800b"), "payload", /lone surrogate/],
          [msg(1, { headers: { h: "\udc00" } }), "headers", /invalid/],
          [msg("x".repeat(1024 * 1024 + 1)), "payload", /bytes/],
          [msg(1, { delay: -1 }), "delay", /not allowed/],
          [msg(1, { delay: Number.NaN }), "delay", /not allowed/],
          [msg(1, { priority: 1.5 }), "priority", /not allowed/],
          [msg(1, { maxAttempts: 0 }), "maxAttempts", /out of range/],
          [msg(1, { dedupKey: "" }), "dedupKey", /not allowed/],
          [msg(1, { headers: { a: 1 as unknown as string } }), "headers", /invalid/]
        ]
        for (const [bad, field, pattern] of cases) {
          // A bad message in the middle of a batch refuses the whole batch.
          const e = yield* refused(store.send(queue, [msg("good"), bad, msg("good too")]))
          assert.strictEqual(e._tag, "InvalidInput")
          assert.strictEqual(e.field, field)
          assert.match(e.message, pattern)
        }
        const e = yield* refused(store.claim(queue, { lease: "1 minute", limit: 0, consumer: "c" }))
        assert.strictEqual(e.field, "limit")
        // Dead-letter filters too.
        assert.strictEqual((yield* refused(store.purge({ queue: "x\"; drop table messages" }))).field, "queue")
        assert.strictEqual((yield* refused(store.redrive({ ids: ["1", "1 OR 1=1"] as Array<MessageId> }))).field, "ids")
        assert.strictEqual((yield* refused(store.deadLetters({ queue, limit: -1 }))).field, "limit")
        const stats = yield* store.stats(queue)
        assert.strictEqual(stats.ready + stats.delayed + stats.inFlight + stats.dead, 0, "nothing was written")
        // Text that merely looks like an escape is fine, and comes back as sent.
        const [literal] = yield* store.send(queue, [msg({ s: "\\u0000 and \\ud800", emoji: "😀" })])
        const [claimed] = yield* store.claim(queue, { lease: "1 minute", limit: 1, consumer: "c" })
        assert.strictEqual(claimed!.id, literal!.id)
        assert.deepStrictEqual(claimed!.payload, { s: "\\u0000 and \\ud800", emoji: "😀" })
        yield* store.ack(claimed!)
        // Just under the limit is fine.
        const [ok] = yield* store.send(queue, [msg("x".repeat(1024 * 1024 - 2))])
        assert.isFalse(ok!.deduplicated)
      }))

    it.effect("payload values JSON would drop or change, at any depth, are refused with their path; nothing is written", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("deep")
        const cases: ReadonlyArray<readonly [unknown, string]> = [
          [{ f: () => 1, n: Number.NaN }, "payload.f is a function"],
          [{ n: Number.NaN }, "payload.n is NaN"],
          [{ items: [{ n: 1 }, { n: 2 }, { n: 3 }, { n: Number.POSITIVE_INFINITY }] }, "payload.items[3].n is Infinity"],
          [{ deep: { er: [-Infinity] } }, "payload.deep.er[0] is -Infinity"],
          [{ u: undefined, ok: 1 }, "payload.u is undefined"],
          [[1, undefined], "payload[1] is undefined"],
          // A hole in an array would be stored as null.
          [[, 1], "payload[0] is undefined"],
          [{ "a b": { s: Symbol("x") } }, "payload[\"a b\"].s is a symbol"],
          [{ nested: { fn: function named() {} } }, "payload.nested.fn is a function"],
          // What toJSON returns is what JSON would store: checked too.
          [{ at: { toJSON: () => ({ n: Number.NaN }) } }, "payload.at.n is NaN"]
        ]
        for (const [payload, text] of cases) {
          const e = yield* Effect.flip(store.send(queue, [msg("good"), msg(payload)]))
          assert.strictEqual(e._tag, "InvalidInput", text)
          if (e._tag !== "InvalidInput") continue
          assert.strictEqual(e.field, "payload")
          assert.include(e.message, text)
          assert.match(e.rule, /no functions, symbols, undefined, NaN or Infinity/)
        }
        const stats = yield* store.stats(queue)
        assert.strictEqual(stats.ready + stats.delayed + stats.inFlight + stats.dead, 0, "nothing was written")
        // JSON data, including dates (stored through toJSON), null, -0 and nested empties, is stored as sent.
        const fine = { d: new Date(0), list: [1, "x", null, true, { y: -0 }, [], {}], n: 1.5e300 }
        yield* store.send(queue, [msg(fine)])
        const [claimed] = yield* claimAll(queue)
        assert.deepStrictEqual(claimed!.payload, JSON.parse(JSON.stringify(fine)))
        yield* store.ack(claimed!)
      }))

    it.effect("headers: bounded as JSON (a bound of their own), names and values storable; refused naming the header, nothing written", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("headers")
        const cases: ReadonlyArray<readonly [Record<string, string>, string, RegExp]> = [
          // Payloads stop at 1 MiB; headers stop at 64 KiB, the 5 MiB header of the issue well past it.
          [{ big: "x".repeat(5 * 1024 * 1024) }, "headers", /are 5242\d{3} bytes as JSON/],
          [{ a: "x".repeat(40_000), b: "y".repeat(40_000) }, "headers", /are 800\d\d bytes as JSON/],
          [{ ["a\u0000b"]: "v" }, "headers[\"a\\u0000b\"]", /name that contains a NUL/],
          [{ ["\ud800"]: "v" }, "headers[\"\\ud800\"]", /name that contains a lone surrogate/],
          [{ h: "a\u0000" }, "headers.h", /value that contains a NUL/],
          [{ ["trace id"]: "\udfff" }, "headers[\"trace id\"]", /value that contains a lone surrogate/],
          [{ [""]: "v" }, "headers[\"\"]", /name of 0 characters/]
        ]
        for (const [headers, path, pattern] of cases) {
          const e = yield* refusal(store.send(queue, [msg("good"), msg(1, { headers })]))
          assert.strictEqual(e._tag, "InvalidInput", path)
          assert.strictEqual(e.field, "headers", path)
          const message = (e as unknown as { readonly message: string }).message
          if (path !== "headers") assert.include(message, `${path} is invalid`)
          assert.match(message, pattern)
        }
        const stats = yield* store.stats(queue)
        assert.strictEqual(stats.ready + stats.delayed + stats.inFlight + stats.dead, 0, "nothing was written")
        // Within the bound, odd but storable names and values come back as sent.
        const fine = { big: "x".repeat(60_000), ["a b/ü"]: "😀", ["\\u0000"]: "\t" }
        yield* store.send(queue, [msg(1, { headers: fine })])
        const [claimed] = yield* claimAll(queue)
        assert.deepInclude(claimed!.headers, fine)
        yield* store.ack(claimed!)
      }))

    it.effect("payload text with NUL or a lone surrogate is refused naming its path, in values and keys alike", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("text")
        const cases: ReadonlyArray<readonly [unknown, string]> = [
          [{ a: { b: ["ok", "x\u0000y"] } }, "payload.a.b[1] contains a NUL character"],
          [{ ["k\u0000"]: 1 }, "payload[\"k\\u0000\"] has a key that contains a NUL character"],
          [{ s: "\udc00" }, "payload.s contains a lone surrogate"],
          [[{ ["\ud83d"]: true }], "payload[0][\"\\ud83d\"] has a key that contains a lone surrogate"],
          ["\u0000", "payload contains a NUL character"]
        ]
        for (const [payload, text] of cases) {
          const e = yield* Effect.flip(store.send(queue, [msg("good"), msg(payload)]))
          assert.strictEqual(e._tag, "InvalidInput", text)
          if (e._tag !== "InvalidInput") continue
          assert.strictEqual(e.field, "payload")
          assert.include(e.message, text)
        }
        const stats = yield* store.stats(queue)
        assert.strictEqual(stats.ready + stats.delayed + stats.inFlight + stats.dead, 0, "nothing was written")
      }))

    it.effect("payload Maps, Sets and class instances are refused naming their path (JSON would store {} or drop the class)", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("objects")
        class Point {
          readonly x = 1
        }
        const cases: ReadonlyArray<readonly [unknown, string]> = [
          [{ m: new Map([["a", 1]]) }, "payload.m is a Map, which JSON stores as {}"],
          [{ list: [1, new Set([1, 2])] }, "payload.list[1] is a Set, which JSON stores as {}"],
          [{ p: new Point() }, "payload.p is an instance of Point"],
          [{ bytes: new Uint8Array([1, 2]) }, "payload.bytes is an instance of Uint8Array"],
          [new Map(), "payload is a Map"]
        ]
        for (const [payload, text] of cases) {
          const e = yield* Effect.flip(store.send(queue, [msg("good"), msg(payload)]))
          assert.strictEqual(e._tag, "InvalidInput", text)
          if (e._tag !== "InvalidInput") continue
          assert.strictEqual(e.field, "payload")
          assert.include(e.message, text)
          assert.match(e.rule, /no Map, Set or class instances/)
        }
        const stats = yield* store.stats(queue)
        assert.strictEqual(stats.ready + stats.delayed + stats.inFlight + stats.dead, 0, "nothing was written")
        // Plain data is fine: null-prototype objects, boxed primitives (stored as their value), dates through toJSON.
        const bare = Object.assign(Object.create(null) as Record<string, unknown>, { k: 1 })
        yield* store.send(queue, [msg({ bare, boxed: new String("s"), n: new Number(2), at: new Date(0) })])
        const [claimed] = yield* claimAll(queue)
        assert.deepStrictEqual(claimed!.payload, { bare: { k: 1 }, boxed: "s", n: 2, at: "1970-01-01T00:00:00.000Z" })
        yield* store.ack(claimed!)
      }))

    it.effect("redrive: dead letters sharing a dedup key are all redriven; the first to die keeps the key, the others give it up", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("redrive-dedup")
        const die = (payload: string) =>
          Effect.gen(function*() {
            const [sent] = yield* sendAll(queue, [msg(payload, { dedupKey: "k" })])
            const [claimed] = yield* claimAll(queue)
            assert.strictEqual(claimed!.id, sent!.id)
            assert.strictEqual(yield* store.deadLetter(claimed!, { reason: "r" }), "written")
            return sent!.id
          })
        // Each dies before the next is sent, so the key is free again for the next send.
        const first = yield* die("first")
        const second = yield* die("second")
        const third = yield* die("third")
        assert.deepStrictEqual(yield* store.redrive({ queue }), [first, second, third])
        const keys = yield* Effect.forEach([first, second, third], (id) => Effect.map(store.get(id), (m) => Option.getOrThrow(m).dedupKey))
        assert.deepStrictEqual(keys, ["k", null, null])
        // The key is held by the first again: a send with it deduplicates to it.
        const [again] = yield* sendAll(queue, [msg("again", { dedupKey: "k" })])
        assert.deepStrictEqual(again, { id: first, deduplicated: true })
        // All three run.
        assert.deepStrictEqual((yield* claimAll(queue)).map((c) => c.payload).sort(), ["first", "second", "third"])
        // A dead letter whose key a live message holds gives it up too (with ids as the filter).
        const [live] = yield* sendAll(queue, [msg("live", { dedupKey: "j" })])
        const [holder] = yield* claimAll(queue)
        assert.strictEqual(holder!.id, live!.id)
        assert.strictEqual(yield* store.deadLetter(holder!, { reason: "r" }), "written")
        const [successor] = yield* sendAll(queue, [msg("successor", { dedupKey: "j" })])
        assert.deepStrictEqual(yield* store.redrive({ ids: [live!.id] }), [live!.id])
        assert.strictEqual(Option.getOrThrow(yield* store.get(live!.id)).dedupKey, null)
        assert.strictEqual(Option.getOrThrow(yield* store.get(successor!.id)).dedupKey, "j")
      }))

    it.effect("redrive and purge refuse an empty filter (all: true says every dead letter); ids beyond a bigint are InvalidInput", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("everything")
        yield* sendAll(queue, [msg("a")])
        const [claimed] = yield* claimAll(queue)
        assert.strictEqual(yield* store.deadLetter(claimed!, { reason: "r" }), "written")
        for (const op of [store.redrive, store.purge]) {
          const e = yield* refusal(op({}))
          assert.strictEqual(e._tag, "InvalidInput")
          assert.strictEqual(e.field, "filter")
          assert.strictEqual((yield* refusal(op({ queue: undefined, ids: undefined }))).field, "filter")
          assert.strictEqual((yield* refusal(op({ all: false }))).field, "filter")
          // Past int8: refused at the boundary (an HTTP caller gets 400), never a failed statement.
          for (const id of ["9223372036854775808", "99999999999999999999", "0", "-1", "1e3"]) {
            const bad = yield* refusal(op({ ids: [id as MessageId] }))
            assert.strictEqual(bad._tag, "InvalidInput", id)
            assert.strictEqual(bad.field, "ids", id)
          }
        }
        assert.strictEqual((yield* refusal(store.deadLetters({ ids: ["9223372036854775808" as MessageId] }))).field, "ids")
        // Still dead: nothing acted on it.
        assert.deepStrictEqual((yield* store.deadLetters({ queue })).map((d) => d.id), [claimed!.id])
        // The largest bigint is a valid id (of no message here).
        assert.deepStrictEqual(yield* store.redrive({ ids: ["9223372036854775807" as MessageId] }), [])
        assert.deepStrictEqual(yield* store.attempts("9223372036854775808" as MessageId), [])
        // all: true acts on every dead letter (of the queue, when one is named too).
        assert.deepStrictEqual(yield* store.redrive({ queue, all: true }), [claimed!.id])
        const [again] = yield* claimAll(queue)
        assert.strictEqual(yield* store.deadLetter(again!, { reason: "r" }), "written")
        // Leading zeros spell the same id (as PostgreSQL reads it): both stores match it.
        assert.deepStrictEqual(yield* store.deadLetters({ ids: [`00${claimed!.id}` as MessageId] }), yield* store.deadLetters({ queue }))
        assert.deepStrictEqual(yield* store.purge({ ids: [`0${claimed!.id}` as MessageId] }), [claimed!.id])
      }))

    it.effect("recordAttempt checks its record: ids, names, attempt, outcome, dates, error; nothing is written", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("record")
        const [s] = yield* sendAll(queue, [msg("r")])
        const base = {
          messageId: s!.id,
          queue,
          task: "job",
          attempt: 1,
          consumer: "c1",
          startedAt: new Date(1_000),
          endedAt: new Date(2_000),
          outcome: "acked" as const,
          error: null
        }
        const cases: ReadonlyArray<readonly [Record<string, unknown>, string]> = [
          [{ messageId: "9223372036854775808" }, "messageId"],
          [{ messageId: "x" }, "messageId"],
          [{ queue: "bad queue" }, "queue"],
          [{ task: "" }, "task"],
          [{ consumer: "a b" }, "consumer"],
          [{ attempt: -1 }, "attempt"],
          [{ attempt: 1.5 }, "attempt"],
          [{ attempt: 2 ** 31 }, "attempt"],
          [{ outcome: "exploded" }, "outcome"],
          [{ startedAt: new Date(Number.NaN) }, "startedAt"],
          [{ endedAt: "yesterday" }, "endedAt"],
          [{ error: 42 }, "error"]
        ]
        for (const [patch, field] of cases) {
          const e = yield* refusal(store.recordAttempt({ ...base, ...patch } as never))
          assert.strictEqual(e._tag, "InvalidInput", field)
          assert.strictEqual(e.field, field, JSON.stringify(patch))
        }
        assert.deepStrictEqual(yield* store.attempts(s!.id), [], "nothing was written")
        assert.isUndefined((yield* store.queues()).find((q) => q.queue === "bad queue"))
        // A valid record, with no consumer (""), is kept.
        yield* store.recordAttempt({ ...base, consumer: "" })
        assert.deepStrictEqual((yield* store.attempts(s!.id)).map((a) => [a.attempt, a.consumer]), [[1, ""]])
      }))

    movesTime("a lease that expired is counted, recorded in the history, and its message claimed alone", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("expiry")
        yield* TestClock.setTime(30_000_000)
        const [s1] = yield* sendAll(queue, [msg("suspect", { priority: -1 })])
        const [first] = yield* claimAll(queue, { lease: "1 second", consumer: "doomed" })
        assert.strictEqual(first!.leaseExpiries, 0)
        yield* sendAll(queue, [msg("a"), msg("b")])
        yield* TestClock.adjust("2 seconds")
        // The suspect comes first in claim order: it is claimed alone.
        const alone = yield* claimAll(queue, { consumer: "next" })
        assert.deepStrictEqual(alone.map((c) => c.payload), ["suspect"])
        assert.strictEqual(alone[0]!.leaseExpiries, 1)
        assert.strictEqual(alone[0]!.attempts, 2)
        const history = yield* store.attempts(s1!.id)
        assert.strictEqual(history.length, 1)
        assert.deepStrictEqual(
          [history[0]!.outcome, history[0]!.attempt, history[0]!.consumer, history[0]!.startedAt.getTime(), history[0]!.endedAt.getTime()],
          ["lease-expired", 1, "doomed", 30_000_000, 30_001_000]
        )
        // With a non-suspect first, suspects are left for a claim of their own.
        const rest = yield* claimAll(queue, { consumer: "next" })
        assert.deepStrictEqual(rest.map((c) => c.payload), ["a", "b"])
        yield* TestClock.adjust("1 minute") // all three leases expire
        const order = [
          yield* claimAll(queue, { consumer: "n1" }),
          yield* claimAll(queue, { consumer: "n2" }),
          yield* claimAll(queue, { consumer: "n3" })
        ]
        assert.deepStrictEqual(order.map((cs) => cs.map((c) => c.payload)), [["suspect"], ["a"], ["b"]])
        assert.deepStrictEqual(order.map((cs) => cs[0]!.leaseExpiries), [2, 1, 1])
        // A finished claim clears the lease: no expiry is counted after a release.
        assert.strictEqual(yield* store.release(order[1]![0]!), "written")
        const [again] = yield* claimAll(queue, { consumer: "n4" })
        assert.strictEqual(again!.payload, "a")
        assert.strictEqual(again!.leaseExpiries, 1)
        // Redrive gives a fresh budget, lease expiries included.
        assert.strictEqual(yield* store.deadLetter(order[0]![0]!, { reason: "suspected worker-killer" }), "written")
        yield* store.redrive({ ids: [s1!.id] })
        const [redriven] = yield* claimAll(queue, { consumer: "n5" })
        assert.deepStrictEqual([redriven!.payload, redriven!.attempts, redriven!.leaseExpiries], ["suspect", 1, 0])
      }))

    movesTime("attempt history: recorded, listed in order, pruned by age", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("history")
        yield* TestClock.setTime(40_000_000)
        const [s] = yield* sendAll(queue, [msg("h")])
        const base = {
          messageId: s!.id,
          queue,
          task: "job",
          consumer: "c1",
          startedAt: new Date(40_000_000),
          endedAt: new Date(40_001_000)
        }
        yield* store.recordAttempt({ ...base, attempt: 1, outcome: "retried", error: "boom", result: { partial: 1 } })
        yield* TestClock.adjust("1 hour")
        yield* store.recordAttempt({ ...base, attempt: 2, outcome: "acked", error: null, endedAt: new Date(40_000_000 + 3_600_000), result: { n: 2 } })
        const history = yield* store.attempts(s!.id)
        assert.deepStrictEqual(history.map((a) => [a.attempt, a.outcome, a.error, a.result]), [[1, "retried", "boom", { partial: 1 }], [2, "acked", null, { n: 2 }]])
        // Pruning is store-wide (other tests' records may go too); this message keeps only its recent attempt,
        // and the pruned record's result went with it (same retention).
        assert.isAtLeast(yield* store.pruneAttempts("30 minutes"), 1)
        assert.deepStrictEqual((yield* store.attempts(s!.id)).map((a) => [a.attempt, a.result]), [[2, { n: 2 }]])
      }))

    it.effect("sends wake a subscriber of the queue once per await, even when sent before the await", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("wake")
        const next = yield* store.sends([queue])
        // Sent before anyone awaits: the signal is kept.
        yield* sendAll(queue, [msg("early")])
        yield* next
        // Awaited first, sent after: the waiter wakes (on PostgreSQL, through LISTEN/NOTIFY).
        const waiter = yield* Effect.forkChild(next)
        yield* sendAll(queue, [msg("late")])
        yield* Fiber.join(waiter)
      }))

    it.effect("a release (single or in complete) wakes the queue's subscribers, as a send does", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("release-wake")
        yield* sendAll(queue, [msg(1), msg(2)])
        const [first, second] = yield* claimAll(queue, { limit: 2 })
        const next = yield* store.sends([queue]) // subscribed after the sends: nothing pending
        const single = yield* Effect.forkChild(next)
        assert.strictEqual(yield* store.release(first!), "written")
        yield* Fiber.join(single)
        const batched = yield* Effect.forkChild(next)
        const { held } = yield* store.complete([{
          ref: second!,
          finish: { _tag: "Release" },
          queue,
          task: second!.task,
          attempt: second!.attempts,
          consumer: "shutting-down",
          startedAt: new Date(),
          outcome: "released",
          error: null
        }])
        assert.deepStrictEqual(held, [second!.id])
        yield* Fiber.join(batched)
      }))

    it.effect("pause: a paused queue is claimed by nobody, still takes sends, and is listed paused; resume wakes subscribers", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("pause")
        const other = freshQueue("pause-other")
        yield* sendAll(queue, [msg(1), msg(2)])
        yield* sendAll(other, [msg("o")])
        const [running] = yield* claimAll(queue, { limit: 1 })
        yield* store.pause(queue)
        const [info] = (yield* store.queues()).filter((q) => q.queue === queue)
        assert.isTrue(info!.paused)
        assert.instanceOf(info!.pausedAt, Date)
        yield* store.pause(queue) // pausing again changes nothing, not even the time
        const [again] = (yield* store.queues()).filter((q) => q.queue === queue)
        assert.strictEqual(again!.pausedAt!.getTime(), info!.pausedAt!.getTime())
        assert.deepStrictEqual([info!.ready, info!.inFlight], [1, 1])
        // Sends are accepted; nothing is claimed; the other queue is unaffected.
        yield* sendAll(queue, [msg(3)])
        assert.deepStrictEqual(yield* claimAll(queue), [])
        assert.strictEqual((yield* claimAll(other)).length, 1)
        // The message in flight finishes normally.
        assert.isTrue(yield* store.ack(running!))
        // Resume wakes an idle subscriber (on PostgreSQL, through the send notification).
        const next = yield* store.sends([queue])
        const waiter = yield* Effect.forkChild(next)
        yield* store.resume(queue)
        yield* Fiber.join(waiter)
        const [resumed] = (yield* store.queues()).filter((q) => q.queue === queue)
        assert.deepStrictEqual([resumed!.paused, resumed!.pausedAt], [false, null])
        assert.strictEqual((yield* claimAll(queue)).length, 2)
        yield* store.resume(queue) // resuming a queue that is not paused changes nothing
        yield* store.resume(freshQueue("never-paused"))
        for (const refused of [yield* refusal(store.pause("bad name")), yield* refusal(store.resume(""))]) {
          assert.deepStrictEqual([refused._tag, refused.field], ["InvalidInput", "queue"])
        }
      }))

    it.effect("queues: every queue with messages, history or a pause row, by name, with its counts", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const live = freshQueue("q-live")
        const dead = freshQueue("q-dead")
        const historic = freshQueue("q-history")
        const paused = freshQueue("q-paused")
        yield* sendAll(live, [msg(1), msg(2, { delay: 60_000 })])
        yield* sendAll(dead, [msg(1)])
        const [d] = yield* claimAll(dead)
        assert.strictEqual(yield* store.deadLetter(d!, { reason: "r" }), "written")
        yield* sendAll(historic, [msg(1)])
        const [h] = yield* claimAll(historic)
        yield* store.complete([{
          ref: h!,
          finish: { _tag: "Ack" },
          queue: historic,
          task: "job",
          attempt: 1,
          consumer: "c1",
          startedAt: new Date(0),
          outcome: "acked",
          error: null
        }])
        yield* store.pause(paused)
        const all = yield* store.queues()
        const names = all.map((q) => q.queue)
        assert.deepStrictEqual(names, [...names].sort(), "by name")
        const find = (name: string) => all.find((q) => q.queue === name)
        assert.deepInclude(find(live)!, { ready: 1, delayed: 1, inFlight: 0, dead: 0, paused: false, pausedAt: null })
        assert.deepInclude(find(dead)!, { ready: 0, dead: 1, paused: false })
        assert.deepInclude(find(historic)!, { ready: 0, delayed: 0, inFlight: 0, dead: 0, paused: false })
        assert.deepInclude(find(paused)!, { ready: 0, dead: 0, paused: true })
        assert.isUndefined(find(freshQueue("q-none")))
      }))

    it.effect("cancel: ready, delayed and dead messages go at once with a cancelled history row; a running one is flagged", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("cancel")
        const [running, dead] = yield* sendAll(queue, [msg("running"), msg("dead")])
        const [claimedRunning, claimedDead] = yield* claimAll(queue)
        assert.strictEqual(claimedRunning!.id, running!.id)
        assert.strictEqual(yield* store.deadLetter(claimedDead!, { reason: "r" }), "written")
        const [ready, delayed, kept] = yield* sendAll(queue, [msg("ready"), msg("delayed", { delay: 60_000 }), msg("kept")])
        const answer = yield* store.cancel([
          delayed!.id,
          running!.id,
          "999999999999" as MessageId,
          "not-an-id" as MessageId,
          dead!.id,
          ready!.id,
          ready!.id
        ])
        // In id order; unknown and malformed ids are absent; a repeated id answers once.
        assert.deepStrictEqual(answer, [
          { id: running!.id, result: "cancelling" },
          { id: dead!.id, result: "cancelled" },
          { id: ready!.id, result: "cancelled" },
          { id: delayed!.id, result: "cancelled" }
        ])
        for (const id of [dead!.id, ready!.id, delayed!.id]) {
          assert.isTrue(Option.isNone(yield* store.get(id)), `${id} is gone`)
          const history = yield* store.attempts(id)
          assert.deepStrictEqual(history.at(-1)!.outcome, "cancelled")
        }
        assert.deepStrictEqual((yield* store.attempts(ready!.id)).map((a) => [a.attempt, a.outcome]), [[0, "cancelled"]])
        assert.deepStrictEqual((yield* store.attempts(dead!.id)).map((a) => [a.attempt, a.outcome]), [[1, "cancelled"]])
        // The running one is still there, in flight, until its holder finishes it; its renewal says so,
        // and so do get and messages (a message merely in flight says nothing of the kind).
        const flagged = Option.getOrThrow(yield* store.get(running!.id))
        assert.strictEqual(flagged.state, "in-flight")
        assert.instanceOf(flagged.cancelRequestedAt, Date)
        assert.deepStrictEqual((yield* store.messages(queue, { state: "in-flight", limit: 10 })).map((m) => [m.id, m.cancelRequestedAt !== null]), [[running!.id, true]])
        const [other] = yield* sendAll(freshQueue("cancel-other"), [msg("other")])
        yield* store.claim(Option.getOrThrow(yield* store.get(other!.id)).queue, { lease: "30 seconds", limit: 1, consumer: "c" })
        const unflagged = Option.getOrThrow(yield* store.get(other!.id))
        assert.strictEqual(unflagged.state, "in-flight")
        assert.isNull(unflagged.cancelRequestedAt)
        assert.deepStrictEqual(yield* store.renew([claimedRunning!], "30 seconds"), { held: [running!.id], cancelling: [running!.id] })
        assert.deepStrictEqual(yield* store.cancel([running!.id]), [{ id: running!.id, result: "cancelling" }], "asked again")
        const held = yield* store.complete([{
          ref: claimedRunning!,
          finish: { _tag: "Cancel" },
          queue,
          task: "job",
          attempt: 1,
          consumer: "c1",
          startedAt: new Date(0),
          outcome: "cancelled",
          error: "cancelled while running"
        }])
        assert.deepStrictEqual(held, { held: [running!.id], cancelled: [running!.id] })
        assert.isTrue(Option.isNone(yield* store.get(running!.id)))
        assert.deepStrictEqual((yield* store.attempts(running!.id)).map((a) => [a.attempt, a.outcome]), [[1, "cancelled"]])
        // Untouched: the message nobody cancelled; nothing of it recorded.
        assert.strictEqual(Option.getOrThrow(yield* store.get(kept!.id)).state, "ready")
        assert.deepStrictEqual(yield* store.attempts(kept!.id), [])
        assert.deepStrictEqual(yield* store.cancel([]), [])
        assert.deepStrictEqual(yield* store.cancel([running!.id]), [], "finished: unknown now")
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

    it.effect("cancel of a running message: its single retry, release or dead letter deletes it too, answers cancelled, records it", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("cancel-single")
        const sent = yield* sendAll(queue, [msg("retry"), msg("release"), msg("dead"), msg("kept")])
        const [retried, released, dead, kept] = yield* claimAll(queue, { consumer: "holder" })
        assert.deepStrictEqual(
          (yield* store.cancel(sent.slice(0, 3).map((s) => s.id))).map((r) => r.result),
          ["cancelling", "cancelling", "cancelling"]
        )
        assert.strictEqual(yield* store.retry(retried!, { delay: 0, error: "boom" }), "cancelled", "held: the write landed as a delete")
        assert.strictEqual(yield* store.release(released!), "cancelled")
        assert.strictEqual(yield* store.deadLetter(dead!, { reason: "r", error: "bad" }), "cancelled")
        assert.strictEqual(yield* store.retry(kept!, { delay: 0, error: "boom" }), "written", "a message not cancelled is retried")
        assert.strictEqual(yield* store.retry(retried!, { delay: 0, error: "boom" }), "lost", "a second write finds it gone")
        assert.deepStrictEqual((yield* store.messages(queue)).map((m) => m.id), [kept!.id], "the cancelled ones are gone, dead letters included")
        assert.isEmpty(yield* store.deadLetters({ queue, limit: 10 }))
        const history = yield* Effect.forEach(sent, (s) => store.attempts(s.id))
        assert.deepStrictEqual(
          history.map((h) => h.map((a) => [a.outcome, a.attempt, a.consumer, a.error])),
          [[["cancelled", 1, "holder", "boom"]], [["cancelled", 1, "holder", null]], [["cancelled", 1, "holder", "bad"]], []],
          "each cancelled write recorded its run as cancelled; the written one's history is the caller's"
        )
        assert.deepStrictEqual((yield* claimAll(queue)).map((c) => c.id), [kept!.id], "never claimed again")
      }))

    movesTime("cancel of a running message whose holder stops before finishing it: the next claim deletes it, never runs it", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("cancel-orphan")
        const [doomed, other] = yield* sendAll(queue, [msg("doomed"), msg("other")])
        const [held] = yield* claimAll(queue, { lease: "10 seconds", limit: 1 })
        assert.strictEqual(held!.id, doomed!.id)
        assert.deepStrictEqual(yield* store.cancel([doomed!.id]), [{ id: doomed!.id, result: "cancelling" }])
        // Its holder dies: no renewal, no finish. Once the lease has run out the message is ready again...
        yield* TestClock.adjust("11 seconds")
        // ...and the next claim takes the other message only (a suspect would be claimed alone: it is not one).
        const next = yield* claimAll(queue)
        assert.deepStrictEqual(next.map((c) => c.id), [other!.id])
        assert.isTrue(Option.isNone(yield* store.get(doomed!.id)), "deleted")
        const history = yield* store.attempts(doomed!.id)
        assert.deepStrictEqual(history.map((a) => a.outcome), ["cancelled"])
        assert.match(history[0]!.error!, /cancelled while it ran/)
        // The dead holder's late finish finds nothing to write.
        assert.isFalse(yield* store.ack(held!))
      }))

    movesTime("a claim whose picked messages were all cancelled (their holders died) goes on to the ready ones behind them", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("cancel-all-picked")
        const doomed = yield* sendAll(queue, [msg("a"), msg("b")])
        assert.lengthOf(yield* claimAll(queue, { lease: "10 seconds", limit: 2 }), 2)
        assert.deepStrictEqual((yield* store.cancel(doomed.map((d) => d.id))).map((r) => r.result), ["cancelling", "cancelling"])
        // Both holders die; once their leases ran out the two are the first ready rows, ahead of a later send.
        yield* TestClock.adjust("11 seconds")
        const [waiting] = yield* sendAll(queue, [msg("c")])
        const claimed = yield* claimAll(queue, { limit: 2 })
        assert.deepStrictEqual(claimed.map((c) => c.id), [waiting!.id], "not nothing while a message waits")
        for (const d of doomed) {
          assert.isTrue(Option.isNone(yield* store.get(d.id)), "deleted")
          assert.deepStrictEqual((yield* store.attempts(d.id)).map((a) => a.outcome), ["cancelled"])
        }
      }))

    it.effect("cancels: a cancel of running messages wakes a subscriber of its queue, naming them", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("cancels")
        // On PostgreSQL cancels are heard by the listener of a sends subscription (a consumer has one).
        yield* store.sends([queue])
        const next = yield* store.cancels([queue])
        yield* sendAll(queue, [msg(1), msg(2), msg(3)])
        const [first, second] = yield* claimAll(queue, { limit: 2 })
        const waiter = yield* Effect.forkChild(next)
        yield* store.cancel([first!.id])
        assert.deepStrictEqual(yield* Fiber.join(waiter), new Set([first!.id]))
        // Heard before anyone awaits: kept, and gathered until taken (the ready one is deleted, not
        // announced). On PostgreSQL the notices arrive one by one, so take until both are named.
        yield* store.cancel([second!.id])
        yield* store.cancelWhere({ queue })
        const gathered = new Set<MessageId>()
        while (!gathered.has(first!.id) || !gathered.has(second!.id)) {
          const taken = yield* next
          assert.isDefined(taken, "every notice names its messages")
          for (const id of taken!) gathered.add(id)
        }
        assert.deepStrictEqual([...gathered].sort(), [first!.id, second!.id].sort(), "only the running ones")
      }))

    it.effect("cancelWhere: every message of a queue, or of one task in it; other queues untouched", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("cancel-where")
        const other = freshQueue("cancel-where-other")
        const [a1, b1, a2] = yield* sendAll(queue, [msg(1, { task: "a" }), msg(2, { task: "b" }), msg(3, { task: "a" })])
        const [o] = yield* sendAll(other, [msg(1, { task: "a" })])
        const [running] = yield* claimAll(queue, { limit: 1 })
        assert.strictEqual(running!.id, a1!.id)
        assert.deepStrictEqual(yield* store.cancelWhere({ queue, task: "a" }), [
          { id: a1!.id, result: "cancelling" },
          { id: a2!.id, result: "cancelled" }
        ])
        assert.deepStrictEqual(yield* store.cancelWhere({ queue }), [
          { id: a1!.id, result: "cancelling" },
          { id: b1!.id, result: "cancelled" }
        ])
        assert.strictEqual(Option.getOrThrow(yield* store.get(o!.id)).state, "ready")
        assert.deepStrictEqual(yield* store.cancelWhere({ queue: freshQueue("empty") }), [])
        const bad = yield* refusal(store.cancelWhere({ queue, task: "bad task" }))
        assert.deepStrictEqual([bad._tag, bad.field], ["InvalidInput", "task"])
        assert.strictEqual((yield* refusal(store.cancelWhere({ queue: "" }))).field, "queue")
      }))

    it.effect(`concurrent claimers over ${options.exactlyOnceMessages} messages deliver each exactly once`, () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("race")
        const total = options.exactlyOnceMessages
        const sent = yield* store.send(queue, Array.from({ length: total }, (_, i) => msg({ i })))
        const seen: Array<MessageId> = []
        // Eight claimers, each claiming small batches and acking, until the queue is empty.
        const claimer = (name: string) =>
          Effect.gen(function*() {
            while (true) {
              const claims = yield* store.claim(queue, { lease: "5 minutes", limit: 7, consumer: name })
              if (claims.length === 0) return
              for (const c of claims) seen.push(c.id)
              yield* Effect.forEach(claims, (c) => Effect.flatMap(store.ack(c), (ok) => ok ? Effect.void : Effect.die(`lost ${c.id}`)))
            }
          })
        yield* Effect.forEach(Array.from({ length: 8 }, (_, i) => `claimer-${i}`), claimer, { concurrency: 8, discard: true })
        assert.strictEqual(seen.length, total, "no message delivered twice")
        assert.strictEqual(new Set(seen).size, total)
        assert.deepStrictEqual([...seen].sort(), sent.map((s) => s.id).sort())
        const stats = yield* store.stats(queue)
        assert.strictEqual(stats.ready + stats.inFlight, 0)
      }), 120_000)

    it.effect("get: one message by id, live or dead, with its state; none for an unknown id", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("get")
        const [flight] = yield* sendAll(queue, [msg("flight", { headers: { h: "1" }, maxAttempts: 5 })])
        const [claimed] = yield* claimAll(queue, { limit: 1, consumer: "getter", lease: "1 minute" })
        assert.strictEqual(claimed!.id, flight!.id)
        const [dead] = yield* sendAll(queue, [msg("dead")])
        const [deadClaim] = yield* claimAll(queue, { limit: 1 })
        assert.strictEqual(yield* store.deadLetter(deadClaim!, { reason: "bad payload", error: "boom" }), "written")
        const [ready] = yield* sendAll(queue, [msg("ready", { priority: 3, dedupKey: "k" })])
        const [delayed] = yield* sendAll(queue, [msg("delayed", { delay: 3_600_000 })])

        const got = (id: MessageId) => Effect.map(store.get(id), Option.getOrThrow)
        const f = yield* got(flight!.id)
        assert.deepStrictEqual(
          [f.id, f.queue, f.task, f.payload, f.headers, f.state, f.attempts, f.maxAttempts, f.leasedBy, f.deadReason, f.deadAt],
          [flight!.id, queue, "job", "flight", { h: "1" }, "in-flight", 1, 5, "getter", null, null]
        )
        assert.strictEqual(f.visibleAt!.getTime(), claimed!.leaseExpiresAt.getTime(), "in flight: visible when the lease expires")
        assert.strictEqual(f.visibleAt!.getTime() - f.leasedAt!.getTime(), 60_000, "in flight: leased a lease ago")
        const d = yield* got(dead!.id)
        assert.deepStrictEqual([d.state, d.payload, d.deadReason, d.lastError, d.visibleAt, d.leasedBy, d.leasedAt], ["dead", "dead", "bad payload", "boom", null, null, null])
        assert.instanceOf(d.deadAt, Date)
        const r = yield* got(ready!.id)
        assert.deepStrictEqual([r.state, r.payload, r.priority, r.dedupKey, r.attempts, r.leasedBy, r.leasedAt], ["ready", "ready", 3, "k", 0, null, null])
        assert.isAtMost(r.visibleAt!.getTime(), r.enqueuedAt.getTime())
        const w = yield* got(delayed!.id)
        assert.strictEqual(w.state, "delayed")
        assert.strictEqual(w.visibleAt!.getTime() - w.enqueuedAt.getTime(), 3_600_000)

        // Unknown: never sent, finished (acked, so deleted), or no message id at all.
        assert.isTrue(Option.isNone(yield* store.get("999999999999" as MessageId)))
        assert.isTrue(yield* store.ack(claimed!))
        assert.isTrue(Option.isNone(yield* store.get(flight!.id)))
        for (const notAnId of ["", "abc", "0", "-1", "1.5", "99999999999999999999", "1; drop table x"]) {
          assert.isTrue(Option.isNone(yield* store.get(notAnId as MessageId)), notAnId)
        }
      }))

    it.effect("messages: a queue's messages in id order, by state, paged with after; options checked", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("list")
        const other = freshQueue("list-other")
        const [flight] = yield* sendAll(queue, [msg(0)])
        yield* claimAll(queue, { limit: 1 })
        const [dead] = yield* sendAll(queue, [msg(1)])
        const [deadClaim] = yield* claimAll(queue, { limit: 1 })
        assert.strictEqual(deadClaim!.id, dead!.id)
        assert.strictEqual(yield* store.deadLetter(deadClaim!, { reason: "r" }), "written")
        // Priorities and delays do not change the order: it is the order of sending.
        const rest = yield* sendAll(queue, [msg(2, { priority: 9 }), msg(3, { delay: 60_000 }), msg(4, { priority: -1 }), msg(5)])
        yield* sendAll(other, [msg("elsewhere")])
        const ids = [flight!.id, dead!.id, ...rest.map((s) => s.id)]

        const all = yield* store.messages(queue)
        assert.deepStrictEqual(all.map((m) => m.id), ids)
        assert.deepStrictEqual(all.map((m) => m.payload), [0, 1, 2, 3, 4, 5])
        assert.deepStrictEqual(all.map((m) => m.state), ["in-flight", "dead", "ready", "delayed", "ready", "ready"])
        const byState = (state: MessageState) => Effect.map(store.messages(queue, { state }), (ms) => ms.map((m) => m.payload))
        assert.deepStrictEqual(yield* byState("ready"), [2, 4, 5])
        assert.deepStrictEqual(yield* byState("delayed"), [3])
        assert.deepStrictEqual(yield* byState("in-flight"), [0])
        assert.deepStrictEqual(yield* byState("dead"), [1])
        assert.deepStrictEqual(yield* store.messages(freshQueue("empty")), [])

        // Pages of two, each after the last id of the previous one.
        const pages: Array<Array<unknown>> = []
        let after: MessageId | undefined
        while (true) {
          const page = yield* store.messages(queue, { limit: 2, after })
          if (page.length === 0) break
          pages.push(page.map((m) => m.payload))
          after = page[page.length - 1]!.id
        }
        assert.deepStrictEqual(pages, [[0, 1], [2, 3], [4, 5]])
        assert.deepStrictEqual((yield* store.messages(queue, { state: "ready", limit: 1, after: rest[0]!.id })).map((m) => m.payload), [4])

        const refused = (effect: Effect.Effect<unknown, unknown>) =>
          Effect.map(Effect.flip(effect), (e) => e as { _tag: string; field: string })
        for (
          const [options, field] of [
            [{ limit: 0 }, "limit"],
            [{ limit: 10_001 }, "limit"],
            [{ limit: 1.5 }, "limit"],
            [{ state: "stuck" }, "state"],
            [{ after: "x'; --" }, "after"],
            [{ after: "-3" }, "after"]
          ] as const
        ) {
          const e = yield* refused(store.messages(queue, options as never))
          assert.deepStrictEqual([e._tag, e.field], ["InvalidInput", field], JSON.stringify(options))
        }
        const q = yield* refused(store.messages("not a queue!"))
        assert.deepStrictEqual([q._tag, q.field], ["InvalidInput", "queue"])
      }))

    movesTime("get and messages: an expired lease reads ready, a delay that ran out ready", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("state-time")
        yield* TestClock.setTime(5_000_000)
        const [leased] = yield* sendAll(queue, [msg("leased")])
        yield* claimAll(queue, { lease: "10 seconds" })
        const [later] = yield* sendAll(queue, [msg("later", { delay: 20_000 })])
        assert.deepStrictEqual((yield* store.messages(queue)).map((m) => m.state), ["in-flight", "delayed"])
        yield* TestClock.adjust("11 seconds")
        const expired = Option.getOrThrow(yield* store.get(leased!.id))
        assert.deepStrictEqual([expired.state, expired.leasedBy, expired.visibleAt!.getTime()], ["ready", null, 5_010_000])
        yield* TestClock.adjust("10 seconds")
        assert.strictEqual(Option.getOrThrow(yield* store.get(later!.id)).state, "ready")
        assert.deepStrictEqual((yield* store.messages(queue, { state: "ready" })).map((m) => m.payload), ["leased", "later"])
      }))

    if (databaseClock) {
      // Real time on the server's clock: leases and delays of about a second, waits a little past
      // them, bounds of a couple of seconds either side (the test server runs on this machine).
      const slack = 2_000

      it.effect("database clock: a claim's lease runs from the server's now; hidden while leased", () =>
        Effect.gen(function*() {
          const store = yield* QueueStore
          const queue = freshQueue("db-basic")
          const [sent] = yield* sendAll(queue, [msg({ n: 1 })])
          const before = yield* wallClock
          const [c] = yield* store.claim(queue, { lease: "30 seconds", limit: 10, consumer: "worker-a" })
          const after = yield* wallClock
          assert.strictEqual(c!.id, sent!.id)
          assert.strictEqual(c!.attempts, 1)
          assert.isAtLeast(c!.leaseExpiresAt.getTime(), before + 30_000 - slack)
          assert.isAtMost(c!.leaseExpiresAt.getTime(), after + 30_000 + slack)
          assert.strictEqual((yield* claimAll(queue, { consumer: "worker-b" })).length, 0)
          assert.isTrue(yield* store.ack(c!))
        }))

      it.effect("database clock: a delayed message is hidden until due, and nextVisibleAt says when", () =>
        Effect.gen(function*() {
          const store = yield* QueueStore
          const queue = freshQueue("db-delay")
          const before = yield* wallClock
          yield* sendAll(queue, [msg("later", { delay: 1_000 }), msg("now")])
          assert.deepStrictEqual((yield* claimAll(queue, { lease: "1 minute" })).map((c) => c.payload), ["now"])
          const next = Option.getOrThrow(yield* store.nextVisibleAt(queue)).getTime()
          assert.isAtLeast(next, before + 1_000 - slack)
          assert.isAtMost(next, (yield* wallClock) + 1_000 + slack)
          assert.strictEqual((yield* store.stats(queue)).delayed, 1)
          yield* realSleep(Math.max(0, next - (yield* wallClock)) + 300)
          assert.deepStrictEqual((yield* claimAll(queue)).map((c) => c.payload), ["later"])
        }))

      it.effect("database clock: an expired lease is reclaimed, counted and recorded; the first holder can change nothing", () =>
        Effect.gen(function*() {
          const store = yield* QueueStore
          const queue = freshQueue("db-fence")
          const [sent] = yield* sendAll(queue, [msg("m")])
          const [old] = yield* claimAll(queue, { lease: "1 second", consumer: "slow" })
          assert.strictEqual((yield* claimAll(queue, { consumer: "fast" })).length, 0, "hidden while the lease holds")
          yield* realSleep(1_300)
          const [current] = yield* claimAll(queue, { lease: "30 seconds", consumer: "fast" })
          assert.strictEqual(current!.id, old!.id)
          assert.notStrictEqual(current!.leaseToken, old!.leaseToken)
          assert.deepStrictEqual([current!.attempts, current!.leaseExpiries], [2, 1])
          assert.deepStrictEqual((yield* store.renew([old!], "5 minutes")).held, [])
          assert.isFalse(yield* store.ack(old!))
          assert.strictEqual(yield* store.retry(old!, { delay: 0, error: "stale" }), "lost")
          assert.strictEqual(yield* store.deadLetter(old!, { reason: "stale" }), "lost")
          assert.strictEqual(yield* store.release(old!), "lost")
          const stats = yield* store.stats(queue)
          assert.deepStrictEqual([stats.inFlight, stats.ready, stats.dead], [1, 0, 0])
          const history = yield* store.attempts(sent!.id)
          assert.deepStrictEqual(history.map((a) => [a.outcome, a.attempt, a.consumer]), [["lease-expired", 1, "slow"]])
          assert.isTrue(yield* store.ack(current!))
        }))

      it.effect("database clock: renew moves the lease from the server's now; an unreclaimed expired lease is still its holder's", () =>
        Effect.gen(function*() {
          const store = yield* QueueStore
          const queue = freshQueue("db-renew")
          yield* sendAll(queue, [msg(1), msg(2)])
          const [kept, lapsed] = yield* claimAll(queue, { lease: "1 second" })
          yield* realSleep(600)
          assert.deepStrictEqual((yield* store.renew([kept!], "3 seconds")).held, [kept!.id])
          yield* realSleep(800) // past the first lease: `lapsed` expired, `kept` was moved on
          // Nobody reclaimed `lapsed` yet: its holder may still renew it.
          assert.deepStrictEqual((yield* store.renew([lapsed!], "3 seconds")).held, [lapsed!.id])
          assert.strictEqual((yield* claimAll(queue, { consumer: "other" })).length, 0, "both leases hold")
          assert.isTrue(yield* store.ack(kept!))
          assert.isTrue(yield* store.ack(lapsed!))
        }))

      it.effect("database clock: retry and release delays run on the server's clock", () =>
        Effect.gen(function*() {
          const store = yield* QueueStore
          const queue = freshQueue("db-retry")
          yield* sendAll(queue, [msg("r"), msg("l")])
          const [r, l] = yield* claimAll(queue, { lease: "1 minute" })
          assert.strictEqual(yield* store.retry(r!, { delay: "1 second", error: "boom" }), "written")
          assert.strictEqual(yield* store.release(l!, { delay: "1 second" }), "written")
          assert.strictEqual((yield* store.stats(queue)).delayed, 2)
          assert.strictEqual((yield* claimAll(queue)).length, 0)
          yield* realSleep(1_300)
          const again = yield* claimAll(queue)
          assert.deepStrictEqual(
            again.map((c) => [c.payload, c.attempts, c.lastError]).sort(),
            [["l", 1, null], ["r", 2, "boom"]]
          )
          // Released now: visible at once, the attempt given back.
          assert.strictEqual(yield* store.release(again.find((c) => c.payload === "l")!), "written")
          assert.deepStrictEqual((yield* claimAll(queue)).map((c) => [c.payload, c.attempts]), [["l", 1]])
        }))

      it.effect("database clock: dead-letter time and the oldest ready age come from the server", () =>
        Effect.gen(function*() {
          const store = yield* QueueStore
          const queue = freshQueue("db-stats")
          yield* sendAll(queue, [msg("dead")])
          const [c] = yield* claimAll(queue)
          const before = yield* wallClock
          assert.strictEqual(yield* store.deadLetter(c!, { reason: "x" }), "written")
          const [dead] = yield* store.deadLetters({ queue })
          assert.isAtLeast(dead!.deadAt.getTime(), before - slack)
          assert.isAtMost(dead!.deadAt.getTime(), (yield* wallClock) + slack)
          yield* sendAll(queue, [msg("r1")])
          const sentAt = yield* wallClock
          yield* realSleep(500)
          const stats = yield* store.stats(queue)
          const elapsed = (yield* wallClock) - sentAt
          assert.deepStrictEqual([stats.ready, stats.dead], [1, 1])
          assert.isAtLeast(stats.oldestReadyAgeMs, 500 - 50)
          assert.isAtMost(stats.oldestReadyAgeMs, elapsed + slack)
        }))

      it.effect("database clock: attempt history is pruned by age against the server's now", () =>
        Effect.gen(function*() {
          const store = yield* QueueStore
          const queue = freshQueue("db-prune")
          const [s] = yield* sendAll(queue, [msg("h")])
          const now = yield* wallClock
          const base = { messageId: s!.id, queue, task: "job", consumer: "c1" }
          yield* store.recordAttempt({ ...base, attempt: 1, outcome: "retried", error: "boom", startedAt: new Date(now - 7_300_000), endedAt: new Date(now - 7_200_000) })
          yield* store.recordAttempt({ ...base, attempt: 2, outcome: "acked", error: null, startedAt: new Date(now - 1_000), endedAt: new Date(now) })
          assert.isAtLeast(yield* store.pruneAttempts("1 hour"), 1)
          assert.deepStrictEqual((yield* store.attempts(s!.id)).map((a) => a.attempt), [2])
        }))
    }
  })
