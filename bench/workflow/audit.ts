/**
 * The write audit of the workflow chaos run (bench/workflow/chaos.ts). The engine records an
 * activity attempt with `INSERT ... ON CONFLICT DO NOTHING` under a primary key, so the table
 * alone can never show a second write: it is dropped in silence. The bench therefore installs, in
 * its own schema only (never in the package's migrations), a BEFORE INSERT trigger on
 * `workflow_activities` that logs every row the engine proposes (its key, the lease token on the
 * execution row, the backend, the time, and whether the key was already recorded) into
 * `bench_activity_inserts`. PostgreSQL fires BEFORE INSERT row triggers before the conflict check
 * of `ON CONFLICT DO NOTHING`, so a dropped row is still logged; a stale holder's insert proposes
 * no row at all (the statement selects from the execution row locked by its token), so it is not.
 * {@link analyse} turns the log and the recorded rows into the run's verdict.
 */
import { randomUUID } from "node:crypto"
import { Effect, Exit } from "effect"
import type { SqlClient } from "effect/sql"
import * as Workflow from "effect/workflow/Workflow"
import * as Sql from "../../src/pg/workflow.ts"
import * as Codec from "../../src/workflow/codec.ts"

/** The bench's audit table, beside the engine's tables in the bench's schema. */
export const auditTable = "bench_activity_inserts"

/** Identifiers are spliced into DDL (they cannot be parameters): only plain lower-case names pass. */
const checkedSchema = (schema: string): string => {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(schema)) throw new Error(`audit: not a plain schema name: ${JSON.stringify(schema)}`)
  return schema
}

/**
 * Install the audit table, its trigger function and the trigger in `schema` (migrated already).
 * The function finds its tables by `TG_TABLE_SCHEMA` with `format('%I')` and passes every value
 * as a `USING` parameter: nothing of a row is spliced into SQL.
 */
export const install = (sql: SqlClient.SqlClient, schema: string): Effect.Effect<void, unknown> =>
  Effect.gen(function*() {
    const s = checkedSchema(schema)
    // seq orders the attempts as they were proposed (one sequence, so across backends too).
    yield* sql`CREATE TABLE ${sql(`${s}.${auditTable}`)} (
      seq           bigserial   PRIMARY KEY,
      workflow      text        NOT NULL,
      execution_id  text        NOT NULL,
      activity      text        NOT NULL,
      attempt       integer     NOT NULL,
      result        jsonb       NOT NULL,
      lease_token   uuid,
      backend_pid   integer     NOT NULL,
      client_port   integer,
      at            timestamptz NOT NULL,
      existed       boolean     NOT NULL,
      same_result   boolean
    )`
    // The execution row is locked FOR SHARE by the engine's statement, so its token read here is the
    // writer's own; `prior` is the result already recorded under this key (the column is NOT NULL, so
    // NULL means none). clock_timestamp(): the statement's now() would hide waits.
    yield* sql.unsafe(`CREATE FUNCTION ${s}.bench_audit_activity_insert() RETURNS trigger LANGUAGE plpgsql AS $fn$
      DECLARE
        token uuid;
        prior jsonb;
      BEGIN
        EXECUTE format('SELECT lease_token FROM %I.workflow_executions WHERE workflow = $1 AND execution_id = $2', TG_TABLE_SCHEMA)
          INTO token USING NEW.workflow, NEW.execution_id;
        EXECUTE format('SELECT result FROM %I.workflow_activities
                        WHERE workflow = $1 AND execution_id = $2 AND activity = $3 AND attempt = $4', TG_TABLE_SCHEMA)
          INTO prior USING NEW.workflow, NEW.execution_id, NEW.activity, NEW.attempt;
        EXECUTE format('INSERT INTO %I.${auditTable}
                          (workflow, execution_id, activity, attempt, result, lease_token, backend_pid, client_port, at, existed, same_result)
                        VALUES ($1, $2, $3, $4, $5, $6, pg_backend_pid(), inet_client_port(), clock_timestamp(), $7, $8)', TG_TABLE_SCHEMA)
          USING NEW.workflow, NEW.execution_id, NEW.activity, NEW.attempt, NEW.result, token,
                prior IS NOT NULL, CASE WHEN prior IS NULL THEN NULL ELSE prior = NEW.result END;
        RETURN NEW;
      END
    $fn$`)
    yield* sql.unsafe(`CREATE TRIGGER bench_audit_insert BEFORE INSERT ON ${s}.workflow_activities
      FOR EACH ROW EXECUTE FUNCTION ${s}.bench_audit_activity_insert()`)
  })

/** One logged insert attempt. */
export interface Attempt {
  readonly seq: number
  readonly workflow: string
  readonly executionId: string
  readonly activity: string
  readonly attempt: number
  readonly leaseToken: string | null
  readonly backendPid: number
  readonly existed: boolean
  readonly sameResult: boolean | null
}

