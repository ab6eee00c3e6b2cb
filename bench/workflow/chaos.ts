/**
 * The workflow chaos run (`npm run bench:workflow-chaos`): BENCH_WF_COUNT (200) executions of the
 * `Chaos` workflow (activities, a durable sleep, an approval deferred, a fan-out) on BENCH_WF_RUNNERS
 * (3) runner processes, while runners are SIGKILLed and restarted (every BENCH_WF_KILL_MS, 1500, one
 * READY for at least BENCH_WF_MIN_UP_MS, 3000) and runner backends terminated (every
 * BENCH_WF_TERMINATE_MS, 1000); runners that exit by themselves are replaced and counted. The runners'
 * lease is BENCH_WF_LEASE_MS (5000), their session liveness BENCH_WF_LIVENESS (on); BENCH_WF_STALL_MS
 * (with BENCH_WF_STALL_EVERY_MS) stalls their event loops to imitate load. The orchestrator approves suspended
 * executions by token as it goes. It reports, and exits 1 unless: every execution completed with the
 * right result (0 lost), each activity attempt recorded once, no second write of a recorded attempt
 * left unexplained and every recorded result the activity's value for its execution (bench/workflow/audit.ts:
 * a trigger, installed here only, logs every insert the engine attempts), no sample ever found an execution
 * suspended on a deferred already done (a lost wake-up), and none is left suspended with its wake-up
 * due. It also prints the largest backlog of clocks due for longer than BENCH_WF_DUE_SLACK_MS (3000)
 * seen while a runner was up: executions waiting for a free slot, not lost (they complete). Embedded PostgreSQL (fsync off), on this machine's cores.
 * Before the runners start, `Audit.probe` shows on the database that the audit catches a hand-made second
 * write and a wrong value; `node bench/workflow/selfcheck.ts` checks the analysis on hand-made logs.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, ManagedRuntime, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { DurableDeferred } from "effect/workflow"
import { startPostgres } from "../../dev/EmbeddedPostgres.ts"
import * as LeaseholdWorkflow from "../../src/LeaseholdWorkflow.ts"
import * as Migrations from "../../src/Migrations.ts"
import { envInt, envMs, sleep } from "../chaos/lib.ts"
import { endLogs, type Proc, startProcess, stopProcess } from "../support/orchestrator.ts"
import * as Audit from "./audit.ts"
import { activityValue, Approval, Chaos, expected } from "./chaosWorkflow.ts"

const COUNT = envInt("BENCH_WF_COUNT", 200)
const RUNNERS = envInt("BENCH_WF_RUNNERS", 3)
const KILL_MS = envMs("BENCH_WF_KILL_MS", 1_500)
const TERMINATE_MS = envMs("BENCH_WF_TERMINATE_MS", 1_000)
const DUE_SLACK_MS = envMs("BENCH_WF_DUE_SLACK_MS", 3_000)
const DEADLINE_MS = envMs("BENCH_WF_DEADLINE_MS", 300_000)
/** A runner is killed only after it has been READY this long (BENCH_WF_MIN_UP_MS, 3000). */
const MIN_UP_MS = envMs("BENCH_WF_MIN_UP_MS", 3_000)
/** The runners' workflow lease. */
const LEASE_MS = Number(process.env["BENCH_WF_LEASE_MS"] ?? 5_000)
/** The runners' session liveness (BENCH_WF_LIVENESS: on, off or auto; default on). */
const LIVENESS = process.env["BENCH_WF_LIVENESS"] ?? "on"
const schema = "wfchaos"
const logDir = `.tmp/bench-workflow-${Date.now()}`

const server = await startPostgres({ forTests: true })
const runtime = ManagedRuntime.make(
  LeaseholdWorkflow.layer({ schema, pollInterval: "250 millis" }).pipe(
    Layer.provideMerge(PgClient.layer({ url: Redacted.make(server.url), maxConnections: 4, applicationName: "leasehold-wf-orchestrator" }))
  )
)
const query = <A extends object>(text: string) =>
  runtime.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe<A>(text)))

await runtime.runPromise(Migrations.run({ schema }))
await query(`CREATE TABLE ${schema}.effects (execution text, activity text, pid int)`)
const withSql = <A>(f: (sql: SqlClient.SqlClient) => Effect.Effect<A, unknown>) => runtime.runPromise(Effect.flatMap(SqlClient.SqlClient, f))
await withSql((sql) => Audit.install(sql, schema))
const probed = await withSql((sql) => Audit.probe(sql, schema))
console.log(`audit probe: a wrong value and a second write of a recorded attempt by its own claim were caught ` +
  `(${probed.repeats.length} repeat, ${probed.wrong.length} wrong); a stale token's write was refused before the trigger`)

