/**
 * The depth-history sampler, as a maintenance task: every {@link everyMs}, the depths of every
 * queue stored as one sample in the database (`Insights.recordDepths`), for the dashboard's
 * charts. Every consumer process on the PostgreSQL store runs one (`leasehold serve` does not:
 * it may run with a read-only role); the store keeps it to one sample per interval for the fleet (an advisory lock, and no sample sooner than the interval
 * after the last), so a process asks the counts only when a sample is due.
 *
 * @since 0.5.0
 */
import { Effect } from "effect"
import type { InsightsShape } from "../Insights.ts"
import type { StoreError } from "../QueueError.ts"
import type { QueueStoreShape } from "../QueueStore.ts"
import type { Task } from "./Maintenance.ts"

/** Time between two samples of the fleet. */
export const everyMs = 10_000
/** How long samples are kept. */
export const retentionMs = 24 * 3_600_000

/**
 * The sampler over `store` and `insights`. It asks a little under the interval after the last
 * sample (several processes' rounds drift apart; the first due one samples).
 */
export const make = (store: QueueStoreShape, insights: InsightsShape, every: number = everyMs): Task<StoreError> => ({
  name: "depth history",
  every,
  firstAtOnce: true,
  run: Effect.gen(function*() {
    const age = yield* insights.depthSampleAge
    if (age !== undefined && age < every * 0.9) return
    const queues = yield* store.queues()
    yield* insights.recordDepths(queues, every * 0.9, retentionMs)
  }),
  failed: (e) => `queue depths not stored for the dashboard: ${e.message}`
})
