/**
 * Event-loop lag watch. Node runs one thread: a handler that blocks it also
 * stalls its renewer and its local deadline. This samples the loop's delay and
 * warns when it approaches the renewal interval (lease/3).
 */
import { Effect, Metric } from "effect"
import { performance } from "node:perf_hooks"
import * as QueueMetrics from "../QueueMetrics.ts"

const SAMPLE_MS = 50

/**
 * A sampler: a plain unref'd timer every 50 ms, recording how late it fires.
 * (node's monitorEventLoopDelay recorded nothing here when the loop was
 * blocked from the start, so the lateness is measured directly.)
 */
const sampler = Effect.acquireRelease(
  Effect.sync(() => {
    const state = { worstMs: 0, last: performance.now(), timer: undefined as NodeJS.Timeout | undefined }
    state.timer = setInterval(() => {
      const now = performance.now()
      state.worstMs = Math.max(state.worstMs, now - state.last - SAMPLE_MS)
      state.last = now
    }, SAMPLE_MS)
    state.timer.unref()
    return state
  }),
  (state) => Effect.sync(() => clearInterval(state.timer))
)

/** Watch the event loop every `intervalMs`; warn when the worst delay in an interval exceeds `warnAboveMs`. */
export const watch = (options: { readonly intervalMs: number; readonly warnAboveMs: number }) =>
  Effect.gen(function*() {
    const state = yield* sampler
    while (true) {
      yield* Effect.sleep(options.intervalMs)
      // Lateness still unrecorded (a block in progress when the sampler last ran) counts too.
      const worstMs = Math.round(Math.max(state.worstMs, performance.now() - state.last - SAMPLE_MS, 0))
      state.worstMs = 0
      yield* Metric.update(QueueMetrics.eventLoopLag, worstMs)
      if (worstMs > options.warnAboveMs) {
        yield* Effect.logWarning(
          `event loop blocked for up to ${worstMs}ms (renewals run every ${options.intervalMs}ms): ` +
            "a CPU-bound handler stalls lease renewals; run such work in a worker thread or another process"
        )
      }
    }
  }).pipe(Effect.scoped)
