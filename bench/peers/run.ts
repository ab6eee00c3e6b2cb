/**
 * `npm run bench:peers` (issue 29, first cut): leasehold against a raw
 * node-postgres SKIP LOCKED worker, graphile-worker and pg-boss, in one run on
 * one server.
 *
 * - The peers are installed for the benchmark only: `npm install --prefix
 *   .tmp/peers graphile-worker@0.18 pg-boss@12` (never a dependency of the
 *   package); a peer whose install fails is skipped with a message.
 * - One durable embedded PostgreSQL (dev/EmbeddedPostgres.ts: fsync,
 *   synchronous_commit, full_page_writes on), a fresh DATABASE per run.
 * - Every adapter script (bench/peers/<adapter>.ts; leasehold's worker is
 *   bench/throughput/leasehold-worker.ts, the README's worker) is compiled
 *   at start with the project's tsc, with the src/ it imports, and run as
 *   JavaScript (`node --no-experimental-strip-types`), as an application runs
 *   leasehold's dist/.
 * - Per adapter, C and repetition: a sender process sets up (migrations, the
 *   queue: not timed) and enqueues PEERS_JOBS no-op jobs PEERS_CHUNK (1,000)
 *   per call, timed: the bulk send rate. VACUUM ANALYZE, CHECKPOINT. Then ONE
 *   worker process at concurrency C:
 *     cold   = the first PEERS_COLD jobs (20,000), from the first handler start
 *              to the PEERS_COLD-th handler start (a fresh process, no warm-up);
 *     steady = the rest (80,000 of 100,000), from the PEERS_COLD-th handler start
 *              to the table seen empty of unfinished jobs (polled every 2 ms once
 *              the worker has run its last handler), or the jobs finished when
 *              PEERS_RUN_BUDGET (120 s) runs out (marked +). The cold part has the same
 *              budget from the first handler start: a worker that has not reached
 *              PEERS_COLD by then gets a cold rate over the jobs it finished (marked +)
 *              and no steady rate (pg-boss at C = 1).
 *   Peak RSS is the worker's VmHWM just before it is stopped; CPU its user +
 *   system time over the steady window, as a share of one core.
 * - Adapters alternate: in odd repetitions in the listed order, in even ones
 *   reversed; the table gives medians, and each row's ratio to the raw worker
 *   and to the best peer (graphile-worker or pg-boss, whichever is faster in
 *   that column).
 * - Pickup latency across processes, per adapter: an idle worker (C = 10) in
 *   its own process, a producer in another (the adapter's `single` role) sends
 *   10 unmeasured then PEERS_LATENCY_SENDS single jobs 20 ms apart, each
 *   carrying its send time; the worker prints handler start - send time. Each
 *   adapter's own wake-up: leasehold's send notifications, the raw worker's
 *   LISTEN (the producer inserts and notifies in one statement),
 *   graphile-worker's NOTIFY trigger, pg-boss's `useListenNotify` with a
 *   `notify: true` queue.
 * - SIGKILL-to-rerun, per adapter: one job whose handler never finishes
 *   (PEERS_HANG=1), worker A runs it, A is SIGKILLed half a second later and a
 *   fresh worker B started at once, both at every setting as above; the time
 *   from the kill to the job's handler start on B (B's start-up included), or
 *   "> budget" when B has not run it within PEERS_KILL_BUDGET.
 *
 * Knobs (environment):
 *   PEERS_QUICK=1            C=10, 6,000 jobs of which 2,000 cold, one repetition (a smoke check)
 *   PEERS_CONCURRENCY        list of C (default "1,10,50,200")
 *   PEERS_JOBS               jobs enqueued per run (default 100000)
 *   PEERS_COLD               the cold part, the first jobs of the run (default 20000; < PEERS_JOBS)
 *   PEERS_REPS               repetitions per C and adapter, alternating (default 1)
 *   PEERS_ADAPTERS           which, in order (default "raw-pg,leasehold,graphile-worker,pg-boss")
 *   PEERS_CHUNK              jobs per bulk send call (default 1000)
 *   PEERS_RUN_BUDGET         longest steady window (default 120s; 0: none)
 *   PEERS_LATENCY=0          skip the pickup-latency runs
 *   PEERS_LATENCY_SENDS      measured single sends per adapter (default 200; quick 50)
 *   PEERS_LATENCY_INTERVAL   time between them (default 20ms)
 *   PEERS_KILL=0             skip the SIGKILL-to-rerun runs
 *   PEERS_KILL_BUDGET        longest wait for the rerun after the SIGKILL (default 60s; quick 35s)
 *   PEERS_SKIP_INSTALL=1     use .tmp/peers as it is (no npm install)
 *   PEERS_FAST_PG=1          the embedded server without durability
 *   PEERS_LOG_DIR            worker output (default .tmp/bench-peers/<time>)
 */
