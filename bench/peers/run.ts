/**
 * `npm run bench` (issue 29): the benchmark a user would run. leasehold as an installed app loads
 * it, a raw node-postgres SKIP LOCKED worker, graphile-worker 0.18 and pg-boss 12, in one run on
 * one server, at C = 1, 10, 50 and 200.
 *
 * - Install (install.ts): `npm pack` (its prepack builds dist/), the tarball installed under
 *   `.tmp/peers` with effect, @effect/sql-pg and @effect/platform-node at this checkout's
 *   versions, and beside it the peers (`graphile-worker@0.18`, `pg-boss@12`), for the benchmark
 *   only, never dependencies of the package; a peer whose install fails is skipped with a
 *   message. The adapter scripts (bench/peers/<adapter>.ts) are compiled by tsc into
 *   `.tmp/peers/app` and run as JavaScript (`node --no-experimental-strip-types`): leasehold's
 *   import `leasehold` by name, which Node finds in `.tmp/peers/node_modules` (dist/index.js).
 * - One durable embedded PostgreSQL (dev/EmbeddedPostgres.ts: fsync, synchronous_commit,
 *   full_page_writes on), a fresh database per run.
 * - Per C, repetition and adapter (throughput.ts), two runs, each in a fresh database with its jobs
 *   bulk-sent by a sender process (set up untimed, PEERS_CHUNK per call), then VACUUM ANALYZE and
 *   CHECKPOINT, then ONE fresh worker process at concurrency C. Cold: PEERS_COLD jobs queued, the
 *   worker's jobs/s from its first handler start to the queue seen empty (no warm-up). Steady:
 *   PEERS_JOBS jobs queued (this send is timed: the bulk send rate), the worker's first PEERS_COLD
 *   jobs its warm-up, the rest from the PEERS_COLD-th handler start to the queue seen empty. Each
 *   part, warm-up included, has PEERS_RUN_BUDGET from its first handler start: what finished by
 *   then is measured, marked + (a warm-up out of budget: no steady rate). Peak RSS: the steady
 *   worker's VmHWM; CPU: its time over the steady window as a share of one core. Adapters
 *   alternate (the listed order in odd repetitions, reversed in even ones); medians, and ratios to
 *   the raw worker and to the best peer (the faster of graphile-worker and pg-boss in that column).
 * - Per adapter (probes.ts), adapters in turn: pickup latency across processes, PEERS_LATENCY_REPS
 *   times (an idle worker at C = 10, a producer process sending 10 unmeasured then
 *   PEERS_LATENCY_SENDS single jobs PEERS_LATENCY_INTERVAL apart; percentiles over all the samples),
 *   and SIGKILL-to-rerun (a never-ending job, its worker A SIGKILLed: kill -> the job's handler
 *   start on worker B, or "> budget" after PEERS_KILL_BUDGET), PEERS_KILL_REPS times with B
 *   already running and idle (what a fleet sees), then PEERS_KILL_FRESH_REPS times with B started
 *   at once after the kill (its start-up included).
 * - Output (report.ts, results.ts): the tables on stdout; every run in `<log dir>/results.json`;
 *   the tables as markdown in bench/results/<date>-<commit>.md for a full run (the README's table is
 *   copied from there), in the log directory for a partial one.
 *
 * Each adapter's settings: its script's doc comment and bench/README.md ("npm run bench").
 *
 * Knobs (environment):
 *   PEERS_QUICK=1            C=10, 6,000 jobs (cold 2,000), 2 x 50 latency sends, 1 kill standing and 1 fresh, 35 s kill budget (a smoke check)
 *   PEERS_CONCURRENCY        list of C (default "1,10,50,200")
 *   PEERS_JOBS               jobs enqueued per run (default 100000)
 *   PEERS_COLD               jobs of the cold run, and the steady run's warm-up (default 20000; < PEERS_JOBS)
 *   PEERS_REPS               repetitions per C and adapter, alternating (default 1)
 *   PEERS_ADAPTERS           which, in order (default "raw-pg,leasehold,graphile-worker,pg-boss")
 *   PEERS_CHUNK              jobs per bulk send call (default 1000)
 *   PEERS_RUN_BUDGET         longest cold run, warm-up and steady window (default 120s; 0: none)
 *   PEERS_LATENCY=0          skip the pickup-latency runs
 *   PEERS_LATENCY_SENDS      measured single sends per adapter and run (default 200; quick 50)
 *   PEERS_LATENCY_REPS       pickup-latency runs per adapter (default 3; quick 2)
 *   PEERS_LATENCY_INTERVAL   time between them (default 20ms)
 *   PEERS_KILL=0             skip the SIGKILL-to-rerun runs
 *   PEERS_KILL_BUDGET        longest wait for the rerun after the SIGKILL (default 60s; quick 35s)
 *   PEERS_KILL_REPS          SIGKILL-to-rerun runs per adapter with B standing, for the p50 (default 5; quick 1)
 *   PEERS_KILL_FRESH_REPS    ... with B fresh (default 1; 0: none). An adapter whose rerun missed the budget
 *                            is not tried again in that kind, nor fresh after missing it standing
 *   PEERS_SKIP_INSTALL=1     no pack, no npm install: use .tmp/peers as an earlier run left it
 *   PEERS_FAST_PG=1          the embedded server without durability
 *   PEERS_LOG_DIR            every process's log and results.json (default .tmp/bench-peers/<time>)
 *   PEERS_RESULTS            the markdown result's path (default above; 0: none)
 *   PEERS_NODE_ARGS          extra node flags for every adapter's processes, the same for each (e.g. a heap profile)
 *   PEERS_PG_STATS=1         the server's execution time and WAL per job in each steady window (pg_stat_statements)
 *   PEERS_LEASEHOLD_<NAME>   passed to leasehold's processes as LEASEHOLD_<NAME> (e.g. PEERS_LEASEHOLD_BATCH_SIZE=200);
 *                            the URL, schema, queues and concurrency stay the run's
 */
