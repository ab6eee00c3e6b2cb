/**
 * Conformance, the commit step (`completeWith`): an effect and the fenced ack of its message in
 * one step. Held: the effect's value, the message gone, its history `acked`. Not held (a stale
 * token, a message already finished): `CommitFenced` before the effect runs, nothing written. A
 * failing effect: its error, and the message still held by the run (its retry lands).
 */
import { assert } from "@effect/vitest"
import { Effect, Option } from "effect"
import type { Claim } from "../../src/Message.ts"
import { type Completion, QueueStore } from "../../src/QueueStore.ts"
import { claimAll, freshQueue, msg, sendAll, type Suite } from "./support.ts"

const ackOf = (claim: Claim, ref: Completion["ref"] = claim): Completion => ({
  ref,
  finish: { _tag: "Ack" },
  queue: claim.queue,
  task: claim.task,
  attempt: claim.attempts,
  consumer: "committer",
  startedAt: new Date(1_000),
  outcome: "acked",
  error: null
})

const STALE = "00000000-0000-4000-8000-000000000000" as Claim["leaseToken"]

/** commit tests of the conformance suite (see index.ts). */
export const commit = ({ it }: Suite) => {
  it.effect("completeWith: a held message's effect runs, its value comes back, the message is acked with its history", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("commit-held")
      yield* sendAll(queue, [msg("a")])
      const [claim] = yield* claimAll(queue, { consumer: "committer" })
      let ran = 0
      const value = yield* store.completeWith(ackOf(claim!), Effect.sync(() => ++ran * 42))
      assert.deepStrictEqual([value, ran], [42, 1])
      assert.isTrue(Option.isNone(yield* store.get(claim!.id)))
      const history = yield* store.attempts(claim!.id)
      assert.deepStrictEqual(history.map((a) => [a.outcome, a.consumer, a.error]), [["acked", "committer", null]])
    }))

  it.effect("completeWith: a run that no longer holds its message is fenced before its effect runs, and nothing is written", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("commit-fenced")
      yield* sendAll(queue, [msg("a"), msg("b")])
      const [first, second] = yield* claimAll(queue, { consumer: "holder" })
      let ran = 0
      const effect = Effect.sync(() => ++ran)
      // A token that is not the holder's (the lease was taken by another run).
      const stale = yield* Effect.flip(store.completeWith(ackOf(first!, { id: first!.id, leaseToken: STALE }), effect))
      assert.strictEqual(stale._tag, "CommitFenced")
      assert.strictEqual(stale._tag === "CommitFenced" ? stale.reason : undefined, "lease-lost")
      // A message already finished (acked by the run that holds it).
      yield* store.complete([ackOf(second!)])
      const gone = yield* Effect.flip(store.completeWith(ackOf(second!), effect))
      assert.strictEqual(gone._tag, "CommitFenced")
      assert.strictEqual(ran, 0, "the effect never ran")
      // The first is still the holder's, untouched: its own ack lands.
      assert.deepStrictEqual((yield* store.complete([ackOf(first!)])).held, [first!.id])
      assert.deepStrictEqual((yield* store.attempts(first!.id)).map((a) => a.outcome), ["acked"])
    }))

  it.effect("completeWith: a failing effect fails the step, writes no ack, and the run still holds its message", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("commit-failed")
      yield* sendAll(queue, [msg("a")])
      const [claim] = yield* claimAll(queue, { consumer: "committer" })
      const error = yield* Effect.flip(store.completeWith(ackOf(claim!), Effect.fail("the write failed" as const)))
      assert.strictEqual(error, "the write failed")
      assert.isTrue(Option.isSome(yield* store.get(claim!.id)))
      assert.deepStrictEqual(yield* store.attempts(claim!.id), [])
      // Still held: the run's retry lands.
      const retried = yield* store.complete([{ ...ackOf(claim!), finish: { _tag: "Retry", delayMs: 0, error: "the write failed" }, outcome: "retried", error: "the write failed" }])
      assert.deepStrictEqual(retried.held, [claim!.id])
      // And a second commit of the retried message's next run works.
      const [again] = yield* claimAll(queue, { consumer: "committer" })
      assert.strictEqual(yield* store.completeWith(ackOf(again!), Effect.succeed("ok")), "ok")
    }))
}
