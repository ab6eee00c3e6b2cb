/**
 * Pruning of the memory store: attempt history by age, expired uniqueness reservations.
 *
 * @since 0.1.0
 */
import { Clock, Duration, Effect } from "effect"
import type { QueueStoreShape } from "../QueueStore.ts"
import type { MemoryState } from "./state.ts"

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

/** `pruneFlow`: the memory store keeps no flow bookkeeping yet (its flow control is being built). */
export const pruneFlow = (_state: MemoryState): QueueStoreShape["pruneFlow"] => Effect.succeed(0)
