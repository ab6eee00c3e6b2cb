/**
 * The attempt history: reading a message's attempts. Its rows are written by the statements
 * that end an attempt (`complete`, `claim`, `cancel`, `redrive`, the reaper) through
 * `historyInsert` (fragments.ts); its pruning is in `prune.ts`.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { QueueStoreShape } from "../QueueStore.ts"
import type { PgContext } from "./context.ts"
import { type AttemptRow, toAttempt } from "./rows.ts"

/** `attempts`: a message's history, in the order it was written. */
export const attempts = ({ attemptsTable, op, sql }: PgContext): QueueStoreShape["attempts"] => (id) =>
  sql<AttemptRow>`SELECT * FROM ${attemptsTable} WHERE message_id = ${id}::bigint ORDER BY id`.pipe(
    Effect.map((rows) => rows.map(toAttempt)),
    (e) => op("attempts", { messageId: id }, e)
  )