import { execFileSync } from "node:child_process"
import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs"
import { availableParallelism, cpus, loadavg, totalmem } from "node:os"
import { isAbsolute, join, relative } from "node:path"
import { type PostgresServer, startPostgres } from "../../dev/EmbeddedPostgres.ts"
import { envInt, envMs, nodeBinary, percentile, repoRoot, sleep, table } from "../chaos/lib.ts"
import { cpuSeconds, endLogs, fmtMb, fmtMs, fmtPct, fmtRate, live, median, type Proc, startProcess, stopOnSignal, stopProcess, vmHwmKb } from "../support/orchestrator.ts"
import { QUEUE, wallMs } from "../throughput/protocol.ts"
import { peerVersion } from "./common.ts"

// ---------------------------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------------------------

const ALL = ["raw-pg", "leasehold", "graphile-worker", "pg-boss"] as const
type Adapter = (typeof ALL)[number]
const PEERS: ReadonlyArray<Adapter> = ["graphile-worker", "pg-boss"]
const PEER_SPECS: Record<string, string> = { "graphile-worker": "graphile-worker@0.18", "pg-boss": "pg-boss@12" }

const quick = process.env["PEERS_QUICK"] === "1"
const list = (name: string, fallback: string) =>
  (process.env[name] ?? fallback).split(",").map((s) => s.trim()).filter((s) => s !== "")

const config = {
  concurrencies: list("PEERS_CONCURRENCY", quick ? "10" : "1,10,50,200").map((c) => {
    if (!/^\d+$/.test(c) || Number(c) < 1) throw new Error(`PEERS_CONCURRENCY: expected positive whole numbers, got ${JSON.stringify(c)}`)
    return Number(c)
  }),
  jobs: envInt("PEERS_JOBS", quick ? 6_000 : 100_000),
  cold: envInt("PEERS_COLD", quick ? 2_000 : 20_000),
  reps: Math.max(1, envInt("PEERS_REPS", 1)),
  adapters: list("PEERS_ADAPTERS", ALL.join(",")).map((a) => {
    if (!(ALL as ReadonlyArray<string>).includes(a)) throw new Error(`PEERS_ADAPTERS: expected some of ${ALL.join(", ")}, got ${JSON.stringify(a)}`)
    return a as Adapter
  }),
  chunk: Math.max(1, envInt("PEERS_CHUNK", 1_000)),
  runBudgetMs: envMs("PEERS_RUN_BUDGET", 120_000),
  latency: process.env["PEERS_LATENCY"] !== "0",
  latencySends: envInt("PEERS_LATENCY_SENDS", quick ? 50 : 200),
  latencyIntervalMs: envMs("PEERS_LATENCY_INTERVAL", 20),
  latencyWarm: 10,
  kill: process.env["PEERS_KILL"] !== "0",
  killBudgetMs: envMs("PEERS_KILL_BUDGET", quick ? 35_000 : 60_000),
  skipInstall: process.env["PEERS_SKIP_INSTALL"] === "1",
  fastPg: process.env["PEERS_FAST_PG"] === "1",
  logDir: process.env["PEERS_LOG_DIR"] ?? join(repoRoot, ".tmp", "bench-peers", new Date().toISOString().replace(/[:.]/g, "-"))
}
if (config.cold < 1 || config.cold >= config.jobs) {
  console.error(`PEERS_COLD (${config.cold}) must be at least 1 and below PEERS_JOBS (${config.jobs})`)
  process.exit(2)
}
const steadyJobs = config.jobs - config.cold
const prefix = join(repoRoot, ".tmp", "peers")

const t0 = Date.now()
const log = (text: string) => console.log(`[peers +${((Date.now() - t0) / 1000).toFixed(1)}s] ${text}`)
const runId = `${process.pid}_${Math.random().toString(36).slice(2, 6)}`

// ---------------------------------------------------------------------------------------------
// node-postgres for the orchestrator (in node_modules without types: imported loosely)
// ---------------------------------------------------------------------------------------------

