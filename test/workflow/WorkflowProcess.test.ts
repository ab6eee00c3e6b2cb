/**
 * Workflow runners as real processes (test/fixtures/workflowRunner.ts), each hanging inside the
 * `Crash` workflow's second activity (`WF_HANG=1`) before it is stopped:
 *
 * - SIGKILLed, session liveness off (lease 2 s): another runner resumes the execution once the
 *   lease runs out;
 * - SIGKILLed, session liveness on (lease 30 s): the reaper releases the execution when the dead
 *   runner's presence session is gone, so another runner resumes it well within the lease;
 * - SIGTERMed (lease 30 s, liveness off): the drain releases the execution it held, so another
 *   runner takes it at once.
 *
 * Each time the replay does not run again what was recorded (one `first` effect, by the stopped
 * pid; the durable sleep is not slept again); the activity it was inside had recorded nothing, so
 * it runs again in the survivor.
 */
import { Layer, ManagedRuntime, Option } from "effect"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import * as LeaseholdWorkflow from "../../src/LeaseholdWorkflow.ts"
import { Crash } from "../fixtures/crashWorkflow.ts"
import * as PgTest from "../support/PgTest.ts"
import { waitForAsync as waitFor } from "../support/Wait.ts"
import { dumpOnFailure, killAll, spawnWorker, sqlRuntime, waitExit, waitReady, type Worker } from "../support/WorkerProcess.ts"

const RUNNER = "test/fixtures/workflowRunner.ts"

let db: ReturnType<typeof sqlRuntime>
const schema = PgTest.uniqueSchema("wfp")
const workers: Array<Worker> = []
// The test's own engine (no workflow registered, so it claims nothing): it starts and polls.
const client = ManagedRuntime.make(
  LeaseholdWorkflow.layer({ schema, pollInterval: "200 millis" }).pipe(Layer.provideMerge(PgTest.clientLayer({ maxConnections: 3 })))
)

beforeAll(async () => {
  db = sqlRuntime()
  await db.migrateWithLedger(schema)
  await db.query(`CREATE TABLE ${schema}.effects (execution text, activity text, pid int, at timestamptz DEFAULT clock_timestamp())`)
})
afterAll(async () => {
  await killAll(workers)
  await client.dispose()
  await db.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined)
  await db.dispose()
})

const effects = (id: string) =>
  db.query<{ activity: string; pid: number }>(`SELECT activity, pid FROM ${schema}.effects WHERE execution = $1 ORDER BY at`, [id])

const execution = (executionId: string) =>
  db.query<{ status: string; runs: number; lease_token: string | null; leased_by: string | null; visible: boolean | null }>(
    `SELECT status, runs, lease_token, leased_by, visible_at <= now() AS visible FROM ${schema}.workflow_executions WHERE execution_id = $1`,
    [executionId]
  ).then((rows) => rows[0]!)

/** Start a `Crash` execution and wait until `victim` hangs inside its second activity. */
const startHanging = async (victim: Worker, id: string) => {
  const executionId = await client.runPromise(Crash.execute({ id }, { discard: true }))
  await waitFor("the victim to hang inside `second`", () => victim.output.some((l) => l.includes(`HANGING ${id}`)) || undefined, 20_000)
  return executionId
}

const completed = (executionId: string, timeoutMs: number) =>
  waitFor("the execution to complete in the survivor", async () => {
    const polled = await client.runPromise(Crash.poll(executionId))
    return Option.isSome(polled) && polled.value._tag === "Complete" ? polled.value : undefined
  }, timeoutMs)

/** What every case checks once the survivor completed the execution. */
const checkReplayed = async (id: string, executionId: string, victim: Worker, survivor: Worker, result: { readonly exit: unknown }) => {
  const victimPid = victim.proc.pid!, survivorPid = survivor.proc.pid!
  const exit = result.exit as { readonly _tag: string; readonly value?: unknown }
  assert.deepStrictEqual(exit._tag === "Success" && exit.value, { first: victimPid, second: survivorPid })
  assert.deepStrictEqual(await effects(id), [
    { activity: "first", pid: victimPid },
    { activity: "second", pid: victimPid },
    { activity: "second", pid: survivorPid }
  ])
  const recorded = await db.query<{ activity: string; attempt: number }>(
    `SELECT activity, attempt FROM ${schema}.workflow_activities WHERE execution_id = $1 ORDER BY recorded_at`,
    [executionId]
  )
  assert.deepStrictEqual(recorded, [{ activity: "first", attempt: 1 }, { activity: "second", attempt: 1 }])
  const row = await execution(executionId)
  assert.strictEqual(row.status, "complete")
  assert.isNull(row.lease_token)
  assert.isNull(row.leased_by)
  assert.isAtLeast(row.runs, 3, "run, woken by its clock, resumed by the survivor")
}

