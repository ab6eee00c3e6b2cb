/**
 * What the benchmark orchestrators share (bench/throughput/run.ts, bench/commit/run.ts, bench/peers/run.ts): worker
 * processes with their output read line by line and logged, their figures from /proc (CPU time,
 * peak RSS), the orchestrator's own database connection and its few queries, and the formats of
 * the tables they print.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import { createWriteStream, mkdirSync, readFileSync, type WriteStream } from "node:fs"
import { join } from "node:path"
import { PgClient } from "@effect/sql-pg"
import { Effect, ManagedRuntime, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { nodeBinary, percentile, repoRoot, sleep } from "../chaos/lib.ts"
import { wallMs } from "../throughput/protocol.ts"

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

/** A worker (or producer) process started by {@link startProcess}. */
export interface Proc {
  readonly name: string
  readonly child: ChildProcess
  readonly pid: number
  readonly lines: Array<string>
  exit: { readonly code: number | null; readonly signal: NodeJS.Signals | null } | undefined
  readonly closed: Promise<void>
  /** The first line starting with `prefix` (seen already or to come); rejects on timeout or exit. */
  readonly waitLine: (prefix: string, timeoutMs: number) => Promise<string>
  readonly linesWith: (prefix: string) => Array<string>
}

/** The processes still running: SIGKILLed when the orchestrator exits. */
export const live = new Set<Proc>()
process.on("exit", () => {
  for (const p of live) if (p.exit === undefined) p.child.kill("SIGKILL")
})

/** The log files of every process started, ended by {@link endLogs}. */
const logStreams: Array<WriteStream> = []

/** Worker environment: ours minus every LEASEHOLD_*, BENCH_* and PEERS_* variable and DATABASE_URL (the worker gets only what we set). */
export const baseEnv = (): Record<string, string> => {
  const env: Record<string, string> = {}
  for (const [key, value] of Object.entries(process.env)) {
    if (value === undefined || key === "DATABASE_URL") continue
    if (!key.startsWith("LEASEHOLD_") && !key.startsWith("BENCH_") && !key.startsWith("PEERS_")) env[key] = value
  }
  return env
}

/** The line waiter of one process: resolves with the first line starting with a prefix. */
const lineWaiter = (proc: Proc, waiters: Set<() => void>) => (prefix: string, timeoutMs: number) =>
  new Promise<string>((resolve, reject) => {
    const tail = () => proc.lines.slice(-30).join("\n")
    const timer = setTimeout(() => {
      waiters.delete(check)
      reject(new Error(`${proc.name}: no "${prefix}" line within ${timeoutMs} ms; last output:\n${tail()}`))
    }, timeoutMs)
    const check = () => {
      const found = proc.lines.find((l) => l.startsWith(prefix))
      if (found === undefined && proc.exit === undefined) return
      clearTimeout(timer)
      waiters.delete(check)
      if (found !== undefined) resolve(found)
      else reject(new Error(`${proc.name} exited (code ${proc.exit!.code}, signal ${proc.exit!.signal}) before "${prefix}"; last output:\n${tail()}`))
    }
    waiters.add(check)
    check()
  })

/**
 * Start `node <nodeArgs> <script>` from the repository, its environment {@link baseEnv} plus
 * `env`, its stdout and stderr kept as lines and written to `<logDir>/<name>.log`.
 */
export const startProcess = (options: {
  readonly name: string
  readonly script: string
  readonly logDir: string
  readonly env: Record<string, string>
  readonly nodeArgs: ReadonlyArray<string>
}): Proc => {
  const { name, script, logDir, env, nodeArgs } = options
  mkdirSync(logDir, { recursive: true })
  const out = createWriteStream(join(logDir, `${name}.log`))
  logStreams.push(out)
  const child = spawn(nodeBinary, [...nodeArgs, script], { cwd: repoRoot, env: { ...baseEnv(), ...env }, stdio: ["ignore", "pipe", "pipe"] })
  const lines: Array<string> = []
  const waiters = new Set<() => void>()
  const wake = () => {
    for (const w of [...waiters]) w()
  }
  let resolveClosed!: () => void
  const proc: Proc = {
    name,
    child,
    pid: child.pid ?? -1,
    lines,
    exit: undefined,
    closed: new Promise<void>((r) => (resolveClosed = r)),
    waitLine: (prefix, timeoutMs) => waitLine(prefix, timeoutMs),
    linesWith: (prefix) => lines.filter((l) => l.startsWith(prefix))
  }
  const waitLine = lineWaiter(proc, waiters)
  const reader = (stream: string) => {
    let pending = ""
    return (chunk: Buffer) => {
      pending += chunk.toString("utf8")
      const parts = pending.split("\n")
      pending = parts.pop() ?? ""
      for (const l of parts) {
        lines.push(l)
        out.write(`[${stream}] ${l}\n`)
      }
      wake()
    }
  }
  child.stdout!.on("data", reader("out"))
  child.stderr!.on("data", reader("err"))
  child.on("exit", (code, signal) => {
    proc.exit = { code, signal }
    wake()
  })
  child.on("close", () => {
    live.delete(proc)
    wake()
    resolveClosed()
  })
  child.on("error", (error) => {
    lines.push(`spawn error: ${error.message}`)
    proc.exit ??= { code: null, signal: null }
    wake()
  })
  live.add(proc)
  return proc
}

