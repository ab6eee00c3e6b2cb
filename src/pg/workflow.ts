/**
 * The statements of the workflow engine (docs/workflows.md): an execution is a row claimed by
 * the lease protocol of a message; its results, clocks and finishing write are fenced by its
 * `(workflow, execution_id, lease_token)`; wake-ups update the row so none is lost while a run
 * holds it. JSON values travel as text parameters cast to jsonb.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { SqlClient, SqlError, Statement } from "effect/sql"
import { notifyChannel } from "./channel.ts"
import { textArray } from "./fragments.ts"

/** The tables and channel of one schema's workflow engine. */
export interface WorkflowSql {
  readonly sql: SqlClient.SqlClient
  readonly executions: Statement.Identifier
  readonly activities: Statement.Identifier
  readonly deferreds: Statement.Identifier
  readonly clocks: Statement.Identifier
  /** The channel runners LISTEN on: `run` (something to claim) and `done <workflow> <id>`. */
  readonly channel: string
}

/** Build the record for `schema` (already validated as an identifier). */
export const make = (client: SqlClient.SqlClient, schema: string): WorkflowSql => {
  const sql = client.withoutTransforms()
  return {
    sql,
    executions: sql(`${schema}.workflow_executions`),
    activities: sql(`${schema}.workflow_activities`),
    deferreds: sql(`${schema}.workflow_deferreds`),
    clocks: sql(`${schema}.workflow_clocks`),
    channel: notifyChannel(`${schema}__workflows`)
  }
}

/** One execution's key. */
export interface Key {
  readonly workflow: string
  readonly executionId: string
}

/** A claimed execution: what a run needs. */
export interface Claimed extends Key {
  readonly payload: unknown
  readonly token: string
  readonly interrupt: number
  readonly parentWorkflow: string | null
  readonly parentExecution: string | null
}

type Sql<A> = Effect.Effect<A, SqlError.SqlError>

/**
 * Start an execution unless it exists (an execution id is its idempotency key), announcing it.
 * The NOTIFY rides in the same statement, counted so one row yields one notification.
 */
export const start = (w: WorkflowSql, key: Key, payload: unknown, parent: Key | undefined): Sql<boolean> =>
  w.sql<{ started: number }>`
    WITH started AS (
      INSERT INTO ${w.executions} (workflow, execution_id, payload, parent_workflow, parent_execution)
      VALUES (${key.workflow}, ${key.executionId}, ${JSON.stringify(payload)}::jsonb,
              ${parent?.workflow ?? null}, ${parent?.executionId ?? null})
      ON CONFLICT DO NOTHING
      RETURNING 1
    )
    SELECT count(pg_notify(${w.channel}, 'run'))::int AS started FROM started`.pipe(
    Effect.map((rows) => (rows[0]?.started ?? 0) > 0)
  )

/** Who claims: the runner's presence consumer id (null without session liveness) and the executions it runs now. */
export interface Claimer {
  readonly holder: string | null
  /** Executions this runner is running: never claimed again by it while their run goes on. */
  readonly running: ReadonlyArray<Key>
}

/**
 * Claim up to `limit` executions of `workflows` that may run now (new, woken, a lease run out,
 * a clock due), SKIP LOCKED so runners never wait on each other; each gets a fresh token,
 * `visible_at` at the end of its lease and its holder (`leased_by`, what the reaper releases by),
 * and the wake it heard before is cleared (this run sees it). The claimer's own running
 * executions are skipped: a run whose lease ran out late is still under way here, and its next
 * renewal, fenced by its token, keeps it unless another runner took it meanwhile.
 */
