/**
 * A real worker process (test/fixtures/worker.ts) whose database role hits its connection
 * limit: for 10 s every new connection is refused with 53300 ("too many connections for
 * role"), and the connections it had are gone. A refused connection is a dead connection
 * (docs/errors.md): the worker keeps running, retries, and once the role may connect again
 * it runs and acks what was sent meanwhile and afterwards.
 *
 * The worker connects as a role of its own (not a superuser: superusers have no connection
 * limit), which owns the test's schema and migrates it at start, as a deployment would.
 */
import { afterAll, afterEach, assert, beforeAll, describe, it } from "vitest"
import type { MessageId } from "../src/Message.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitForAsync as waitFor } from "./support/Wait.ts"
import { dumpOnFailure, killAll, spawnWorker, sqlRuntime, waitReady, type Worker } from "./support/WorkerProcess.ts"

const QUEUE = "refused"
/** How long the role's connections are refused. */
const OUTAGE_MS = 10_000

let db: ReturnType<typeof sqlRuntime>
let workers: Array<Worker> = []
const cleanups: Array<() => Promise<unknown>> = []

beforeAll(() => {
  db = sqlRuntime()
})

afterEach(async () => {
  const done = workers
  workers = []
  await killAll(done)
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined)
})

afterAll(async () => {
  await db?.dispose()
})

/** A login role (no superuser) owning a fresh schema with the ledger the worker writes to. */
const roleWithSchema = async () => {
  const role = PgTest.uniqueSchema("r")
  const schema = PgTest.uniqueSchema("rc")
  const [{ name }] = await db.query<{ name: string }>("SELECT current_database() AS name") as [{ name: string }]
  await db.query(`CREATE ROLE ${role} LOGIN`)
  cleanups.push(() => db.query(`DROP ROLE IF EXISTS ${role}`))
  // CREATE SCHEMA IF NOT EXISTS (the worker's migration) checks this privilege even when the schema exists.
  await db.query(`GRANT CREATE ON DATABASE "${name}" TO ${role}`)
  cleanups.push(() => db.query(`REVOKE CREATE ON DATABASE "${name}" FROM ${role}`))
  await db.query(`CREATE SCHEMA ${schema} AUTHORIZATION ${role}`)
  cleanups.push(() => db.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`))
  await db.query(`CREATE TABLE ${schema}.ledger (message_id text, consumer text, event text, at timestamptz DEFAULT clock_timestamp())`)
  await db.query(`ALTER TABLE ${schema}.ledger OWNER TO ${role}`)
  const url = new URL(PgTest.databaseUrl())
  url.username = role
  url.password = ""
  return { role, schema, url: url.toString() }
}

const backendsOf = async (role: string) =>
  Number((await db.query<{ n: string }>("SELECT count(*)::text AS n FROM pg_stat_activity WHERE usename = $1", [role]))[0]!.n)

/** Whether `id` was acked: its row is gone and its handler's `end` is in the ledger. */
const acked = async (schema: string, id: MessageId) => {
  const row = await db.query(`SELECT 1 FROM ${schema}.messages WHERE id = $1::bigint`, [id])
  const end = await db.query(`SELECT 1 FROM ${schema}.ledger WHERE message_id = $1 AND event = 'end'`, [id])
  return row.length === 0 && end.length === 1
}

describe("a worker whose role hits its connection limit", () => {
  it("keeps running for 10 s of refused connections (53300) and then acks what was sent meanwhile and afterwards", async () => {
    const { role, schema, url } = await roleWithSchema()
    dumpOnFailure(workers)
    const worker = spawnWorker("refused", {
      LEASEHOLD_DATABASE_URL: url,
      LEASEHOLD_SCHEMA: schema,
      LEASEHOLD_QUEUES: QUEUE,
      LEASEHOLD_POLL_INTERVAL: "200ms",
      LEASEHOLD_BACKOFF_MAX: "1s"
    }, workers)
    await waitReady(worker, 30_000)
    const [before] = await db.send(schema, QUEUE, [{ task: "sleep", payload: { ms: 0 } }])
    await waitFor("the first message to be acked", () => acked(schema, before!).then((ok) => ok || undefined), { timeoutMs: 15_000 })

    // The outage: no new connection of the role is admitted, and the ones it had are ended.
    await db.query(`ALTER ROLE ${role} CONNECTION LIMIT 0`)
    const outageStart = Date.now()
    await db.query("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE usename = $1", [role])
    await waitFor("the role's backends to be gone", () => backendsOf(role).then((n) => n === 0 || undefined), { timeoutMs: 10_000 })
    const [during] = await db.send(schema, QUEUE, [{ task: "sleep", payload: { ms: 0 } }])
    while (Date.now() - outageStart < OUTAGE_MS) {
      assert.strictEqual(await backendsOf(role), 0, "no connection of the role got in during the outage")
      assert.isUndefined(worker.exit, "the worker is still running")
      await new Promise((resolve) => setTimeout(resolve, 250))
    }
    assert.isFalse(await acked(schema, during!), "nothing could run during the outage")
    assert.isTrue(
      worker.output.some((line) => line.includes(`too many connections for role \\"${role}\\"`) || line.includes(`too many connections for role "${role}"`)),
      "the worker was refused with 53300 (too many connections for role)"
    )

    await db.query(`ALTER ROLE ${role} CONNECTION LIMIT -1`)
    const [after] = await db.send(schema, QUEUE, [{ task: "sleep", payload: { ms: 0 } }])
    for (const [label, id] of [["sent during the outage", during!], ["sent after it", after!]] as const) {
      await waitFor(`the message ${label} to be acked`, () => acked(schema, id).then((ok) => ok || undefined), { timeoutMs: 20_000 })
    }
    assert.isUndefined(worker.exit, "the worker never exited")
  }, 90_000)
})
