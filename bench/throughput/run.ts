/**
 * `npm run bench:own`: leasehold's throughput against a raw SKIP LOCKED worker on
 * the same server in the same run, pickup latency across processes, and the
 * worker's peak RSS (issue 9). leasehold's own regression benchmark (it was `npm run bench`
 * until 2026-12-03): leasehold compiled from src/, its raw worker on @effect/sql-pg over
 * leasehold's own table, measured after a warm-up. The benchmark a user would run, against the
 * peers and a raw node-postgres worker over a minimal table, with leasehold from its packed
 * dist/, is `npm run bench` (bench/peers/run.ts); docs/benchmarks.md says what each measures.
 *
 * Throughput, for each C (default 1, 10, 50): enqueue W + N no-op messages
 * (default 5,000 warm-up + 20,000 measured) into a fresh schema (leasehold's
 * tables, migrated; then VACUUM ANALYZE and CHECKPOINT, so both workers start
 * from the same state), start ONE worker process, and time from its W-th
 * handler start (the end of its warm-up: a worker is a long-running process,
 * measured here once its code is compiled, as it runs most of its life) to the
 * moment the table is seen empty (polled every 2 ms once the worker reports
 * its (W + N)-th handler run): N messages. The same run also gives the cold
 * rate, W + N messages from the first handler start, printed beside it.
 * Worker setup (connecting, migrating, registering) is not counted. Workers:
 *   - leasehold: bench/throughput/leasehold-worker.ts, built like the README's
 *     worker, concurrency C, every other setting the consumer's default;
 *   - raw: bench/throughput/raw-worker.ts, a loop claiming up to C rows
 *     FOR UPDATE SKIP LOCKED, running them, deleting them in one statement.
 * Workers and producer run as compiled JavaScript, as an application runs
 * leasehold's dist/: at start the orchestrator compiles them and the src/
 * modules they import with the project's tsc (bench/throughput/tsconfig.json)
 * into <log dir>/build (.tmp/bench-build/ when BENCH_LOG_DIR is outside the
 * repository) and starts `node --no-experimental-strip-types <file>.js`: no
 * type stripping, whose loader alone adds ~35 MB to a process's RSS. The
 * orchestrator itself still runs as .ts.
 * With BENCH_REPS > 1 they alternate (raw, leasehold, raw, leasehold, ...)
 * and the table shows medians. Peak RSS is the worker's VmHWM
 * (/proc/<pid>/status) read just before it is stopped; "CPU" is the worker's
 * user+system time over the measured window, as a share of one core.
 *
 * Pickup latency: an idle worker (concurrency 10) in its own process; a
 * producer in another process (bench/throughput/producer.ts) sends 200
 * single messages 20 ms apart (after 10 unmeasured warm-up sends), each
 * carrying its send time; the worker prints handler start - send time.
 * leasehold is woken by its own send notifications; the raw worker by a
 * LISTEN/NOTIFY of its own (INSERT + pg_notify in one statement).
 *
 * PostgreSQL: a throwaway server with DURABLE settings (fsync, synchronous_commit
 * and full_page_writes on, as a production server), or LEASEHOLD_DATABASE_URL
 * (a schema per run, dropped after it).
 *
 * Knobs (environment):
 *   BENCH_QUICK=1              500 warm-up and 2,000 measured messages, 50 latency sends (a smoke check)
 *   BENCH_MESSAGES             measured messages per throughput run (default 20000)
 *   BENCH_WARMUP               messages each worker runs first, unmeasured (default 5000; quick 500; 0: none)
 *   BENCH_CONCURRENCY          list of C (default "1,10,50")
 *   BENCH_REPS                 repetitions per C and worker, alternating (default 1)
 *   BENCH_ONLY                 "leasehold" or "raw": run one worker only
 *   BENCH_BATCH                LEASEHOLD_BATCH_SIZE for the leasehold worker (default: the consumer's)
 *   BENCH_LEASEHOLD_<NAME>     passed to the leasehold worker as LEASEHOLD_<NAME> (e.g. BENCH_LEASEHOLD_POLL_INTERVAL=100ms)
 *   BENCH_LATENCY=0            skip the pickup-latency measurement
 *   BENCH_LATENCY_SENDS        measured sends (default 200; quick 50)
 *   BENCH_LATENCY_BREAKDOWN=1  split leasehold's pickups into send, wake, claim and dispatch (breakdown.ts) and print them
 *   BENCH_LATENCY_INTERVAL     time between sends (default 20ms)
 *   BENCH_FAST_PG=1            the embedded server without durability (fsync, synchronous_commit, full_page_writes off)
 *   BENCH_PG_STATS=1           count each worker's statements on the server (pg_stat_statements, preloaded in the embedded
 *                              server, planning tracked): execution and planning time and WAL per message, by statement kind,
 *                              beside each run and in a table
 *   BENCH_CPU_PROF=1           run the leasehold worker at the largest C with `node --cpu-prof`; print its hottest frames
 *                              (frames of the compiled .js in the build folder; its .js.map files lead back to the .ts)
 *   BENCH_RUN_BUDGET           time budget of one throughput run (default 30s; 0: none): a worker that has not
 *                              emptied the queue by then is measured on what it acked so far (marked in the table)
 *   BENCH_TIMEOUT              longest wait for a worker's first handler run (default 10m)
 *   BENCH_STRICT=1             exit 1 when a target of issue 9 is missed (by default only a failed measurement does)
 *   BENCH_NODE_ARGS            extra node flags for the workers and the producer, e.g. "--max-semi-space-size=1"
 *   BENCH_LOG_DIR              where worker output (and profiles) go (default .tmp/bench/<time>)
 *   BENCH_KEYS                 give the messages flow keys, this many distinct ones (default 0: no keys)
 *   BENCH_KEY_LAYOUT           how keys follow one another in send order: "runs" (default: each key's messages sent
 *                              together, as a tenant's bulk), "spread" (round-robin) or "random" (a fixed pseudo-random draw)
 *   BENCH_FLOW_LIMITS          flow limits as JSON (e.g. '{"keyConcurrency":5}'): adds a third worker, "limited", the
 *                              leasehold worker on a queue with these limits set (before the sends); "leasehold" and
 *                              "raw" run the same keyed messages without limits. Its columns: msg/s and ratios to both
 */
