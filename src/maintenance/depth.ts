/**
 * The queue-depth sampler, as a maintenance task: every `interval`, first at
 * once, one statement for the depths of all the queues wanted, recorded in the
 * depth gauges (`QueueDepth.layer` runs it, one per process).
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { InvalidInput, StoreError } from "../QueueError.ts"
import type { Task } from "./Maintenance.ts"

/** The sampler task over `sample` (one sample, recorded), every `everyMs`. */
export const make = (sample: Effect.Effect<unknown, InvalidInput | StoreError>, everyMs: number): Task<InvalidInput | StoreError> => ({
  name: "queue depth",
  every: everyMs,
  firstAtOnce: true,
  run: Effect.asVoid(sample),
  failed: (e) => `queue depths not sampled: ${e.message}`
})
