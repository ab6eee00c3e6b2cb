/**
 * Pruning of the memory store: attempt history by age, expired uniqueness reservations, flow bookkeeping.
 *
 * @since 0.1.0
 */
import { Clock, Duration, Effect } from "effect"
import type { QueueStoreShape } from "../QueueStore.ts"
import { flowBucket, type MemoryState } from "./state.ts"

/** `pruneAttempts`: forget history records that ended before `olderThan` ago. */
export const pruneAttempts = ({ history }: MemoryState): QueueStoreShape["pruneAttempts"] => (olderThan) =>
  Effect.map(Clock.currentTimeMillis, (now) => {
    const cutoff = now - Duration.toMillis(olderThan)
    const kept = history.filter((a) => a.endedAt.getTime() >= cutoff)
    const removed = history.length - kept.length
    history.splice(0, history.length, ...kept)
    return removed
  })

/** `pruneUniqueKeys`: forget the reservations whose window has passed. */
export const pruneUniqueKeys = ({ reserved }: MemoryState): QueueStoreShape["pruneUniqueKeys"] =>
  Effect.map(Clock.currentTimeMillis, (now) => {
    let removed = 0
    for (const [k, held] of reserved) {
      if (held.until <= now) {
        reserved.delete(k)
        removed++
      }
    }
    return removed
  })

/** The longest rate period: a window whose every start is older is empty for any limit. */
const DAY_MS = 86_400_000

/**
 * `pruneFlow`: forget rate windows whose every start is a day old, and keys of weight 1 with no
 * live message (a key that comes back starts at the queue's current turn, as a new one does).
 */
export const pruneFlow = (state: MemoryState): QueueStoreShape["pruneFlow"] =>
  Effect.map(Clock.currentTimeMillis, (now) => {
    let removed = 0
    for (const [bucket, starts] of state.flow.rates) {
      if (starts.every((s) => s <= now - DAY_MS)) {
        state.flow.rates.delete(bucket)
        removed++
      }
    }
    const inUse = new Set<string>()
    for (const r of state.rows.values()) if (r.key !== null && r.state === "ready") inUse.add(flowBucket(r.queue, "", r.key))
    for (const [bucket, key] of state.flow.keys) {
      if (key.weight === 1 && !inUse.has(bucket)) {
        state.flow.keys.delete(bucket)
        removed++
      }
    }
    return removed
  })