import { execFileSync } from "node:child_process"
import { existsSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs"
import { availableParallelism, cpus, loadavg, totalmem } from "node:os"
import { isAbsolute, join, relative } from "node:path"
import { Effect } from "effect"
import { type PostgresServer, startPostgres } from "../../dev/EmbeddedPostgres.ts"
import type { FlowLimits } from "../../src/FlowControl.ts"
import * as PgQueueStore from "../../src/PgQueueStore.ts"
import { envInt, envMs, envWords, nodeBinary, percentile, repoRoot, sleep, table } from "../chaos/lib.ts"
import {
  type Admin,
  commitProbe,
  cpuSeconds,
  dropSchema,
  fmtMb,
  fmtMs,
  fmtLatencies,
  fmtPct,
  fmtRate,
  handledOrBudget,
  median,
  openAdmin,
  type Proc,
  query,
  startProcess,
  stopOnSignal,
  stopProcess,
  vmHwmKb,
  whenEmpty,
  runAsProcess,
  shutDown
} from "../support/orchestrator.ts"
import * as Breakdown from "./breakdown.ts"
import { format as formatProfile, hottest } from "./profile.ts"
import { QUEUE, wallMs } from "./protocol.ts"

// ---------------------------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------------------------

const quick = process.env["BENCH_QUICK"] === "1"
const only = process.env["BENCH_ONLY"]
if (only !== undefined && only !== "" && only !== "leasehold" && only !== "raw" && only !== "limited") {
  console.error(`BENCH_ONLY: expected "leasehold", "raw" or "limited", got ${JSON.stringify(only)}`)
  process.exit(2)
}

/** BENCH_FLOW_LIMITS: the limits of the "limited" worker's queue (FlowControl.FlowLimits), or none. */
const flowLimits: FlowLimits | undefined = (() => {
  const text = process.env["BENCH_FLOW_LIMITS"]
  if (text === undefined || text.trim() === "") return undefined
  try {
    return JSON.parse(text) as FlowLimits
  } catch (error) {
    console.error(`BENCH_FLOW_LIMITS: expected JSON limits such as '{"keyConcurrency":5}': ${String(error)}`)
    return process.exit(2)
  }
})()
const keyLayout = process.env["BENCH_KEY_LAYOUT"] ?? "runs"
if (keyLayout !== "runs" && keyLayout !== "spread" && keyLayout !== "random") {
  console.error(`BENCH_KEY_LAYOUT: expected "runs", "spread" or "random", got ${JSON.stringify(keyLayout)}`)
  process.exit(2)
}

const config = {
  messages: envInt("BENCH_MESSAGES", quick ? 2_000 : 20_000),
  warmup: envInt("BENCH_WARMUP", quick ? 500 : 5_000),
  concurrencies: (process.env["BENCH_CONCURRENCY"] ?? "1,10,50").split(",").map((c) => c.trim()).filter((c) => c !== "").map((c) => {
    if (!/^\d+$/.test(c) || Number(c) < 1) throw new Error(`BENCH_CONCURRENCY: expected a list of positive whole numbers, got ${JSON.stringify(c)}`)
    return Number(c)
  }),
  reps: Math.max(1, envInt("BENCH_REPS", 1)),
  kinds: (only === "leasehold" || only === "raw" || only === "limited"
    ? [only]
    : flowLimits === undefined ? ["raw", "leasehold"] : ["raw", "leasehold", "limited"]) as ReadonlyArray<Kind>,
  keys: envInt("BENCH_KEYS", 0),
  latency: process.env["BENCH_LATENCY"] !== "0",
  latencySends: envInt("BENCH_LATENCY_SENDS", quick ? 50 : 200),
  latencyIntervalMs: envMs("BENCH_LATENCY_INTERVAL", 20),
  latencyWarm: 10,
  latencyConcurrency: 10,
  latencyBreakdown: process.env["BENCH_LATENCY_BREAKDOWN"] === "1",
  fastPg: process.env["BENCH_FAST_PG"] === "1",
  pgStats: process.env["BENCH_PG_STATS"] === "1",
  cpuProf: process.env["BENCH_CPU_PROF"] === "1",
  timeoutMs: envMs("BENCH_TIMEOUT", 600_000),
  runBudgetMs: envMs("BENCH_RUN_BUDGET", 30_000),
  strict: process.env["BENCH_STRICT"] === "1",
  nodeArgs: envWords("BENCH_NODE_ARGS"),
  logDir: process.env["BENCH_LOG_DIR"] ?? join(repoRoot, ".tmp", "bench", new Date().toISOString().replace(/[:.]/g, "-"))
}

/** Messages enqueued for one throughput run: the warm-up, then the measured ones. */
const perRun = config.warmup + config.messages

/** What the leasehold worker gets besides URL, schema, queue and concurrency: only what a knob asks for. */
const leaseholdExtraEnv: Record<string, string> = (() => {
  const extra: Record<string, string> = {}
  const batch = process.env["BENCH_BATCH"]
  if (batch !== undefined && batch !== "") extra["LEASEHOLD_BATCH_SIZE"] = batch
  for (const [key, value] of Object.entries(process.env)) {
    if (key.startsWith("BENCH_LEASEHOLD_") && value !== undefined) extra[`LEASEHOLD_${key.slice("BENCH_LEASEHOLD_".length)}`] = value
  }
  return extra
})()

/** The targets of issue 9 (checked by BENCH_STRICT=1). */
const targets = {
  ratioAt: (c: number) => (c >= 10 ? 0.9 : 0.8),
  p50Ms: 2,
  p99Ms: 6,
  rssMb: 120
}

/** The leasehold worker, the raw baseline, and (BENCH_FLOW_LIMITS) the leasehold worker on a queue with limits. */
type Kind = "leasehold" | "raw" | "limited"

const t0 = Date.now()
const log = (text: string) => console.log(`[bench +${((Date.now() - t0) / 1000).toFixed(1)}s] ${text}`)
const runId = `${process.pid}_${Math.random().toString(36).slice(2, 6)}`

// ---------------------------------------------------------------------------------------------
// Compiled workers
// ---------------------------------------------------------------------------------------------

/**
 * The worker processes run compiled JavaScript, as an application that depends
 * on leasehold runs its dist/: once at start, `tsc -p bench/throughput/tsconfig.json`
 * (the project's TypeScript) compiles the workers, the producer and the part of
 * src/ they import, fresh from the working tree, into `buildDir`
 * (`<build>/src/*.js`, `<build>/bench/throughput/*.js`, with source maps).
 * Node then runs the .js files with type stripping off (`--no-experimental-strip-types`):
 * nothing .ts is loaded in a worker, and Node's TypeScript loader (amaro, ~35 MB
 * of RSS) never is. The build must sit inside the repository (node_modules is
 * found from there): under the log directory when that is, else .tmp/bench-build/.
 */
const buildDir = (() => {
  const rel = relative(repoRoot, config.logDir)
  const inRepo = rel !== "" && !rel.startsWith("..") && !isAbsolute(rel)
  return inRepo ? join(config.logDir, "build") : join(repoRoot, ".tmp", "bench-build", runId)
})()
const benchTsconfig = join(repoRoot, "bench", "throughput", "tsconfig.json")
const tscBin = join(repoRoot, "node_modules", ".bin", "tsc")
/** Node flags of every worker and producer process: type stripping off, then BENCH_NODE_ARGS. */
const workerNodeArgs: ReadonlyArray<string> = ["--no-experimental-strip-types", ...config.nodeArgs]

/** The compiled entry point of bench/throughput/<script>.ts. */
const compiledScript = (script: string) => join(buildDir, "bench", "throughput", `${script}.js`)

/**
 * Compiles the workers into `buildDir` (emptied first: never a stale build).
 * Type errors do not stop the bench (tsc emits anyway, and type stripping ran
 * such code too): they are counted, printed, and noted in the header.
 */
const compileWorkers = (): { readonly ms: number; readonly typeErrors: number } => {
  const started = Date.now()
  rmSync(buildDir, { recursive: true, force: true })
  mkdirSync(buildDir, { recursive: true })
  let typeErrors = 0
  try {
    execFileSync(nodeBinary, [tscBin, "-p", benchTsconfig, "--outDir", buildDir], { cwd: repoRoot, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] })
  } catch (error) {
    const e = error as { stdout?: string; stderr?: string; message?: string }
    const output = `${e.stdout ?? ""}${e.stderr ?? ""}`
    typeErrors = output.match(/error TS\d+/g)?.length ?? 0
    const emitted = ["leasehold-worker", "raw-worker", "producer"].every((script) => existsSync(compiledScript(script)))
    if (typeErrors === 0 || !emitted) throw new Error(`tsc -p ${relative(repoRoot, benchTsconfig)} failed:\n${output}${e.message ?? ""}`)
    log(`tsc reported ${typeErrors} type error(s); the emitted JavaScript runs anyway:\n${output.trimEnd()}`)
  }
  // ES modules whatever the folders above say.
  writeFileSync(join(buildDir, "package.json"), `${JSON.stringify({ type: "module", private: true })}\n`)
  for (const script of ["leasehold-worker", "raw-worker", "producer"]) {
    if (!existsSync(compiledScript(script))) throw new Error(`tsc did not emit ${compiledScript(script)}`)
  }
  return { ms: Date.now() - started, typeErrors }
}