interface PgClient {
  readonly query: (text: string, values?: ReadonlyArray<unknown>) => Promise<{ readonly rows: Array<Record<string, unknown>> }>
  readonly end: () => Promise<void>
}
const pgModule = "pg"
const pg = (await import(pgModule)).default as { Client: new(options: { connectionString: string; application_name?: string }) => PgClient & { connect: () => Promise<void> } }
const connect = async (url: string): Promise<PgClient> => {
  const client = new pg.Client({ connectionString: url, application_name: "peers-orchestrator" })
  await client.connect()
  return client
}
const dbUrl = (serverUrl: string, db: string) => {
  const u = new URL(serverUrl)
  u.pathname = `/${db}`
  return u.toString()
}

// ---------------------------------------------------------------------------------------------
// Install and compile
// ---------------------------------------------------------------------------------------------

/** `npm install --prefix .tmp/peers <spec>` for every peer asked for; the ones that are there afterwards. */
const installPeers = (wanted: ReadonlyArray<Adapter>): Set<Adapter> => {
  const specs = wanted.filter((a) => PEERS.includes(a))
  if (specs.length === 0) return new Set()
  mkdirSync(prefix, { recursive: true })
  if (!existsSync(join(prefix, "package.json"))) writeFileSync(join(prefix, "package.json"), `${JSON.stringify({ name: "leasehold-bench-peers", private: true })}\n`)
  const npmInstall = (names: ReadonlyArray<Adapter>) =>
    execFileSync("npm", ["install", "--prefix", prefix, "--no-audit", "--no-fund", "--loglevel=error", ...names.map((n) => PEER_SPECS[n]!)], {
      cwd: prefix,
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"]
    })
  if (!config.skipInstall) {
    const started = Date.now()
    try {
      npmInstall(specs)
      log(`installed ${specs.map((n) => PEER_SPECS[n]).join(", ")} under ${relative(repoRoot, prefix)} (${((Date.now() - started) / 1000).toFixed(1)} s; for the benchmark only)`)
    } catch {
      for (const name of specs) {
        try {
          npmInstall([name])
        } catch (error) {
          const e = error as { stderr?: string; message?: string }
          console.log(`skipping ${name}: npm install --prefix ${relative(repoRoot, prefix)} ${PEER_SPECS[name]} failed: ${(e.stderr ?? e.message ?? "").trim().split("\n").slice(-3).join(" / ")}`)
        }
      }
    }
  }
  const present = new Set<Adapter>()
  for (const name of specs) {
    if (peerVersion(prefix, name) !== undefined) present.add(name)
    else console.log(`skipping ${name}: not installed under ${relative(repoRoot, prefix)}`)
  }
  return present
}

/** Like `npm run bench`: the adapter scripts and the src/ they import, compiled fresh into `buildDir`. */
const buildDir = (() => {
  const rel = relative(repoRoot, config.logDir)
  const inRepo = rel !== "" && !rel.startsWith("..") && !isAbsolute(rel)
  return inRepo ? join(config.logDir, "build") : join(repoRoot, ".tmp", "bench-build", `peers-${runId}`)
})()
const workerNodeArgs = ["--no-experimental-strip-types"]
type Role = "send" | "single" | "work" | "hang"
const scriptOf = (adapter: Adapter, role: Role) =>
  adapter === "leasehold"
    ? role === "send" || role === "single" ? join(buildDir, "bench", "peers", "leasehold-send.js")
    : role === "hang" ? join(buildDir, "bench", "peers", "leasehold-worker.js")
    : join(buildDir, "bench", "throughput", "leasehold-worker.js")
    : join(buildDir, "bench", "peers", `${adapter}.js`)

const compile = (): number => {
  const started = Date.now()
  rmSync(buildDir, { recursive: true, force: true })
  mkdirSync(buildDir, { recursive: true })
  try {
    execFileSync(nodeBinary, [join(repoRoot, "node_modules", ".bin", "tsc"), "-p", join(repoRoot, "bench", "peers", "tsconfig.json"), "--outDir", buildDir], {
      cwd: repoRoot,
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"]
    })
  } catch (error) {
    const e = error as { stdout?: string; stderr?: string }
    log(`tsc reported errors; the emitted JavaScript runs anyway:\n${`${e.stdout ?? ""}${e.stderr ?? ""}`.trimEnd()}`)
  }
  writeFileSync(join(buildDir, "package.json"), `${JSON.stringify({ type: "module", private: true })}\n`)
  for (const a of ALL) for (const role of ["send", "single", "work", "hang"] as const) if (!existsSync(scriptOf(a, role))) throw new Error(`tsc did not emit ${scriptOf(a, role)}`)
  return Date.now() - started
}

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

