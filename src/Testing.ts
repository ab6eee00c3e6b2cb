/**
 * Helpers for tests of code that sends and consumes messages, on the memory
 * store (or PostgreSQL with `clock: "effect"`) under Effect's `TestClock`.
 *
 * `awaitIdle` replaces hand-written "settle and move the clock" loops: it lets
 * the consumer's fibers run and advances the `TestClock` step by step until
 * every queue it watches is idle, so a test does not depend on how far the
 * scheduler needs the clock moved.
 *
 * ```ts
 * it.effect("a welcome email is sent once", () =>
 *   Effect.gen(function*() {
 *     yield* Task.send(sendWelcomeEmail, { to: "a@b.c", name: "A" })
 *     yield* Testing.awaitIdle({ queues: ["emails"] }) // ran, retried if need be, acked
 *     // ...assert on what the handler did
 *   }).pipe(Effect.provide(Consumer.layer(...).pipe(Layer.provideMerge(MemoryQueueStore.layer()))))
 * )
 * ```
 *
 * @since 0.1.0
 */
import { Clock, Data, Duration, Effect, Option } from "effect"
import type { TestClock } from "effect/testing"
import type { QueueStats } from "./Message.ts"
import type { InvalidInput, StoreError } from "./QueueError.ts"
import { QueueStore } from "./QueueStore.ts"

/** How {@link awaitIdle} decides it is done, and how far it may go. */
export interface AwaitIdleOptions {
  /** The queues that must be idle (default `["default"]`). */
  readonly queues?: ReadonlyArray<string> | undefined
  /**
   * A delayed message (a delay or retry backoff) due within this long counts as pending
   * work; one due later does not (default 1 minute).
   */
  readonly horizon?: Duration.Input | undefined
  /**
   * How far the clock moves per step while a message is ready or in flight (default
   * 100 ms). With only delayed messages left it moves straight to the next one due.
   */
  readonly step?: Duration.Input | undefined
  /** Steps before giving up with {@link AwaitIdleTimeout} (default 10000). */
  readonly maxSteps?: number | undefined
  /** Scheduler turns given to other fibers before each look at the queues (default 20). */
  readonly yields?: number | undefined
}

/** What {@link awaitIdle} did: how many steps it took and how far it moved the clock. */
export interface IdleReport {
  readonly steps: number
  readonly advancedMs: number
}

/**
 * {@link awaitIdle} gave up: the queues were still busy after `maxSteps` steps (a message
 * with no consumer for its queue, a handler that never ends), or no `TestClock` was in use.
 */
export class AwaitIdleTimeout extends Data.TaggedError("AwaitIdleTimeout")<{
  readonly message: string
  readonly steps: number
  readonly advancedMs: number
  /** The counts of the watched queues at the last look. */
  readonly stats: ReadonlyArray<QueueStats>
}> {}

const isTestClock = (clock: Clock.Clock): clock is TestClock.TestClock =>
  typeof (clock as Partial<TestClock.TestClock>).adjust === "function"

const describe = (stats: ReadonlyArray<QueueStats>) =>
  stats.map((s) => `${s.queue}: ${s.ready} ready, ${s.inFlight} in flight, ${s.delayed} delayed`).join("; ")

/**
 * Advance the `TestClock` until no message of `queues` is ready, in flight, or delayed
 * within `horizon`: each step gives other fibers `yields` scheduler turns, reads the
 * queues' counts, and moves the clock by `step` (or to the next delayed message when
 * nothing else is pending). Fails with {@link AwaitIdleTimeout} after `maxSteps` steps.
 *
 * Meant for `it.effect` (which runs on the `TestClock`) with `MemoryQueueStore.layer()`
 * and a consumer running in the test's scope; it reads the store through `QueueStore`.
 * Dead letters count as idle: check `stats` or `messages(queue, { state: "dead" })` for them.
 */
export const awaitIdle = (
  options: AwaitIdleOptions = {}
): Effect.Effect<IdleReport, AwaitIdleTimeout | InvalidInput | StoreError, QueueStore> =>
  Effect.gen(function*() {
    const store = yield* QueueStore
    const clock = yield* Clock.Clock
    const queues = options.queues ?? ["default"]
    const horizonMs = Duration.toMillis(Duration.fromInputUnsafe(options.horizon ?? "1 minute"))
    const stepMs = Math.max(1, Duration.toMillis(Duration.fromInputUnsafe(options.step ?? "100 millis")))
    const maxSteps = options.maxSteps ?? 10_000
    const yields = options.yields ?? 20
    if (!isTestClock(clock)) {
      return yield* new AwaitIdleTimeout({
        message: "awaitIdle needs the TestClock (it.effect provides it; it.live does not)",
        steps: 0,
        advancedMs: 0,
        stats: []
      })
    }
    const start = clock.currentTimeMillisUnsafe()
    let stats: ReadonlyArray<QueueStats> = []
    for (let steps = 0; steps <= maxSteps; steps++) {
      for (let i = 0; i < yields; i++) yield* Effect.yieldNow
      stats = yield* store.depths(queues)
      const now = clock.currentTimeMillisUnsafe()
      if (stats.every((s) => s.ready === 0 && s.inFlight === 0)) {
        // Only delayed messages (if any) left: idle unless one is due within the horizon.
        let nextDue = Infinity
        for (const s of stats) {
          if (s.delayed === 0) continue
          const at = yield* store.nextVisibleAt(s.queue)
          if (Option.isSome(at)) nextDue = Math.min(nextDue, at.value.getTime())
        }
        if (nextDue > now + horizonMs) return { steps, advancedMs: now - start }
        if (steps < maxSteps) yield* clock.adjust(Math.max(1, nextDue - now))
      } else if (steps < maxSteps) {
        yield* clock.adjust(stepMs)
      }
    }
    const advancedMs = clock.currentTimeMillisUnsafe() - start
    return yield* new AwaitIdleTimeout({
      message: `queues not idle after ${maxSteps} steps (${advancedMs} ms of TestClock time): ${describe(stats)}`,
      steps: maxSteps,
      advancedMs,
      stats
    })
  })
