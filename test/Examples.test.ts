/**
 * The programs the README tells people to run are run here, as processes, the way the README runs
 * them (issue 8, item 17), not only type-checked:
 *
 * - `examples/producer.ts` then `examples/worker.ts` against the test server, each test in a database
 *   of its own (the producer writes to the application's `public.users`) with a non-default
 *   `LEASEHOLD_SCHEMA`, so the schema setting is exercised; the worker consumes its dispatcher's queue
 *   (`emails`) with no `LEASEHOLD_QUEUES`, runs the producer's message, and exits 0 on SIGTERM;
 * - the same worker exits 1 when its claim loop fails on something other than a dead connection
 *   (its messages table is gone), after shutting down (`Consumer.launch`);
 * - `examples/api.ts` (an HTTP API that sends a task): with the store's migration held back (the test
 *   holds its advisory lock), the port accepts no connection; once the migration is let through, a
 *   request sent as the server starts is answered and its message stored (docs/tasks.md's wiring);
 * - `npm run demo` (`node dev/demo.ts`, as its npm script `exec`s it): its own embedded
 *   PostgreSQL, the renewals, the retry, the dead letter, the final stats, exit 0, server gone.
 *
 * The examples import `leasehold`: Node resolves it by the package's self-reference (package.json
 * `name` + `exports` "."), under the `leasehold-source` condition to ./src/index.ts (type-stripped by
 * Node 22 since it is not under node_modules) rather than the build in dist/, the same way TypeScript
 * (NodeNext, `customConditions`) does for `npm run typecheck`; the first test checks that resolution.
 * Without the condition, `leasehold` is dist/ (what an installed package gives; test/package/run.ts).
 *
 * SLOW: every test spawns Node processes (about 1-2 s each to start); the demo takes about 12 s.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import { existsSync } from "node:fs"
import { connect } from "node:net"
import { resolve } from "node:path"
import { pathToFileURL } from "node:url"
import { Effect, ManagedRuntime } from "effect"
import { SqlClient } from "effect/sql"
import { afterAll, afterEach, assert, beforeAll, describe, it, onTestFailed } from "vitest"
import * as PgTest from "./support/PgTest.ts"
import { waitForAsync } from "./support/Wait.ts"
import { sqlRuntime } from "./support/WorkerProcess.ts"
import { freePort } from "../dev/EmbeddedPostgres.ts"

/** Node >= 22 (type stripping): the one vitest runs on, else the devDependency's. */
const nodeBinary = (() => {
  if (Number(process.versions.node.split(".")[0]) >= 22) return process.execPath
  const local = resolve("node_modules/.bin/node")
  if (existsSync(local)) return local
  throw new Error(`Node >= 22 needed to run the examples; this is ${process.version}`)
})()

/** `leasehold` as the source in src/, not the build in dist/ (package.json `exports`). */
const sourceCondition = "--conditions=leasehold-source"

/** A program run as a process, its output kept line by line. */
interface Program {
  readonly name: string
  readonly proc: ChildProcess
  readonly lines: Array<string>
  exit: { readonly code: number | null; readonly signal: NodeJS.Signals | null } | undefined
}

const running: Array<Program> = []

/** The environment of the test run without any LEASEHOLD_* setting, plus `env`. */
const cleanEnv = (env: Record<string, string>): NodeJS.ProcessEnv => {
  const base: NodeJS.ProcessEnv = {}
  for (const [key, value] of Object.entries(process.env)) if (!key.startsWith("LEASEHOLD_")) base[key] = value
  return { ...base, ...env }
}

/** Run `file` (relative to the repository) on Node 22 with `env`, from the repository's root. */
const run = (name: string, file: string, env: Record<string, string>): Program => {
  const proc = spawn(nodeBinary, [sourceCondition, file], { env: cleanEnv(env), stdio: ["ignore", "pipe", "pipe"] })
  const program: Program = { name, proc, lines: [], exit: undefined }
  running.push(program)
  for (const stream of [proc.stdout!, proc.stderr!]) {
    let pending = ""
    stream.on("data", (chunk: Buffer) => {
      pending += chunk.toString("utf8")
      const lines = pending.split("\n")
      pending = lines.pop() ?? ""
      program.lines.push(...lines)
    })
  }
  proc.on("exit", (code, signal) => {
    program.exit = { code, signal }
  })
  return program
}

const output = (program: Program) => program.lines.join("\n")

