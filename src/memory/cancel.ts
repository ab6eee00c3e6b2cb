/**
 * Cancelling in the memory store: running messages flagged (their holders told), the others
 * deleted with a history row.
 *
 * @since 0.1.0
 */
import { Clock, Effect } from "effect"
import type { CancelResult, MessageId } from "../Message.ts"
import type { QueueStoreShape } from "../QueueStore.ts"
import { announce, type MemoryState, type Row, stateOf } from "./state.ts"

/** Cancel the given rows, in id order: flag the running ones, delete the others with a history row. */
const cancelRows = (state: MemoryState, targets: ReadonlyArray<Row>) =>
  Effect.map(Clock.currentTimeMillis, (now) =>
    [...targets].sort((a, b) => (a.id < b.id ? -1 : 1)).map((row): CancelResult => {
      const id = String(row.id) as MessageId
      if (stateOf(row, now) === "in-flight") {
        row.cancelRequestedAt ??= now
        for (const inbox of state.cancelListeners.get(row.queue) ?? []) inbox.add([id])
        return { id, result: "cancelling" }
      }
      state.rows.delete(row.id)
      announce(state, { id, queue: row.queue, task: row.task }, "cancelled", now)
      state.history.push({
        messageId: id,
        queue: row.queue,
        task: row.task,
        attempt: row.attemptBase + row.attempts,
        consumer: "",
        startedAt: new Date(now),
        endedAt: new Date(now),
        outcome: "cancelled",
        error: null
      })
      return { id, result: "cancelled" }
    }))

/** `cancel`: cancel messages by id. Ids checked by `fromOperations`: valid and distinct. */
export const cancel = (state: MemoryState): QueueStoreShape["cancel"] => (ids) =>
  Effect.suspend(() => cancelRows(state, ids.flatMap((id) => state.rows.get(BigInt(id)) ?? [])))

/** `cancelWhere`: cancel every message of a queue (of one task, when given). */
export const cancelWhere = (state: MemoryState): QueueStoreShape["cancelWhere"] => (filter) =>
  Effect.suspend(() =>
    cancelRows(
      state,
      [...state.rows.values()].filter((r) => r.queue === filter.queue && (filter.task === undefined || r.task === filter.task))
    )
  )