let spawned = 0
/** When each runner printed READY: only runners up for a while are killed, so the fleet always makes progress. */
const readyAt = new Map<Proc, number>()
const spawnRunner = (): Proc => {
  const runner = startProcess({
    name: `runner-${spawned++}`,
    script: "bench/workflow/runner.ts",
    logDir,
    env: { LEASEHOLD_DATABASE_URL: server.url, LEASEHOLD_SCHEMA: schema, BENCH_WF_LEASE_MS: String(LEASE_MS), LEASEHOLD_SESSION_LIVENESS: LIVENESS,
      BENCH_WF_STALL_MS: process.env["BENCH_WF_STALL_MS"] ?? "0", BENCH_WF_STALL_EVERY_MS: process.env["BENCH_WF_STALL_EVERY_MS"] ?? "200" },
    nodeArgs: []
  })
  runner.waitLine("READY", 120_000).then(() => readyAt.set(runner, Date.now()), () => undefined)
  return runner
}
const runners: Array<Proc> = Array.from({ length: RUNNERS }, spawnRunner)
await Promise.all(runners.map((r) => r.waitLine("READY", 60_000)))

const started = Date.now()
const ids = Array.from({ length: COUNT }, (_, n) => ({ id: `wf-${n}`, n }))
const executionIds = await runtime.runPromise(Effect.forEach(ids, (p) => Chaos.execute(p, { discard: true }), { concurrency: 8 }))
const byExecution = new Map(executionIds.map((e, i) => [e, ids[i]!]))
console.log(`started ${COUNT} executions on ${RUNNERS} runners (lease ${LEASE_MS} ms, session liveness ${LIVENESS}) in ${Date.now() - started} ms`)

const stats = { kills: 0, crashed: 0, terminated: 0, lostWakeUps: 0, overdueClocks: 0, approvals: 0 }
/** The backends terminated: a write that committed just before may be retried by the same claim (audit.ts). */
const terminatedPids = new Set<number>()
const approved = new Set<string>()

/** Approve (by token) every execution suspended on its approval that was not approved yet. */
const approve = async () => {
  const rows = await query<{ execution_id: string }>(
    `SELECT execution_id FROM ${schema}.workflow_executions WHERE status = 'suspended' AND suspended_on -> 'deferreds' ? 'approval'`
  )
  const fresh = rows.map((r) => r.execution_id).filter((e) => !approved.has(e))
  await runtime.runPromise(Effect.forEach(fresh, (executionId) =>
    DurableDeferred.succeed(Approval, {
      token: DurableDeferred.tokenFromExecutionId(Approval, { workflow: Chaos, executionId }),
      value: 10 * byExecution.get(executionId)!.n
    }), { concurrency: 8 }))
  for (const e of fresh) approved.add(e)
  stats.approvals += fresh.length
}

/** One consistent snapshot: suspended rows whose awaited deferred is done, or whose clock is long due. */
const sampleWakeUps = async () => {
  const [row] = await query<{ lost: number; overdue: number }>(`
    SELECT
      (SELECT count(*)::int FROM ${schema}.workflow_executions e
       WHERE e.status = 'suspended' AND EXISTS (
         SELECT 1 FROM ${schema}.workflow_deferreds d, jsonb_array_elements_text(e.suspended_on -> 'deferreds') AS awaited(name)
         WHERE d.workflow = e.workflow AND d.execution_id = e.execution_id AND d.name = awaited.name)) AS lost,
      (SELECT count(*)::int FROM ${schema}.workflow_executions e
       WHERE e.status = 'suspended' AND e.visible_at < now() - interval '${DUE_SLACK_MS} milliseconds') AS overdue`)
  stats.lostWakeUps = Math.max(stats.lostWakeUps, row!.lost)
  // A due clock is only overdue if some runner has been up long enough to have claimed it.
  const longestUp = Math.max(0, ...runners.map((r) => Date.now() - (readyAt.get(r) ?? Date.now())))
  if (longestUp > DUE_SLACK_MS + LEASE_MS) stats.overdueClocks = Math.max(stats.overdueClocks, row!.overdue)
}

const remaining = async () =>
  (await query<{ n: number }>(`SELECT count(*)::int AS n FROM ${schema}.workflow_executions WHERE status <> 'complete'`))[0]!.n

/** A progress line: executions by status, and activity results recorded so far. */
const progress = async () => {
  const rows = await query<{ status: string; n: number }>(
    `SELECT status, count(*)::int AS n FROM ${schema}.workflow_executions GROUP BY status ORDER BY status`
  )
  const [recorded] = await query<{ n: number }>(`SELECT count(*)::int AS n FROM ${schema}.workflow_activities`)
  console.log(`${Date.now() - started} ms: ${rows.map((r) => `${r.status} ${r.n}`).join(", ")}; activities ${recorded!.n}; kills ${stats.kills}`)
}