/** SIGTERM, then SIGKILL after `graceMs`; resolves once its output was read to the end. */
export const stopProcess = async (p: Proc, graceMs = 20_000): Promise<void> => {
  if (p.exit === undefined) p.child.kill("SIGTERM")
  const done = await Promise.race([p.closed.then(() => true), sleep(graceMs).then(() => false)])
  if (!done) {
    p.child.kill("SIGKILL")
    await Promise.race([p.closed, sleep(5_000)])
  }
}

/** Close every process log (at the end of a run). */
export const endLogs = () => Promise.all(logStreams.map((s) => new Promise<void>((r) => s.end(r))))

const clockTicks = (() => {
  try {
    return Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100
  } catch {
    return 100
  }
})()

/** Peak resident set (VmHWM) of a live process, in kB; undefined without /proc. */
export const vmHwmKb = (pid: number): number | undefined => {
  try {
    const m = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))
    return m === null ? undefined : Number(m[1])
  } catch {
    return undefined
  }
}

/** User + system CPU seconds of a live process; undefined without /proc. */
export const cpuSeconds = (pid: number): number | undefined => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    return (Number(fields[11]) + Number(fields[12])) / clockTicks
  } catch {
    return undefined
  }
}

// ---------------------------------------------------------------------------------------------
// Database
// ---------------------------------------------------------------------------------------------

/** The orchestrator's own connection (two, at most). */
export type Admin = ManagedRuntime.ManagedRuntime<SqlClient.SqlClient, unknown>

/** Connect the orchestrator to `url`. */
export const openAdmin = async (url: string, applicationName: string): Promise<Admin> => {
  const runtime = ManagedRuntime.make(PgClient.layer({ url: Redacted.make(url), maxConnections: 2, applicationName }))
  await runtime.runPromise(Effect.void)
  return runtime
}

/** One statement of the orchestrator's (its text is the orchestrator's own, never input). */
export const query = <A extends object>(admin: Admin, text: string, params: ReadonlyArray<unknown> = []) =>
  admin.runPromise(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    return yield* sql.unsafe<A>(text, params)
  }))

