/**
 * The operator's statements on workflow executions (docs/workflows.md): list them with what they
 * are suspended on, show an execution's recorded activities, prune finished ones. Read-only but
 * for the prune; none takes a lease.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { SqlError, Statement } from "effect/sql"
import type { Key, WorkflowSql } from "./workflow.ts"

/** One execution as an operator sees it. */
export interface ExecutionRow {
  readonly workflow: string
  readonly execution_id: string
  readonly status: string
  readonly failed: boolean
  readonly held: boolean
  /** The presence consumer id of the runner holding it (null: none, or a runner without session liveness). */
  readonly holder: string | null
  readonly suspended_on: unknown
  readonly clocks: unknown
  readonly parent: string | null
  /** How a complete execution ended (`success`, `failure`, `defect`, `interrupted`); null while not complete. */
  readonly outcome: string | null
  readonly runs: number
  readonly activities: number
  readonly next_run_at: Date | null
  readonly created_at: Date
  readonly updated_at: Date
  readonly completed_at: Date | null
}

/** Which executions to list. */
export interface ListFilter {
  readonly workflow?: string | undefined
  readonly status?: string | undefined
  readonly limit: number
}

/**
 * How the stored `Workflow.Result` JSON in `column` ended: `success`, else by the reasons of its
 * exit's cause (a `Fail`, else an interrupt, else a defect). One expression for activities and
 * executions, so both name outcomes alike.
 */
const outcomeOf = (w: WorkflowSql, column: string): Statement.Statement<never> =>
  w.sql`CASE WHEN ${w.sql(column)} #>> '{exit,_tag}' = 'Success' THEN 'success'
             WHEN jsonb_path_exists(${w.sql(column)}, '$.exit.cause[*] ? (@._tag == "Fail")') THEN 'failure'
             WHEN jsonb_path_exists(${w.sql(column)}, '$.exit.cause[*] ? (@._tag == "Interrupt")') THEN 'interrupted'
             ELSE 'defect' END`

/**
 * The columns of an execution as listed, over `e` (the executions): its unfired clocks and how
 * many activity results it recorded, read per row by its key.
 */
const listedColumns = (w: WorkflowSql): Statement.Statement<never> =>
  w.sql`e.workflow, e.execution_id, e.status, e.failed, e.lease_token IS NOT NULL AS held, e.leased_by AS holder, e.suspended_on,
           (SELECT coalesce(jsonb_agg(jsonb_build_object('name', c.name, 'due_at', c.due_at) ORDER BY c.due_at), '[]')
            FROM ${w.clocks} c
            WHERE c.workflow = e.workflow AND c.execution_id = e.execution_id
              AND NOT EXISTS (SELECT 1 FROM ${w.deferreds} d
                              WHERE d.workflow = c.workflow AND d.execution_id = c.execution_id AND d.name = c.name)) AS clocks,
           CASE WHEN e.parent_workflow IS NOT NULL THEN e.parent_workflow || '/' || e.parent_execution END AS parent,
           CASE WHEN e.status = 'complete' THEN ${outcomeOf(w, "e.result")} END AS outcome,
           e.runs,
           (SELECT count(*)::int FROM ${w.activities} a
            WHERE a.workflow = e.workflow AND a.execution_id = e.execution_id) AS activities,
           e.visible_at AS next_run_at, e.created_at, e.updated_at, e.completed_at`

/**
 * Executions, newest first, filtered by workflow and status (null parameters match all): with
 * their unfired clocks and how many activity results they recorded, read per listed row only.
 */
export const list = (w: WorkflowSql, filter: ListFilter): Effect.Effect<ReadonlyArray<ExecutionRow>, SqlError.SqlError> =>
  w.sql<ExecutionRow>`
    SELECT ${listedColumns(w)}
    FROM ${w.executions} e
    WHERE (${filter.workflow ?? null}::text IS NULL OR e.workflow = ${filter.workflow ?? null})
      AND (${filter.status ?? null}::text IS NULL OR e.status = ${filter.status ?? null})
    ORDER BY e.created_at DESC
    LIMIT ${filter.limit}`

/** One execution in full: its listed columns, payload, last result and what was heard while held. */
export interface ExecutionDetailRow extends ExecutionRow {
  readonly payload: unknown
  readonly result: unknown
  /** The interrupt requested: 0 none, 1 safe, 2 unsafe. */
  readonly interrupt: number
}

/**
 * One execution by key, the list's columns and the rest of the row (the list's statement on one
 * row: its key is the primary key), or undefined.
 */
export const execution = (w: WorkflowSql, key: Key): Effect.Effect<ExecutionDetailRow | undefined, SqlError.SqlError> =>
  w.sql<ExecutionDetailRow>`
    SELECT ${listedColumns(w)},
           e.payload, e.result, e.interrupt
    FROM ${w.executions} e
    WHERE e.workflow = ${key.workflow} AND e.execution_id = ${key.executionId}`.pipe(Effect.map((rows) => rows[0]))

