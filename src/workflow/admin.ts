/**
 * What operators read and prune of workflow executions, store-shaped: the CLI (`leasehold
 * workflows`) and applications call these with a `SqlClient` in context.
 *
 * @since 0.1.0
 */
import { type Duration, Effect, Metric, Option } from "effect"
import * as SqlClient from "effect/sql/SqlClient"
import { DEFAULT_WORKFLOW_RETENTION } from "../config/workflow.ts"
import { defaultSchema } from "../Migrations.ts"
import { classify, type InvalidInput, type StoreError } from "../QueueError.ts"
import * as QueueMetrics from "../QueueMetrics.ts"
import * as Validate from "../internal/validate.ts"
import * as Admin from "../pg/workflowAdmin.ts"
import * as Sql from "../pg/workflow.ts"

/** The statuses an execution can have. */
export const statuses = ["runnable", "running", "suspended", "complete"] as const

/** An execution as listed: status, what it is suspended on, its clocks, counts and times. */
export type Execution = Admin.ExecutionRow

/** A recorded activity attempt. */
export type RecordedActivity = Admin.ActivityRow

const statementsFor = (schema: string | undefined) =>
  Effect.gen(function*() {
    const validated = yield* Validate.schemaName(schema ?? defaultSchema)
    return Sql.make(yield* SqlClient.SqlClient, validated)
  })

/** List executions, newest first (at most `limit`, default 100), by workflow and status. */
export const list = (options: {
  readonly schema?: string | undefined
  readonly workflow?: string | undefined
  readonly status?: string | undefined
  readonly limit?: number | undefined
} = {}): Effect.Effect<ReadonlyArray<Execution>, InvalidInput | StoreError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const w = yield* statementsFor(options.schema)
    const limit = yield* Validate.positiveInt("limit", options.limit ?? 100, 10_000)
    return yield* Admin.list(w, { workflow: options.workflow, status: options.status, limit }).pipe(classify("workflows.list"))
  })

/** The recorded activity attempts of one execution. */
export const activities = (options: {
  readonly schema?: string | undefined
  readonly workflow: string
  readonly executionId: string
}): Effect.Effect<ReadonlyArray<RecordedActivity>, InvalidInput | StoreError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const w = yield* statementsFor(options.schema)
    return yield* Admin.activities(w, { workflow: options.workflow, executionId: options.executionId }).pipe(
      classify("workflows.activities")
    )
  })

/** One execution in full, as `show` answers it: the row, its activity attempts, done deferreds and clocks. */
export interface ExecutionDetail {
  readonly execution: Admin.ExecutionDetailRow
  readonly activities: ReadonlyArray<RecordedActivity>
  readonly deferreds: ReadonlyArray<Admin.DeferredRow>
  readonly clocks: ReadonlyArray<Admin.ClockRow>
}

/** One execution with its recorded activity attempts, done deferreds and clocks; none if it does not exist. */
export const show = (options: {
  readonly schema?: string | undefined
  readonly workflow: string
  readonly executionId: string
}): Effect.Effect<Option.Option<ExecutionDetail>, InvalidInput | StoreError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const w = yield* statementsFor(options.schema)
    const key = { workflow: options.workflow, executionId: options.executionId }
    const execution = yield* Admin.execution(w, key)
    if (execution === undefined) return Option.none()
    const [activities, deferreds, clocks] = yield* Effect.all([Admin.activities(w, key), Admin.deferreds(w, key), Admin.clocks(w, key)])
    return Option.some({ execution, activities, deferreds, clocks })
  }).pipe(classify("workflows.show"))

/** Executions deleted per statement by the engine's retention, and by {@link prune} by default. */
export const PRUNE_BATCH = 1_000

/**
 * Delete executions completed more than `olderThanMs` ago (never a child whose parent is not
 * complete: `pg/workflowAdmin.ts`), batch after batch of at most `batch` (each one short
 * statement) until one comes back short; each batch counted in
 * `leasehold_workflow_executions_pruned`. Returns how many went.
 */
export const pruneFinished = (w: Sql.WorkflowSql, olderThanMs: number, batch: number): Effect.Effect<number, StoreError> =>
  Effect.gen(function*() {
    let total = 0
    while (true) {
      const pruned = yield* Admin.prune(w, olderThanMs, batch).pipe(classify("workflows.prune"))
      total += pruned
      if (pruned > 0) yield* Metric.update(QueueMetrics.workflowPruned, pruned)
      if (pruned < batch) return total
    }
  })

/**
 * Delete executions completed more than `olderThan` ago (default 7 days, the engine's default
 * retention), in batches of `batch` (default 1,000) until none is left; returns how many went.
 */
export const prune = (options: {
  readonly schema?: string | undefined
  readonly olderThan?: Duration.Input | undefined
  readonly batch?: number | undefined
} = {}): Effect.Effect<number, InvalidInput | StoreError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const w = yield* statementsFor(options.schema)
    const olderThanMs = yield* Validate.durationMs("olderThan", options.olderThan ?? DEFAULT_WORKFLOW_RETENTION, { min: 0 })
    const batch = yield* Validate.positiveInt("batch", options.batch ?? PRUNE_BATCH, 100_000)
    return yield* pruneFinished(w, olderThanMs, batch)
  })
