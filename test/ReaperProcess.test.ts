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
import { type ChildProcess, spawn } from "node:child_process"
import { existsSync } from "node:fs"
import { resolve } from "node:path"
import { Effect, ManagedRuntime } from "effect"
import { SqlClient } from "effect/sql"
import { afterAll, afterEach, assert, beforeAll, describe, it, onTestFailed } from "vitest"
import type { MessageId } from "../src/Message.ts"
import * as Migrations from "../src/Migrations.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitForAsync as waitFor } from "./support/Wait.ts"

const nodeBinary = (() => {
  const major = Number(process.versions.node.split(".")[0])
  if (major >= 22) return process.execPath
  const local = resolve("node_modules/.bin/node")
  if (existsSync(local)) return local
  throw new Error(`Node >= 22 needed to run test/fixtures/worker.ts; this is ${process.version}`)
})()

const WORKER = resolve("test/fixtures/worker.ts")
const QUEUE = "reaper"
const LEASE = "30s"

let runtime: ManagedRuntime.ManagedRuntime<SqlClient.SqlClient, unknown>
beforeAll(() => {
  runtime = ManagedRuntime.make(PgTest.clientLayer({ maxConnections: 4 }))
})
afterAll(async () => {
  await runtime?.dispose()
})

const query = <A extends object>(text: string, params: ReadonlyArray<unknown> = []) =>
  runtime.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe<A>(text, params)))


interface Worker {
  readonly name: string
  readonly consumerId: string
  readonly proc: ChildProcess
  readonly output: Array<string>
  ready: boolean
  exited: boolean
}

let workers: Array<Worker> = []
let schemas: Array<string> = []

const spawnWorker = (name: string, schema: string): Worker => {
  const consumerId = `${name}-${Math.random().toString(36).slice(2, 6)}`
  const proc = spawn(nodeBinary, [WORKER], {
    env: {
      ...process.env,
      LEASEHOLD_DATABASE_URL: PgTest.databaseUrl(),
      LEASEHOLD_SCHEMA: schema,
      LEASEHOLD_QUEUES: QUEUE,
      LEASEHOLD_LEASE: LEASE,
      LEASEHOLD_SHUTDOWN_GRACE: "2s",
      LEASEHOLD_CONSUMER_ID: consumerId,
      LEASEHOLD_SESSION_LIVENESS: "auto"
    },
    stdio: ["ignore", "pipe", "pipe"]
  })
  const worker: Worker = { name, consumerId, proc, output: [], ready: false, exited: false }
  workers.push(worker)
  const startedAt = Date.now()
  for (const [stream, label] of [[proc.stdout!, "out"], [proc.stderr!, "err"]] as const) {
    let pending = ""
    stream.on("data", (chunk: Buffer) => {
      pending += chunk.toString("utf8")
      const lines = pending.split("\n")
      pending = lines.pop() ?? ""
      for (const line of lines) {
        worker.output.push(`[${name} ${label} +${Date.now() - startedAt}ms] ${line}`)
        if (line === `READY ${consumerId}`) worker.ready = true
      }
    })
  }
  proc.on("exit", () => {
    worker.exited = true
  })
  return worker
}

const freshSchema = async () => {
  const schema = PgTest.uniqueSchema("rp")
  schemas.push(schema)
  await runtime.runPromise(Migrations.run({ schema }))
  await query(`CREATE TABLE ${schema}.ledger (message_id text, consumer text, event text, at timestamptz DEFAULT clock_timestamp())`)
  return schema
}

const send = (schema: string, ms: number) =>
  runtime.runPromise(Effect.scoped(Effect.gen(function*() {
    const store = yield* PgQueueStore.make({ schema, migrate: false, leasePool: false })
    const [sent] = yield* store.send(QUEUE, [{ task: "sleep", payload: { ms } }])
    return sent!.id
  })))

const starts = (schema: string, id: MessageId) =>
  query<{ consumer: string; at: Date }>(
    `SELECT consumer, at FROM ${schema}.ledger WHERE message_id = $1 AND event = 'start' ORDER BY at`,
    [id]
  )

/** Both workers registered with session liveness (a lock key advertised). */
const waitRegistered = (schema: string, ws: ReadonlyArray<Worker>) =>
  waitFor("the workers to register with session liveness", async () => {
    const rows = await query<{ id: string }>(`SELECT id FROM ${schema}.consumers WHERE lock_key IS NOT NULL`)
    return ws.every((w) => w.ready && rows.some((r) => r.id === w.consumerId)) ? true : undefined
  }, 20_000)

afterEach(async () => {
  for (const w of workers.splice(0)) {
    if (!w.exited) {
      w.proc.kill("SIGCONT")
      w.proc.kill("SIGKILL")
      await waitFor(`${w.name} to exit`, async () => (w.exited ? true : undefined), 10_000).catch(() => undefined)
    }
  }
  for (const schema of schemas.splice(0)) await query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined)
})

const dumpOnFailure = () => {
  const mine = workers
  onTestFailed(() => {
    for (const w of mine) console.error(`---- ${w.name} (${w.consumerId}) ----\n${w.output.join("\n")}`)
  })
}

describe("session liveness with worker processes (lease 30 s)", () => {
  it("SIGKILL: the other worker's reaper releases the claim within seconds, counted as a lease expiry", async () => {
    workers = []
    dumpOnFailure()
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
    // Default presence timing: stale after 3 s, a sweep every second; the reaper wakes its consumer at once.
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
    dumpOnFailure()
    const schema = await freshSchema()
    const one = spawnWorker("W1", schema)
    const two = spawnWorker("W2", schema)
    await waitRegistered(schema, [one, two])

    const id = await send(schema, 60_000)
    const first = await waitFor("a worker to start the message", async () => (await starts(schema, id))[0])
    const frozen = first.consumer === one.consumerId ? one : two
    const other = frozen === one ? two : one

    frozen.proc.kill("SIGSTOP")
    // Well past the stale bound (3 s) with the other worker sweeping every second.
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
