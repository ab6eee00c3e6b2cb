/**
 * The statements around the migrations (the migrations' own SQL is in `src/migrations/`):
 * the lock a migrating run holds, the schema it creates, and the read-only look at which
 * migrations a schema has run. Each takes a client without transforms and a validated schema.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { SqlClient } from "effect/sql"

/**
 * Take the transaction-scoped advisory lock of migrating `schema`. Why a lock: CREATE SCHEMA
 * IF NOT EXISTS and the migrations table are not race-free on their own.
 */
export const lock = (sql: SqlClient.SqlClient, schema: string) =>
  sql`SELECT pg_advisory_xact_lock(hashtext(${`leasehold.migrate.${schema}`}))`.pipe(Effect.asVoid)

/** Create `schema` unless it exists. */
export const createSchema = (sql: SqlClient.SqlClient, schema: string) =>
  sql`CREATE SCHEMA IF NOT EXISTS ${sql(schema)}`.pipe(Effect.asVoid)

/**
 * The ids of the migrations `schema` has run, or `undefined` when it has no migrations
 * table (nor perhaps the schema). to_regclass: NULL (no error) when the schema or its
 * migrations table does not exist. Nothing is created or locked.
 */
export const applied = (sql: SqlClient.SqlClient, schema: string) =>
  Effect.gen(function*() {
    const [table] = yield* sql<{ present: boolean }>`SELECT to_regclass(${`${schema}.migrations`}) IS NOT NULL AS present`
    if (table?.present !== true) return undefined
    const rows = yield* sql<{ id: number }>`SELECT migration_id AS id FROM ${sql(`${schema}.migrations`)}`
    return new Set(rows.map((row) => Number(row.id)))
  })