/** Wait until `program`'s output matches `pattern`; fail at once if it exited first. */
const waitOutput = (program: Program, pattern: RegExp, timeoutMs = 20_000) =>
  waitForAsync(`${program.name} to print ${pattern}`, () => {
    const match = output(program).match(pattern)
    if (match !== null) return match
    if (program.exit !== undefined) throw new Error(`${program.name} exited (${JSON.stringify(program.exit)}) before printing ${pattern}`)
    return undefined
  }, { timeoutMs, intervalMs: 25 })

const waitExit = (program: Program, timeoutMs: number) =>
  waitForAsync(`${program.name} to exit`, () => program.exit, { timeoutMs, intervalMs: 25 })

afterEach(async () => {
  for (const program of running.splice(0)) {
    if (program.exit !== undefined) continue
    program.proc.kill("SIGKILL")
    await waitExit(program, 10_000).catch(() => undefined)
  }
})

/** Print every program's output when the current test fails. */
const dumpOnFailure = () =>
  onTestFailed(() => {
    for (const program of running) {
      console.error(`---- ${program.name}; exit ${JSON.stringify(program.exit)} ----\n${output(program)}`)
    }
  })

const admin = sqlRuntime()
afterAll(() => admin.dispose())

/**
 * A fresh database on the test server with the application's `public.users` table (what
 * examples/producer.ts inserts into), and a SQL runtime on it; dropped by `drop`.
 */
const freshDatabase = async () => {
  const name = PgTest.uniqueSchema("exdb")
  await admin.query(`CREATE DATABASE ${name}`)
  const url = new URL(PgTest.databaseUrl())
  url.pathname = `/${name}`
  const runtime = ManagedRuntime.make(PgTest.clientLayer({ url: url.toString(), maxConnections: 2 }))
  const query = <A extends object>(text: string, params: ReadonlyArray<unknown> = []) =>
    runtime.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe<A>(text, params)))
  await query("CREATE TABLE public.users (name text, email text)")
  return {
    url: url.toString(),
    query,
    drop: async () => {
      await runtime.dispose()
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
    }
  }
}

type Database = Awaited<ReturnType<typeof freshDatabase>>
let db: Database
beforeAll(async () => {
  db = await freshDatabase()
})
afterAll(async () => {
  await db?.drop()
})

/** Schemas of the test's database that hold a table. */
const schemasWithTables = async () =>
  (await db.query<{ schema: string }>(
    `SELECT DISTINCT table_schema AS schema FROM information_schema.tables
     WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1`
  )).map((row) => row.schema)