describe("a workflow runner stopped mid-workflow", () => {
  it("SIGKILLed without session liveness: another runner resumes it after the lease", async () => {
    dumpOnFailure(workers)
    await killAll(workers) // the last case's survivor would take this one's execution
    const env = { LEASEHOLD_SCHEMA: schema, LEASEHOLD_SESSION_LIVENESS: "off", WF_LEASE_MS: "2000" }
    const victim = spawnWorker("WFA", { ...env, WF_HANG: "1" }, workers, RUNNER)
    const id = `crash-${Date.now().toString(36)}`
    const executionId = await startHanging(victim, id)
    victim.proc.kill("SIGKILL")
    const killedAt = Date.now()
    const survivor = spawnWorker("WFB", env, workers, RUNNER)
    const result = await completed(executionId, 30_000)
    console.log(`lease only: resumed and completed ${Date.now() - killedAt} ms after the SIGKILL (lease 2 s)`)
    await checkReplayed(id, executionId, victim, survivor, result)
  }, 60_000)

  it("SIGKILLed with session liveness: the reaper releases it well within the lease", async () => {
    dumpOnFailure(workers)
    await killAll(workers) // the last case's survivor would take this one's execution
    const env = { LEASEHOLD_SCHEMA: schema, LEASEHOLD_SESSION_LIVENESS: "on", WF_LEASE_MS: "30000" }
    const victim = spawnWorker("WFC", { ...env, WF_HANG: "1" }, workers, RUNNER)
    const id = `reaped-${Date.now().toString(36)}`
    const executionId = await startHanging(victim, id)
    assert.strictEqual((await execution(executionId)).leased_by, victim.consumerId, "held under the runner's presence id")
    const survivor = spawnWorker("WFD", env, workers, RUNNER)
    await waitReady(survivor)
    victim.proc.kill("SIGKILL")
    const killedAt = Date.now()
    const result = await completed(executionId, 25_000)
    const elapsed = Date.now() - killedAt
    console.log(`session liveness: resumed and completed ${elapsed} ms after the SIGKILL (lease 30 s)`)
    assert.isBelow(elapsed, 15_000, "resumed within session liveness, not after the 30 s lease")
    await checkReplayed(id, executionId, victim, survivor, result)
  }, 60_000)

  it("SIGTERMed: the drain releases what it held, another runner takes it at once", async () => {
    dumpOnFailure(workers)
    await killAll(workers) // the last case's survivor would take this one's execution
    const env = { LEASEHOLD_SCHEMA: schema, LEASEHOLD_SESSION_LIVENESS: "off", WF_LEASE_MS: "30000" }
    const victim = spawnWorker("WFE", { ...env, WF_HANG: "1" }, workers, RUNNER)
    const id = `drained-${Date.now().toString(36)}`
    const executionId = await startHanging(victim, id)
    const survivor = spawnWorker("WFF", env, workers, RUNNER)
    await waitReady(survivor)
    victim.proc.kill("SIGTERM")
    const stoppedAt = Date.now()
    const exit = await waitExit(victim, 15_000)
    const result = await completed(executionId, 25_000)
    const elapsed = Date.now() - stoppedAt
    console.log(`drain: exited (code ${exit.code}, signal ${exit.signal}) ${exit.at - stoppedAt} ms after SIGTERM; completed elsewhere ${elapsed} ms after it (lease 30 s)`)
    assert.isBelow(elapsed, 10_000, "released by the drain, not left to its 30 s lease")
    await checkReplayed(id, executionId, victim, survivor, result)
  }, 60_000)
})
