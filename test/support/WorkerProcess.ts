/**
 * Real worker processes for tests: test/fixtures/worker.ts spawned on Node 22,
 * its output kept (and printed when the test fails), its readiness and exit
 * observable, and a SQL runtime of the test's own for checking the database.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { existsSync } from "node:fs"
import { resolve } from "node:path"
import { Effect, ManagedRuntime } from "effect"
import { SqlClient } from "effect/sql"
import type { MessageId } from "../../src/Message.ts"
import * as Migrations from "../../src/Migrations.ts"
import * as PgQueueStore from "../../src/PgQueueStore.ts"
import { onTestFailed } from "vitest"
import * as PgTest from "./PgTest.ts"
import { waitForAsync } from "./Wait.ts"

/** Node 22 (type stripping): vitest runs on it through node_modules/.bin/node; fall back to that binary otherwise. */
const nodeBinary = (() => {
  const major = Number(process.versions.node.split(".")[0])
  if (major >= 22) return process.execPath
  const local = resolve("node_modules/.bin/node")
  if (existsSync(local)) return local
  throw new Error(`Node >= 22 needed to run test/fixtures/worker.ts; this is ${process.version} at ${process.execPath}`)
})()

const WORKER = resolve("test/fixtures/worker.ts")

/** A running (or exited) worker process. */
export interface Worker {
  readonly name: string
  readonly consumerId: string
  readonly proc: ChildProcess
  readonly output: Array<string>
  readonly spawnedAt: number
  /** Set when the worker printed READY. */
  readyAt: number | undefined
  /** Set when the process exited. */
  exit: { readonly code: number | null; readonly signal: NodeJS.Signals | null; readonly at: number } | undefined
}

/**
 * Spawn a worker named `name` with `env` (LEASEHOLD_* settings; the database URL
 * and a consumer id `<name>-xxxx` are filled in), added to `into`. `script` runs another
 * fixture than test/fixtures/worker.ts (it must print `READY <LEASEHOLD_CONSUMER_ID>` too).
 */
export const spawnWorker = (name: string, env: Record<string, string>, into: Array<Worker>, script: string = WORKER): Worker => {
  const consumerId = `${name}-${Math.random().toString(36).slice(2, 6)}`
  const proc = spawn(nodeBinary, [resolve(script)], {
    env: { ...process.env, LEASEHOLD_DATABASE_URL: PgTest.databaseUrl(), LEASEHOLD_CONSUMER_ID: consumerId, ...env },
    stdio: ["ignore", "pipe", "pipe"]
  })
  const worker: Worker = { name, consumerId, proc, output: [], spawnedAt: Date.now(), readyAt: undefined, exit: undefined }
  into.push(worker)
  const reader = (stream: "out" | "err") => {
    let pending = ""
    return (chunk: Buffer) => {
      pending += chunk.toString("utf8")
      const lines = pending.split("\n")
      pending = lines.pop() ?? ""
      for (const line of lines) {
        worker.output.push(`[${name} ${stream} +${Date.now() - worker.spawnedAt}ms] ${line}`)
        if (stream === "out" && line === `READY ${consumerId}`) worker.readyAt ??= Date.now()
      }
    }
  }
  proc.stdout!.on("data", reader("out"))
  proc.stderr!.on("data", reader("err"))
  proc.on("exit", (code, signal) => {
    worker.exit = { code, signal, at: Date.now() }
  })
  proc.on("error", (error) => {
    worker.output.push(`[${name}] spawn error: ${error.message}`)
  })
  return worker
}

/** Wait until `worker` printed READY; fail at once if it exited first. */
export const waitReady = (worker: Worker, timeoutMs = 20_000) =>
  waitForAsync(`${worker.name} to print READY`, () => {
    if (worker.exit !== undefined) {
      throw new Error(`${worker.name} exited before READY (code ${worker.exit.code}, signal ${worker.exit.signal})`)
    }
    return worker.readyAt
  }, { timeoutMs })

/** Wait until `worker` exited; returns how. */
export const waitExit = (worker: Worker, timeoutMs: number) =>
  waitForAsync(`${worker.name} to exit`, () => worker.exit, { timeoutMs, intervalMs: 10 })

/** SIGKILL whatever of `workers` still runs (continuing stopped ones first) and wait for them to be gone. */
export const killAll = async (workers: ReadonlyArray<Worker>) => {
  for (const w of workers) {
    if (w.exit !== undefined) continue
    w.proc.kill("SIGCONT")
    w.proc.kill("SIGKILL")
    await waitExit(w, 10_000).catch(() => undefined)
  }
}

/** Print every worker's output when the current test fails. */
export const dumpOnFailure = (workers: ReadonlyArray<Worker>) =>
  onTestFailed(() => {
    for (const w of workers) {
      console.error(`---- ${w.name} (${w.consumerId}) output; exit ${JSON.stringify(w.exit)} ----\n${w.output.join("\n")}`)
    }
  })

/**
 * A SQL runtime of the test's own (4 connections to the test server), with what the process
 * tests share: call `dispose` in afterAll.
 */
export const sqlRuntime = () => {
  const runtime = ManagedRuntime.make(PgTest.clientLayer({ maxConnections: 4 }))
  const query = <A extends object>(text: string, params: ReadonlyArray<unknown> = []) =>
    runtime.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe<A>(text, params)))
  return {
    runPromise: runtime.runPromise,
    /** Run one statement. */
    query,
    /** Migrate `schema` and give it the `ledger` table the test worker writes its handler runs to. */
    migrateWithLedger: async (schema: string) => {
      await runtime.runPromise(Migrations.run({ schema }))
      await query(`CREATE TABLE ${schema}.ledger (message_id text, consumer text, event text, at timestamptz DEFAULT clock_timestamp())`)
    },
    /** Send `messages` to `queue` through the store, as an application would; their ids in order. */
    send: (schema: string, queue: string, messages: ReadonlyArray<{ readonly task: string; readonly payload: unknown }>) =>
      runtime.runPromise(Effect.scoped(Effect.gen(function*() {
        const store = yield* PgQueueStore.make({ schema, migrate: false, leasePool: false })
        return (yield* store.send(queue, messages)).map((r) => r.id)
      }))),
    /** Who started message `id`, and when, in the order of the ledger. */
    starts: (schema: string, id: MessageId) =>
      query<{ consumer: string; at: Date }>(
        `SELECT consumer, at FROM ${schema}.ledger WHERE message_id = $1 AND event = 'start' ORDER BY at`,
        [id]
      ),
    dispose: () => runtime.dispose()
  }
}
