/**
 * The database schema of leasehold: numbered migrations run by effect's
 * `Migrator`, into a schema of their own (default `leasehold`).
 *
 * @since 0.1.0
 */
import { Effect, Layer } from "effect"
import * as Migrator from "effect/sql/Migrator"
import * as SqlClient from "effect/sql/SqlClient"
import * as SqlError from "effect/sql/SqlError"
import createMessages from "./migrations/0001_create_messages.ts"
import attemptsAndLeaseExpiries from "./migrations/0002_attempts_and_lease_expiries.ts"
import consumers from "./migrations/0003_consumers.ts"
import redrivenHistory from "./migrations/0004_redriven_history.ts"
import attemptResults from "./migrations/0005_attempt_results.ts"
import pauseAndCancel from "./migrations/0006_pause_and_cancel.ts"
import schedulesAndUniqueKeys from "./migrations/0007_schedules_and_unique_keys.ts"
import claimIndexOnly from "./migrations/0008_claim_index_only.ts"
import flowControl from "./migrations/0009_flow_control.ts"
import leanHistory from "./migrations/0010_lean_history.ts"
import workflows from "./migrations/0011_workflows.ts"
import progress from "./migrations/0012_progress.ts"
import depthSamples from "./migrations/0013_depth_samples.ts"
import workflowHolders from "./migrations/0014_workflow_holders.ts"
import uniqueKeyIndexesWithoutDedup from "./migrations/0015_unique_key_indexes_without_dedup.ts"
import { classify, type InvalidInput, QueryFailed, type StoreError } from "./QueueError.ts"
import * as Validate from "./internal/validate.ts"
import * as Statements from "./pg/migrate.ts"

/** The schema leasehold uses unless told otherwise. */
export const defaultSchema = "leasehold"

/** Every migration, in order. Append new ones; never edit a released one. */
const all: ReadonlyArray<readonly [id: number, name: string, make: (schema: string) => Effect.Effect<void, SqlError.SqlError, SqlClient.SqlClient>]> = [
  [1, "create_messages", createMessages],
  [2, "attempts_and_lease_expiries", attemptsAndLeaseExpiries],
  [3, "consumers", consumers],
  [4, "redriven_history", redrivenHistory],
  [5, "attempt_results", attemptResults],
  [6, "pause_and_cancel", pauseAndCancel],
  [7, "schedules_and_unique_keys", schedulesAndUniqueKeys],
  [8, "claim_index_only", claimIndexOnly],
  [9, "flow_control", flowControl],
  [10, "lean_history", leanHistory],
  [11, "workflows", workflows],
  [12, "progress", progress],
  [13, "depth_samples", depthSamples],
  [14, "workflow_holders", workflowHolders],
  [15, "unique_key_indexes_without_dedup", uniqueKeyIndexesWithoutDedup]
]

/** The ids and names of every migration, in order: what a fully migrated schema has run. */
export const known: ReadonlyArray<readonly [id: number, name: string]> = all.map(([id, name]) => [id, name] as const)

/**
 * Bring `schema` up to date. Safe to run from many workers at once: the run
 * holds a transaction-scoped advisory lock keyed by the schema name, so one
 * migrates and the others then find nothing to do.
 */
export const run = (options: { readonly schema?: string | undefined } = {}): Effect.Effect<
  ReadonlyArray<readonly [id: number, name: string]>,
  InvalidInput | StoreError,
  SqlClient.SqlClient
> =>
  Effect.gen(function*() {
    const schema = yield* Validate.schemaName(options.schema ?? defaultSchema)
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const migrate = Migrator.make({})({
      table: `${schema}.migrations`,
      loader: Effect.succeed(all.map(([id, name, make]) => [id, name, Effect.succeed(make(schema))] as const))
    })
    return yield* sql.withTransaction(Effect.gen(function*() {
      // Why a lock: CREATE SCHEMA IF NOT EXISTS and the migrations table are not race-free on their own.
      yield* Statements.lock(sql, schema)
      yield* Statements.createSchema(sql, schema)
      return yield* migrate
    })).pipe(
      // A migration that failed on SQL reports that SQL error; any other migrator failure is a QueryFailed.
      Effect.catchTag("MigrationError", (error) =>
        Effect.fail(
          SqlError.isSqlError(error.cause)
            ? error.cause
            : new QueryFailed({ operation: "migrate", message: `migrate: ${error.message}` })
        )),
      classify("migrate")
    )
  }).pipe(Effect.withSpan("leasehold.migrate"))

/** A layer that migrates `schema` when built: put it before the store in the application's layer. */
export const layer = (options: { readonly schema?: string | undefined } = {}): Layer.Layer<
  never,
  InvalidInput | StoreError,
  SqlClient.SqlClient
> => Layer.effectDiscard(run(options))

/**
 * The known migrations that `schema` has not run (read-only: nothing is
 * created or locked). Empty when the schema is up to date; every migration
 * when leasehold's tables are not there at all. For readiness checks
 * (`Http`'s `/readyz`) and operators.
 */
export const pending = (options: { readonly schema?: string | undefined } = {}): Effect.Effect<
  ReadonlyArray<readonly [id: number, name: string]>,
  InvalidInput | StoreError,
  SqlClient.SqlClient
> =>
  Effect.gen(function*() {
    const schema = yield* Validate.schemaName(options.schema ?? defaultSchema)
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    // No migrations table (nor perhaps the schema): nothing has run.
    const applied = yield* Statements.applied(sql, schema)
    if (applied === undefined) return known
    return known.filter(([id]) => !applied.has(id))
  }).pipe(classify("read migrations"))