describe("examples/*.ts, run as the README says (slow: real processes)", () => {
  it("`leasehold` resolves by the package's self-reference to src/index.ts (condition `leasehold-source`)", () => {
    const resolved = execFileSync(nodeBinary, [sourceCondition, "--input-type=module", "-e", "console.log(import.meta.resolve('leasehold'))"], {
      cwd: resolve("examples"),
      encoding: "utf8"
    }).trim()
    assert.strictEqual(resolved, pathToFileURL(resolve("src/index.ts")).href)
  })

  it("producer.ts enqueues in the user's transaction; worker.ts consumes `emails` without LEASEHOLD_QUEUES, runs it, and exits 0 on SIGTERM", async () => {
    dumpOnFailure()
    const schema = PgTest.uniqueSchema("ex")
    const env = { LEASEHOLD_DATABASE_URL: db.url, LEASEHOLD_SCHEMA: schema }

    // The producer: the user row and the delayed, deduplicated email commit together.
    const producer = run("producer", "examples/producer.ts", env)
    assert.deepStrictEqual(await waitExit(producer, 30_000), { code: 0, signal: null }, output(producer))
    const id = (await waitOutput(producer, /enqueued (\d+)(?! \(already queued\))/))[1]!
    assert.deepStrictEqual(await db.query(`SELECT name, email FROM public.users`), [{ name: "Ada", email: "ada@example.com" }])
    const [queued] = await db.query<{ queue: string; task: string; delayed_ms: number }>(
      `SELECT queue, task, (extract(epoch FROM visible_at - now()) * 1000)::int AS delayed_ms
       FROM ${schema}.messages WHERE id = $1::bigint`,
      [id]
    )
    assert.strictEqual(queued?.queue, "emails")
    assert.strictEqual(queued?.task, "email.welcome")
    assert.isAbove(queued!.delayed_ms, 5_000, "sent with the example's 10 s delay")

    // Run again: its dedup key finds the live message (the user row is the example's, not deduplicated).
    const again = run("producer (again)", "examples/producer.ts", env)
    assert.deepStrictEqual(await waitExit(again, 30_000), { code: 0, signal: null }, output(again))
    assert.match(output(again), new RegExp(`enqueued ${id} \\(already queued\\)`))

    // The worker, with nothing but the URL and the schema: its dispatcher's queue.
    const worker = run("worker", "examples/worker.ts", env)
    await waitOutput(worker, /consumer started: queues emails,/)
    // Not waiting out the example's 10 s delay: the test makes the message due now (the worker's
    // idle wait is at most its 1 s poll interval).
    await db.query(`UPDATE ${schema}.messages SET visible_at = now() WHERE id = $1::bigint`, [id])
    await waitOutput(worker, /welcoming Ada <ada@example\.com>, attempt 1/, 15_000)
    const outcome = await waitForAsync("the email's attempt to be recorded", async () =>
      (await db.query<{ outcome: string; consumer: string }>(
        `SELECT outcome, consumer FROM ${schema}.attempts WHERE message_id = $1::bigint`,
        [id]
      ))[0])
    assert.strictEqual(outcome.outcome, "acked")
    assert.deepStrictEqual(await db.query(`SELECT id FROM ${schema}.messages`), [], "acked messages are deleted")

    // Session liveness (auto) registered it in the same schema; nothing went to the default `leasehold`.
    const [registered] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${schema}.consumers`)
    assert.strictEqual(registered?.n, 1)
    assert.deepStrictEqual(await schemasWithTables(), [schema, "public"].sort())

    worker.proc.kill("SIGTERM")
    assert.deepStrictEqual(await waitExit(worker, 20_000), { code: 0, signal: null }, output(worker))
    assert.match(output(worker), /consumer stopped/)
    assert.notMatch(output(worker), /\] (ERROR|FATAL) /)
  })

  it("worker.ts exits 1 after shutting down when its claim loop fails on something other than a dead connection", async () => {
    dumpOnFailure()
    const schema = PgTest.uniqueSchema("ex")
    const worker = run("worker", "examples/worker.ts", {
      LEASEHOLD_DATABASE_URL: db.url,
      LEASEHOLD_SCHEMA: schema,
      LEASEHOLD_POLL_INTERVAL: "200ms",
      LEASEHOLD_SESSION_LIVENESS: "off"
    })
    await waitOutput(worker, /consumer started: queues emails,/)
    // A schema change the worker does not expect: every claim now fails with "relation does not exist".
    await db.query(`ALTER TABLE ${schema}.messages RENAME TO messages_gone`)
    const exit = await waitExit(worker, 15_000)
    assert.deepStrictEqual(exit, { code: 1, signal: null }, output(worker))
    const text = output(worker)
    assert.match(text, /claim loop failed; the consumer stops claiming and shuts down:/)
    assert.match(text, /messages/)
    assert.match(text, /consumer stopped/, "shut down before exiting")
  })
})

/** Whether something accepts a TCP connection on `port` of this machine now. */
const accepts = (port: number) =>
  new Promise<boolean>((done) => {
    const socket = connect(port, "127.0.0.1")
    socket.on("connect", () => {
      socket.destroy()
      done(true)
    })
    socket.on("error", () => done(false))
  })

/**
 * Hold the advisory lock that migrations of `schema` take (src/pg/migrate.ts: `leasehold.migrate.<schema>`)
 * in an open transaction on the database at `url`, until `release` is called.
 */
const holdMigrationLock = async (url: string, schema: string) => {
  const runtime = ManagedRuntime.make(PgTest.clientLayer({ url, maxConnections: 1 }))
  let release!: () => void
  const released = new Promise<void>((done) => (release = done))
  let locked!: () => void
  const isLocked = new Promise<void>((done) => (locked = done))
  const transaction = runtime.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.withTransaction(Effect.gen(function*() {
      yield* sql`SELECT pg_advisory_xact_lock(hashtext(${`leasehold.migrate.${schema}`}))`
      locked()
      yield* Effect.promise(() => released)
    }))))
  await Promise.race([isLocked, transaction])
  return {
    release: async () => {
      release()
      await transaction
      await runtime.dispose()
    }
  }
}

describe("examples/api.ts: the store is built before the server listens (slow: a real process)", () => {
  it("the port accepts nothing while the migration is held back; a request sent as it opens is answered", async () => {
    dumpOnFailure()
    const schema = PgTest.uniqueSchema("api")
    const port = await freePort()
    const lock = await holdMigrationLock(db.url, schema)
    try {
      const api = run("api", "examples/api.ts", { LEASEHOLD_DATABASE_URL: db.url, LEASEHOLD_SCHEMA: schema, PORT: String(port) })
      // The store's migration is waiting for the lock the test holds.
      await waitForAsync("the api's migration to wait for the lock", async () => {
        if (api.exit !== undefined) throw new Error(`api exited: ${JSON.stringify(api.exit)}`)
        const [row] = await db.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_locks
           WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`
        )
        return row!.n > 0 ? true : undefined
      }, { timeoutMs: 30_000, intervalMs: 50 })
      for (let i = 0; i < 15; i++) {
        assert.isFalse(await accepts(port), "the server listens while the store is still migrating")
        await new Promise((done) => setTimeout(done, 100))
      }
      await lock.release()
      // Sent as soon as the port takes a connection, each bounded: the first one accepted must be answered.
      const answer = await waitForAsync("the api to answer", async () => {
        if (api.exit !== undefined) throw new Error(`api exited: ${JSON.stringify(api.exit)}`)
        if (!(await accepts(port))) return undefined
        return fetch(`http://127.0.0.1:${port}/users`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ name: "Ada", email: "ada@example.com" }),
          signal: AbortSignal.timeout(10_000)
        })
      }, { timeoutMs: 30_000, intervalMs: 10 })
      assert.strictEqual(answer.status, 200, await answer.clone().text())
      const { messageId } = await answer.json() as { messageId: string }
      const rows = await db.query<{ task: string }>(`SELECT task FROM ${schema}.messages WHERE id = $1::bigint`, [messageId])
      assert.deepStrictEqual(rows, [{ task: "email.welcome" }])
    } finally {
      await lock.release().catch(() => undefined)
    }
  })
})

