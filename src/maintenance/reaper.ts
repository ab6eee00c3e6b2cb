/**
 * The reaper, as a maintenance task: every consumer runs one (no leader), which
 * every `reapEvery` probes the presence locks of the other consumers (the
 * statements: `pg/reap.ts`) and releases the claims of those whose lock it has
 * seen free for `reapAfter` (on its first look and on a look at least that much
 * later, no look between finding it held), then logs and counts what it released.
 * Why a lock seen free for that long means dead: `ConsumerPresence.ts`.
 *
 * @since 0.1.0
 */
import { Clock, Effect, Metric } from "effect"
import { seconds } from "../internal/format.ts"
import type { PresenceContext } from "../pg/presence.ts"
import * as Reap from "../pg/reap.ts"
import type { StoreError } from "../QueueError.ts"
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
      const who = `consumer ${consumer} (host ${first.host}, pid ${first.pid}) is gone: its presence sessions ended (last heartbeat ${
        seconds(now - first.heartbeatAt.getTime())
      } ago)`
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
 * The reaper of consumer `self`. A consumer whose lock it finds free becomes a suspect,
 * with the time of that look; a suspect found free again at least `reapAfterMs` later (and
 * advertising the same key) is released; a suspect found held, or advertising another key,
 * is dropped. A failed look drops every suspect: the next look starts afresh. Nothing here
 * waits for this reaper to have been healthy for a while: its own blip frees nobody's lock,
 * and a fresh reaper (a new process) releases a dead consumer as fast as an old one.
 * `onReleased` runs when a sweep released claims (the consumer wakes to take them).
 */
export const make = (options: {
  readonly ctx: PresenceContext
  readonly self: string
  readonly reapMs: number
  readonly reapAfterMs: number
  readonly onReleased: Effect.Effect<void>
}): Task => {
  const { ctx, self } = options
  /** Suspects: consumer id -> the key seen free and when (Clock ms) it was first seen free. */
  const suspects = new Map<string, { readonly lockKey: number; readonly since: number }>()
  let lastError: string | undefined
  const failed = (error: StoreError) =>
    Effect.gen(function*() {
      suspects.clear()
      if (error.message === lastError) return
      lastError = error.message
      yield* error._tag === "ConnectionDead"
        ? Effect.logWarning(`reaper: connection dead, retrying: ${error.message}`)
        : Effect.logError(`reaper failed (${error._tag}), retrying: ${error.message}`)
    })
  /** One look: the suspects it makes due, and when (Clock ms) the next suspect will be due. */
  const look = Effect.gen(function*() {
    const free = yield* Reap.freeLocks(ctx, self)
    lastError = undefined
    const now = yield* Clock.currentTimeMillis
    const due: Array<Reap.FreeLock> = []
    const seen = new Set<string>()
    let nextDue = Infinity
    for (const lock of free) {
      seen.add(lock.id)
      const suspect = suspects.get(lock.id)
      if (suspect === undefined || suspect.lockKey !== lock.lockKey) {
        suspects.set(lock.id, { lockKey: lock.lockKey, since: now })
        nextDue = Math.min(nextDue, now + options.reapAfterMs)
      } else if (now - suspect.since >= options.reapAfterMs) due.push(lock)
      else nextDue = Math.min(nextDue, suspect.since + options.reapAfterMs)
    }
    for (const id of suspects.keys()) if (!seen.has(id)) suspects.delete(id)
    return { due, nextDue, now }
  })
  const release = (due: ReadonlyArray<Reap.FreeLock>) =>
    Effect.gen(function*() {
      const reaped = yield* Reap.sweep(ctx, self, due)
      for (const lock of due) suspects.delete(lock.id)
      if (reaped.length > 0 && (yield* report(reaped)) > 0) yield* options.onReleased
    })
  return {
    name: "reaper",
    every: options.reapMs,
    run: Effect.gen(function*() {
      const result = yield* look
      if (result.due.length > 0) return yield* release(result.due)
      // A suspect due before the next round: at that moment, release it in one statement, whose
      // own lock try is the second look (a lock held again by then is not released, and the
      // suspect is dropped), rather than a look and then a release on the round's grid.
      if (result.nextDue < result.now + options.reapMs) {
        yield* Effect.sleep(result.nextDue - result.now)
        const now = yield* Clock.currentTimeMillis
        const due = [...suspects].filter(([, s]) => now - s.since >= options.reapAfterMs).map(([id, s]) => ({ id, lockKey: s.lockKey }))
        if (due.length > 0) yield* release(due)
      }
    }).pipe(Effect.catch(failed))
  }
}
