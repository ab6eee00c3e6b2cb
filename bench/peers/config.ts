/**
 * The settings of `npm run bench` (bench/peers/run.ts), read once from the environment: the
 * adapters, the concurrencies, the jobs per run, the budgets and where output goes. Every knob is
 * listed in run.ts's doc comment and in bench/README.md.
 */
import { join } from "node:path"
import { envInt, envMs, envWords, repoRoot } from "../chaos/lib.ts"

/** Every adapter the benchmark knows, in its default order. */
export const ALL = ["raw-pg", "leasehold", "graphile-worker", "pg-boss"] as const
/** One of {@link ALL}. */
export type Adapter = (typeof ALL)[number]
/** The other queues, installed for the benchmark only; "best peer" is the faster of them. */
export const PEERS: ReadonlyArray<Adapter> = ["graphile-worker", "pg-boss"]
/** What `npm install` is given for each peer. */
export const PEER_SPECS: Record<string, string> = { "graphile-worker": "graphile-worker@0.18", "pg-boss": "pg-boss@12" }

const quick = process.env["PEERS_QUICK"] === "1"
const list = (name: string, fallback: string) =>
  (process.env[name] ?? fallback).split(",").map((s) => s.trim()).filter((s) => s !== "")

const startedAt = new Date()

/** The run's settings. */
export const config = {
  quick,
  startedAt,
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
  latencyReps: Math.max(1, envInt("PEERS_LATENCY_REPS", quick ? 2 : 3)),
  kill: process.env["PEERS_KILL"] !== "0",
  killBudgetMs: envMs("PEERS_KILL_BUDGET", quick ? 35_000 : 60_000),
  killReps: Math.max(1, envInt("PEERS_KILL_REPS", quick ? 1 : 5)),
  killFreshReps: Math.max(0, envInt("PEERS_KILL_FRESH_REPS", 1)),
  skipInstall: process.env["PEERS_SKIP_INSTALL"] === "1",
  fastPg: process.env["PEERS_FAST_PG"] === "1",
  /** PEERS_PG_STATS=1: the server time and WAL per job of each steady window (pg_stat_statements, preloaded). */
  pgStats: process.env["PEERS_PG_STATS"] === "1",
  /**
   * Extra node flags for every adapter's processes (PEERS_NODE_ARGS, split on spaces), the same
   * for each adapter: e.g. a heap profile (`--max-semi-space-size=2 --heap-growing-percent=50`)
   * measured against the peers under the same flags.
   */
  nodeArgs: envWords("PEERS_NODE_ARGS"),
  logDir: process.env["PEERS_LOG_DIR"] ?? join(repoRoot, ".tmp", "bench-peers", startedAt.toISOString().replace(/[:.]/g, "-")),
  /**
   * Where the markdown result goes: PEERS_RESULTS (a path; `0`: nowhere), by default
   * bench/results/<date>-<commit>.md for a full run and the log directory for a quick one.
   */
  results: process.env["PEERS_RESULTS"],
  /**
   * What the leasehold adapter's processes get besides URL, schema, queue and concurrency:
   * PEERS_LEASEHOLD_<NAME> as LEASEHOLD_<NAME> (no other LEASEHOLD_* variable reaches them). For
   * A/B runs of a setting; the run's header lists them among the knobs.
   */
  leaseholdEnv: Object.fromEntries(
    Object.entries(process.env)
      .filter((entry): entry is [string, string] => entry[0].startsWith("PEERS_LEASEHOLD_") && entry[1] !== undefined)
      .map(([key, value]) => [`LEASEHOLD_${key.slice("PEERS_LEASEHOLD_".length)}`, value])
  ) as Record<string, string>
}
if (config.cold < 1 || config.cold >= config.jobs) {
  console.error(`PEERS_COLD (${config.cold}) must be at least 1 and below PEERS_JOBS (${config.jobs})`)
  process.exit(2)
}

/** The jobs of a run's steady part: all but the cold ones. */
export const steadyJobs = config.jobs - config.cold
/** The npm prefix the peers and leasehold's tarball are installed into, and the compiled adapters run from. */
export const prefix = join(repoRoot, ".tmp", "peers")
/** The compiled adapter scripts: under the prefix, so their bare imports resolve to its node_modules. */
export const appDir = join(prefix, "app")
/** Unique per orchestrator: the databases' names. */
export const runId = `${process.pid}_${Math.random().toString(36).slice(2, 6)}`

const t0 = Date.now()
/** A progress line with the time since start. */
export const log = (text: string) => console.log(`[bench +${((Date.now() - t0) / 1000).toFixed(1)}s] ${text}`)
