/**
 * The probe statement: does the database answer? (`Http`'s `/readyz`, and the pooler proof
 * touching its session between its lock checks.)
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { SqlClient } from "effect/sql"

/** `SELECT 1` on `sql`: succeeds when the database answers. */
export const ping = (sql: SqlClient.SqlClient) => sql`SELECT 1`.pipe(Effect.asVoid)
