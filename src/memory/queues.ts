/**
 * Queues and their counts in the memory store: pausing and resuming, the list of every
 * queue, stats and depths, and when a queue's next delayed message becomes ready.
 *
 * @since 0.1.0
 */
import { Clock, Effect, Option } from "effect"
import type { QueueInfo, QueueStats } from "../Message.ts"
import type { InvalidInput } from "../QueueError.ts"
import type { QueueStoreShape } from "../QueueStore.ts"
import * as Validate from "../internal/validate.ts"
import { fullWindows } from "./flow.ts"
import { live, type MemoryState, wake } from "./state.ts"

/** `pause`: stop claims from a queue (its first pause time kept). */
export const pause = ({ pauses }: MemoryState): QueueStoreShape["pause"] => (queue) =>
  Effect.map(Clock.currentTimeMillis, (now) => {
    if (pauses.get(queue)?.paused !== true) pauses.set(queue, { paused: true, pausedAt: now })
  })

/** `resume`: let claims from a paused queue go on, waking its idle consumers. */
export const resume = (state: MemoryState): QueueStoreShape["resume"] => (queue) =>
  Effect.sync(() => {
    const entry = state.pauses.get(queue)
    if (entry?.paused !== true) return
    state.pauses.set(queue, { paused: false, pausedAt: null })
    // Idle consumers claim at once, as after a send.
    wake(state, queue)
  })

/** The counts of one queue at `now`, its name not checked. */
const countOf = (state: MemoryState, queue: string, now: number): QueueStats => {
  const all = [...state.rows.values()].filter((r) => r.queue === queue)
  const ready = all.filter((r) => r.state === "ready" && r.visibleAt <= now)
  const waiting = all.filter((r) => r.state === "ready" && r.visibleAt > now)
  return {
    queue,
    ready: ready.length,
    delayed: waiting.filter((r) => r.leaseToken === null).length,
    inFlight: waiting.filter((r) => r.leaseToken !== null).length,
    dead: all.filter((r) => r.state === "dead").length,
    oldestReadyAgeMs: ready.length === 0 ? 0 : now - Math.min(...ready.map((r) => r.visibleAt))
  }
}

/** `queues`: every queue ever paused, holding messages or in the history, with its counts. */
export const queues = (state: MemoryState): QueueStoreShape["queues"] => () =>
  Effect.gen(function*() {
    const { history, pauses, rows } = state
    const names = new Set<string>([...pauses.keys()])
    for (const row of rows.values()) names.add(row.queue)
    for (const a of history) names.add(a.queue)
    const out: Array<QueueInfo> = []
    const now = yield* Clock.currentTimeMillis
    for (const queue of [...names].sort()) {
      // Counted whatever the name (as SQL counts what its tables hold): never a defect.
      const counts = countOf(state, queue, now)
      const entry = pauses.get(queue)
      out.push({
        ...counts,
        paused: entry?.paused === true,
        pausedAt: entry?.pausedAt == null ? null : new Date(entry.pausedAt)
      })
    }
    return out
  })

/** `stats`: the counts of one queue. */
export const stats = (state: MemoryState): QueueStoreShape["stats"] => (queue) =>
  Effect.gen(function*() {
    yield* Validate.name("queue", queue)
    return countOf(state, queue, yield* Clock.currentTimeMillis)
  })

/** `depths`: the counts of several queues, at one instant. */
export const depths = (state: MemoryState): QueueStoreShape["depths"] => {
  const statsOf = stats(state)
  return (queues) =>
    Effect.gen(function*() {
      const wanted = [...new Set(queues)]
      const out: Array<QueueStats> = []
      // Each queue as `stats` counts it; no effect between them, so one instant for all.
      for (const queue of wanted) out.push(yield* statsOf(queue))
      return out
    })
}

/**
 * `nextVisibleAt`: when the earliest delayed (or leased) message of a queue becomes visible,
 * or the earliest full rate window of the queue frees a start, if sooner.
 */
export const nextVisibleAt = (state: MemoryState) => (queue: string): Effect.Effect<Option.Option<Date>, InvalidInput> =>
  Effect.gen(function*() {
    yield* Validate.name("queue", queue)
    const now = yield* Clock.currentTimeMillis
    const future = live(state, queue).map((r) => r.visibleAt).filter((t) => t > now)
    for (const w of fullWindows(state, queue, now)) future.push(w.nextAt.getTime())
    return future.length === 0 ? Option.none() : Option.some(new Date(Math.min(...future)))
  })