/** Start a compiled adapter script as `name`. */
const startProc = (name: string, script: string, env: Record<string, string>): Proc =>
  startProcess({ name, script, logDir: config.logDir, env, nodeArgs: workerNodeArgs })

// ---------------------------------------------------------------------------------------------
// Runs
// ---------------------------------------------------------------------------------------------

/** Jobs not finished yet, as each adapter stores them (finished jobs are deleted, or, in pg-boss, marked). */
const remainingSql: Record<Adapter, string> = {
  "raw-pg": "SELECT count(*)::int AS n FROM q",
  "leasehold": "SELECT count(*)::int AS n FROM leasehold.messages",
  "graphile-worker": "SELECT count(*)::int AS n FROM graphile_worker._private_jobs",
  "pg-boss": "SELECT count(*)::int AS n FROM pgboss.job WHERE state < 'completed'"
}

const adapterEnv = (
  adapter: Adapter,
  url: string,
  role: Role,
  c: number,
  mode: "throughput" | "latency" = "throughput",
  jobs = config.jobs
): Record<string, string> => {
  const common = {
    PEERS_ROLE: role === "hang" ? "work" : role,
    ...(role === "hang" ? { PEERS_HANG: "1" } : {}),
    PEERS_SENDS: String(config.latencySends),
    PEERS_WARM: String(config.latencyWarm),
    PEERS_INTERVAL_MS: String(config.latencyIntervalMs),
    PEERS_URL: url,
    PEERS_JOBS: String(jobs),
    PEERS_CHUNK: String(config.chunk),
    PEERS_CONCURRENCY: String(c),
    PEERS_PREFIX: prefix,
    BENCH_SCHEMA: "peers",
    BENCH_MODE: mode,
    BENCH_EXPECT: String(mode === "throughput" ? config.jobs : 0),
    BENCH_WARMUP: String(mode === "throughput" ? config.cold : 0),
    BENCH_CONCURRENCY: String(c)
  }
  return adapter === "leasehold"
    ? { ...common, LEASEHOLD_DATABASE_URL: url, LEASEHOLD_SCHEMA: "leasehold", LEASEHOLD_QUEUES: QUEUE, LEASEHOLD_CONCURRENCY: String(c) }
    : common
}

interface Result {
  readonly adapter: Adapter
  readonly c: number
  readonly rep: number
  readonly sendRate: number
  readonly coldRate: number
  /** The cold part did not finish within the budget: coldRate is over the jobs finished by then. */
  readonly coldPartial?: boolean
  readonly steadyRate: number | undefined
  /** Steady jobs finished in the window: all of them, or fewer when the budget ran out. */
  readonly steadyDone: number
  readonly rssKb: number | undefined
  readonly cpuShare: number | undefined
}

