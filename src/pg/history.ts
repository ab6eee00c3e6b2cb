/**
 * The attempt history: recording one attempt (numbered across redrives) and reading a
 * message's attempts. Its pruning is in `prune.ts`.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { QueueStoreShape } from "../QueueStore.ts"
import * as Validate from "../internal/validate.ts"
import type { PgContext } from "./context.ts"
import { historyInsert } from "./fragments.ts"
import { type AttemptRow, resultText, toAttempt } from "./rows.ts"

/**
 * `recordAttempt`: one history row. The caller numbers the attempt by its drive; the row's
 * redrive base (migration 4) is added here, read from the message (0 once it is gone).
 */
export const recordAttempt = ({ attemptsTable, op, sql, table }: PgContext): QueueStoreShape["recordAttempt"] => (a) =>
  sql`
    ${historyInsert(attemptsTable, { result: true })}
    VALUES (${a.messageId}::bigint, ${a.queue}, ${a.task},
            ${a.attempt} + coalesce((SELECT b.attempt_base FROM ${table} AS b WHERE b.id = ${a.messageId}::bigint), 0),
            ${a.consumer}, ${a.startedAt}, ${a.endedAt},
            ${a.outcome}, ${a.error === null ? null : Validate.boundedText(a.error)}, ${resultText(a.result)}::jsonb)`.pipe(
    Effect.asVoid,
    (e) => op("recordAttempt", { messageId: a.messageId }, e)
  )

/** `attempts`: a message's history, in the order it was written. */
export const attempts = ({ attemptsTable, op, sql }: PgContext): QueueStoreShape["attempts"] => (id) =>
  sql<AttemptRow>`SELECT * FROM ${attemptsTable} WHERE message_id = ${id}::bigint ORDER BY id`.pipe(
    Effect.map((rows) => rows.map(toAttempt)),
    (e) => op("attempts", { messageId: id }, e)
  )