describe("npm run demo (slow: an embedded PostgreSQL and a 6 s task)", () => {
  it("runs the renewals, the retry and the dead letter, prints the final stats, stops its server and exits 0", async () => {
    dumpOnFailure()
    // No LEASEHOLD_DATABASE_URL: the demo starts its own server, as `npm install && npm run demo` does.
    const demo = run("demo", "dev/demo.ts", {})
    assert.deepStrictEqual(await waitExit(demo, 55_000), { code: 0, signal: null }, output(demo))
    const text = output(demo)
    const port = Number(/embedded PostgreSQL ready on port (\d+)/.exec(text)?.[1])
    assert.isAbove(port, 0, "started an embedded PostgreSQL")

    // The dispatcher's queue, consumed without naming it.
    assert.match(text, /consumer started: queues demo,/)
    assert.match(text, /greet: hello, leasehold!/)
    // The slow task outlives its 2 s lease three times over and keeps it by renewal (every lease/3).
    const renewals = text.match(/DEBUG .*lease renewed for 1 message\(s\), 2\.0s from now/g) ?? []
    assert.isAtLeast(renewals.length, 4, "renewed while the 6 s task ran")
    assert.match(text, /slow-report 42: done on attempt 1, lease held throughout/)
    assert.notMatch(text, /lease lost|double run/)
    // The flaky task: retried with backoff, then succeeded.
    assert.match(text, /WARN .*retry in [\d.]+s:\s*\nError: flaky: upstream unavailable \(attempt 1\)/)
    assert.match(text, /flaky: succeeded on attempt 2/)
    // The payload that fails its schema: dead-lettered without running.
    assert.match(text, /WARN .*dead-lettered: payload does not match the task's schema/)
    assert.notMatch(text, /charged .* cents/)
    assert.match(text, /dead letter \d+ \(charge-card\): payload does not match the task's schema/)

    const done = /all done: (\{[^}]*\}); leases renewed: (\{[^}]*\})/.exec(text)
    assert.isNotNull(done, "the final stats")
    const stats = JSON.parse(done![1]!) as Record<string, unknown>
    assert.deepInclude(stats, { queue: "demo", ready: 0, delayed: 0, inFlight: 0, dead: 1 })
    const renewed = JSON.parse(done![2]!) as { count: number }
    assert.strictEqual(renewed.count, renewals.length, "the metric counts the renewals logged")

    // A graceful shutdown, and no error on the way.
    assert.match(text, /consumer stopped/)
    assert.notMatch(text, /\] (ERROR|FATAL) /)
    // The throwaway server is gone with the demo.
    const refused = await new Promise<boolean>((done) => {
      const socket = connect(port, "127.0.0.1")
      socket.on("connect", () => {
        socket.destroy()
        done(false)
      })
      socket.on("error", () => done(true))
    })
    assert.isTrue(refused, `the embedded PostgreSQL on port ${port} still accepts connections after the demo exited`)
  }, 60_000)
})
