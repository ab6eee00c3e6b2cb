/**
 * Queue-depth gauges: ready, delayed, in flight, dead and the age of the
 * oldest ready message, per queue, sampled by one collector per process with
 * one statement per interval for all its queues (never one per consumer).
 *
 * ```ts
 * const Worker = Layer.mergeAll(Consumer.layerFromEnv(dispatcher), QueueDepth.layer()).pipe(
 *   Layer.provide(PgQueueStore.layer())
 * )
 * ```
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer, type Scope } from "effect"
import * as Depth from "./maintenance/depth.ts"
import * as Maintenance from "./maintenance/Maintenance.ts"
import type { QueueStats } from "./Message.ts"
import type { ConfigInvalid, InvalidInput, StoreError } from "./QueueError.ts"
import * as QueueConfig from "./QueueConfig.ts"
import * as QueueMetrics from "./QueueMetrics.ts"
import { QueueStore } from "./QueueStore.ts"

/** How to sample. */
export interface QueueDepthOptions {
  /**
   * The queues to sample. Default: the queues of the consumers running in this
   * process at each sample (a process without consumers samples nothing).
   */
  readonly queues?: ReadonlyArray<string> | undefined
  /** Time between samples (default 10 seconds): any duration, `"5s"` as well as `"5 seconds"`. */
  readonly interval?: QueueConfig.DurationLike | undefined
}

/**
 * Which queues the running consumers consume, and how many consume each: what
 * {@link layer} samples by default. A service: by default one per process (every
 * consumer and collector of the process shares it); a runtime that must not see
 * another's consumers (two workers in one process) provides its own with
 * {@link layerConsumedQueues}, below its consumers and its collector.
 */
export const ConsumedQueues: Context.Reference<Map<string, number>> = Context.Reference<Map<string, number>>(
  "leasehold/QueueDepth/ConsumedQueues",
  { defaultValue: () => new Map() }
)

/** A registry of consumed queues of its own (see {@link ConsumedQueues}). */
export const layerConsumedQueues: Layer.Layer<never> = Layer.sync(ConsumedQueues, () => new Map<string, number>())

/**
 * The queues of the running consumers, in the order they were first consumed:
 * what {@link layer} samples by default.
 */
export const consumedQueues: Effect.Effect<ReadonlyArray<string>> = Effect.map(Effect.service(ConsumedQueues), (consumed) => [...consumed.keys()])

/**
 * Count `queues` as consumed for the life of the current scope (the consumer
 * does this for its queues).
 */
export const track = (queues: ReadonlyArray<string>): Effect.Effect<void, never, Scope.Scope> =>
  Effect.flatMap(Effect.service(ConsumedQueues), (consumed) =>
    Effect.acquireRelease(
      Effect.sync(() => {
        for (const queue of new Set(queues)) consumed.set(queue, (consumed.get(queue) ?? 0) + 1)
      }),
      () =>
        Effect.sync(() => {
          for (const queue of new Set(queues)) {
            const n = (consumed.get(queue) ?? 1) - 1
            if (n <= 0) consumed.delete(queue)
            else consumed.set(queue, n)
          }
        })
    ))

/** Set the depth gauges of each queue counted. */
export const record = (depths: ReadonlyArray<QueueStats>): Effect.Effect<void> =>
  Effect.withFiberSucceed((fiber) => {
    for (const d of depths) {
      const gauges = QueueMetrics.forQueue(d.queue)
      gauges.ready.updateUnsafe(d.ready, fiber.context)
      gauges.delayed.updateUnsafe(d.delayed, fiber.context)
      gauges.inFlight.updateUnsafe(d.inFlight, fiber.context)
      gauges.dead.updateUnsafe(d.dead, fiber.context)
      gauges.oldestReadyAgeMs.updateUnsafe(d.oldestReadyAgeMs, fiber.context)
    }
  })

/**
 * Sample once: the depths of `queues` (default: the consumed ones) in one
 * statement, recorded in the gauges and returned.
 */
export const sample = (
  queues?: ReadonlyArray<string>
): Effect.Effect<ReadonlyArray<QueueStats>, InvalidInput | StoreError, QueueStore> =>
  Effect.gen(function*() {
    const wanted = queues ?? (yield* consumedQueues)
    if (wanted.length === 0) return []
    const store = yield* QueueStore
    const depths = yield* store.depths(wanted)
    yield* record(depths)
    return depths
  })

/**
 * The collector as a layer: samples every `interval` (default 10 s), first at
 * once, while the layer is in use. A failed sample is logged and the gauges
 * keep their last values until the next one. An `interval` that is no duration fails the
 * layer with `ConfigInvalid` naming it.
 */
export const layer = (options: QueueDepthOptions = {}): Layer.Layer<never, ConfigInvalid, QueueStore> =>
  Layer.effectDiscard(Effect.gen(function*() {
    const store = yield* QueueStore
    const interval = yield* QueueConfig.parseDuration("interval", options.interval ?? "10 seconds")
    const once = sample(options.queues).pipe(Effect.provideService(QueueStore, store))
    yield* Maintenance.fork(Depth.make(once, interval)).pipe(Effect.annotateLogs({ module: "QueueDepth" }))
  }))
