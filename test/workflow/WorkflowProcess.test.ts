/**
 * A workflow runner SIGKILLed mid-workflow (test/fixtures/workflowRunner.ts, lease 2 s): the
 * execution resumes in another runner process once the lease runs out, replaying what was
 * recorded. The activity that completed in the killed runner is not run again (one `first`
 * effect, by the killed pid); the activity it was inside when killed had recorded nothing, so it
 * runs again in the survivor; the durable sleep between them is not slept again.
 */
import { Layer, ManagedRuntime, Option } from "effect"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import * as LeaseholdWorkflow from "../../src/LeaseholdWorkflow.ts"
import { Crash } from "../fixtures/crashWorkflow.ts"
import * as PgTest from "../support/PgTest.ts"
import { waitForAsync as waitFor } from "../support/Wait.ts"
import { dumpOnFailure, killAll, spawnWorker, sqlRuntime, type Worker } from "../support/WorkerProcess.ts"

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

describe("a workflow runner killed mid-workflow", () => {
  it("another runner resumes the execution; recorded activities are not run again", async () => {
    dumpOnFailure(workers)
    const victim = spawnWorker("WFA", { LEASEHOLD_SCHEMA: schema, WF_HANG: "1" }, workers, RUNNER)
    const id = `crash-${Date.now().toString(36)}`
    const executionId = await client.runPromise(Crash.execute({ id }, { discard: true }))
    await waitFor("the victim to hang inside `second`", () => victim.output.some((l) => l.includes(`HANGING ${id}`)) || undefined, 20_000)

    victim.proc.kill("SIGKILL")
    const killedAt = Date.now()
    const survivor = spawnWorker("WFB", { LEASEHOLD_SCHEMA: schema }, workers, RUNNER)
    const result = await waitFor("the execution to complete in the survivor", async () => {
      const polled = await client.runPromise(Crash.poll(executionId))
      return Option.isSome(polled) && polled.value._tag === "Complete" ? polled.value : undefined
    }, 30_000)
    console.log(`workflow resumed and completed ${Date.now() - killedAt} ms after the SIGKILL (lease 2 s)`)

    const victimPid = victim.proc.pid!, survivorPid = survivor.proc.pid!
    assert.deepStrictEqual(result.exit._tag === "Success" && result.exit.value, { first: victimPid, second: survivorPid })
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
    const [row] = await db.query<{ status: string; runs: number; lease_token: string | null }>(
      `SELECT status, runs, lease_token FROM ${schema}.workflow_executions WHERE execution_id = $1`,
      [executionId]
    )
    assert.strictEqual(row?.status, "complete")
    assert.isNull(row?.lease_token ?? null)
    assert.isAtLeast(row?.runs ?? 0, 3, "run, woken by its clock, resumed by the survivor")
  }, 60_000)
})