/** Drop a schema of the run, failures ignored. */
export const dropSchema = (admin: Admin, schema: string) => query(admin, `DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined)

/** The number a one-row `SELECT ... AS n` answers. */
export const countOf = async (admin: Admin, text: string): Promise<number> => Number((await query<{ n: unknown }>(admin, text))[0]?.n ?? 0)

/** Polls until the messages table of `schema` is empty; the wall time it was first seen so. */
export const whenEmpty = async (admin: Admin, schema: string, timeoutMs: number): Promise<number> => {
  const deadline = Date.now() + timeoutMs
  while (true) {
    const n = await countOf(admin, `SELECT count(*)::int AS n FROM ${schema}.messages`)
    if (n === 0) return wallMs()
    if (Date.now() > deadline) throw new Error(`${schema}.messages still holds ${n} messages ${timeoutMs} ms after the worker ran them all`)
    await sleep(2)
  }
}

/**
 * How fast this server commits, one transaction after another (200 single-row INSERTs into a
 * scratch `schema`): with fsync on, the disk's flush latency, which bounds every worker that
 * commits per message. Printed so runs on different disks can be compared.
 */
export const commitProbe = async (admin: Admin, schema: string): Promise<{ readonly perSecond: number; readonly p50Ms: number }> => {
  await dropSchema(admin, schema)
  await query(admin, `CREATE SCHEMA ${schema}`)
  await query(admin, `CREATE TABLE ${schema}.probe (x integer)`)
  const times: Array<number> = []
  const started = wallMs()
  for (let i = 0; i < 200; i++) {
    const t = wallMs()
    await query(admin, `INSERT INTO ${schema}.probe VALUES ($1)`, [i])
    times.push(wallMs() - t)
  }
  const perSecond = 200 / ((wallMs() - started) / 1000)
  await dropSchema(admin, schema)
  return { perSecond, p50Ms: percentile(times, 50) ?? 0 }
}

/**
 * Which comes first: the worker's HANDLED line (it has run every message) or the end of the run's
 * budget, `budgetMs` after `start` (wall-clock ms; a budget of 0: none).
 */
export const handledOrBudget = async (w: Proc, start: number, budgetMs: number, timeoutMs: number): Promise<"handled" | "budget"> => {
  const handled = w.waitLine("HANDLED", timeoutMs)
  handled.catch(() => undefined)
  let timer: NodeJS.Timeout | undefined
  const budget = budgetMs > 0
    ? new Promise<"budget">((r) => (timer = setTimeout(() => r("budget"), Math.max(0, start + budgetMs - wallMs()))))
    : new Promise<"budget">(() => undefined)
  try {
    return await Promise.race([handled.then(() => "handled" as const), budget])
  } finally {
    clearTimeout(timer)
  }
}

// ---------------------------------------------------------------------------------------------
// Formats
// ---------------------------------------------------------------------------------------------

/** A share of one core as a percentage. */
export const fmtPct = (share: number | undefined) => (share === undefined ? "-" : `${Math.round(share * 100)} %`)
/** Messages a second, whole. */
export const fmtRate = (rate: number | undefined) => (rate === undefined ? "-" : Math.round(rate).toLocaleString("en-US"))
/** Milliseconds with two decimals. */
export const fmtMs = (ms: number | undefined) => (ms === undefined ? "-" : `${ms.toFixed(2)} ms`)
/** Megabytes from kB. */
export const fmtMb = (kb: number | undefined) => (kb === undefined ? "-" : `${Math.round(kb / 1024)} MB`)
/** a / b with two decimals. */
export const ratio = (a: number | undefined, b: number | undefined) => (a === undefined || b === undefined || b === 0 ? "-" : (a / b).toFixed(2))

/** p50, p95, p99 and max of latencies in ms, as one phrase. */
export const fmtLatencies = (values: ReadonlyArray<number>) =>
  `p50 ${fmtMs(percentile(values, 50))}, p95 ${fmtMs(percentile(values, 95))}, p99 ${fmtMs(percentile(values, 99))}, max ${fmtMs(percentile(values, 100))}`

/** The median of `values` (the mean of the middle two for an even count). */
export const median = (values: ReadonlyArray<number>): number | undefined => {
  if (values.length === 0) return undefined
  const s = [...values].sort((a, b) => a - b)
  const mid = Math.floor(s.length / 2)
  return s.length % 2 === 1 ? s[mid] : (s[mid - 1]! + s[mid]!) / 2
}

/**
 * On SIGINT or SIGTERM: say so, SIGKILL every worker, stop the server (`server()`, when one was
 * started) and exit 130.
 */
export const stopOnSignal = (label: string, server: () => { readonly destroy: () => Promise<unknown> } | undefined): void => {
  const onSignal = () => {
    console.error(`${label}: interrupted`)
    for (const p of live) p.child.kill("SIGKILL")
    void (server()?.destroy() ?? Promise.resolve()).finally(() => process.exit(130))
  }
  process.once("SIGINT", onSignal)
  process.once("SIGTERM", onSignal)
}

/**
 * The end of every orchestrator: stop the processes still running, close the admin connection
 * (`end` or `dispose`, whichever it has) and the server, flush the logs; nothing here throws.
 */
export const shutDown = async (
  admin: { readonly end?: () => Promise<unknown>; readonly dispose?: () => Promise<unknown> } | undefined,
  server: { readonly destroy: () => Promise<unknown> } | undefined
): Promise<void> => {
  for (const p of [...live]) await stopProcess(p, 5_000)
  await (admin?.end ?? admin?.dispose)?.call(admin).catch(() => undefined)
  await server?.destroy().catch(() => undefined)
  await endLogs()
}

/** Run an orchestrator's `main` as the process: exit with its code, or print the error and exit 1. */
export const runAsProcess = (label: string, main: () => Promise<number>): void => {
  main().then(
    (code) => process.exit(code),
    (error) => {
      console.error(`${label}: ${error instanceof Error ? error.stack ?? error.message : String(error)}`)
      process.exit(1)
    }
  )
}
