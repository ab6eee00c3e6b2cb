/**
 * The workflow routes of the admin API (docs/workflows.md, docs/admin.md): executions listed by
 * status and workflow, and one execution with its activity attempts, done deferreds and clocks,
 * read through `LeaseholdWorkflow`'s admin statements on the store's database and schema. Without
 * a PostgreSQL store (the memory store) there are no executions: the list is empty and every
 * execution is not found. Read-only: behind the reading guard.
 *
 * @since 0.1.0
 */
import { Effect, Option, Schema } from "effect"
import * as SqlClient from "effect/sql/SqlClient"
import type { InvalidInput, StoreError } from "../QueueError.ts"
import * as WorkflowAdmin from "../workflow/admin.ts"
import { NotFound } from "./adminSchema.ts"

const nameRule = "1 to 256 characters"

/** A workflow name in a path or query. */
export const WorkflowName = Schema.String.check(Schema.isBetweenLength(1, 256, { message: nameRule }))
/** An execution id in a path. */
export const ExecutionIdInput = WorkflowName
/** An execution status in a query. */
export const WorkflowStatusInput = Schema.Literals(WorkflowAdmin.statuses).annotate({
  message: `one of ${WorkflowAdmin.statuses.join(", ")}`
})

/** How a recorded activity attempt ended. */
const activityOutcomes = ["success", "failure", "interrupted", "defect"] as const

/** A clock not fired yet, as listed. */
const DueClock = Schema.Struct({ name: Schema.String, dueAt: Schema.Date })

/** An execution as listed: status, what it is suspended on, its unfired clocks, counts and times. */
export const ExecutionRow = Schema.Struct({
  workflow: Schema.String,
  executionId: Schema.String,
  status: Schema.String,
  /** Suspended on its own failure (`Workflow.SuspendOnFailure`): only an explicit resume wakes it. */
  failed: Schema.Boolean,
  /** A run holds its lease now. */
  held: Schema.Boolean,
  /** The presence consumer id of the runner holding it, when it runs with session liveness. */
  holder: Schema.NullOr(Schema.String),
  suspendedOn: Schema.NullOr(Schema.Struct({ deferreds: Schema.Array(Schema.String), children: Schema.Array(Schema.String) })),
  clocks: Schema.Array(DueClock),
  parent: Schema.NullOr(Schema.String),
  /** How a complete execution ended: `success`, `failure`, `interrupted`, `defect`; null while not complete. */
  outcome: Schema.NullOr(Schema.String),
  runs: Schema.Number,
  activities: Schema.Number,
  /** When it may be claimed next (its lease's end while held, its earliest clock while asleep); null: waiting to be woken, or complete. */
  nextRunAt: Schema.NullOr(Schema.Date),
  createdAt: Schema.Date,
  /** When its row last changed (a run, a lease, a wake-up). */
  updatedAt: Schema.Date,
  completedAt: Schema.NullOr(Schema.Date)
})

/** One execution in full: the row, its payload and last result, its attempts, deferreds and clocks. */
export const ExecutionDetail = Schema.Struct({
  execution: Schema.Struct({
    ...ExecutionRow.fields,
    payload: Schema.Unknown,
    /** The last run's `Workflow.Result` as stored (null before a run wrote one). */
    result: Schema.Unknown,
    /** The interrupt requested: 0 none, 1 safe, 2 unsafe. */
    interrupt: Schema.Number
  }),
  activities: Schema.Array(Schema.Struct({
    activity: Schema.String,
    attempt: Schema.Number,
    outcome: Schema.Literals(activityOutcomes),
    /** The attempt's exit as stored: `{ _tag: "Success", value }` or `{ _tag: "Failure", cause: [reasons] }`. */
    exit: Schema.Unknown,
    recordedAt: Schema.Date
  })),
  deferreds: Schema.Array(Schema.Struct({ name: Schema.String, exit: Schema.Unknown, doneAt: Schema.Date })),
  clocks: Schema.Array(Schema.Struct({ name: Schema.String, dueAt: Schema.Date, fired: Schema.Boolean }))
})

type Row = typeof ExecutionRow.Type

/** A stored row as the API shows it (clock times arrive as JSON text). */
const rowView = (row: WorkflowAdmin.Execution): Row => ({
  workflow: row.workflow,
  executionId: row.execution_id,
  status: row.status,
  failed: row.failed,
  held: row.held,
  holder: row.holder,
  suspendedOn: (row.suspended_on ?? null) as Row["suspendedOn"],
  clocks: ((row.clocks ?? []) as ReadonlyArray<{ readonly name: string; readonly due_at: string }>).map((c) => ({
    name: c.name,
    dueAt: new Date(c.due_at)
  })),
  parent: row.parent,
  outcome: row.outcome,
  runs: Number(row.runs),
  activities: Number(row.activities),
  nextRunAt: row.next_run_at,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
  completedAt: row.completed_at
})

/** An execution in full as the API shows it. */
const detailView = (detail: WorkflowAdmin.ExecutionDetail): typeof ExecutionDetail.Type => ({
  execution: {
    ...rowView(detail.execution),
    payload: detail.execution.payload,
    result: detail.execution.result ?? null,
    interrupt: Number(detail.execution.interrupt)
  },
  activities: detail.activities.map((a) => ({
    activity: a.activity,
    attempt: Number(a.attempt),
    outcome: a.outcome as typeof activityOutcomes[number],
    exit: a.exit,
    recordedAt: a.recorded_at
  })),
  deferreds: detail.deferreds.map((d) => ({ name: d.name, exit: d.exit, doneAt: d.done_at })),
  clocks: detail.clocks.map((c) => ({ name: c.name, dueAt: c.due_at, fired: c.fired }))
})

/** The handlers of the workflow routes, on the store's database client and schema, when it is PostgreSQL. */
export const workflowRoutes = (sql: Option.Option<SqlClient.SqlClient>, schema: Option.Option<string>) => {
  const onDatabase = <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient>, otherwise: Effect.Effect<A, E>) =>
    Option.isSome(sql) && Option.isSome(schema) ? Effect.provideService(effect, SqlClient.SqlClient, sql.value) : otherwise
  return {
    /** `GET /api/workflows?status=&workflow=&limit=`: newest first, at most `limit` (default 100). */
    list: (query: { readonly status?: string | undefined; readonly workflow?: string | undefined; readonly limit?: number | undefined }) =>
      onDatabase(
        Effect.map(
          WorkflowAdmin.list({ schema: Option.getOrUndefined(schema), workflow: query.workflow, status: query.status, limit: query.limit }),
          (rows) => rows.map(rowView)
        ),
        Effect.succeed([])
      ) as Effect.Effect<ReadonlyArray<Row>, InvalidInput | StoreError>,
    /** `GET /api/workflows/:workflow/:executionId`. */
    show: (workflow: string, executionId: string): Effect.Effect<typeof ExecutionDetail.Type, InvalidInput | StoreError | NotFound> =>
      Effect.flatMap(
        onDatabase(WorkflowAdmin.show({ schema: Option.getOrUndefined(schema), workflow, executionId }), Effect.succeedNone),
        Option.match({
          onNone: () => Effect.fail(new NotFound({ message: `no execution ${executionId} of workflow ${workflow} (never started, or pruned)` })),
          onSome: (detail) => Effect.succeed(detailView(detail))
        })
      )
  }
}