import { writeFileSync } from "node:fs"
import { relative } from "node:path"
import { type PostgresServer, startPostgres } from "../../dev/EmbeddedPostgres.ts"
import { repoRoot } from "../chaos/lib.ts"
import { stopOnSignal, runAsProcess, shutDown } from "../support/orchestrator.ts"
import { peerVersion } from "./common.ts"
import { type Adapter, config, log, PEERS, prefix, steadyJobs } from "./config.ts"
import { compile, install, leaseholdEntry } from "./install.ts"
import { type KillKind, type KillResult, killRun, type LatencyResult, latencyRun } from "./probes.ts"
import { connect, type PgClient, workerNodeArgs } from "./processes.ts"
import * as Report from "./report.ts"
import { loadSampler, resultsPath, writeResults } from "./results.ts"
import { type Result, throughputRun } from "./throughput.ts"

/** Every step in turn; a failed step is recorded and the rest go on. */
const attempt = async <A>(what: string, failures: Array<string>, f: () => Promise<A>): Promise<A | undefined> => {
  try {
    return await f()
  } catch (error) {
    const text = `${what}: ${error instanceof Error ? error.message : String(error)}`
    failures.push(text)
    log(`FAILED ${text}`)
    return undefined
  }
}

/** The run's header lines: code, machine, server, adapters, what one run is. */
const headerLines = async (admin: PgClient, adapters: ReadonlyArray<Adapter>, versions: Record<string, string | undefined>, buildMs: number) => {
  const settings = (await admin.query(
    `SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', 'shared_buffers', 'server_version')`
  )).rows as Array<{ name: string; setting: string }>
  const setting = (name: string) => settings.find((s) => s.name === name)?.setting ?? "?"
  const code = Report.codeAtStart
  const n = (x: number) => x.toLocaleString("en-US")
  return [
    `date: ${config.startedAt.toISOString()}`,
    `code: ${code.head}${code.dirty ? " with uncommitted changes in src/, bench/ or package.json" : ""}`,
    Report.machineLine(),
    `PostgreSQL ${setting("server_version")} (embedded, same machine): fsync=${setting("fsync")}, synchronous_commit=${setting("synchronous_commit")}, ` +
      `full_page_writes=${setting("full_page_writes")}, shared_buffers=${Math.round(Number(setting("shared_buffers")) * 8 / 1024)} MB; a fresh database per run`,
    `leasehold: the packed tarball, \`import "leasehold"\` from the adapters resolving to ${leaseholdEntry()}`,
    `adapters: ${adapters.map((a) => (versions[a] === undefined ? a : `${a} ${versions[a]}`)).join(", ")} ` +
      `(installed under ${relative(repoRoot, prefix)}: leasehold from its packed tarball, the peers for the benchmark only; compiled in ${(buildMs / 1000).toFixed(1)} s, run by node ${workerNodeArgs.join(" ")})`,
    `per C and repetition, two runs of ONE fresh worker process at C, each on jobs bulk-sent ${n(config.chunk)} per call into a fresh database: cold, ${n(config.cold)} queued, ` +
      `from the first handler start to the queue seen empty; steady, ${n(config.jobs)} queued (the send timed), the first ${n(config.cold)} a warm-up, ` +
      `the other ${n(steadyJobs)} to the queue seen empty${config.runBudgetMs > 0 ? ` (each part ${Math.round(config.runBudgetMs / 1000)} s at most: then the jobs finished so far, marked +)` : ""}; ` +
      `C = ${config.concurrencies.join(", ")}; ${config.reps} repetition(s)${config.reps > 1 ? ", adapters alternating, medians" : ""}`,
    Report.knobsLine(),
    `at start: ${Report.loadLine()}; busiest processes: ${Report.busiest()}`
  ]
}