const startProc = (name: string, script: string, env: Record<string, string>, nodeArgs: ReadonlyArray<string> = []): Proc =>
  startProcess({ name, script: compiledScript(script), logDir: config.logDir, env, nodeArgs: [...workerNodeArgs, ...nodeArgs] })

// ---------------------------------------------------------------------------------------------
// Database
// ---------------------------------------------------------------------------------------------

/** The flow key of message i of `count` (BENCH_KEYS, BENCH_KEY_LAYOUT), or none. */
const keyOf = (i: number, count: number): string | undefined => {
  const keys = config.keys
  if (keys <= 0) return undefined
  const k = keyLayout === "spread" ? i % keys
    : keyLayout === "random" ? (Math.imul(i + 1, 2654435761) >>> 0) % keys
    : Math.min(keys - 1, Math.floor(i / Math.ceil(count / keys)))
  return `k${k}`
}

/**
 * A fresh schema with leasehold's tables, holding `count` no-op messages on the bench queue
 * (keyed with BENCH_KEYS); `limits`: the queue's flow limits, set before the sends.
 */
const prepareSchema = async (admin: Admin, schema: string, count: number, limits?: FlowLimits): Promise<number> => {
  await query(admin, `DROP SCHEMA IF EXISTS ${schema} CASCADE`)
  const started = wallMs()
  await admin.runPromise(Effect.scoped(Effect.gen(function*() {
    const store = yield* PgQueueStore.make({ schema, leasePool: false })
    if (limits !== undefined) yield* store.setLimits({ queue: QUEUE }, limits)
    const CHUNK = 5_000
    for (let from = 0; from < count; from += CHUNK) {
      const batch = Array.from({ length: Math.min(CHUNK, count - from) }, (_, k) => {
        const key = keyOf(from + k, count)
        return { task: "noop", payload: { i: from + k }, ...(key === undefined ? {} : { key }) }
      })
      yield* store.send(QUEUE, batch)
    }
  })))
  const enqueueMs = wallMs() - started
  await query(admin, `VACUUM ANALYZE ${schema}.messages`)
  await query(admin, "CHECKPOINT").catch(() => undefined) // needs superuser (or pg_checkpoint) on a server of your own
  return enqueueMs
}

