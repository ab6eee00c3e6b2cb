/**
 * Dead letters in the memory store: reading, redriving and purging them.
 *
 * @since 0.1.0
 */
import { Clock, Effect } from "effect"
import type { DeadLetter, MessageId } from "../Message.ts"
import type { DeadLetterFilter, QueueStoreShape } from "../QueueStore.ts"
import { live, type MemoryState, message } from "./state.ts"

/** The dead rows a filter names, oldest death first. */
const matching = (state: MemoryState, filter: DeadLetterFilter) => {
  const wanted = filter.ids === undefined ? undefined : new Set(filter.ids.map(String))
  return [...state.rows.values()]
    .filter((r) =>
      r.state === "dead" && (filter.queue === undefined || r.queue === filter.queue) &&
      (wanted === undefined || wanted.has(String(r.id)))
    )
    .sort((a, b) => (a.deadAt ?? 0) - (b.deadAt ?? 0) || (a.id < b.id ? -1 : 1))
}

/** `redrive`: make dead letters ready again, recording the redrive in their history. */
export const redrive = (state: MemoryState): QueueStoreShape["redrive"] => (filter) =>
  Effect.map(Clock.currentTimeMillis, (now) =>
    matching(state, filter).map((row) => {
      // Same rule as SQL: a key now held by a live message is given up.
      if (row.dedupKey !== null && live(state, row.queue).some((r) => r.dedupKey === row.dedupKey)) row.dedupKey = null
      row.state = "ready"
      // The history records the redrive as the last attempt so far; the next drive's are numbered on.
      row.attemptBase += row.attempts
      state.history.push({
        messageId: String(row.id) as MessageId,
        queue: row.queue,
        task: row.task,
        attempt: row.attemptBase,
        consumer: "",
        startedAt: new Date(now),
        endedAt: new Date(now),
        outcome: "redriven",
        error: null
      })
      row.attempts = 0
      row.leaseExpiries = 0
      row.deadReason = null
      row.deadAt = null
      row.visibleAt = now
      return String(row.id) as MessageId
    }))

/** `purge`: delete dead letters. */
export const purge = (state: MemoryState): QueueStoreShape["purge"] => (filter) =>
  Effect.sync(() =>
    matching(state, filter).map((row) => {
      state.rows.delete(row.id)
      return String(row.id) as MessageId
    })
  )

/** `deadLetters`: read dead letters, oldest death first. */
export const deadLetters = (state: MemoryState): QueueStoreShape["deadLetters"] => (filter) =>
  Effect.sync(() =>
    matching(state, filter).slice(0, filter.limit ?? 100).map((row): DeadLetter => ({
      ...message(row),
      reason: row.deadReason ?? "",
      deadAt: new Date(row.deadAt ?? 0)
    }))
  )