const oneRun = async (admin: PgClient, serverUrl: string, adapter: Adapter, c: number, rep: number): Promise<Result> => {
  const tag = `${adapter}-c${c}-r${rep}`
  const db = `peers_${runId}_${adapter.replace(/-/g, "_")}_c${c}_r${rep}`
  await admin.query(`CREATE DATABASE ${db}`)
  const url = dbUrl(serverUrl, db)
  let worker: Proc | undefined
  try {
    // The bulk send, in a process of its own.
    const sender = startProc(`${tag}-send`, scriptOf(adapter, "send"), adapterEnv(adapter, url, "send", c))
    const sent = (await sender.waitLine("SENT", 30 * 60_000)).split(" ")
    await Promise.race([sender.closed, sleep(10_000)])
    await stopProcess(sender, 2_000)
    const sendMs = Number(sent[1])
    const client = await connect(url)
    try {
      await client.query("VACUUM ANALYZE")
      await client.query("CHECKPOINT")
      const queued = Number((await client.query(remainingSql[adapter])).rows[0]?.["n"])
      if (queued !== config.jobs) throw new Error(`${tag}: ${queued} jobs in the queue after the send, expected ${config.jobs}`)

      const w = (worker = startProc(tag, scriptOf(adapter, "work"), adapterEnv(adapter, url, "work", c)))
      await w.waitLine("READY", 120_000)
      const first = Number((await w.waitLine("FIRST", 600_000)).split(" ")[1])
      // The cold part has the same budget: a worker that has not reached it by then is measured on
      // the jobs it finished so far (cold only, marked +; no steady rate).
      const warm = await w.waitLine("WARM", config.runBudgetMs > 0 ? Math.max(1, first + config.runBudgetMs - wallMs()) : 24 * 3_600_000)
        .catch(async (error) => {
          if (w.exit !== undefined || config.runBudgetMs <= 0) throw error
          return undefined
        })
      if (warm === undefined) {
        const n = Number((await client.query(remainingSql[adapter])).rows[0]?.["n"])
        const now = wallMs()
        const result: Result = {
          adapter,
          c,
          rep,
          sendRate: config.jobs / (sendMs / 1000),
          coldRate: (config.jobs - n) / ((now - first) / 1000),
          coldPartial: true,
          steadyRate: undefined,
          steadyDone: 0,
          rssKb: vmHwmKb(w.pid),
          cpuShare: undefined
        }
        log(`${tag}: send ${fmtRate(result.sendRate)} jobs/s; cold: only ${config.jobs - n} of ${config.cold} jobs finished within the ${Math.round(config.runBudgetMs / 1000)} s budget = ${fmtRate(result.coldRate)} jobs/s; no steady part`)
        return result
      }
      const start = Number(warm.split(" ")[2])
      const cpu0 = cpuSeconds(w.pid)
      const handled = w.waitLine("HANDLED", 24 * 3_600_000)
      handled.catch(() => undefined)
      let budgetTimer: NodeJS.Timeout | undefined
      const budget = config.runBudgetMs > 0
        ? new Promise<"budget">((r) => (budgetTimer = setTimeout(() => r("budget"), Math.max(0, start + config.runBudgetMs - wallMs()))))
        : new Promise<"budget">(() => undefined)
      const outcome = await Promise.race([handled.then(() => "handled" as const), budget])
      clearTimeout(budgetTimer)
      let end: number
      let done: number
      if (outcome === "handled") {
        const deadline = Date.now() + 60_000
        while (true) {
          const n = Number((await client.query(remainingSql[adapter])).rows[0]?.["n"])
          if (n === 0) break
          if (Date.now() > deadline) throw new Error(`${tag}: ${n} jobs still unfinished 60 s after the last handler ran`)
          await sleep(2)
        }
        end = wallMs()
        done = steadyJobs
      } else {
        const n = Number((await client.query(remainingSql[adapter])).rows[0]?.["n"])
        end = wallMs()
        done = Math.max(0, steadyJobs - n)
      }
      const cpu1 = cpuSeconds(w.pid)
      const rssKb = vmHwmKb(w.pid)
      const ms = end - start
      const result: Result = {
        adapter,
        c,
        rep,
        sendRate: config.jobs / (sendMs / 1000),
        coldRate: (config.cold - 1) / ((start - first) / 1000),
        steadyRate: done / (ms / 1000),
        steadyDone: done,
        rssKb,
        cpuShare: cpu0 === undefined || cpu1 === undefined ? undefined : (cpu1 - cpu0) / (ms / 1000)
      }
      log(
        `${tag}: send ${fmtRate(result.sendRate)} jobs/s (${sent[2]} calls); cold ${fmtRate(result.coldRate)} jobs/s; ` +
          `steady ${done === steadyJobs ? `all ${done}` : `${done} of ${steadyJobs} (budget)`} in ${(ms / 1000).toFixed(2)} s = ${fmtRate(result.steadyRate)} jobs/s; ` +
          `peak RSS ${fmtMb(rssKb)}, CPU ${fmtPct(result.cpuShare)}`
      )
      return result
    } finally {
      if (worker !== undefined) await stopProcess(worker)
      await client.end().catch(() => undefined)
    }
  } finally {
    if (worker !== undefined) await stopProcess(worker)
    await admin.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch((error) => log(`drop ${db}: ${String(error)}`))
  }
}

/** A fresh database for one run, set up by the adapter's send role with `jobs` jobs (0: setup only). */
const freshDatabase = async (admin: PgClient, serverUrl: string, adapter: Adapter, tag: string, mode: "throughput" | "latency", jobs: number) => {
  const db = `peers_${runId}_${adapter.replace(/-/g, "_")}_${tag}`
  await admin.query(`CREATE DATABASE ${db}`)
  const url = dbUrl(serverUrl, db)
  const sender = startProc(`${adapter}-${tag}-setup`, scriptOf(adapter, "send"), adapterEnv(adapter, url, "send", 10, mode, jobs))
  await sender.waitLine("SENT", 120_000)
  await Promise.race([sender.closed, sleep(10_000)])
  await stopProcess(sender, 2_000)
  return { db, url, drop: () => admin.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).then(() => undefined, (error) => log(`drop ${db}: ${String(error)}`)) }
}

