/**
 * The readiness probe's statement (`Http`'s `/readyz`): does the database answer?
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { SqlClient } from "effect/sql"

/** `SELECT 1` on `sql`: succeeds when the database answers. */
export const ping = (sql: SqlClient.SqlClient) => sql`SELECT 1`.pipe(Effect.asVoid)