/** One recorded row, its result decoded: a success's value, or what else it was. */
export interface Recorded {
  readonly workflow: string
  readonly executionId: string
  readonly activity: string
  readonly attempt: number
  readonly success: boolean
  readonly value: unknown
}

/** Read the log, oldest first. */
export const readAttempts = (sql: SqlClient.SqlClient, schema: string): Effect.Effect<ReadonlyArray<Attempt>, unknown> =>
  sql<{
    seq: string
    workflow: string
    execution_id: string
    activity: string
    attempt: number
    lease_token: string | null
    backend_pid: number
    existed: boolean
    same_result: boolean | null
  }>`SELECT seq, workflow, execution_id, activity, attempt, lease_token, backend_pid, existed, same_result
     FROM ${sql(`${checkedSchema(schema)}.${auditTable}`)} ORDER BY seq`.pipe(
    Effect.map((rows) =>
      rows.map((r) => ({
        seq: Number(r.seq),
        workflow: r.workflow,
        executionId: r.execution_id,
        activity: r.activity,
        attempt: r.attempt,
        leaseToken: r.lease_token,
        backendPid: r.backend_pid,
        existed: r.existed,
        sameResult: r.same_result
      }))
    )
  )

/** Read the recorded rows, each result decoded by the engine's own codec. */
export const readRecorded = (sql: SqlClient.SqlClient, schema: string): Effect.Effect<ReadonlyArray<Recorded>, unknown> =>
  Effect.gen(function*() {
    const rows = yield* sql<{ workflow: string; execution_id: string; activity: string; attempt: number; result: unknown }>`
      SELECT workflow, execution_id, activity, attempt, result FROM ${sql(`${checkedSchema(schema)}.workflow_activities`)}`
    return yield* Effect.forEach(rows, (r) =>
      Effect.map(Codec.decodeResult(r.result), (decoded): Recorded => {
        const key = { workflow: r.workflow, executionId: r.execution_id, activity: r.activity, attempt: r.attempt }
        // Anything but a success keeps its stored JSON, to be printed as it is.
        if (decoded._tag === "Complete" && decoded.exit._tag === "Success") return { ...key, success: true, value: decoded.exit.value }
        return { ...key, success: false, value: r.result }
      }))
  })

/** What {@link analyse} is given. */
export interface AuditInput {
  readonly recorded: ReadonlyArray<Recorded>
  readonly attempts: ReadonlyArray<Attempt>
  /** What the activity returns for its execution; undefined: not known (counted wrong). */
  readonly expected: (r: Recorded) => number | undefined
  /** Backends the orchestrator terminated: a write whose reply died with one may be retried. */
  readonly terminatedPids: ReadonlySet<number>
}

/** A key written more than once, and why that may be harmless. */
export interface Repeat {
  readonly key: string
  readonly first: Attempt
  readonly again: Attempt
  /** The same claim (token) wrote the same result again after its first write's backend was terminated. */
  readonly explained: boolean
}

/** The verdict. */
export interface AuditReport {
  readonly recorded: number
  readonly attempts: number
  /** Recorded keys whose insert was attempted exactly once. */
  readonly recordedOnce: number
  /** Attempts after the first for a key (found it recorded, or raced its first write). */
  readonly repeats: ReadonlyArray<Repeat>
  readonly unexplained: number
  /** Recorded rows the trigger never saw (the audit was not in place). */
  readonly unaudited: number
  /** Logged keys with no recorded row (a committed write that vanished). */
  readonly orphans: number
  readonly right: number
  readonly wrong: ReadonlyArray<{ readonly key: string; readonly value: unknown; readonly expected: number | undefined }>
  readonly ok: boolean
}

const keyOf = (r: { workflow: string; executionId: string; activity: string; attempt: number }) =>
  `${r.workflow}/${r.executionId}/${r.activity}#${r.attempt}`

/** A repeat is harmless only as the engine's retry of a statement whose connection died after it committed. */
const isExplained = (first: Attempt, again: Attempt, terminated: ReadonlySet<number>): boolean =>
  first.leaseToken !== null && again.leaseToken === first.leaseToken && again.sameResult === true &&
  terminated.has(first.backendPid)

/** Judge the run: every recorded key written once (repeats explained), every result the right one. */
export const analyse = (input: AuditInput): AuditReport => {
  const byKey = new Map<string, Array<Attempt>>()
  for (const a of input.attempts) {
    const list = byKey.get(keyOf(a)) ?? []
    list.push(a)
    byKey.set(keyOf(a), list)
  }
  const repeats: Array<Repeat> = []
  for (const [key, list] of byKey) {
    const [first, ...rest] = [...list].sort((x, y) => x.seq - y.seq)
    for (const again of rest) repeats.push({ key, first: first!, again, explained: isExplained(first!, again, input.terminatedPids) })
  }
  const recordedKeys = new Set(input.recorded.map(keyOf))
  const wrong: Array<AuditReport["wrong"][number]> = []
  for (const r of input.recorded) {
    const expected = input.expected(r)
    if (!r.success || expected === undefined || r.value !== expected) wrong.push({ key: keyOf(r), value: r.value, expected })
  }
  const unexplained = repeats.filter((r) => !r.explained).length
  const unaudited = input.recorded.filter((r) => !byKey.has(keyOf(r))).length
  const orphans = [...byKey.keys()].filter((k) => !recordedKeys.has(k)).length
  return {
    recorded: input.recorded.length,
    attempts: input.attempts.length,
    recordedOnce: input.recorded.filter((r) => byKey.get(keyOf(r))?.length === 1).length,
    repeats,
    unexplained,
    unaudited,
    orphans,
    right: input.recorded.length - wrong.length,
    wrong,
    ok: unexplained === 0 && unaudited === 0 && orphans === 0 && wrong.length === 0
  }
}