/** The code measured: the commit, and whether src/ differs from it. */
const codeLine = (): string => {
  try {
    const head = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: repoRoot, encoding: "utf8" }).trim()
    const dirty = execFileSync("git", ["status", "--porcelain", "--", "src"], { cwd: repoRoot, encoding: "utf8" }).trim() !== ""
    return `code: ${head}${dirty ? " with uncommitted changes in src/" : ""}`
  } catch {
    return "code: (not a git checkout)"
  }
}

const loadLine = () => `load average ${loadavg().map((l) => l.toFixed(2)).join(", ")} (1, 5, 15 min) on ${availableParallelism()} cores`

interface ServerStatements {
  /** Per kind of statement: calls, execution and planning microseconds and WAL bytes per message acked. */
  readonly kinds: ReadonlyArray<
    { readonly kind: string; readonly calls: number; readonly execUs: number; readonly planUs: number; readonly walBytes: number }
  >
  readonly execUs: number
  readonly planUs: number
  readonly walBytes: number
}

/** A statement's kind, from its text (the workers' statements are few and known). */
const statementKind = (text: string): string =>
  /WITH picked AS/.test(text) ? "claim"
  : /WITH items AS/.test(text) ? "complete"
  : /jsonb_to_recordset/.test(text) ? "renew"
  : /^\s*DELETE/i.test(text) ? "delete"
  : text.replace(/\s+/g, " ").trim().split(" ").slice(0, 2).join(" ").toLowerCase()

/**
 * The statements that named `schema` since the last reset (the orchestrator's own polling of the
 * table excluded), summed by kind and divided by the messages acked.
 */
const serverStatements = async (admin: Admin, schema: string, messages: number): Promise<ServerStatements> => {
  const rows = await query<{ query: string; calls: string; exec_ms: number; plan_ms: number; wal_bytes: string }>(
    admin,
    `SELECT query, calls, total_exec_time AS exec_ms, total_plan_time AS plan_ms, wal_bytes FROM pg_stat_statements
     WHERE query LIKE '%' || $1 || '%' AND query NOT LIKE 'SELECT count(*)::int AS n FROM%'`,
    [schema]
  )
  const byKind = new Map<string, { calls: number; execMs: number; planMs: number; walBytes: number }>()
  for (const row of rows) {
    const kind = statementKind(row.query)
    const k = byKind.get(kind) ?? { calls: 0, execMs: 0, planMs: 0, walBytes: 0 }
    k.calls += Number(row.calls)
    k.execMs += Number(row.exec_ms)
    k.planMs += Number(row.plan_ms)
    k.walBytes += Number(row.wal_bytes)
    byKind.set(kind, k)
  }
  const per = Math.max(1, messages)
  const kinds = [...byKind].map(([kind, k]) => ({
    kind,
    calls: k.calls,
    execUs: (k.execMs * 1000) / per,
    planUs: (k.planMs * 1000) / per,
    walBytes: k.walBytes / per
  })).sort((a, b) => b.execUs - a.execUs)
  return {
    kinds,
    execUs: kinds.reduce((sum, k) => sum + k.execUs, 0),
    planUs: kinds.reduce((sum, k) => sum + k.planUs, 0),
    walBytes: kinds.reduce((sum, k) => sum + k.walBytes, 0)
  }
}

const formatServer = (s: ServerStatements) =>
  `${s.execUs.toFixed(1)} us executing, ${s.planUs.toFixed(1)} us planning and ${Math.round(s.walBytes)} B of WAL per message (` +
  s.kinds.filter((k) => k.execUs >= 0.05).map((k) =>
    `${k.kind} ${k.calls} calls ${k.execUs.toFixed(1)} us + ${k.planUs.toFixed(1)} us planning ${Math.round(k.walBytes)} B`
  ).join("; ") + ")"

// ---------------------------------------------------------------------------------------------
// Runs
// ---------------------------------------------------------------------------------------------

interface ThroughputResult {
  readonly kind: Kind
  readonly c: number
  readonly rep: number
  readonly ms: number
  /** Measured messages acked in `ms` (after the warm-up): all of them, or fewer when the time budget ran out. */
  readonly done: number
  readonly rate: number
  /** Warm-up and measured messages over the time from the first handler start. */
  readonly coldRate: number
  readonly rssKb: number | undefined
  readonly cpuShare: number | undefined
  readonly handled: number | undefined
  readonly profiled: boolean
  /** BENCH_PG_STATS=1: the worker's statements as the server counted them. */
  readonly server?: ServerStatements | undefined
}

const workerScript = (kind: Kind) => (kind === "raw" ? "raw-worker" : "leasehold-worker")
const schemaTag = (kind: Kind) => (kind === "raw" ? "raw" : kind === "limited" ? "fl" : "lh")