/** A deferred of an execution that is done: its name, its stored exit and when. */
export interface DeferredRow {
  readonly name: string
  readonly exit: unknown
  readonly done_at: Date
}

/** An execution's done deferreds (fired clocks among them, named `DurableClock/<name>`), in the order they were done. */
export const deferreds = (w: WorkflowSql, key: Key): Effect.Effect<ReadonlyArray<DeferredRow>, SqlError.SqlError> =>
  w.sql<DeferredRow>`
    SELECT name, exit, done_at FROM ${w.deferreds}
    WHERE workflow = ${key.workflow} AND execution_id = ${key.executionId}
    ORDER BY done_at, name`

/** A clock of an execution: when it is due and whether it fired (its deferred is done). */
export interface ClockRow {
  readonly name: string
  readonly due_at: Date
  readonly fired: boolean
}

/** Every clock an execution scheduled, fired or not, by due time (a few per execution: read by its key). */
export const clocks = (w: WorkflowSql, key: Key): Effect.Effect<ReadonlyArray<ClockRow>, SqlError.SqlError> =>
  w.sql<ClockRow>`
    SELECT c.name, c.due_at,
           EXISTS (SELECT 1 FROM ${w.deferreds} d
                   WHERE d.workflow = c.workflow AND d.execution_id = c.execution_id AND d.name = c.name) AS fired
    FROM ${w.clocks} c
    WHERE c.workflow = ${key.workflow} AND c.execution_id = ${key.executionId}
    ORDER BY c.due_at, c.name`

/** One recorded activity attempt: how it ended (`success`, `failure`, `interrupted`, `defect`), its stored exit (its value or cause) and when. */
export interface ActivityRow {
  readonly activity: string
  readonly attempt: number
  readonly outcome: string
  readonly exit: unknown
  readonly recorded_at: Date
}

/**
 * An execution's recorded activity attempts, in the order they were recorded; the outcome read
 * from the stored `Workflow.Result` JSON (a failed exit's cause holds `Fail`, `Die` or `Interrupt`
 * reasons), its exit given as stored.
 */
export const activities = (w: WorkflowSql, key: Key): Effect.Effect<ReadonlyArray<ActivityRow>, SqlError.SqlError> =>
  w.sql<ActivityRow>`
    SELECT activity, attempt, ${outcomeOf(w, "result")} AS outcome, result -> 'exit' AS exit,
           recorded_at
    FROM ${w.activities}
    WHERE workflow = ${key.workflow} AND execution_id = ${key.executionId}
    ORDER BY recorded_at, activity, attempt`

/**
 * Delete up to `limit` executions completed more than `olderThanMs` ago, oldest first, with their
 * deferreds (their activities and clocks go by cascade); a batch per call keeps each statement short.
 * The batch is found through the partial index on `completed_at` (migration 11). `complete` is terminal
 * (no statement moves a row out of it, and such a row holds no lease and is never claimed), so
 * nothing a runner holds or may run is ever chosen. A child whose parent is not complete stays:
 * the parent's next replay reads the child's result from its row, and a child gone would be
 * started again (`start` inserts what is missing) and run twice. Rows are locked SKIP LOCKED, so
 * pruners on several runners share the work without waiting on each other, and deleted by their
 * row address (stable: this statement holds their lock): matched by key instead, the planner
 * hashed the batch against a scan of the whole table (EXPLAIN ANALYZE of a batch of 1,000 among
 * 200,000 executions on the test server, PostgreSQL 18: 146 ms by key, 30-40 ms by address).
 */
export const prune = (w: WorkflowSql, olderThanMs: number, limit: number): Effect.Effect<number, SqlError.SqlError> =>
  w.sql<{ pruned: number }>`
    WITH gone AS (
      DELETE FROM ${w.executions} e
      WHERE e.ctid = ANY(ARRAY(
        SELECT x.ctid FROM ${w.executions} x
        WHERE x.completed_at < now() - ${olderThanMs}::bigint * interval '1 millisecond'
          AND x.status = 'complete'
          AND NOT EXISTS (SELECT 1 FROM ${w.executions} p
                          WHERE p.workflow = x.parent_workflow AND p.execution_id = x.parent_execution
                            AND p.status <> 'complete')
        ORDER BY x.completed_at
        LIMIT ${limit}
        FOR UPDATE OF x SKIP LOCKED
      ))
      RETURNING e.workflow, e.execution_id
    ), deferreds AS (
      DELETE FROM ${w.deferreds} d USING gone
      WHERE d.workflow = gone.workflow AND d.execution_id = gone.execution_id
    )
    SELECT count(*)::int AS pruned FROM gone`.pipe(Effect.map((rows) => rows[0]?.pruned ?? 0))