export const claim = (
  w: WorkflowSql,
  workflows: ReadonlyArray<string>,
  limit: number,
  leaseMs: number,
  claimer: Claimer = { holder: null, running: [] }
): Sql<ReadonlyArray<Claimed>> =>
  w.sql<{
    workflow: string
    execution_id: string
    payload: unknown
    lease_token: string
    interrupt: number
    parent_workflow: string | null
    parent_execution: string | null
  }>`
    WITH chosen AS (
      SELECT x.workflow, x.execution_id FROM ${w.executions} AS x
      WHERE x.visible_at <= now() AND x.workflow = ANY(${textArray(workflows)})
        AND NOT EXISTS (SELECT 1 FROM unnest(${textArray(claimer.running.map((k) => k.workflow))},
                                             ${textArray(claimer.running.map((k) => k.executionId))}) AS mine(workflow, execution_id)
                        WHERE mine.workflow = x.workflow AND mine.execution_id = x.execution_id)
      ORDER BY x.visible_at
      LIMIT ${limit}
      FOR UPDATE SKIP LOCKED
    )
    UPDATE ${w.executions} AS e SET
      lease_token = gen_random_uuid(),
      leased_by   = ${claimer.holder},
      status      = 'running',
      visible_at  = now() + ${leaseMs}::bigint * interval '1 millisecond',
      wake        = 0,
      runs        = e.runs + 1,
      updated_at  = now()
    FROM chosen
    WHERE e.workflow = chosen.workflow AND e.execution_id = chosen.execution_id
    RETURNING e.workflow, e.execution_id, e.payload, e.lease_token::text, e.interrupt,
              e.parent_workflow, e.parent_execution`.pipe(
    Effect.map((rows) =>
      rows.map((row) => ({
        workflow: row.workflow,
        executionId: row.execution_id,
        payload: row.payload,
        token: row.lease_token,
        interrupt: Number(row.interrupt),
        parentWorkflow: row.parent_workflow,
        parentExecution: row.parent_execution
      }))
    )
  )

/**
 * Extend a held lease, fenced by token. `None` (no row): the lease is lost. Returns the
 * interrupt requested meanwhile, so an unsafe interrupt reaches the runner holding it.
 */
export const renew = (w: WorkflowSql, claimed: Claimed, leaseMs: number): Sql<number | undefined> =>
  w.sql<{ interrupt: number }>`
    UPDATE ${w.executions} SET visible_at = now() + ${leaseMs}::bigint * interval '1 millisecond'
    WHERE workflow = ${claimed.workflow} AND execution_id = ${claimed.executionId}
      AND lease_token = ${claimed.token}::uuid
    RETURNING interrupt`.pipe(Effect.map((rows) => rows[0] === undefined ? undefined : Number(rows[0].interrupt)))

/**
 * Fire the held execution's due clocks: each becomes its deferred's result (first writer wins),
 * fenced by the execution row locked by its token, before the run replays.
 */
export const fireClocks = (w: WorkflowSql, claimed: Claimed, voidExit: unknown): Sql<void> =>
  w.sql`
    WITH held AS (
      SELECT workflow, execution_id FROM ${w.executions}
      WHERE workflow = ${claimed.workflow} AND execution_id = ${claimed.executionId}
        AND lease_token = ${claimed.token}::uuid
      FOR SHARE
    )
    INSERT INTO ${w.deferreds} (workflow, execution_id, name, exit)
    SELECT c.workflow, c.execution_id, c.name, ${JSON.stringify(voidExit)}::jsonb
    FROM ${w.clocks} c JOIN held USING (workflow, execution_id)
    WHERE c.due_at <= now()
    ON CONFLICT DO NOTHING`.pipe(Effect.asVoid)

/** The recorded result of an activity attempt, if any. */
export const activityResult = (w: WorkflowSql, key: Key, activity: string, attempt: number): Sql<unknown> =>
  w.sql<{ result: unknown }>`
    SELECT result FROM ${w.activities}
    WHERE workflow = ${key.workflow} AND execution_id = ${key.executionId}
      AND activity = ${activity} AND attempt = ${attempt}`.pipe(Effect.map((rows) => rows[0]?.result))

/**
 * Record an activity attempt's result, fenced: the execution row is locked by its token
 * (`FOR SHARE`: a newer claim cannot slip between the check and the insert). False: the
 * lease is lost and nothing was written.
 */
export const recordActivity = (
  w: WorkflowSql,
  claimed: Claimed,
  activity: string,
  attempt: number,
  result: unknown
): Sql<boolean> =>
  w.sql<{ held: number }>`
    WITH held AS (
      SELECT workflow, execution_id FROM ${w.executions}
      WHERE workflow = ${claimed.workflow} AND execution_id = ${claimed.executionId}
        AND lease_token = ${claimed.token}::uuid
      FOR SHARE
    ), recorded AS (
      INSERT INTO ${w.activities} (workflow, execution_id, activity, attempt, result)
      SELECT workflow, execution_id, ${activity}, ${attempt}, ${JSON.stringify(result)}::jsonb FROM held
      ON CONFLICT DO NOTHING
      RETURNING 1
    )
    SELECT (SELECT count(*) FROM held)::int AS held`.pipe(Effect.map((rows) => (rows[0]?.held ?? 0) > 0))

