/**
 * Conformance, maintenance: attempt history pruned by age (uniqueness reservations are pruned in send.ts).
 */
import { assert } from "@effect/vitest"
import { Effect } from "effect"
import { TestClock } from "effect/testing"
import { type Finish as FinishKind, QueueStore } from "../../src/QueueStore.ts"
import * as Finish from "../support/Finish.ts"
import { claimAll, freshQueue, msg, realSleep, sendAll, type Suite } from "./support.ts"

/** maintenance tests of the conformance suite (see index.ts). */
export const maintenance = ({ it, movesTime, databaseClock }: Suite) => {
  movesTime("attempt history: recorded, listed in order, pruned by age", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("history")
      yield* TestClock.setTime(40_000_000)
      const [s] = yield* sendAll(queue, [msg("h")])
      // Two runs, an hour apart: a retry (with a partial result), then an ack with its result.
      const run = (finish: FinishKind, outcome: "retried" | "acked", error: string | null, result: unknown) =>
        Effect.gen(function*() {
          const [claimed] = yield* claimAll(queue)
          const completion = yield* Finish.completion(store, claimed!, finish, outcome, error)
          const { held } = yield* store.complete([{ ...completion, result: JSON.stringify(result) }])
          assert.deepStrictEqual(held, [s!.id])
        })
      yield* run({ _tag: "Retry", delayMs: 0, error: "boom" }, "retried", "boom", { partial: 1 })
      yield* TestClock.adjust("1 hour")
      yield* run({ _tag: "Ack" }, "acked", null, { n: 2 })
      const history = yield* store.attempts(s!.id)
      assert.deepStrictEqual(history.map((a) => [a.attempt, a.outcome, a.error, a.result, a.endedAt.getTime()]), [
        [1, "retried", "boom", { partial: 1 }, 40_000_000],
        [2, "acked", null, { n: 2 }, 40_000_000 + 3_600_000]
      ])
      // Pruning is store-wide (other tests' records may go too); this message keeps only its recent attempt,
      // and the pruned record's result went with it (same retention).
      assert.isAtLeast(yield* store.pruneAttempts("30 minutes"), 1)
      assert.deepStrictEqual((yield* store.attempts(s!.id)).map((a) => [a.attempt, a.result]), [[2, { n: 2 }]])
    }))

  if (databaseClock) {
    it.effect("database clock: attempt history is pruned by age against the server's now", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("db-prune")
        const [s] = yield* sendAll(queue, [msg("h")])
        // A run that ended over a second ago (by the server's clock), then one that ends now.
        const [first] = yield* claimAll(queue)
        assert.strictEqual(yield* Finish.retry(store, first!, { delay: 0, error: "boom" }), "written")
        yield* realSleep(1_500)
        const [second] = yield* claimAll(queue)
        assert.isTrue(yield* Finish.ack(store, second!))
        assert.deepStrictEqual((yield* store.attempts(s!.id)).map((a) => a.attempt), [1, 2])
        // Store-wide: older records of the tests before go too.
        assert.isAtLeast(yield* store.pruneAttempts("1 second"), 1)
        assert.deepStrictEqual((yield* store.attempts(s!.id)).map((a) => a.attempt), [2])
      }))
  }
}
