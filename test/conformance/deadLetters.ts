/**
 * Conformance, dead letters, as an operator handles them: listed, redriven (their history and dedup keys),
 * purged, and the filters that say which.
 */
import { assert } from "@effect/vitest"
import { Effect, Option } from "effect"
import { TestClock } from "effect/testing"
import { type MessageId } from "../../src/Message.ts"
import { type Finish as FinishKind, QueueStore } from "../../src/QueueStore.ts"
import * as Finish from "../support/Finish.ts"
import { claimAll, freshQueue, msg, refusal, sendAll, type Suite } from "./support.ts"

/** deadLetters tests of the conformance suite (see index.ts). */
export const deadLetters = ({ it, movesTime }: Suite) => {
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
      for (const c of claims) assert.strictEqual(yield* Finish.deadLetter(store, c, { reason: "attempts exhausted", error: `err ${c.payload}` }), "written")
      assert.strictEqual(yield* Finish.deadLetter(store, z!, { reason: "unknown task" }), "written")
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

  it.effect("redrive records a redriven history row, and the next attempts are numbered on from there", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("redriven")
      const [sent] = yield* sendAll(queue, [msg("r", { maxAttempts: 2 })])
      const run = (finish: FinishKind, outcome: "acked" | "retried" | "dead-lettered") =>
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

  it.effect("redrive: dead letters sharing a dedup key are all redriven; the first to die keeps the key, the others give it up", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("redrive-dedup")
      const die = (payload: string) =>
        Effect.gen(function*() {
          const [sent] = yield* sendAll(queue, [msg(payload, { dedupKey: "k" })])
          const [claimed] = yield* claimAll(queue)
          assert.strictEqual(claimed!.id, sent!.id)
          assert.strictEqual(yield* Finish.deadLetter(store, claimed!, { reason: "r" }), "written")
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
      assert.strictEqual(yield* Finish.deadLetter(store, holder!, { reason: "r" }), "written")
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
      assert.strictEqual(yield* Finish.deadLetter(store, claimed!, { reason: "r" }), "written")
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
      assert.strictEqual(yield* Finish.deadLetter(store, again!, { reason: "r" }), "written")
      // Leading zeros spell the same id (as PostgreSQL reads it): both stores match it.
      assert.deepStrictEqual(yield* store.deadLetters({ ids: [`00${claimed!.id}` as MessageId] }), yield* store.deadLetters({ queue }))
      assert.deepStrictEqual(yield* store.purge({ ids: [`0${claimed!.id}` as MessageId] }), [claimed!.id])
    }))
}
