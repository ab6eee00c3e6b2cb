/**
 * Migration 5: handler results in the attempt history.
 *
 * `result` holds the success value of an attempt (encoded through its task's success
 * schema), bounded by the store to 64 KiB of JSON; NULL when the handler returned nothing,
 * so a void task costs no bytes. Pruned with its record. Nullable with no default: adding
 * it rewrites nothing.
 */
import { Effect } from "effect"
import * as SqlClient from "effect/sql/SqlClient"

/** Build the migration for `schema` (already validated as an identifier). */
export default (schema: string) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    yield* sql`ALTER TABLE ${sql(`${schema}.attempts`)} ADD COLUMN result jsonb`
  })