/** Schedule a clock of the held execution, fenced; a clock already scheduled keeps its time. */
export const scheduleClock = (w: WorkflowSql, claimed: Claimed, name: string, durationMs: number): Sql<void> =>
  w.sql`
    INSERT INTO ${w.clocks} (workflow, execution_id, name, due_at)
    SELECT workflow, execution_id, ${name}, now() + ${durationMs}::bigint * interval '1 millisecond'
    FROM ${w.executions}
    WHERE workflow = ${claimed.workflow} AND execution_id = ${claimed.executionId}
      AND lease_token = ${claimed.token}::uuid
    FOR SHARE
    ON CONFLICT DO NOTHING`.pipe(Effect.asVoid)

/** A deferred's result, if it is done. */
export const deferredResult = (w: WorkflowSql, key: Key, name: string): Sql<unknown> =>
  w.sql<{ exit: unknown }>`
    SELECT exit FROM ${w.deferreds}
    WHERE workflow = ${key.workflow} AND execution_id = ${key.executionId} AND name = ${name}`.pipe(
    Effect.map((rows) => rows[0]?.exit)
  )

/**
 * The wake-up of one execution, the SET list every waking statement shares: a suspended row
 * holding no lease becomes visible now (an automatic wake, `mode` 1, skips one suspended on its
 * own failure; an explicit one, 2, does not); a held row records the wake in `wake`, which its
 * run's finishing write reads under the same row lock (no lost wake-up). Columns unqualified:
 * the statements' other relations carry none of these names.
 */
const wakeSet = (w: WorkflowSql, mode: 1 | 2): Statement.Statement<never> => {
  const wakes = w.sql`lease_token IS NULL AND (${mode}::int = 2 OR NOT failed)`
  return w.sql`
        wake       = greatest(wake, ${mode}::smallint),
        visible_at = CASE WHEN ${wakes} THEN now() ELSE visible_at END,
        status     = CASE WHEN ${wakes} THEN 'runnable' ELSE status END,
        updated_at = now()`
}

/** Complete a deferred (first writer wins) and wake its execution; anyone may call it, by token. */
export const deferredDone = (w: WorkflowSql, key: Key, name: string, exit: unknown): Sql<void> =>
  w.sql`
    WITH done AS (
      INSERT INTO ${w.deferreds} (workflow, execution_id, name, exit)
      VALUES (${key.workflow}, ${key.executionId}, ${name}, ${JSON.stringify(exit)}::jsonb)
      ON CONFLICT DO NOTHING
      RETURNING workflow, execution_id
    ), woken AS (
      UPDATE ${w.executions} AS e SET ${wakeSet(w, 1)}
      FROM done
      WHERE e.workflow = done.workflow AND e.execution_id = done.execution_id AND e.status <> 'complete'
      RETURNING 1
    )
    SELECT count(pg_notify(${w.channel}, 'run')) FROM woken`.pipe(Effect.asVoid)

/**
 * Wake an execution (`resume`: explicit, 2; a finished child: automatic, 1), and with `interrupt`
 * (1 safe, 2 unsafe) record an interrupt request the next run applies. See {@link deferredDone}
 * for what a wake does to a held and to a suspended row.
 */
export const wake = (w: WorkflowSql, key: Key, mode: 1 | 2, interrupt: 0 | 1 | 2): Sql<void> =>
  w.sql`
    WITH woken AS (
      UPDATE ${w.executions} AS e SET interrupt = greatest(e.interrupt, ${interrupt}::smallint), ${wakeSet(w, mode)}
      WHERE e.workflow = ${key.workflow} AND e.execution_id = ${key.executionId} AND e.status <> 'complete'
      RETURNING 1
    )
    SELECT count(pg_notify(${w.channel}, 'run')) FROM woken`.pipe(Effect.asVoid)

/** How a run ended: its encoded result, whether it completed, whether it suspended on its own failure. */
export interface Finish {
  readonly result: unknown
  readonly complete: boolean
  readonly failed: boolean
  /** What a suspended run waited for (deferred names, child executions), shown to operators. */
  readonly suspendedOn?: { readonly deferreds: ReadonlyArray<string>; readonly children: ReadonlyArray<string> } | undefined
}

/**
 * A run's finishing write, fenced by token: the result, and the lease let go. A completed
 * execution is invisible for good and wakes its parent (automatic) in the same statement; a
 * suspended one is visible now if a wake came while it ran (`wake`, read under the row lock),
 * else at its earliest unfired clock, else never (it holds nothing). Announces `done` for
 * waiting callers, `run` when something became runnable. False: the lease was lost.
 */