/** The adapters in turn: the listed order in odd repetitions, reversed in even ones. */
const inTurn = (adapters: ReadonlyArray<Adapter>, rep: number) => (rep % 2 === 1 ? adapters : [...adapters].reverse())

/** The measurements: every C, repetition and adapter, then the probes per adapter. */
const measure = async (admin: PgClient, serverUrl: string, adapters: ReadonlyArray<Adapter>, failures: Array<string>) => {
  const results: Array<Result> = []
  for (const c of config.concurrencies) {
    for (let rep = 1; rep <= config.reps; rep++) {
      for (const adapter of inTurn(adapters, rep)) {
        const r = await attempt(`${adapter} at C=${c}, repetition ${rep}`, failures, () => throughputRun(admin, serverUrl, adapter, c, rep))
        if (r !== undefined) results.push(r)
      }
    }
  }
  const latencies: Array<LatencyResult> = []
  for (let rep = 1; config.latency && rep <= config.latencyReps; rep++) {
    for (const adapter of inTurn(adapters, rep)) {
      const l = await attempt(`${adapter} pickup latency ${rep}`, failures, () => latencyRun(admin, serverUrl, adapter, rep))
      if (l !== undefined) latencies.push(l)
      if (l !== undefined && l.values.length < l.expected) failures.push(`${adapter}: ${l.values.length}/${l.expected} latency samples (run ${rep})`)
    }
  }
  const kills: Array<KillResult> = []
  // Repeated for a median, adapters in turn; an adapter whose rerun missed the budget is not tried
  // again in that kind, nor fresh after a standing miss (a worker started after the kill cannot
  // rerun sooner than one already running: each adapter's bound is a timeout or the lock probe).
  const missed = new Set<string>()
  const kinds: ReadonlyArray<readonly [KillKind, number]> = [["standing", config.killReps], ["fresh", config.killFreshReps]]
  for (const [kind, reps] of config.kill ? kinds : []) {
    for (let rep = 1; rep <= reps; rep++) {
      for (const adapter of inTurn(adapters, rep).filter((a) => !missed.has(a) && !missed.has(`${a} ${kind}`))) {
        const k = await attempt(`${adapter} SIGKILL-to-rerun (${kind} worker) ${rep}`, failures, () => killRun(admin, serverUrl, adapter, kind))
        if (k !== undefined) kills.push(k)
        if (k === undefined || k.rerunMs === undefined) missed.add(kind === "standing" ? adapter : `${adapter} ${kind}`)
      }
    }
  }
  return { results, latencies, kills }
}

