/**
 * A real worker process (test/fixtures/worker.ts: consumer, store, presence and
 * `Http.layerWithAdminFromEnv` built after the consumer, as in a user's worker)
 * started with a bad setting exits non-zero before it claims anything: a message
 * sent before it started is untouched (attempts 0, no lease holder, no handler
 * run). Its output names the variable and the rule, without leasehold's stack
 * frames. `LEASEHOLD_LOG_LEVEL=Debug` shows the renewal DEBUG lines.
 */
import { afterAll, afterEach, assert, beforeAll, describe, it } from "vitest"
import type { MessageId } from "../src/Message.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitForAsync } from "./support/Wait.ts"
import { dumpOnFailure, killAll, spawnWorker, sqlRuntime, waitExit, waitReady, type Worker } from "./support/WorkerProcess.ts"

const QUEUE = "config"

let db: ReturnType<typeof sqlRuntime>
let workers: Array<Worker> = []
let schemas: Array<string> = []

beforeAll(() => {
  db = sqlRuntime()
})

afterAll(async () => {
  await db?.dispose()
})

afterEach(async () => {
  const done = workers
  workers = []
  await killAll(done)
  for (const schema of schemas.splice(0)) {
    await db.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined)
  }
})

/** A migrated schema with the fixture's ledger and one `sleep` message of `ms` waiting in it. */
const schemaWithMessage = async (ms: number) => {
  const schema = PgTest.uniqueSchema("wc")
  schemas.push(schema)
  await db.migrateWithLedger(schema)
  const [id] = await db.send(schema, QUEUE, [{ task: "sleep", payload: { ms } }])
  return { schema, id: id! }
}

const start = (name: string, schema: string, env: Record<string, string>) =>
  spawnWorker(name, { LEASEHOLD_SCHEMA: schema, LEASEHOLD_QUEUES: QUEUE, LEASEHOLD_POLL_INTERVAL: "100ms", ...env }, workers)

const messageRow = async (schema: string, id: MessageId) =>
  (await db.query<{ attempts: number; leased_by: string | null }>(
    `SELECT attempts, leased_by FROM ${schema}.messages WHERE id = $1::bigint`,
    [id]
  ))[0]

/** What the worker wrote (stdout and stderr: effect's logger writes the final ERROR to either), without the harness's prefix. */
const outputOf = (worker: Worker) => worker.output.map((line) => line.replace(/^\[[^\]]*\] /, "")).join("\n")

describe("a worker's configuration is checked before anything starts", () => {
  const cases: ReadonlyArray<readonly [string, Record<string, string>, string, RegExp]> = [
    ["port", { LEASEHOLD_HTTP_PORT: "http" }, "LEASEHOLD_HTTP_PORT", /a whole number from 0 to 65535/],
    ["port-range", { LEASEHOLD_HTTP_PORT: "70000" }, "LEASEHOLD_HTTP_PORT", /a whole number from 0 to 65535/],
    ["host", { LEASEHOLD_HTTP_PORT: "0", LEASEHOLD_HTTP_HOST: "not a host" }, "LEASEHOLD_HTTP_HOST", /a host name or IP address/],
    ["token", { LEASEHOLD_HTTP_PORT: "0", LEASEHOLD_ADMIN_TOKEN: "short" }, "LEASEHOLD_ADMIN_TOKEN", /at least 16 characters, no whitespace/],
    ["log-level", { LEASEHOLD_LOG_LEVEL: "verbose" }, "LEASEHOLD_LOG_LEVEL", /one of All, Trace, Debug, Info, Warn, Error, Fatal, None/],
    ["queue-concurrency", { LEASEHOLD_QUEUE_CONCURRENCY: "config=0" }, "LEASEHOLD_QUEUE_CONCURRENCY", /a whole number from 1 to 10000/]
  ]
  for (const [name, env, variable, rule] of cases) {
    it(`a bad ${variable} (${JSON.stringify(env)}): exit non-zero, the message untouched, its output names it and the rule, no stack frames`, async () => {
      dumpOnFailure(workers)
      const { id, schema } = await schemaWithMessage(0)
      const worker = start(`bad-${name}`, schema, env)
      const exit = await waitExit(worker, 30_000)
      assert.notStrictEqual(exit.code, 0, "a worker with a bad setting fails")
      assert.isUndefined(worker.readyAt, "it fails before the consumer is built (READY is printed once it is)")
      assert.deepStrictEqual(await messageRow(schema, id), { attempts: 0, leased_by: null }, "never claimed")
      assert.lengthOf(await db.query(`SELECT 1 FROM ${schema}.ledger`), 0, "no handler ran")
      const stderr = outputOf(worker)
      assert.include(stderr, `ConfigInvalid: ${variable}`)
      assert.match(stderr, rule)
      assert.notMatch(stderr, /^\s+at /m, "no stack frames")
      assert.notInclude(stderr, "/src/", "no leasehold source paths")
      if (variable === "LEASEHOLD_ADMIN_TOKEN") assert.notInclude(stderr, "short", "the token is never printed")
    }, 60_000)
  }
})

describe("LEASEHOLD_LOG_LEVEL", () => {
  it("Debug (any case): the worker logs the renewal DEBUG lines; by default it does not", async () => {
    dumpOnFailure(workers)
    const renewal = /lease renewed for 1 message\(s\)/
    for (const level of ["debug", undefined] as const) {
      const { id, schema } = await schemaWithMessage(1_500)
      const worker = start(`level-${level ?? "default"}`, schema, {
        LEASEHOLD_LEASE: "600ms",
        ...(level === undefined ? {} : { LEASEHOLD_LOG_LEVEL: level })
      })
      await waitReady(worker)
      // The handler (1.5 s) outlives the lease (600 ms, renewed every 200 ms): done once it ended.
      await waitForAsync("the handler to end", async () =>
        (await db.query(`SELECT 1 FROM ${schema}.ledger WHERE message_id = $1 AND event = 'end'`, [id])).length > 0 || undefined, {
        timeoutMs: 20_000
      })
      worker.proc.kill("SIGTERM")
      assert.strictEqual((await waitExit(worker, 20_000)).code, 0)
      const renewals = worker.output.filter((line) => renewal.test(line))
      if (level === undefined) assert.lengthOf(renewals, 0, "INFO and up by default")
      else {
        assert.isAtLeast(renewals.length, 2, "renewed at DEBUG while the handler ran")
        assert.match(renewals[0]!, / DEBUG /)
      }
    }
  }, 90_000)
})