export const finish = (w: WorkflowSql, claimed: Claimed, outcome: Finish): Sql<boolean> =>
  w.sql<{ finished: number }>`
    WITH finished AS (
      UPDATE ${w.executions} AS e SET
        result       = ${JSON.stringify(outcome.result)}::jsonb,
        failed       = ${outcome.failed},
        suspended_on = ${outcome.suspendedOn === undefined ? null : JSON.stringify(outcome.suspendedOn)}::jsonb,
        lease_token  = NULL,
        leased_by    = NULL,
        status       = CASE WHEN ${outcome.complete} THEN 'complete'
                            WHEN e.wake = 2 OR (e.wake = 1 AND NOT ${outcome.failed}) THEN 'runnable'
                            ELSE 'suspended' END,
        visible_at   = CASE WHEN ${outcome.complete} THEN NULL
                            WHEN e.wake = 2 OR (e.wake = 1 AND NOT ${outcome.failed}) THEN now()
                            ELSE (SELECT min(c.due_at) FROM ${w.clocks} c
                                  WHERE c.workflow = e.workflow AND c.execution_id = e.execution_id
                                    AND NOT EXISTS (SELECT 1 FROM ${w.deferreds} d
                                                    WHERE d.workflow = c.workflow AND d.execution_id = c.execution_id
                                                      AND d.name = c.name)) END,
        completed_at = CASE WHEN ${outcome.complete} THEN now() END,
        updated_at   = now()
      WHERE e.workflow = ${claimed.workflow} AND e.execution_id = ${claimed.executionId}
        AND e.lease_token = ${claimed.token}::uuid
      RETURNING e.workflow, e.execution_id, e.parent_workflow, e.parent_execution, e.status AS new_status
    ), parent AS (
      UPDATE ${w.executions} AS p SET ${wakeSet(w, 1)}
      FROM finished f
      WHERE f.new_status = 'complete' AND p.workflow = f.parent_workflow AND p.execution_id = f.parent_execution
        AND p.status <> 'complete'
      RETURNING 1
    )
    SELECT (SELECT count(pg_notify(${w.channel}, 'done ' || workflow || ' ' || execution_id)) FROM finished)::int AS finished,
           (SELECT count(pg_notify(${w.channel}, 'run')) FROM parent) AS parents,
           (SELECT count(pg_notify(${w.channel}, 'run')) FROM finished WHERE new_status = 'runnable') AS again`.pipe(
    Effect.map((rows) => (rows[0]?.finished ?? 0) > 0)
  )

/** An execution's last result and status, if it exists. */
export const status = (w: WorkflowSql, key: Key): Sql<{ readonly status: string; readonly result: unknown } | undefined> =>
  w.sql<{ status: string; result: unknown }>`
    SELECT status, result FROM ${w.executions}
    WHERE workflow = ${key.workflow} AND execution_id = ${key.executionId}`.pipe(Effect.map((rows) => rows[0]))

/**
 * Let a held execution go without a result (its run was interrupted by shutdown or an unsafe
 * interrupt, or died): visible again after `delayMs`, fenced by token; announced for other runners.
 */
export const release = (w: WorkflowSql, claimed: Claimed, delayMs: number): Sql<void> =>
  w.sql`
    WITH released AS (
      UPDATE ${w.executions} SET
        lease_token = NULL,
        leased_by   = NULL,
        status      = 'runnable',
        visible_at  = now() + ${delayMs}::bigint * interval '1 millisecond',
        updated_at  = now()
      WHERE workflow = ${claimed.workflow} AND execution_id = ${claimed.executionId}
        AND lease_token = ${claimed.token}::uuid
      RETURNING 1
    )
    SELECT count(pg_notify(${w.channel}, 'run')) FROM released`.pipe(Effect.asVoid)

/**
 * Lock the held execution by its token (`FOR UPDATE`), inside a transactional activity's
 * transaction: the fence taken before the activity's writes, as the commit step locks a message.
 * False: the lease is gone, and the transaction must roll back. Claims skip the locked row and a
 * renewal waits for it, so nobody takes the execution while the writes run.
 */
export const lockHeld = (w: WorkflowSql, claimed: Claimed): Sql<boolean> =>
  w.sql<{ held: number }>`
    SELECT 1 AS held FROM ${w.executions}
    WHERE workflow = ${claimed.workflow} AND execution_id = ${claimed.executionId}
      AND lease_token = ${claimed.token}::uuid
    FOR UPDATE`.pipe(Effect.map((rows) => rows.length > 0))
