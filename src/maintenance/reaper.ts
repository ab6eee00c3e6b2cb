/**
 * The reaper, as a maintenance task: every consumer runs one (no leader), which
 * every `reapEvery` releases the claims of consumers whose heartbeat is stale
 * AND whose presence lock nobody holds (the statement: `pg/reap.ts`), then logs
 * and counts what it released.
 *
 * @since 0.1.0
 */
import { Clock, Effect, Metric } from "effect"
import { seconds } from "../internal/format.ts"
import type { PresenceContext } from "../pg/presence.ts"
import * as Reap from "../pg/reap.ts"
import * as QueueMetrics from "../QueueMetrics.ts"
import type { Task } from "./Maintenance.ts"

/** Log and count what a sweep released; returns how many claims. */
export const report = (reaped: ReadonlyArray<Reap.Reaped>): Effect.Effect<number> =>
  Effect.gen(function*() {
    const byConsumer = new Map<string, Array<Reap.Reaped>>()
    for (const r of reaped) byConsumer.set(r.consumer, [...(byConsumer.get(r.consumer) ?? []), r])
    const now = yield* Clock.currentTimeMillis
    let released = 0
    let executionsReleased = 0
    for (const [consumer, rows] of byConsumer) {
      const first = rows[0]!
      const ids = rows.flatMap((r) => (r.messageId === null ? [] : [r.messageId]))
      const executions = rows.flatMap((r) => (r.execution === null ? [] : [r.execution]))
      released += ids.length
      executionsReleased += executions.length
      const who = `consumer ${consumer} (host ${first.host}, pid ${first.pid}) is gone: its session ended and its last heartbeat was ${
        seconds(now - first.heartbeatAt.getTime())
      } ago`
      const what = [
        ids.length === 0 ? [] : [`its ${ids.length} claim(s), counted as lease expiries: ${ids.join(", ")}`],
        executions.length === 0 ? [] : [`its ${executions.length} workflow execution(s): ${executions.join(", ")}`]
      ].flat()
      yield* (what.length === 0
        ? Effect.logInfo(`${who}; it held no claims`)
        : Effect.logWarning(`${who}; released at once ${what.join("; and ")}`)).pipe(
          Effect.annotateLogs({ deadConsumer: consumer, messageIds: ids.join(","), executions: executions.join(",") })
        )
    }
    if (released > 0) yield* Metric.update(QueueMetrics.reaped, released)
    if (executionsReleased > 0) yield* Metric.update(QueueMetrics.workflowReaped, executionsReleased)
    return released
  })

/**
 * The reaper of consumer `self`. It releases only after it has itself talked to the
 * database without a failure for the stale bound: after a network blip that cut
 * everybody off, the others get that long to heartbeat again. `onReleased` runs when a
 * sweep released claims (the consumer wakes to take them).
 */
export const make = (options: {
  readonly ctx: PresenceContext
  readonly self: string
  readonly reapMs: number
  readonly onReleased: Effect.Effect<void>
}): Task => {
  const { ctx, self } = options
  let healthySince: number | undefined
  let lastError: string | undefined
  return {
    name: "reaper",
    every: options.reapMs,
    run: Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      const result = yield* Effect.result(Reap.sweep(ctx, self, healthySince !== undefined && now - healthySince >= ctx.staleMs))
      if (result._tag === "Failure") {
        healthySince = undefined
        const error = result.failure
        if (error.message !== lastError) {
          lastError = error.message
          yield* error._tag === "ConnectionDead"
            ? Effect.logWarning(`reaper: connection dead, retrying: ${error.message}`)
            : Effect.logError(`reaper failed (${error._tag}), retrying: ${error.message}`)
        }
        return
      }
      lastError = undefined
      healthySince ??= now
      if (result.success.length > 0 && (yield* report(result.success)) > 0) yield* options.onReleased
    })
  }
}
