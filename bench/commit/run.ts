/**
 * `npm run bench:commit`: what the commit step (`context.commit(effect)`, exactly-once database
 * effects) costs in messages/s against plain acks (issue 28, item 2).
 *
 * One workload, three handlers (bench/commit/worker.ts), each in ONE worker process built like the
 * README's worker, at each concurrency C (default 10, 50):
 *   - noop:   no handler work, the consumer's plain batched ack (today's throughput);
 *   - plain:  `UPDATE counters SET n = n + 1 WHERE key = $1` (autocommit, main pool), then the plain
 *             batched ack (many acks in one statement, on the lease pool): at least once;
 *   - commit: the same UPDATE inside `context.commit(...)`: BEGIN; SELECT ... FOR UPDATE of the
 *             message by its lease token; the UPDATE; the fenced DELETE + history INSERT; COMMIT,
 *             on the store's main pool: exactly once.
 * Each run: a fresh schema (leasehold's tables, migrated, plus `counters (key int PRIMARY KEY,
 * n bigint)` with BENCH_KEYS rows at 0), W + N messages (default 2,000 warm-up + 20,000 measured)
 * whose payload names key i % BENCH_KEYS, VACUUM ANALYZE and CHECKPOINT, then the worker. Timed as
 * `npm run bench:own` times it: steady = from the W-th handler start to the table seen empty (N
 * messages); cold = all W + N from the first handler start. Variants alternate within each
 * repetition (the first variant rotating from one repetition to the next); the table shows medians.
 *
 * Honesty check, after every run (worker stopped): the counters' sum against the messages acked
 * (W + N - messages left). The commit variant must match exactly (a run whose UPDATE landed was
 * acked in the same transaction, and the other way round); plain may exceed it (at least once: a
 * rerun updates again) but never fall short; noop leaves every counter at 0. A mismatch fails the run.
 *
 * PostgreSQL: a throwaway server with DURABLE settings (fsync, synchronous_commit, full_page_writes
 * on, as `npm run bench:own`), or LEASEHOLD_DATABASE_URL (a schema per run, dropped after it). The worker
 * runs as compiled JavaScript (tsc -p bench/commit/tsconfig.json into <log dir>/build).
 *
 * Knobs (environment):
 *   BENCH_MESSAGES      measured messages per run (default 20000)
 *   BENCH_WARMUP        warm-up messages per run (default 2000; 0: none)
 *   BENCH_KEYS          counter rows (default 1000)
 *   BENCH_CONCURRENCY   list of C (default "10,50")
 *   BENCH_REPS          repetitions (default 3)
 *   BENCH_VARIANTS      the variants and their order (default "noop,plain,commit"); `<variant>@<n>` runs one with a
 *                       main pool of n connections (e.g. "plain,commit,plain@50,commit@50")
 *   BENCH_POOL          the worker's main pool size (default: QueueConfig's, 10)
 *   BENCH_LEASEHOLD_<NAME>  passed to the worker as LEASEHOLD_<NAME>
 *   BENCH_RUN_BUDGET    time budget of one run after its warm-up (default 90s; 0: none): then measured on the messages acked
 *   BENCH_PG_STATS=1    per message, from the server: statements by kind (pg_stat_statements), transactions
 *                       committed (pg_stat_database) and WAL flushes (pg_stat_io, object wal)
 *   BENCH_CPU_PROF=1    the first commit run at the largest C under node --cpu-prof; its hottest frames
 *   BENCH_FAST_PG=1     the embedded server without durability
 *   BENCH_QUICK=1       500 warm-up + 2,000 measured messages, one repetition (a smoke check)
 *   BENCH_LOG_DIR       worker output (default .tmp/bench-commit/<time>)
 */