/** The report as the run prints it, with up to five examples of each fault. */
export const describe = (report: AuditReport): Array<string> => {
  const explained = report.repeats.length - report.unexplained
  const lines = [
    `audit trigger: ${report.attempts} insert attempts for ${report.recorded} recorded results; recorded once ${report.recordedOnce}, ` +
    `attempts that found their key already recorded or raced its first write ${report.repeats.length} ` +
    `(${explained} explained: same claim, same result, first write's backend terminated; ${report.unexplained} unexplained); ` +
    `recorded but never seen by the trigger ${report.unaudited}; seen but not recorded ${report.orphans}`,
    `recorded results equal to what the activity returns for its execution: ${report.right} right, ${report.wrong.length} wrong`
  ]
  for (const r of report.repeats.filter((x) => !x.explained).slice(0, 5)) {
    lines.push(`  written again: ${r.key} by token ${r.again.leaseToken} (pid ${r.again.backendPid}, found recorded ${r.again.existed}), ` +
      `first by token ${r.first.leaseToken} (pid ${r.first.backendPid})`)
  }
  for (const w of report.wrong.slice(0, 5)) lines.push(`  wrong result: ${w.key} = ${JSON.stringify(w.value)}, expected ${w.expected}`)
  return lines
}

/**
 * Prove on the database, before the run, that the audit catches what the primary key hides: a
 * hand-made execution held by a token gets its activity recorded with a wrong value (5, where 7
 * is expected), then the same claim writes it again (dropped by `ON CONFLICT DO NOTHING`, logged
 * by the trigger), then a stale token tries (refused by the fence: no row proposed, nothing
 * logged). Throws unless the analysis reports exactly that; removes its rows either way.
 */
export const probe = (client: SqlClient.SqlClient, schema: string): Effect.Effect<AuditReport, unknown> => {
  const w = Sql.make(client, checkedSchema(schema))
  const key = { workflow: "BenchAuditProbe", executionId: "probe" }
  const claimed = { ...key, payload: {}, token: randomUUID(), interrupt: 0, parentWorkflow: null, parentExecution: null }
  const value = (n: number) => Codec.encodeResult(new Workflow.Complete({ exit: Exit.succeed(n) }))
  const cleanUp = Effect.gen(function*() {
    // The execution's activities go with it (ON DELETE CASCADE); the log rows by their workflow.
    yield* w.sql`DELETE FROM ${w.executions} WHERE workflow = ${key.workflow}`
    yield* w.sql`DELETE FROM ${w.sql(`${schema}.${auditTable}`)} WHERE workflow = ${key.workflow}`
  })
  return Effect.gen(function*() {
    // Held as a claim leaves a row, but never claimable: no runner has this workflow, and it is not visible.
    yield* w.sql`INSERT INTO ${w.executions} (workflow, execution_id, payload, status, visible_at, lease_token)
      VALUES (${key.workflow}, ${key.executionId}, '{}'::jsonb, 'running', NULL, ${claimed.token}::uuid)`
    yield* Sql.recordActivity(w, claimed, "a", 1, yield* value(5))
    yield* Sql.recordActivity(w, claimed, "a", 1, yield* value(5))
    const staleHeld = yield* Sql.recordActivity(w, { ...claimed, token: randomUUID() }, "a", 1, yield* value(5))
    const mine = <A extends { workflow: string }>(rows: ReadonlyArray<A>) => rows.filter((r) => r.workflow === key.workflow)
    const report = analyse({
      recorded: mine(yield* readRecorded(w.sql, schema)),
      attempts: mine(yield* readAttempts(w.sql, schema)),
      expected: () => 7,
      terminatedPids: new Set()
    })
    const caught = !staleHeld && !report.ok && report.attempts === 2 && report.recorded === 1 && report.recordedOnce === 0 &&
      report.repeats.length === 1 && report.unexplained === 1 && report.repeats[0]!.again.existed &&
      report.repeats[0]!.again.sameResult === true && report.wrong.length === 1
    if (!caught) return yield* Effect.die(new Error(`audit probe: the audit missed a hand-made fault:\n${describe(report).join("\n")}`))
    return report
  }).pipe(Effect.ensuring(Effect.orDie(cleanUp)))
}
