/**
 * Migration 12: progress reported by running handlers (`HandlerContext.progress`), kept on the
 * message: `progress` (jsonb, bounded by the store before it is written) and `progress_at`, when
 * it was written. Read with the message (`get`, `messages`), never by the claim.
 */
import { Effect } from "effect"
import * as SqlClient from "effect/sql/SqlClient"

/** Build the migration for `schema` (already validated as an identifier). */
export default (schema: string) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const messages = sql(`${schema}.messages`)
    // Nullable, no default: adding them rewrites nothing, and a NULL costs no bytes per row
    // (only a bit in the null bitmap), so messages that never report progress stay as they were.
    yield* sql`ALTER TABLE ${messages} ADD COLUMN progress jsonb, ADD COLUMN progress_at timestamptz`
  })
