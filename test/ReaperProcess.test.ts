/**
 * Session liveness with real worker processes (test/fixtures/worker.ts, with
 * LEASEHOLD_SESSION_LIVENESS=auto and a 30 s lease, default presence timing):
 *
 * - SIGKILL: the killed worker's session ends with it, its heartbeat stops, and
 *   the other worker's reaper releases its claim within seconds, not after the
 *   30 s lease;
 * - SIGSTOP: a frozen worker stops heartbeating but its session (and lock)
 *   stays, so nobody takes its claim: both signals must agree.
 */
import { afterAll, afterEach, assert, beforeAll, describe, it } from "vitest"
import type { MessageId } from "../src/Message.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitForAsync as waitFor } from "./support/Wait.ts"
import { dumpOnFailure, killAll, spawnWorker as spawnProcess, sqlRuntime, type Worker } from "./support/WorkerProcess.ts"

const QUEUE = "reaper"
const LEASE = "30s"

let db: ReturnType<typeof sqlRuntime>
beforeAll(() => {
  db = sqlRuntime()
})
afterAll(async () => {
  await db?.dispose()
})

const query = <A extends object>(text: string, params: ReadonlyArray<unknown> = []) => db.query<A>(text, params)

let workers: Array<Worker> = []
let schemas: Array<string> = []

const spawnWorker = (name: string, schema: string): Worker =>
  spawnProcess(name, {
    LEASEHOLD_SCHEMA: schema,
    LEASEHOLD_QUEUES: QUEUE,
    LEASEHOLD_LEASE: LEASE,
    LEASEHOLD_SHUTDOWN_GRACE: "2s",
    LEASEHOLD_SESSION_LIVENESS: "auto"
  }, workers)

const freshSchema = async () => {
  const schema = PgTest.uniqueSchema("rp")
  schemas.push(schema)
  await db.migrateWithLedger(schema)
  return schema
}

const send = async (schema: string, ms: number) => (await db.send(schema, QUEUE, [{ task: "sleep", payload: { ms } }]))[0]!

const starts = (schema: string, id: MessageId) => db.starts(schema, id)

/** Both workers registered with session liveness (a lock key advertised). */
const waitRegistered = (schema: string, ws: ReadonlyArray<Worker>) =>
  waitFor("the workers to register with session liveness", async () => {
    const rows = await query<{ id: string }>(`SELECT id FROM ${schema}.consumers WHERE lock_key IS NOT NULL`)
    return ws.every((w) => w.readyAt !== undefined && rows.some((r) => r.id === w.consumerId)) ? true : undefined
  }, 20_000)

afterEach(async () => {
  // A new array, not splice: a failure report still has this test's workers.
  const done = workers
  workers = []
  await killAll(done)
  for (const schema of schemas.splice(0)) await query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined)
})


describe("session liveness with worker processes (lease 30 s)", () => {
  it("SIGKILL: the other worker's reaper releases the claim within seconds, counted as a lease expiry", async () => {
    workers = []
    dumpOnFailure(workers)
    const schema = await freshSchema()
    const one = spawnWorker("W1", schema)
    const two = spawnWorker("W2", schema)
    await waitRegistered(schema, [one, two])

    const id = await send(schema, 60_000)
    const first = await waitFor("a worker to start the message", async () => (await starts(schema, id))[0])
    const victim = first.consumer === one.consumerId ? one : two
    const survivor = victim === one ? two : one

    const killedAt = Date.now()
    victim.proc.kill("SIGKILL")
    const taken = await waitFor("the survivor to start the message", async () => {
      return (await starts(schema, id)).find((s) => s.consumer === survivor.consumerId)
    }, 20_000)
    const redeliveryMs = taken.at.getTime() - killedAt
    console.log(`SIGKILL with a 30 s lease: the survivor started the message ${redeliveryMs} ms after the kill`)
    // Default presence timing: stale after 2 s, a sweep every 500 ms; the reaper wakes its consumer at once.
    assert.isAtMost(redeliveryMs, 6_000, "redelivered by the reaper, long before the 30 s lease")

    const [row] = await query<{ leased_by: string; attempts: number; lease_expiries: number }>(
      `SELECT leased_by, attempts, lease_expiries FROM ${schema}.messages WHERE id = $1::bigint`,
      [id]
    )
    assert.deepStrictEqual(row, { leased_by: survivor.consumerId, attempts: 2, lease_expiries: 1 })
    const history = await query<{ consumer: string; outcome: string }>(
      `SELECT consumer, outcome FROM ${schema}.attempts WHERE message_id = $1::bigint ORDER BY id`,
      [id]
    )
    assert.deepStrictEqual(history, [{ consumer: victim.consumerId, outcome: "lease-expired" }])
    const reapedBy = survivor.output.filter((l) => l.includes(`consumer ${victim.consumerId}`) && l.includes("is gone"))
    assert.isAtLeast(reapedBy.length, 1, "the survivor logged the reap")
    const left = await query<{ id: string }>(`SELECT id FROM ${schema}.consumers ORDER BY id`)
    assert.deepStrictEqual(left.map((r) => r.id), [survivor.consumerId], "the dead worker is forgotten")
  }, 40_000)

  it("SIGSTOP: a frozen worker keeps its session, so its claim is not taken although its heartbeat is stale", async () => {
    workers = []
    dumpOnFailure(workers)
    const schema = await freshSchema()
    const one = spawnWorker("W1", schema)
    const two = spawnWorker("W2", schema)
    await waitRegistered(schema, [one, two])

    const id = await send(schema, 60_000)
    const first = await waitFor("a worker to start the message", async () => (await starts(schema, id))[0])
    const frozen = first.consumer === one.consumerId ? one : two
    const other = frozen === one ? two : one

    frozen.proc.kill("SIGSTOP")
    // Well past the stale bound (2 s) with the other worker sweeping every 500 ms.
    await new Promise((r) => setTimeout(r, 6_000))
    const [hb] = await query<{ age_ms: number }>(
      `SELECT (extract(epoch FROM now() - heartbeat_at) * 1000)::float8 AS age_ms FROM ${schema}.consumers WHERE id = $1`,
      [frozen.consumerId]
    )
    assert.isAbove(hb!.age_ms, 3_000, "the frozen worker's heartbeat is stale")
    const [row] = await query<{ leased_by: string; lease_expiries: number }>(
      `SELECT leased_by, lease_expiries FROM ${schema}.messages WHERE id = $1::bigint`,
      [id]
    )
    assert.deepStrictEqual(row, { leased_by: frozen.consumerId, lease_expiries: 0 }, "the claim stays with the frozen worker")
    assert.deepStrictEqual((await starts(schema, id)).map((s) => s.consumer), [frozen.consumerId])
    assert.isFalse(other.output.some((l) => l.includes("is gone")))

    frozen.proc.kill("SIGCONT")
    await waitFor("the thawed worker to heartbeat again", async () => {
      const [r] = await query<{ age_ms: number }>(
        `SELECT (extract(epoch FROM now() - heartbeat_at) * 1000)::float8 AS age_ms FROM ${schema}.consumers WHERE id = $1`,
        [frozen.consumerId]
      )
      return r !== undefined && r.age_ms < 1_500 ? true : undefined
    }, 10_000)
  }, 40_000)
})