const workerEnvFor = (kind: Kind, url: string, schema: string, c: number, mode: "throughput" | "latency", expect: number) => {
  const common = {
    BENCH_SCHEMA: schema,
    BENCH_MODE: mode,
    BENCH_EXPECT: String(expect),
    BENCH_WARMUP: String(mode === "throughput" ? config.warmup : 0),
    BENCH_CONCURRENCY: String(c),
    BENCH_LATENCY_BREAKDOWN: config.latencyBreakdown ? "1" : "0"
  }
  return kind === "raw"
    ? { ...common, BENCH_DATABASE_URL: url }
    : {
      ...common,
      LEASEHOLD_DATABASE_URL: url,
      LEASEHOLD_SCHEMA: schema,
      LEASEHOLD_QUEUES: QUEUE,
      LEASEHOLD_CONCURRENCY: String(c),
      ...leaseholdExtraEnv
    }
}

const profileDir = (kind: Kind = "leasehold") => join(config.logDir, kind === "limited" ? "profile-limited" : "profile")

const throughputRun = async (admin: Admin, url: string, kind: Kind, c: number, rep: number): Promise<ThroughputResult> => {
  const tag = `${kind}-c${c}-r${rep}`
  const schema = `bench_${runId}_${schemaTag(kind)}_c${c}_r${rep}`
  const enqueueMs = await prepareSchema(admin, schema, perRun, kind === "limited" ? flowLimits : undefined)
  const profiled = config.cpuProf && kind !== "raw" && rep === 1 && c === Math.max(...config.concurrencies)
  const nodeArgs = profiled ? ["--cpu-prof", `--cpu-prof-dir=${profileDir(kind)}`] : []
  if (config.pgStats) await query(admin, "SELECT pg_stat_statements_reset()")
  const w = startProc(tag, workerScript(kind), workerEnvFor(kind, url, schema, c, "throughput", perRun), nodeArgs)
  try {
    await w.waitLine("READY", 60_000)
    const first = Number((await w.waitLine("FIRST", config.timeoutMs)).split(" ")[1])
    // The measured part starts once the warm-up has run.
    const start = config.warmup > 0 ? Number((await w.waitLine("WARM", config.timeoutMs)).split(" ")[2]) : first
    const cpu0 = cpuSeconds(w.pid)
    // Until the worker has run every message, or the run's time budget is spent.
    const outcome = await handledOrBudget(w, start, config.runBudgetMs, config.timeoutMs)
    let end: number
    let done: number
    if (outcome === "handled") {
      end = await whenEmpty(admin, schema, 60_000)
      done = config.messages
    } else {
      const left = (await query<{ n: number }>(admin, `SELECT count(*)::int AS n FROM ${schema}.messages`))[0]?.n ?? 0
      end = wallMs()
      done = Math.max(0, config.messages - left)
    }
    const cpu1 = cpuSeconds(w.pid)
    const hwm = vmHwmKb(w.pid)
    await stopProcess(w)
    const server = config.pgStats ? await serverStatements(admin, schema, config.warmup + done) : undefined
    const countLine = w.linesWith("COUNT ")[0]?.split(" ")
    const handled = countLine === undefined ? undefined : Number(countLine[1])
    const rssKb = hwm ?? (countLine?.[2] === undefined ? undefined : Number(countLine[2]))
    const ms = end - start
    const result: ThroughputResult = {
      kind,
      c,
      rep,
      ms,
      done,
      rate: done / (ms / 1000),
      coldRate: (config.warmup + done) / ((end - first) / 1000),
      rssKb,
      cpuShare: cpu0 === undefined || cpu1 === undefined ? undefined : (cpu1 - cpu0) / (ms / 1000),
      handled,
      profiled,
      server
    }
    log(
      `${tag}: ${done === config.messages ? `all ${done}` : `${done} of ${config.messages} (time budget)`} messages in ` +
        `${(ms / 1000).toFixed(2)} s = ${Math.round(result.rate)} msg/s after ${config.warmup} warm-up (cold: ${Math.round(result.coldRate)} msg/s), ` +
        `peak RSS ${fmtMb(rssKb)}, CPU ${fmtPct(result.cpuShare)} of a core, handler runs ${handled ?? "?"}` +
        ` (enqueue ${(enqueueMs / 1000).toFixed(1)} s)${profiled ? " [profiled]" : ""}`
    )
    if (server !== undefined) log(`${tag} on the server: ${formatServer(server)}`)
    return result
  } finally {
    await stopProcess(w)
    await dropSchema(admin, schema)
  }
}

interface LatencyResult {
  readonly kind: Kind
  readonly values: ReadonlyArray<number>
  readonly expected: number
  /** BENCH_LATENCY_BREAKDOWN=1, leasehold: its measured pickups split into segments. */
  readonly breakdown?: ReadonlyArray<Breakdown.Pickup> | undefined
}

/** The measured (not warm-up) pickups of a latency run, split by breakdown.ts from the producer's and the worker's lines. */
const pickupBreakdown = (producer: Proc, worker: Proc): ReadonlyArray<Breakdown.Pickup> => {
  const fields = (lines: ReadonlyArray<string>) => lines.map((l) => l.split(" ").map(Number))
  const sends = fields(producer.linesWith("SENDT ")).map(([, sentAt, ackedAt]) => ({ sentAt: sentAt!, ackedAt: ackedAt! }))
  const claims = fields(worker.linesWith("CLAIMED ")).map(([, startAt, endAt]) => ({ startAt: startAt!, endAt: endAt! }))
  const starts = worker.linesWith("LAT ").map((l) => l.split(" ")).filter((f) => f[2] === "0")
    .map((f) => ({ sentAt: Number(f[3]), startAt: Number(f[4]) }))
  return Breakdown.pickups(sends, claims, starts)
}