import { execFileSync } from "node:child_process"
import { existsSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs"
import { availableParallelism, cpus, loadavg } from "node:os"
import { isAbsolute, join, relative } from "node:path"
import { Effect } from "effect"
import { type PostgresServer, startPostgres } from "../../dev/EmbeddedPostgres.ts"
import {
  type Admin,
  commitProbe,
  countOf,
  cpuSeconds,
  dropSchema,
  fmtPct,
  fmtRate,
  handledOrBudget,
  median,
  openAdmin,
  type Proc,
  query,
  ratio,
  startProcess,
  stopOnSignal,
  stopProcess,
  whenEmpty,
  runAsProcess,
  shutDown
} from "../support/orchestrator.ts"
import * as PgQueueStore from "../../src/PgQueueStore.ts"
import { envInt, envMs, nodeBinary, repoRoot, sleep, table } from "../chaos/lib.ts"
import { format as formatProfile, hottest } from "../throughput/profile.ts"
import { QUEUE, wallMs } from "../throughput/protocol.ts"

// ---------------------------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------------------------

type Variant = "noop" | "plain" | "commit"
/** A variant as BENCH_VARIANTS names it: `commit`, or `commit@50` (a main pool of 50). */
interface RunKind {
  readonly label: string
  readonly variant: Variant
  readonly pool: string | undefined
}

const quick = process.env["BENCH_QUICK"] === "1"
const list = (name: string, fallback: string) => (process.env[name] ?? fallback).split(",").map((s) => s.trim()).filter((s) => s !== "")

const config = {
  messages: envInt("BENCH_MESSAGES", quick ? 2_000 : 20_000),
  warmup: envInt("BENCH_WARMUP", quick ? 500 : 2_000),
  keys: Math.max(1, envInt("BENCH_KEYS", 1_000)),
  concurrencies: list("BENCH_CONCURRENCY", "10,50").map((c) => {
    if (!/^\d+$/.test(c) || Number(c) < 1) throw new Error(`BENCH_CONCURRENCY: expected positive whole numbers, got ${JSON.stringify(c)}`)
    return Number(c)
  }),
  reps: Math.max(1, envInt("BENCH_REPS", quick ? 1 : 3)),
  variants: list("BENCH_VARIANTS", "noop,plain,commit").map((label): RunKind => {
    const m = /^(noop|plain|commit)(?:@(\d+))?$/.exec(label)
    if (m === null) throw new Error(`BENCH_VARIANTS: expected noop, plain, commit (each with an optional @<pool size>), got ${JSON.stringify(label)}`)
    return { label, variant: m[1] as Variant, pool: m[2] }
  }),
  pool: process.env["BENCH_POOL"] ?? "",
  runBudgetMs: envMs("BENCH_RUN_BUDGET", 90_000),
  pgStats: process.env["BENCH_PG_STATS"] === "1",
  cpuProf: process.env["BENCH_CPU_PROF"] === "1",
  fastPg: process.env["BENCH_FAST_PG"] === "1",
  logDir: process.env["BENCH_LOG_DIR"] ?? join(repoRoot, ".tmp", "bench-commit", new Date().toISOString().replace(/[:.]/g, "-"))
}
const perRun = config.warmup + config.messages

const extraEnv: Record<string, string> = {}
for (const [key, value] of Object.entries(process.env)) {
  if (key.startsWith("BENCH_LEASEHOLD_") && value !== undefined) extraEnv[`LEASEHOLD_${key.slice("BENCH_LEASEHOLD_".length)}`] = value
}

const t0 = Date.now()
const log = (text: string) => console.log(`[bench:commit +${((Date.now() - t0) / 1000).toFixed(1)}s] ${text}`)
const runId = `${process.pid}_${Math.random().toString(36).slice(2, 6)}`

// ---------------------------------------------------------------------------------------------
// The compiled worker, and its process
// ---------------------------------------------------------------------------------------------

const buildDir = (() => {
  const rel = relative(repoRoot, config.logDir)
  const inRepo = rel !== "" && !rel.startsWith("..") && !isAbsolute(rel)
  return inRepo ? join(config.logDir, "build") : join(repoRoot, ".tmp", "bench-build", `commit-${runId}`)
})()
const workerJs = join(buildDir, "bench", "commit", "worker.js")

/** tsc -p bench/commit/tsconfig.json into buildDir; type errors are printed and the emitted code runs anyway. */
const compileWorker = (): number => {
  rmSync(buildDir, { recursive: true, force: true })
  mkdirSync(buildDir, { recursive: true })
  let typeErrors = 0
  try {
    execFileSync(nodeBinary, [join(repoRoot, "node_modules", ".bin", "tsc"), "-p", join(repoRoot, "bench", "commit", "tsconfig.json"), "--outDir", buildDir], {
      cwd: repoRoot,
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"]
    })
  } catch (error) {
    const e = error as { stdout?: string; stderr?: string }
    const output = `${e.stdout ?? ""}${e.stderr ?? ""}`
    typeErrors = output.match(/error TS\d+/g)?.length ?? 0
    if (typeErrors === 0 || !existsSync(workerJs)) throw new Error(`tsc -p bench/commit/tsconfig.json failed:\n${output}`)
    log(`tsc reported ${typeErrors} type error(s); the emitted JavaScript runs anyway:\n${output.trimEnd()}`)
  }
  writeFileSync(join(buildDir, "package.json"), `${JSON.stringify({ type: "module", private: true })}\n`)
  return typeErrors
}

// ---------------------------------------------------------------------------------------------
// Database
// ---------------------------------------------------------------------------------------------

/** Start the compiled commit worker as `name`, with type stripping off. */
const startWorker = (name: string, env: Record<string, string>, nodeArgs: ReadonlyArray<string>): Proc =>
  startProcess({ name, script: workerJs, logDir: config.logDir, env, nodeArgs: ["--no-experimental-strip-types", ...nodeArgs] })

/** A fresh schema: leasehold's tables holding `count` messages on the bench queue, and the counters at 0. */
const prepareSchema = async (admin: Admin, schema: string, count: number): Promise<void> => {
  await dropSchema(admin, schema)
  await admin.runPromise(Effect.scoped(Effect.gen(function*() {
    const store = yield* PgQueueStore.make({ schema, leasePool: false })
    const CHUNK = 5_000
    for (let from = 0; from < count; from += CHUNK) {
      const batch = Array.from({ length: Math.min(CHUNK, count - from) }, (_, k) => ({ task: "count", payload: { i: from + k, key: (from + k) % config.keys } }))
      yield* store.send(QUEUE, batch)
    }
  })))
  await query(admin, `CREATE TABLE ${schema}.counters (key integer PRIMARY KEY, n bigint NOT NULL DEFAULT 0)`)
  await query(admin, `INSERT INTO ${schema}.counters (key) SELECT generate_series(0, $1::int - 1)`, [config.keys])
  await query(admin, `VACUUM ANALYZE ${schema}.messages`)
  await query(admin, `VACUUM ANALYZE ${schema}.counters`)
  await query(admin, "CHECKPOINT").catch(() => undefined)
}

/** BENCH_PG_STATS=1: what the server saw of one run, per message acked. */
interface ServerSide {
  /** Statement kind -> calls and execution microseconds, per message. */
  readonly kinds: ReadonlyArray<{ readonly kind: string; readonly calls: number; readonly execUs: number }>
  readonly commits: number
  readonly walFsyncs: number | undefined
  readonly walFsyncUs: number | undefined
  readonly walBytes: number | undefined
}

const statementKind = (text: string): string =>
  /WITH picked AS/.test(text) ? "claim"
  : /WITH items AS/.test(text) ? "finishing write (DELETE + history)"
  : /WITH acked AS/.test(text) ? "commit: ack (DELETE + history, one row)"
  : /jsonb_to_recordset/.test(text) ? "renew"
  : /FOR UPDATE\s*$/.test(text.trim()) && /lease_token/.test(text) ? "commit: lock (SELECT ... FOR UPDATE)"
  : /^\s*UPDATE\s+\S*counters/i.test(text) ? "UPDATE counters"
  : /^\s*(BEGIN|START)/i.test(text) ? "BEGIN"
  : /^\s*COMMIT/i.test(text) ? "COMMIT"
  : /^\s*(ROLLBACK|SAVEPOINT|RELEASE)/i.test(text) ? "ROLLBACK/SAVEPOINT"
  : /^\s*SET\s+(LOCAL\s+)?synchronous_commit/i.test(text) ? "SET synchronous_commit"
  : "other"

interface StatsBefore {
  readonly commits: number
  readonly io: { readonly fsyncs: number; readonly fsyncMs: number } | undefined
  readonly walBytes: number | undefined
}

const ioWal = async (admin: Admin) =>
  query<{ fsyncs: unknown; ms: unknown }>(admin, `SELECT coalesce(sum(fsyncs), 0) AS fsyncs, coalesce(sum(fsync_time), 0) AS ms FROM pg_stat_io WHERE object = 'wal'`)
    .then((r) => ({ fsyncs: Number(r[0]?.fsyncs ?? 0), fsyncMs: Number(r[0]?.ms ?? 0) }))
    .catch(() => undefined)
const walBytes = async (admin: Admin) => countOf(admin, "SELECT wal_bytes AS n FROM pg_stat_wal").catch(() => undefined)
const commitsSoFar = async (admin: Admin) => {
  await query(admin, "SELECT pg_stat_clear_snapshot()")
  return countOf(admin, "SELECT xact_commit AS n FROM pg_stat_database WHERE datname = current_database()")
}

const statsBefore = async (admin: Admin): Promise<StatsBefore> => {
  await query(admin, "SELECT pg_stat_statements_reset()")
  return { commits: await commitsSoFar(admin), io: await ioWal(admin), walBytes: await walBytes(admin) }
}

const statsAfter = async (admin: Admin, before: StatsBefore, messages: number): Promise<ServerSide> => {
  await sleep(600) // the statistics of the worker's backends reach the shared counters on their exit and every ~1 s
  // Every statement since the reset (the server is this bench's alone) but the orchestrator's own polls and checks.
  const rows = await query<{ query: string; calls: unknown; ms: unknown }>(
    admin,
    `SELECT query, calls, total_exec_time AS ms FROM pg_stat_statements
     WHERE query NOT LIKE 'SELECT count(*)::int AS n FROM%' AND query NOT LIKE 'SELECT coalesce(sum(n)%' AND query NOT LIKE 'SELECT pg_stat%'`
  )
  const byKind = new Map<string, { calls: number; ms: number }>()
  for (const row of rows) {
    const kind = statementKind(row.query)
    const k = byKind.get(kind) ?? { calls: 0, ms: 0 }
    k.calls += Number(row.calls)
    k.ms += Number(row.ms)
    byKind.set(kind, k)
  }
  const per = Math.max(1, messages)
  const io = await ioWal(admin)
  const wal = await walBytes(admin)
  return {
    kinds: [...byKind].map(([kind, k]) => ({ kind, calls: k.calls / per, execUs: (k.ms * 1000) / per })).sort((a, b) => b.execUs - a.execUs),
    commits: ((await commitsSoFar(admin)) - before.commits) / per,
    walFsyncs: io === undefined || before.io === undefined ? undefined : (io.fsyncs - before.io.fsyncs) / per,
    walFsyncUs: io === undefined || before.io === undefined ? undefined : ((io.fsyncMs - before.io.fsyncMs) * 1000) / per,
    walBytes: wal === undefined || before.walBytes === undefined ? undefined : (wal - before.walBytes) / per
  }
}

// ---------------------------------------------------------------------------------------------
// A run
// ---------------------------------------------------------------------------------------------

interface Result {
  readonly variant: Variant
  readonly label: string
  readonly c: number
  readonly rep: number
  readonly done: number
  readonly rate: number
  readonly coldRate: number
  readonly cpuShare: number | undefined
  /** The handler's database part after the warm-up: p50, p95, mean (ms). */
  readonly db: { readonly p50: number; readonly p95: number; readonly mean: number } | undefined
  /** The commit variant: means (ms) of call -> effect start, the UPDATE, effect end -> committed. */
  readonly parts: { readonly before: number; readonly update: number; readonly after: number } | undefined
  readonly sum: number
  readonly acked: number
  readonly honest: boolean
  readonly profiled: boolean
  readonly server: ServerSide | undefined
}

const run = async (admin: Admin, url: string, kind: RunKind, c: number, rep: number): Promise<Result> => {
  const { label, variant } = kind
  const tag = `${label.replace("@", "-pool")}-c${c}-r${rep}`
  const schema = `bench_commit_${runId}_${label.replace("@", "_p")}_c${c}_r${rep}`
  await prepareSchema(admin, schema, perRun)
  const profiled = config.cpuProf && variant === "commit" && rep === 1 && c === Math.max(...config.concurrencies)
  const nodeArgs = profiled ? ["--cpu-prof", `--cpu-prof-dir=${join(config.logDir, "profile")}`] : []
  const before = config.pgStats ? await statsBefore(admin) : undefined
  const w = startWorker(tag, {
    BENCH_SCHEMA: schema,
    BENCH_MODE: "throughput",
    BENCH_EXPECT: String(perRun),
    BENCH_WARMUP: String(config.warmup),
    BENCH_CONCURRENCY: String(c),
    BENCH_VARIANT: variant,
    BENCH_POOL: kind.pool ?? config.pool,
    LEASEHOLD_DATABASE_URL: url,
    LEASEHOLD_SCHEMA: schema,
    LEASEHOLD_QUEUES: QUEUE,
    LEASEHOLD_CONCURRENCY: String(c),
    ...extraEnv
  }, nodeArgs)
  try {
    await w.waitLine("READY", 60_000)
    const first = Number((await w.waitLine("FIRST", 600_000)).split(" ")[1])
    const start = config.warmup > 0 ? Number((await w.waitLine("WARM", 600_000)).split(" ")[2]) : first
    const cpu0 = cpuSeconds(w.pid)
    const outcome = await handledOrBudget(w, start, config.runBudgetMs, 600_000)
    let end: number
    let done: number
    if (outcome === "handled") {
      end = await whenEmpty(admin, schema, 60_000)
      done = config.messages
    } else {
      end = wallMs()
      done = Math.max(0, config.messages - (await countOf(admin, `SELECT count(*)::int AS n FROM ${schema}.messages`)))
    }
    const cpu1 = cpuSeconds(w.pid)
    await stopProcess(w)
    if (w.exit?.code !== 0) log(`${tag}: the worker exited with ${JSON.stringify(w.exit)}`)
    // The honesty check, with the worker gone: counters against the messages acked.
    const left = await countOf(admin, `SELECT count(*)::int AS n FROM ${schema}.messages`)
    const acked = perRun - left
    const sum = await countOf(admin, `SELECT coalesce(sum(n), 0)::bigint AS n FROM ${schema}.counters`)
    const honest = variant === "commit" ? sum === acked : variant === "plain" ? sum >= acked : sum === 0
    const server = before === undefined ? undefined : await statsAfter(admin, before, acked)
    const dbLine = w.lines.find((l) => l.startsWith("DBTIME "))?.split(" ")
    const db = dbLine === undefined || Number(dbLine[1]) === 0 ? undefined : { p50: Number(dbLine[2]), p95: Number(dbLine[3]), mean: Number(dbLine[4]) }
    const partsLine = w.lines.find((l) => l.startsWith("DBPARTS "))?.slice("DBPARTS ".length).split(" | ").map((p) => p.split(" "))
    const parts = partsLine === undefined || partsLine.length !== 3
      ? undefined
      : { before: Number(partsLine[0]![3]), update: Number(partsLine[1]![3]), after: Number(partsLine[2]![3]) }
    const ms = end - start
    const result: Result = {
      variant,
      label,
      c,
      rep,
      done,
      rate: done / (ms / 1000),
      coldRate: (config.warmup + done) / ((end - first) / 1000),
      cpuShare: cpu0 === undefined || cpu1 === undefined ? undefined : (cpu1 - cpu0) / (ms / 1000),
      db,
      parts,
      sum,
      acked,
      honest,
      profiled,
      server
    }
    log(
      `${tag}: ${done === config.messages ? `all ${done}` : `${done} of ${config.messages} (time budget)`} in ${(ms / 1000).toFixed(2)} s = ` +
        `${Math.round(result.rate)} msg/s (cold ${Math.round(result.coldRate)}), worker CPU ${fmtPct(result.cpuShare)}` +
        (db === undefined ? "" : `, ${variant === "commit" ? "commit step" : "UPDATE"} p50 ${db.p50.toFixed(2)} ms p95 ${db.p95.toFixed(2)} ms mean ${db.mean.toFixed(2)} ms`) +
        (parts === undefined ? "" : ` (means: to the effect ${parts.before.toFixed(2)}, UPDATE ${parts.update.toFixed(2)}, to committed ${parts.after.toFixed(2)} ms)`) +
        `; counters ${sum} for ${acked} acked: ${honest ? "ok" : "MISMATCH"}${profiled ? " [profiled]" : ""}`
    )
    if (server !== undefined) log(`${tag} on the server, per message: ${formatServer(server)}`)
    return result
  } finally {
    await stopProcess(w)
    await dropSchema(admin, schema)
  }
}

// ---------------------------------------------------------------------------------------------
// Printing
// ---------------------------------------------------------------------------------------------

const formatServer = (s: ServerSide) =>
  `${s.commits.toFixed(2)} transactions committed, ` +
  (s.walFsyncs === undefined ? "" : `${s.walFsyncs.toFixed(3)} WAL fsyncs (${s.walFsyncUs!.toFixed(0)} us), `) +
  (s.walBytes === undefined ? "" : `${Math.round(s.walBytes)} B of WAL; `) +
  s.kinds.filter((k) => k.execUs >= 0.05).map((k) => `${k.kind} ${k.calls.toFixed(2)} calls ${k.execUs.toFixed(1)} us`).join(", ")

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

const main = async (): Promise<number> => {
  const externalUrl = process.env["LEASEHOLD_DATABASE_URL"]
  let server: PostgresServer | undefined
  let admin: Admin | undefined
  stopOnSignal("bench:commit", () => server)
  try {
    const typeErrors = compileWorker()
    if (externalUrl !== undefined && externalUrl !== "") {
      log("using LEASEHOLD_DATABASE_URL; a schema per run, dropped after it")
    } else {
      server = await startPostgres({
        forTests: config.fastPg,
        settings: config.pgStats
          ? ["shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=top", "pg_stat_statements.track_utility=on", "track_io_timing=on", "track_wal_io_timing=on"]
          : []
      })
    }
    const url = server?.url ?? externalUrl!
    admin = await openAdmin(url, "bench-commit-orchestrator")
    if (config.pgStats) await query(admin, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    const settings = await query<{ name: string; setting: string }>(
      admin,
      `SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', 'commit_delay')`
    )
    const setting = (name: string) => settings.find((s) => s.name === name)?.setting ?? "?"
    const version = (await query<{ v: string }>(admin, "SELECT current_setting('server_version') AS v"))[0]?.v ?? "?"
    const probe = await commitProbe(admin, `bench_commit_${runId}_probe`)
    const code = (() => {
      try {
        const head = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: repoRoot, encoding: "utf8" }).trim()
        const dirty = execFileSync("git", ["status", "--porcelain", "--", "src", "bench/commit"], { cwd: repoRoot, encoding: "utf8" }).trim() !== ""
        return `${head}${dirty ? " with uncommitted changes in src/ or bench/commit/" : ""}`
      } catch {
        return "(not a git checkout)"
      }
    })()
    const loadLine = () => `load average ${loadavg().map((l) => l.toFixed(2)).join(", ")} on ${availableParallelism()} cores`
    for (
      const h of [
        `code: ${code}; ${new Date().toISOString()}`,
        `machine: ${availableParallelism()} cores (${(cpus()[0]?.model ?? "?").trim()}), Node ${process.versions.node}`,
        `PostgreSQL ${version} (${server === undefined ? "LEASEHOLD_DATABASE_URL" : "embedded, same machine"}): fsync=${setting("fsync")}, ` +
        `synchronous_commit=${setting("synchronous_commit")}, full_page_writes=${setting("full_page_writes")}, commit_delay=${setting("commit_delay")}; ` +
        `serial commits ${Math.round(probe.perSecond)}/s (p50 ${probe.p50Ms.toFixed(2)} ms)`,
        `at start: ${loadLine()}`,
        `workload: ${perRun.toLocaleString("en-US")} messages per run (${config.warmup.toLocaleString("en-US")} warm-up), counters over ${config.keys} keys; ` +
        `variants ${config.variants.map((k) => k.label).join(", ")}; C = ${config.concurrencies.join(", ")}; ${config.reps} repetition(s), alternating` +
        (config.runBudgetMs > 0 ? `; run budget ${Math.round(config.runBudgetMs / 1000)} s after the warm-up` : ""),
        `worker: Consumer.layerFromEnv + ConsumerPresence.layerFromEnv() + PgQueueStore.layer() + QueueConfig.pgLayerFromEnv(), compiled ` +
        `(tsc -p bench/commit/tsconfig.json${typeErrors > 0 ? `, ${typeErrors} type error(s)` : ""}); main pool ${config.pool === "" ? "default (10)" : config.pool}` +
        (Object.keys(extraEnv).length === 0 ? "" : `; also ${Object.entries(extraEnv).map(([k, v]) => `${k}=${v}`).join(" ")}`)
      ]
    ) console.log(h)
    console.log(`worker logs: ${config.logDir}`)

    const results: Array<Result> = []
    for (const c of config.concurrencies) {
      for (let rep = 1; rep <= config.reps; rep++) {
        const shift = (rep - 1) % config.variants.length
        const order = [...config.variants.slice(shift), ...config.variants.slice(0, shift)]
        for (const kind of order) results.push(await run(admin, url, kind, c, rep))
      }
    }

    const rows: Array<Array<string>> = [[
      "C",
      "noop msg/s",
      "plain msg/s",
      "commit msg/s",
      "commit/plain",
      "commit/noop",
      "cold: noop",
      "plain",
      "commit",
      "commit/plain",
      "UPDATE p50 (plain)",
      "commit step p50",
      "worker CPU noop/plain/commit",
      "counters"
    ]]
    for (const c of config.concurrencies) {
      const of = (v: Variant) => results.filter((r) => r.label === v && r.c === c)
      const med = (v: Variant, f: (r: Result) => number | undefined) => median(of(v).map(f).filter((x): x is number => x !== undefined))
      const partial = (v: Variant) => (of(v).some((r) => r.done < config.messages) ? " +" : "")
      const rate = (v: Variant) => med(v, (r) => r.rate)
      const cold = (v: Variant) => med(v, (r) => r.coldRate)
      const dbp50 = (v: Variant) => med(v, (r) => r.db?.p50)
      const honest = results.filter((r) => r.c === c).every((r) => r.honest)
      rows.push([
        String(c),
        `${fmtRate(rate("noop"))}${partial("noop")}`,
        `${fmtRate(rate("plain"))}${partial("plain")}`,
        `${fmtRate(rate("commit"))}${partial("commit")}${of("commit").some((r) => r.profiled) ? " *" : ""}`,
        ratio(rate("commit"), rate("plain")),
        ratio(rate("commit"), rate("noop")),
        fmtRate(cold("noop")),
        fmtRate(cold("plain")),
        fmtRate(cold("commit")),
        ratio(cold("commit"), cold("plain")),
        dbp50("plain") === undefined ? "-" : `${dbp50("plain")!.toFixed(2)} ms`,
        dbp50("commit") === undefined ? "-" : `${dbp50("commit")!.toFixed(2)} ms`,
        (["noop", "plain", "commit"] as const).map((v) => fmtPct(med(v, (r) => r.cpuShare))).join(" / "),
        honest ? "exact" : "MISMATCH"
      ])
    }
    console.log("")
    console.log(
      `messages/s (steady: ${config.messages.toLocaleString("en-US")} after ${config.warmup.toLocaleString("en-US")} of warm-up; cold: all ` +
        `${perRun.toLocaleString("en-US")} from the first handler start; ${config.reps > 1 ? `median of ${config.reps}` : "one run each"})`
    )
    console.log(table(rows))
    // Every variant, with its ratio to the plain (and noop) run of the same repetition: the median of those ratios.
    const krows: Array<Array<string>> = [["C", "variant", "steady msg/s", "cold msg/s", "/ plain, same rep (median)", "/ noop, same rep (median)", "db part mean", "commit: to effect / UPDATE / to committed (means)"]]
    for (const c of config.concurrencies) {
      for (const { label } of config.variants) {
        const rs = results.filter((r) => r.c === c && r.label === label)
        const same = (base: string) =>
          median(rs.flatMap((r) => {
            const b = results.find((x) => x.c === c && x.rep === r.rep && x.label === base)
            return b === undefined || b.rate === 0 ? [] : [r.rate / b.rate]
          }))
        const med = (f: (r: Result) => number | undefined) => median(rs.map(f).filter((x): x is number => x !== undefined))
        const f2 = (x: number | undefined, unit = "") => (x === undefined ? "-" : `${x.toFixed(2)}${unit}`)
        krows.push([
          String(c),
          label,
          fmtRate(med((r) => r.rate)),
          fmtRate(med((r) => r.coldRate)),
          f2(same("plain")),
          f2(same("noop")),
          f2(med((r) => r.db?.mean), " ms"),
          rs.some((r) => r.parts !== undefined)
            ? `${f2(med((r) => r.parts?.before))} / ${f2(med((r) => r.parts?.update))} / ${f2(med((r) => r.parts?.after))} ms`
            : "-"
        ])
      }
    }
    console.log("")
    console.log("by variant (medians; ratios: median over the repetitions of the ratio to the same repetition's run)")
    console.log(table(krows))
    console.log("per run (steady msg/s, in run order):")
    for (const c of config.concurrencies) {
      console.log(`  C=${c}: ${results.filter((r) => r.c === c).map((r) => `${r.label} ${fmtRate(r.rate)}`).join(", ")}`)
    }
    if (results.some((r) => r.parts !== undefined)) {
      console.log("")
      console.log("where a commit step's time goes (means over the measured runs, medians across repetitions; ms):")
      const prow: Array<Array<string>> = [["C", "plain: UPDATE (autocommit)", "commit step", "call -> effect start (renewer, connection, BEGIN, lock)", "UPDATE", "effect end -> committed (finishing write, COMMIT, flush)"]]
      for (const c of config.concurrencies) {
        const med = (v: Variant, f: (r: Result) => number | undefined) =>
          median(results.filter((r) => r.label === v && r.c === c).map(f).filter((x): x is number => x !== undefined))
        const f = (x: number | undefined) => (x === undefined ? "-" : x.toFixed(2))
        prow.push([String(c), f(med("plain", (r) => r.db?.mean)), f(med("commit", (r) => r.db?.mean)), f(med("commit", (r) => r.parts?.before)), f(med("commit", (r) => r.parts?.update)), f(med("commit", (r) => r.parts?.after))])
      }
      console.log(table(prow))
    }
    for (const r of results.filter((r) => r.done < config.messages)) console.log(`+ ${r.label} at C=${r.c} rep ${r.rep}: budget spent, ${r.done} of ${config.messages} acked`)
    if (results.some((r) => r.profiled)) console.log("* one of these runs was profiled (node --cpu-prof): slower than usual")
    if (config.pgStats) {
      console.log("")
      console.log("on the server, per message acked (medians; statement execution time excludes the commits' WAL flushes):")
      for (const c of config.concurrencies) {
        for (const { label: v } of config.variants) {
          const rs = results.filter((r) => r.c === c && r.label === v && r.server !== undefined)
          if (rs.length === 0) continue
          const mid = [...rs].sort((a, b) => a.rate - b.rate)[Math.floor(rs.length / 2)]!
          console.log(`  C=${c} ${v} (the run of median rate, ${fmtRate(mid.rate)} msg/s): ${formatServer(mid.server!)}`)
        }
      }
    }
    const profileDir = join(config.logDir, "profile")
    if (config.cpuProf && existsSync(profileDir)) {
      const file = readdirSync(profileDir).filter((f) => f.endsWith(".cpuprofile")).map((f) => join(profileDir, f))
        .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs)[0]
      if (file !== undefined) {
        console.log("")
        console.log(`commit worker at C=${Math.max(...config.concurrencies)}, ${file}`)
        console.log(formatProfile(hottest(file, 12)))
      }
    }
    console.log("")
    console.log(`at end: ${loadLine()}`)
    const dishonest = results.filter((r) => !r.honest)
    for (const r of dishonest) console.log(`counter check failed: ${r.label} C=${r.c} rep ${r.rep}: counters sum ${r.sum}, messages acked ${r.acked}`)
    console.log(dishonest.length === 0 ? "DONE" : "FAIL")
    return dishonest.length === 0 ? 0 : 1
  } finally {
    await shutDown(admin, server)
  }
}

runAsProcess("bench:commit", main)
