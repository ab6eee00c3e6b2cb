/**
 * The attempt history of the memory store: keeping a record as SQL would, the record of an
 * attempt its holder left unfinished, and the `attempts` read.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { Attempt, MessageId } from "../Message.ts"
import type { QueueStoreShape } from "../QueueStore.ts"
import * as AttemptResult from "../internal/attemptResult.ts"
import * as Validate from "../internal/validate.ts"
import type { MemoryState, Row } from "./state.ts"

/** The history record of the attempt its last holder left unfinished. */
export const unfinished = (row: Row, endedAt: number, outcome: "cancelled" | "lease-expired", error: string | null): Attempt => ({
  messageId: String(row.id) as MessageId,
  queue: row.queue,
  task: row.task,
  attempt: row.attemptBase + row.attempts,
  consumer: row.leasedBy ?? "",
  startedAt: new Date(row.leasedAt ?? row.visibleAt),
  endedAt: new Date(endedAt),
  outcome,
  error
})

/** Keep a record as SQL would: error text bounded, a result bounded as JSON, null or undefined as none. */
export const pushAttempt = (state: MemoryState, { result, ...a }: Attempt): void => {
  const json = AttemptResult.textOf(result)
  state.history.push({
    ...a,
    error: a.error === null ? null : Validate.boundedText(a.error),
    ...(json === undefined ? {} : { result: JSON.parse(json) })
  })
}

/** `attempts`: the history of one message, in the order it was written. */
export const attempts = (state: MemoryState): QueueStoreShape["attempts"] => (id) =>
  Effect.sync(() => state.history.filter((a) => a.messageId === id))