interface LatencyResult {
  readonly adapter: Adapter
  readonly values: ReadonlyArray<number>
  readonly expected: number
}

const latencyRun = async (admin: PgClient, serverUrl: string, adapter: Adapter): Promise<LatencyResult> => {
  const { url, drop } = await freshDatabase(admin, serverUrl, adapter, "latency", "latency", 0)
  const w = startProc(`${adapter}-latency`, scriptOf(adapter, "work"), adapterEnv(adapter, url, "work", 10, "latency"))
  try {
    await w.waitLine("READY", 120_000)
    await sleep(1_500) // let it go idle
    const producer = startProc(`${adapter}-latency-producer`, scriptOf(adapter, "single"), adapterEnv(adapter, url, "single", 10, "latency"))
    const total = config.latencySends + config.latencyWarm
    await producer.waitLine("SENT", total * config.latencyIntervalMs + 120_000).finally(() => stopProcess(producer, 5_000))
    const deadline = Date.now() + 10_000
    while (w.lines.filter((l) => l.startsWith("LAT ")).length < total && Date.now() < deadline) await sleep(20)
    const values = w.lines.filter((l) => l.startsWith("LAT ")).map((l) => l.split(" ")).filter((f) => f[2] === "0").map((f) => Number(f[1]))
    log(
      `${adapter} pickup latency: ${values.length}/${config.latencySends} measured, p50 ${fmtMs(percentile(values, 50))}, ` +
        `p95 ${fmtMs(percentile(values, 95))}, p99 ${fmtMs(percentile(values, 99))}, max ${fmtMs(percentile(values, 100))}`
    )
    return { adapter, values, expected: config.latencySends }
  } finally {
    await stopProcess(w)
    await drop()
  }
}

interface KillResult {
  readonly adapter: Adapter
  /** Kill -> the job's handler start on the fresh worker; undefined: not within the budget. */
  readonly rerunMs: number | undefined
}

const killRun = async (admin: PgClient, serverUrl: string, adapter: Adapter): Promise<KillResult> => {
  const { url, drop } = await freshDatabase(admin, serverUrl, adapter, "kill", "throughput", 1)
  const env = { ...adapterEnv(adapter, url, "hang", 1), BENCH_EXPECT: "0", BENCH_WARMUP: "0" }
  const a = startProc(`${adapter}-kill-a`, scriptOf(adapter, "hang"), env)
  let b: Proc | undefined
  try {
    await a.waitLine("RUN", 120_000)
    await sleep(500)
    const killedAt = wallMs()
    a.child.kill("SIGKILL")
    await Promise.race([a.closed, sleep(5_000)])
    b = startProc(`${adapter}-kill-b`, scriptOf(adapter, "hang"), env)
    const rerun = await b.waitLine("RUN", config.killBudgetMs).then((line) => Number(line.split(" ")[1]) - killedAt, () => undefined)
    log(`${adapter} SIGKILL-to-rerun: ${rerun === undefined ? `not rerun within ${fmtS(config.killBudgetMs)}` : fmtS(rerun)}`)
    return { adapter, rerunMs: rerun }
  } finally {
    a.child.kill("SIGKILL")
    b?.child.kill("SIGKILL")
    await Promise.race([Promise.all([a.closed, b?.closed]), sleep(5_000)])
    await drop()
  }
}

/** What each adapter documents as the bound on a killed worker's job (printed beside the measurement). */
const killBound: Record<Adapter, string> = {
  "raw-pg": "its 30 s visibility timeout (vt)",
  "leasehold": "session liveness (dead sessions reaped within seconds), else one 30 s lease",
  "graphile-worker": "a locked job is freed after 4 hours",
  "pg-boss": "an active job expires after expireInSeconds (default 15 min)"
}

// ---------------------------------------------------------------------------------------------
// Printing
// ---------------------------------------------------------------------------------------------

const fmtS = (ms: number) => `${(ms / 1000).toFixed(1)} s`
const fmtRatio = (a: number | undefined, b: number | undefined) => (a === undefined || b === undefined || b === 0 ? "-" : (a / b).toFixed(2))
const codeLine = (): string => {
  try {
    const head = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: repoRoot, encoding: "utf8" }).trim()
    const dirty = execFileSync("git", ["status", "--porcelain", "--", "src", "bench"], { cwd: repoRoot, encoding: "utf8" }).trim() !== ""
    return `code: ${head}${dirty ? " with uncommitted changes in src/ or bench/" : ""}`
  } catch {
    return "code: (not a git checkout)"
  }
}
const loadLine = () => `load average ${loadavg().map((l) => l.toFixed(2)).join(", ")} (1, 5, 15 min) on ${availableParallelism()} cores`

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