let lastKill = Date.now(), lastTerminate = Date.now(), lastProgress = Date.now()
while ((await remaining()) > 0 && Date.now() - started < DEADLINE_MS) {
  if (Date.now() - lastProgress >= 10_000) {
    lastProgress = Date.now()
    await progress()
  }
  await approve()
  await sampleWakeUps()
  // A runner that died by itself (a backend terminated under its start-up) is replaced and counted.
  for (const dead of runners.filter((r) => r.exit !== undefined)) {
    runners.splice(runners.indexOf(dead), 1, spawnRunner())
    stats.crashed++
  }
  const killable = runners.filter((r) => Date.now() - (readyAt.get(r) ?? Date.now()) >= MIN_UP_MS)
  if (Date.now() - lastKill >= KILL_MS && killable.length > 0) {
    lastKill = Date.now()
    const victim = killable[Math.floor(Math.random() * killable.length)]!
    runners.splice(runners.indexOf(victim), 1)
    victim.child.kill("SIGKILL")
    stats.kills++
    runners.push(spawnRunner())
  }
  if (Date.now() - lastTerminate >= TERMINATE_MS) {
    lastTerminate = Date.now()
    // The pid comes back only if the backend was signalled: the audit explains a repeat by it.
    const gone = await query<{ pid: number }>(`
      SELECT pid FROM (
        SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'leasehold-workflow-bench%' ORDER BY random() LIMIT 1) AS one
      WHERE pg_terminate_backend(pid)`)
    for (const g of gone) terminatedPids.add(g.pid)
    stats.terminated += gone.length
  }
  await sleep(200)
}
const elapsedMs = Date.now() - started
for (const r of runners) await stopProcess(r, 5_000)

const [due] = await query<{ n: number }>(
  `SELECT count(*)::int AS n FROM ${schema}.workflow_executions WHERE status <> 'complete' AND visible_at <= now()`
)
const dueAtEnd = due!.n
const results = await runtime.runPromise(Effect.forEach(executionIds, (e) => Chaos.poll(e)))
let right = 0, wrong = 0, incomplete = 0
results.forEach((polled, i) => {
  const { n } = byExecution.get(executionIds[i]!)!
  if (polled._tag === "None" || polled.value._tag !== "Complete") incomplete++
  else if (polled.value.exit._tag === "Success" && polled.value.exit.value === expected(n)) right++
  else wrong++
})
const [recorded] = await query<{ rows: number; keys: number }>(
  `SELECT count(*)::int AS rows, count(DISTINCT (execution_id, activity, attempt))::int AS keys FROM ${schema}.workflow_activities`
)
const audit = Audit.analyse({
  recorded: await withSql((sql) => Audit.readRecorded(sql, schema)),
  attempts: await withSql((sql) => Audit.readAttempts(sql, schema)),
  expected: (r) => {
    const payload = byExecution.get(r.executionId)
    return payload === undefined || r.workflow !== Chaos._tag ? undefined : activityValue(payload.n, r.activity)
  },
  terminatedPids
})
const [reruns] = await query<{ n: number }>(`
  SELECT coalesce(sum(c - 1), 0)::int AS n FROM (SELECT count(*) AS c FROM ${schema}.effects GROUP BY execution, activity) AS runs`)

console.log([
  `elapsed ${elapsedMs} ms; runners SIGKILLed ${stats.kills}, exited by themselves ${stats.crashed}, backends terminated ${stats.terminated}, approvals ${stats.approvals}`,
  `executions: ${right} right, ${wrong} wrong, ${incomplete} not complete (lost) of ${COUNT}`,
  `activity results recorded: ${recorded!.rows} rows, ${recorded!.keys} distinct attempts (expected ${COUNT * 4})`,
  ...Audit.describe(audit),
  `activity bodies run again (interrupted by a kill before their result was recorded): ${reruns!.n}`,
  `samples: at most ${stats.lostWakeUps} suspended on a deferred already done; a backlog of at most ${stats.overdueClocks} with a clock due over ${DUE_SLACK_MS} ms`,
  `left suspended with a wake-up due at the end: ${dueAtEnd}`
].join("\n"))

await runtime.dispose()
await endLogs()
await server.stop()
const ok = right === COUNT && recorded!.rows === COUNT * 4 && recorded!.keys === recorded!.rows && audit.ok && stats.lostWakeUps === 0 &&
  dueAtEnd === 0
console.log(ok ? "PASS" : "FAIL")
process.exit(ok ? 0 : 1)