const latencyRun = async (admin: Admin, url: string, kind: Kind): Promise<LatencyResult> => {
  const schema = `bench_${runId}_${kind === "raw" ? "raw" : "lh"}_latency`
  await prepareSchema(admin, schema, 0)
  const w = startProc(`${kind}-latency`, workerScript(kind), workerEnvFor(kind, url, schema, config.latencyConcurrency, "latency", 0))
  try {
    await w.waitLine("READY", 60_000)
    await sleep(1_500) // let it go idle
    const producer = startProc(`${kind}-producer`, "producer", {
      BENCH_KIND: kind,
      BENCH_DATABASE_URL: url,
      BENCH_SCHEMA: schema,
      BENCH_SENDS: String(config.latencySends),
      BENCH_INTERVAL_MS: String(config.latencyIntervalMs),
      BENCH_WARM: String(config.latencyWarm),
      BENCH_LATENCY_BREAKDOWN: config.latencyBreakdown ? "1" : "0"
    })
    const producerBudget = (config.latencySends + config.latencyWarm) * config.latencyIntervalMs + 60_000
    await producer.waitLine("SENT", producerBudget).finally(() => stopProcess(producer))
    const total = config.latencySends + config.latencyWarm
    const deadline = Date.now() + 10_000
    while (w.linesWith("LAT ").length < total && Date.now() < deadline) await sleep(20)
    const values = w.linesWith("LAT ").map((l) => l.split(" ")).filter((f) => f[2] === "0").map((f) => Number(f[1]))
    const v = [...values]
    log(`${kind} pickup latency: ${v.length}/${config.latencySends} measured, ${fmtLatencies(v)}`)
    const breakdown = config.latencyBreakdown && kind === "leasehold" ? pickupBreakdown(producer, w) : undefined
    return { kind, values, expected: config.latencySends, breakdown }
  } finally {
    await stopProcess(w)
    await dropSchema(admin, schema)
  }
}

// ---------------------------------------------------------------------------------------------
// Printing
// ---------------------------------------------------------------------------------------------

const formatBudget = () => `${Math.round(config.runBudgetMs / 1000)} s`
const redactUrl = (url: string): string => {
  try {
    const u = new URL(url)
    return `${u.hostname}:${u.port || "5432"}${u.pathname}`
  } catch {
    return "(unparsable URL)"
  }
}

const newestProfile = (kind: Kind): string | undefined => {
  const dir = profileDir(kind)
  if (!existsSync(dir)) return undefined
  return readdirSync(dir)
    .filter((f) => f.endsWith(".cpuprofile"))
    .map((f) => join(dir, f))
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs)[0]
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