/** The budget notes under the tables. */
const budgetNotes = (results: ReadonlyArray<Result>) =>
  results.flatMap((r) => [
    ...(r.coldPartial === true
      ? [`+ ${r.adapter} at C=${r.c} (repetition ${r.rep}): the cold run's budget ran out; its cold rate is over the jobs finished by then`]
      : []),
    ...(r.warmupPartial === true
      ? [`+ ${r.adapter} at C=${r.c} (repetition ${r.rep}): the budget ran out in the steady run's warm-up; no steady rate`]
      : r.steadyDone < steadyJobs
      ? [`+ ${r.adapter} at C=${r.c} (repetition ${r.rep}): the budget ran out with ${r.steadyDone.toLocaleString("en-US")} of ${steadyJobs.toLocaleString("en-US")} steady jobs finished; the rate is theirs`]
      : [])
  ])

const main = async (): Promise<number> => {
  let server: PostgresServer | undefined
  let admin: PgClient | undefined
  stopOnSignal("bench", () => server)
  const load = loadSampler()
  try {
    const installed = install(config.adapters)
    const adapters = config.adapters.filter((a) => installed.has(a))
    const versions: Record<string, string | undefined> = Object.fromEntries(["leasehold", ...PEERS].map((a) => [a, peerVersion(prefix, a)]))
    const buildMs = compile()
    server = await startPostgres({
      forTests: config.fastPg,
      settings: config.pgStats ? ["shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=top"] : []
    })
    admin = await connect(server.url)
    if (config.pgStats) await admin.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    const header = await headerLines(admin, adapters, versions, buildMs)
    for (const h of header) console.log(h)
    console.log(`worker logs: ${config.logDir}`)
    const failures: Array<string> = []
    const { results, latencies, kills } = await measure(admin, server.url, adapters, failures)
    writeFileSync(`${config.logDir}/results.json`, `${JSON.stringify({ header, results, latencies, kills }, null, 2)}\n`)
    load.stop()
    header.push(`at end: ${Report.loadLine()}; busiest processes: ${Report.busiest()}`, load.line())
    const notes = budgetNotes(results)
    const tables = [
      ...config.concurrencies.map((c) => Report.rateTable(results, adapters, c)),
      ...(config.reps > 1 ? [Report.everyRunTable(results, adapters)] : []),
      ...(config.pgStats ? [Report.serverTable(results, adapters)] : []),
      ...(latencies.length > 0 ? [Report.latencyTable(latencies)] : []),
      ...(kills.length > 0 ? [Report.killTable(kills)] : [])
    ]
    const readme = Report.readmeTable(results, { "graphile-worker": versions["graphile-worker"], "pg-boss": versions["pg-boss"] })
    console.log("")
    for (const t of [...tables, readme]) console.log(Report.plain(t))
    for (const note of notes) console.log(note)
    for (const h of header.slice(-2)) console.log(h)
    const path = resultsPath()
    if (path !== undefined) console.log(`markdown result: ${writeResults(path, [...header, ...notes], readme, tables, failures)}`)
    for (const f of failures) console.log(`failed: ${f}`)
    console.log(failures.length === 0 ? "DONE" : "FAIL")
    return failures.length === 0 ? 0 : 1
  } finally {
    load.stop()
    await shutDown(admin, server)
  }
}

runAsProcess("bench", main)