const main = async (): Promise<number> => {
  let server: PostgresServer | undefined
  let admin: PgClient | undefined
  stopOnSignal("bench:peers", () => server)
  try {
    const installed = installPeers(config.adapters)
    const adapters = config.adapters.filter((a) => !PEERS.includes(a) || installed.has(a))
    const buildMs = compile()
    server = await startPostgres({ forTests: config.fastPg })
    admin = await connect(server.url)
    const settings = (await admin.query(
      `SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', 'shared_buffers', 'server_version')`
    )).rows as Array<{ name: string; setting: string }>
    const setting = (name: string) => settings.find((s) => s.name === name)?.setting ?? "?"
    const header = [
      codeLine(),
      `machine: ${availableParallelism()} cores (${(cpus()[0]?.model ?? "?").trim()}), ${Math.round(totalmem() / 2 ** 30)} GB RAM, Node ${process.versions.node}`,
      `PostgreSQL ${setting("server_version")} (embedded, same machine): fsync=${setting("fsync")}, synchronous_commit=${setting("synchronous_commit")}, ` +
        `full_page_writes=${setting("full_page_writes")}, shared_buffers=${Math.round(Number(setting("shared_buffers")) * 8 / 1024)} MB; a fresh database per run`,
      `at start: ${loadLine()}`,
      `adapters: ${adapters.map((a) => (PEERS.includes(a) ? `${a} ${peerVersion(prefix, a)}` : a)).join(", ")} ` +
        `(peers under ${relative(repoRoot, prefix)}, for the benchmark only; all compiled by tsc -p bench/peers/tsconfig.json in ${(buildMs / 1000).toFixed(1)} s, run by node ${workerNodeArgs.join(" ")})`,
      `per run: ${config.jobs.toLocaleString("en-US")} no-op jobs bulk-sent ${config.chunk.toLocaleString("en-US")} per call, then ONE worker process at C; ` +
        `cold: the first ${config.cold.toLocaleString("en-US")} from the first handler start; steady: the other ${steadyJobs.toLocaleString("en-US")} to the queue seen empty` +
        (config.runBudgetMs > 0 ? ` (or ${Math.round(config.runBudgetMs / 1000)} s: then the jobs finished so far, marked +)` : "") +
        `; C = ${config.concurrencies.join(", ")}; ${config.reps} repetition(s)${config.reps > 1 ? ", adapters alternating, medians" : ""}`
    ]
    for (const h of header) console.log(h)
    console.log(`worker logs: ${config.logDir}`)

    const results: Array<Result> = []
    const failures: Array<string> = []
    for (const c of config.concurrencies) {
      for (let rep = 1; rep <= config.reps; rep++) {
        const order = rep % 2 === 1 ? adapters : [...adapters].reverse()
        for (const adapter of order) {
          try {
            results.push(await oneRun(admin, server.url, adapter, c, rep))
          } catch (error) {
            const text = `${adapter} at C=${c}, repetition ${rep}: ${error instanceof Error ? error.message : String(error)}`
            failures.push(text)
            log(`FAILED ${text}`)
          }
        }
      }
    }
    const latencies: Array<LatencyResult> = []
    if (config.latency) {
      for (const adapter of adapters) {
        try {
          latencies.push(await latencyRun(admin, server.url, adapter))
        } catch (error) {
          failures.push(`${adapter} pickup latency: ${error instanceof Error ? error.message : String(error)}`)
          log(`FAILED ${adapter} pickup latency: ${String(error)}`)
        }
      }
    }
    const kills: Array<KillResult> = []
    if (config.kill) {
      for (const adapter of adapters) {
        try {
          kills.push(await killRun(admin, server.url, adapter))
        } catch (error) {
          failures.push(`${adapter} SIGKILL-to-rerun: ${error instanceof Error ? error.message : String(error)}`)
          log(`FAILED ${adapter} SIGKILL-to-rerun: ${String(error)}`)
        }
      }
    }
    writeFileSync(join(config.logDir, "results.json"), `${JSON.stringify({ header, results, latencies, kills }, null, 2)}\n`)

    console.log("")
    for (const c of config.concurrencies) {
      const med = (a: Adapter, f: (r: Result) => number | undefined) =>
        median(results.filter((r) => r.adapter === a && r.c === c).map(f).filter((v): v is number => v !== undefined))
      const best = (f: (r: Result) => number | undefined) => {
        const values = PEERS.map((p) => med(p, f)).filter((v): v is number => v !== undefined)
        return values.length === 0 ? undefined : Math.max(...values)
      }
      const steady = (r: Result) => r.steadyRate
      const cold = (r: Result) => r.coldRate
      const send = (r: Result) => r.sendRate
      const rows: Array<Array<string>> = [[
        `C=${c}`,
        "steady jobs/s",
        "/ raw",
        "/ best peer",
        "cold jobs/s",
        "/ raw",
        "/ best peer",
        "send jobs/s",
        "/ raw",
        "/ best peer",
        "peak RSS",
        "CPU"
      ]]
      for (const a of adapters) {
        if (!results.some((r) => r.adapter === a && r.c === c)) continue
        const partial = results.some((r) => r.adapter === a && r.c === c && r.steadyDone < steadyJobs) ? " +" : ""
        const coldPartial = results.some((r) => r.adapter === a && r.c === c && r.coldPartial === true) ? " +" : ""
        rows.push([
          a,
          `${fmtRate(med(a, steady))}${partial}`,
          fmtRatio(med(a, steady), med("raw-pg", steady)),
          fmtRatio(med(a, steady), best(steady)),
          `${fmtRate(med(a, cold))}${coldPartial}`,
          fmtRatio(med(a, cold), med("raw-pg", cold)),
          fmtRatio(med(a, cold), best(cold)),
          fmtRate(med(a, send)),
          fmtRatio(med(a, send), med("raw-pg", send)),
          fmtRatio(med(a, send), best(send)),
          fmtMb(med(a, (r) => r.rssKb)),
          fmtPct(med(a, (r) => r.cpuShare))
        ])
      }
      console.log(table(rows))
      console.log("")
    }
    for (const r of results.filter((r) => r.steadyDone < steadyJobs)) {
      if (r.coldPartial === true) {
        console.log(`+ ${r.adapter} at C=${r.c} (repetition ${r.rep}): the budget ran out in the cold part; its cold rate is over the jobs finished by then, no steady rate`)
        continue
      }
      console.log(`+ ${r.adapter} at C=${r.c} (repetition ${r.rep}): the budget ran out with ${r.steadyDone.toLocaleString("en-US")} of ${steadyJobs.toLocaleString("en-US")} steady jobs finished; the rate is theirs`)
    }
    if (latencies.length > 0) {
      const rows: Array<Array<string>> = [["pickup latency", "p50", "p95", "p99", "max", "n"]]
      for (const l of latencies) {
        rows.push([l.adapter, fmtMs(percentile(l.values, 50)), fmtMs(percentile(l.values, 95)), fmtMs(percentile(l.values, 99)), fmtMs(percentile(l.values, 100)), `${l.values.length}/${l.expected}`])
        if (l.values.length < l.expected) failures.push(`${l.adapter}: ${l.values.length}/${l.expected} latency samples`)
      }
      console.log(`pickup latency across processes (handler start - send time; idle worker at C=10, single sends ${config.latencyIntervalMs} ms apart)`)
      console.log(table(rows))
      console.log("")
    }
    if (kills.length > 0) {
      const rows: Array<Array<string>> = [["SIGKILL-to-rerun", "kill -> rerun starts", "the adapter's bound"]]
      for (const k of kills) rows.push([k.adapter, k.rerunMs === undefined ? `> ${fmtS(config.killBudgetMs)}` : fmtS(k.rerunMs), killBound[k.adapter]])
      console.log("SIGKILL-to-rerun (one job whose handler never finishes; its worker SIGKILLed, a fresh worker started at once; its start-up included)")
      console.log(table(rows))
      console.log("")
    }
    console.log(`best peer: the faster of ${PEERS.join(" and ")} in that column (a peer's own row: 1.00 for the faster one)`)
    console.log(`at end: ${loadLine()}`)
    for (const f of failures) console.log(`failed: ${f}`)
    console.log(failures.length === 0 ? "DONE" : "FAIL")
    return failures.length === 0 ? 0 : 1
  } finally {
    for (const p of [...live]) await stopProcess(p, 5_000)
    await admin?.end().catch(() => undefined)
    await server?.destroy().catch(() => undefined)
    await endLogs()
  }
}

main().then(
  (code) => process.exit(code),
  (error) => {
    console.error(`bench:peers: ${error instanceof Error ? error.stack ?? error.message : String(error)}`)
    process.exit(1)
  }
)