const main = async (): Promise<number> => {
  const externalUrl = process.env["LEASEHOLD_DATABASE_URL"]
  let server: PostgresServer | undefined
  let admin: Admin | undefined
  stopOnSignal("bench:own", () => server)
  try {
    const build = compileWorkers()
    if (externalUrl !== undefined && externalUrl !== "") {
      log(`using LEASEHOLD_DATABASE_URL (${redactUrl(externalUrl)}); a schema per run, dropped after it`)
    } else {
      server = await startPostgres({
        forTests: config.fastPg,
        settings: config.pgStats
          ? ["shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=top", "pg_stat_statements.track_planning=on"]
          : []
      })
    }
    const url = server?.url ?? externalUrl!
    admin = await openAdmin(url, "bench-orchestrator")
    if (config.pgStats) {
      await query(admin, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements").catch((error) => {
        throw new Error(`BENCH_PG_STATS=1 needs pg_stat_statements preloaded on the server: ${String(error)}`)
      })
    }
    const settings = await query<{ name: string; setting: string }>(
      admin,
      `SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', 'shared_buffers', 'max_connections')`
    )
    const setting = (name: string) => settings.find((s) => s.name === name)?.setting ?? "?"
    const version = (await query<{ v: string }>(admin, "SELECT current_setting('server_version') AS v"))[0]?.v ?? "?"
    const commit = await commitProbe(admin, `bench_${runId}_probe`)
    const cpu = cpus()[0]?.model ?? "?"

    const header = [
      codeLine(),
      `machine: ${availableParallelism()} cores (${cpu.trim()}), ${Math.round(totalmem() / 2 ** 30)} GB RAM, Node ${process.versions.node}`,
      `PostgreSQL ${version} (${server === undefined ? `LEASEHOLD_DATABASE_URL ${redactUrl(url)}` : "embedded, same machine"}): ` +
        `fsync=${setting("fsync")}, synchronous_commit=${setting("synchronous_commit")}, full_page_writes=${setting("full_page_writes")}, ` +
        `shared_buffers=${Math.round(Number(setting("shared_buffers")) * 8 / 1024)} MB; ` +
        `serial commits: ${Math.round(commit.perSecond)}/s (p50 ${commit.p50Ms.toFixed(2)} ms)`,
      `at start: ${loadLine()}${loadavg()[0]! > availableParallelism() / 2 ? " -- the machine is busy: figures will be noisy" : ""}`,
      `throughput: ${perRun.toLocaleString("en-US")} no-op messages enqueued first, one worker process, C = ${config.concurrencies.join(", ")}, ` +
        `${config.reps} repetition(s)${config.reps > 1 ? " alternating, medians" : ""}; timed from the ${config.warmup > 0 ? `${config.warmup.toLocaleString("en-US")}-th` : "first"} handler start ` +
        `(the warm-up's end) to the table seen empty` +
        (config.runBudgetMs > 0 ? ` or ${formatBudget()} (then: messages acked so far)` : ""),
      `leasehold worker: Consumer.layerFromEnv + ConsumerPresence.layerFromEnv() + PgQueueStore.layer(), concurrency C, ` +
        (Object.keys(leaseholdExtraEnv).length === 0
          ? "every other setting the consumer's default"
          : `also ${Object.entries(leaseholdExtraEnv).map(([k, v]) => `${k}=${v}`).join(" ")}, the rest the consumer's default`),
      `raw worker: claim up to C rows FOR UPDATE SKIP LOCKED, run them, DELETE ... WHERE id = ANY(...)`,
      config.keys > 0
        ? `messages keyed: ${config.keys.toLocaleString("en-US")} keys, layout ${keyLayout}` +
          (flowLimits === undefined ? "" : `; "limited" worker: the leasehold worker on a queue with limits ${JSON.stringify(flowLimits)}`)
        : flowLimits === undefined ? "messages without keys" : `"limited" worker: limits ${JSON.stringify(flowLimits)}, messages without keys`,
      `workers${config.latency ? " and producer" : ""}: compiled JavaScript, as an application runs leasehold: src/ and bench/throughput/ built fresh by ` +
        `tsc -p bench/throughput/tsconfig.json at start (${(build.ms / 1000).toFixed(1)} s` +
        `${build.typeErrors > 0 ? `; ${build.typeErrors} type error(s), emitted anyway` : ""}) into ${relative(repoRoot, buildDir)}, ` +
        `run by node ${workerNodeArgs.join(" ")} (nothing .ts loaded)`,
      config.latency
        ? `pickup latency: idle worker (concurrency ${config.latencyConcurrency}), producer in another process, ${config.latencySends} single sends ` +
          `${config.latencyIntervalMs} ms apart (after ${config.latencyWarm} warm-up sends)`
        : "pickup latency: skipped (BENCH_LATENCY=0)"
    ]
    for (const h of header) console.log(h)
    console.log(`worker logs: ${config.logDir}`)

    const results: Array<ThroughputResult> = []
    for (const c of config.concurrencies) {
      for (let rep = 1; rep <= config.reps; rep++) {
        for (const kind of config.kinds) results.push(await throughputRun(admin, url, kind, c, rep))
      }
    }
    const latencies: Array<LatencyResult> = []
    if (config.latency) {
      for (const kind of ["leasehold", "raw"] as const) {
        if (config.kinds.includes(kind)) latencies.push(await latencyRun(admin, url, kind))
      }
    }

    // The table.
    const misses: Array<string> = []
    const flowRows: Array<Array<string>> = [[
      "C",
      "limited msg/s",
      "/ leasehold",
      "/ baseline",
      "cold: limited",
      "/ leasehold",
      "/ baseline",
      "limited RSS",
      "limited CPU"
    ]]
    const rows: Array<Array<string>> = [["C", "leasehold msg/s", "baseline msg/s", "ratio", "cold: leasehold", "baseline", "ratio", "leasehold RSS", "leasehold CPU", "baseline RSS", "baseline CPU"]]
    for (const c of config.concurrencies) {
      const of = (kind: Kind) => results.filter((r) => r.kind === kind && r.c === c)
      const med = (kind: Kind, f: (r: ThroughputResult) => number | undefined) =>
        median(of(kind).map(f).filter((v): v is number => v !== undefined))
      const lh = med("leasehold", (r) => r.rate)
      const raw = med("raw", (r) => r.rate)
      const ratio = lh !== undefined && raw !== undefined ? lh / raw : undefined
      const lhCold = med("leasehold", (r) => r.coldRate)
      const rawCold = med("raw", (r) => r.coldRate)
      const lhRss = med("leasehold", (r) => r.rssKb)
      const profiled = of("leasehold").some((r) => r.profiled)
      const partial = (kind: Kind) => (of(kind).some((r) => r.done < config.messages) ? " +" : "")
      rows.push([
        String(c),
        `${fmtRate(lh)}${partial("leasehold")}${profiled ? " *" : ""}`,
        `${fmtRate(raw)}${partial("raw")}`,
        ratio === undefined ? "-" : ratio.toFixed(2),
        fmtRate(lhCold),
        fmtRate(rawCold),
        lhCold === undefined || rawCold === undefined ? "-" : (lhCold / rawCold).toFixed(2),
        fmtMb(lhRss),
        fmtPct(med("leasehold", (r) => r.cpuShare)),
        fmtMb(med("raw", (r) => r.rssKb)),
        fmtPct(med("raw", (r) => r.cpuShare))
      ])
      if (ratio !== undefined && ratio < targets.ratioAt(c)) misses.push(`ratio at C=${c}: ${ratio.toFixed(2)} < ${targets.ratioAt(c)}`)
      if (lhRss !== undefined && lhRss / 1024 > targets.rssMb) misses.push(`leasehold peak RSS at C=${c}: ${fmtMb(lhRss)} > ${targets.rssMb} MB`)
      const lhHandled = of("leasehold").filter((r) => r.done === config.messages).map((r) => r.handled)
        .filter((h) => h !== undefined && h !== perRun)
      if (lhHandled.length > 0) console.log(`note: leasehold at C=${c} ran handlers ${lhHandled.join(", ")} times for ${perRun} messages (warm-up included)`)
      if (flowLimits !== undefined) {
        const fl = med("limited", (r) => r.rate)
        const flCold = med("limited", (r) => r.coldRate)
        const ratio = (a: number | undefined, b: number | undefined) => (a === undefined || b === undefined ? "-" : (a / b).toFixed(2))
        flowRows.push([
          String(c),
          `${fmtRate(fl)}${partial("limited")}${of("limited").some((r) => r.profiled) ? " *" : ""}`,
          ratio(fl, lh),
          ratio(fl, raw),
          fmtRate(flCold),
          ratio(flCold, lhCold),
          ratio(flCold, rawCold),
          fmtMb(med("limited", (r) => r.rssKb)),
          fmtPct(med("limited", (r) => r.cpuShare))
        ])
      }
    }
    console.log("")
    console.log(
      `throughput (${config.messages.toLocaleString("en-US")} messages after ${config.warmup.toLocaleString("en-US")} of warm-up; ` +
        `cold: all ${perRun.toLocaleString("en-US")} from the first handler start; ${config.reps > 1 ? `median of ${config.reps}` : "one run each"})`
    )
    console.log(table(rows))
    if (flowLimits !== undefined) {
      console.log("")
      console.log(`with flow limits ${JSON.stringify(flowLimits)} (the same keyed messages; ratios to the unlimited leasehold worker and to the baseline of this run)`)
      console.log(table(flowRows))
    }
    for (const r of results.filter((r) => r.done < config.messages)) {
      console.log(`+ ${r.kind} at C=${r.c}: the ${formatBudget()} budget ran out with ${r.done.toLocaleString("en-US")} of ${config.messages.toLocaleString("en-US")} messages acked; the rate is theirs`)
    }
    if (results.some((r) => r.profiled)) console.log("* this run was profiled (node --cpu-prof): slower than usual")
    if (config.pgStats) {
      // What each worker costs the server per message, whatever the disk and the noise did to the wall time.
      const srows: Array<Array<string>> = [[
        "C",
        "leasehold exec us/msg",
        "leasehold plan us/msg",
        "leasehold WAL B/msg",
        "baseline exec us/msg",
        "baseline plan us/msg",
        "baseline WAL B/msg"
      ]]
      for (const c of config.concurrencies) {
        const med = (kind: Kind, f: (s: ServerStatements) => number) =>
          median(results.filter((r) => r.kind === kind && r.c === c && r.server !== undefined).map((r) => f(r.server!)))
        const fmt = (v: number | undefined, digits: number) => (v === undefined ? "-" : v.toFixed(digits))
        srows.push([
          String(c),
          fmt(med("leasehold", (s) => s.execUs), 1),
          fmt(med("leasehold", (s) => s.planUs), 1),
          fmt(med("leasehold", (s) => s.walBytes), 0),
          fmt(med("raw", (s) => s.execUs), 1),
          fmt(med("raw", (s) => s.planUs), 1),
          fmt(med("raw", (s) => s.walBytes), 0)
        ])
      }
      console.log("")
      console.log("on the server (pg_stat_statements: statement execution and planning time and WAL per message acked, commits' flushes not included)")
      console.log(table(srows))
    }

    if (latencies.length > 0) {
      const lrows: Array<Array<string>> = [["pickup latency", "p50", "p95", "p99", "max", "n"]]
      for (const l of latencies) {
        const v = l.values
        lrows.push([
          l.kind === "leasehold" ? "leasehold" : "baseline (LISTEN/NOTIFY)",
          fmtMs(percentile(v, 50)),
          fmtMs(percentile(v, 95)),
          fmtMs(percentile(v, 99)),
          fmtMs(percentile(v, 100)),
          `${v.length}/${l.expected}`
        ])
        if (l.kind === "leasehold") {
          const p50 = percentile(v, 50)
          const p99 = percentile(v, 99)
          if (p50 !== undefined && p50 > targets.p50Ms) misses.push(`pickup p50 ${fmtMs(p50)} > ${targets.p50Ms} ms`)
          if (p99 !== undefined && p99 > targets.p99Ms) misses.push(`pickup p99 ${fmtMs(p99)} > ${targets.p99Ms} ms`)
        }
      }
      console.log("")
      console.log(`pickup latency across processes (handler start - send time)`)
      console.log(table(lrows))
      for (const l of latencies) {
        if (l.breakdown === undefined) continue
        console.log("")
        console.log(`where leasehold's pickups went (ms; ${l.breakdown.length} of ${l.values.length} pickups joined to their send and claim; bench/throughput/breakdown.ts)`)
        console.log(table([["segment", "p50", "p95", "p99", "max"], ...Breakdown.breakdownRows(l.breakdown)]))
      }
    }

    const failures = latencies.filter((l) => l.values.length < l.expected).map((l) => `${l.kind}: ${l.values.length}/${l.expected} latency samples`)
    for (const kind of ["leasehold", "limited"] as const) {
      const profile = config.cpuProf ? newestProfile(kind) : undefined
      if (profile !== undefined) {
        console.log("")
        console.log(`${kind === "limited" ? "limited " : ""}leasehold worker at C=${Math.max(...config.concurrencies)}, ${profile}`)
        console.log(formatProfile(hottest(profile, 10)))
      }
    }

    console.log("")
    console.log(`at end: ${loadLine()}`)
    console.log(misses.length === 0 ? "targets of issue 9: all met" : `targets of issue 9 missed:\n  ${misses.join("\n  ")}`)
    for (const f of failures) console.log(`failed measurement: ${f}`)
    const code = failures.length > 0 || (config.strict && misses.length > 0) ? 1 : 0
    console.log(`\n${code === 0 ? "DONE" : "FAIL"}${config.strict ? "" : " (BENCH_STRICT=1 to fail on a missed target)"}`)
    return code
  } finally {
    await shutDown(admin, server)
  }
}

runAsProcess("bench", main)
