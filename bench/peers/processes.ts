/**
 * The orchestrator's side of the adapters (bench/peers/run.ts): its own node-postgres connection,
 * a fresh database per run, every adapter's environment, starting its compiled scripts, and how
 * each adapter's unfinished jobs are counted.
 */
import { sleep } from "../chaos/lib.ts"
import { type Proc, startProcess, stopProcess } from "../support/orchestrator.ts"
import { QUEUE } from "../throughput/protocol.ts"
import { type Adapter, config, log, prefix, runId } from "./config.ts"
import { type Role, scriptOf } from "./install.ts"

/** The orchestrator's connection (node-postgres, in node_modules without types: imported loosely). */
export interface PgClient {
  readonly query: (text: string, values?: ReadonlyArray<unknown>) => Promise<{ readonly rows: Array<Record<string, unknown>> }>
  readonly end: () => Promise<void>
}
const pgModule = "pg"
const pg = (await import(pgModule)).default as { Client: new(options: { connectionString: string; application_name?: string }) => PgClient & { connect: () => Promise<void> } }

/** A connected client for `url`. */
export const connect = async (url: string): Promise<PgClient> => {
  const client = new pg.Client({ connectionString: url, application_name: "peers-orchestrator" })
  await client.connect()
  return client
}

const dbUrl = (serverUrl: string, db: string) => {
  const u = new URL(serverUrl)
  u.pathname = `/${db}`
  return u.toString()
}

/** How every count of unfinished jobs begins: the server-cost reading (PEERS_PG_STATS) leaves them out by it. */
export const REMAINING_PREFIX = "SELECT count(*)::int AS n FROM "

/** Jobs not finished yet, as each adapter stores them (finished jobs are deleted, or, in pg-boss, marked). */
const remainingSql: Record<Adapter, string> = {
  "raw-pg": `${REMAINING_PREFIX}q`,
  "leasehold": `${REMAINING_PREFIX}leasehold.messages`,
  "graphile-worker": `${REMAINING_PREFIX}graphile_worker._private_jobs`,
  "pg-boss": `${REMAINING_PREFIX}pgboss.job WHERE state < 'completed'`
}

/** The adapter's jobs not finished yet. */
export const remaining = async (client: PgClient, adapter: Adapter): Promise<number> =>
  Number((await client.query(remainingSql[adapter])).rows[0]?.["n"])

/** The environment of an adapter script in a role (common.ts reads PEERS_*, protocol.ts BENCH_*). */
export const adapterEnv = (
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
    BENCH_EXPECT: String(mode === "throughput" && role !== "hang" ? config.jobs : 0),
    BENCH_WARMUP: String(mode === "throughput" && role !== "hang" ? config.cold : 0),
    BENCH_CONCURRENCY: String(c)
  }
  return adapter === "leasehold"
    ? { ...common, ...config.leaseholdEnv, LEASEHOLD_DATABASE_URL: url, LEASEHOLD_SCHEMA: "leasehold", LEASEHOLD_QUEUES: QUEUE, LEASEHOLD_CONCURRENCY: String(c) }
    : common
}

/** The node flags of every adapter process: compiled JavaScript, no type stripping; then PEERS_NODE_ARGS. */
export const workerNodeArgs = ["--no-experimental-strip-types", ...config.nodeArgs]

/** Start an adapter's compiled script in a role, as `name`. */
export const startAdapter = (name: string, adapter: Adapter, role: Role, env: Record<string, string>): Proc =>
  startProcess({ name, script: scriptOf(adapter, role), logDir: config.logDir, env, nodeArgs: workerNodeArgs })

/** A database of its own for one run, created; `drop` removes it (errors logged, not thrown). */
export const createDatabase = async (admin: PgClient, serverUrl: string, adapter: Adapter, tag: string) => {
  const db = `peers_${runId}_${adapter.replace(/-/g, "_")}_${tag.replace(/[^a-z0-9]/g, "_")}`
  await admin.query(`CREATE DATABASE ${db}`)
  return {
    url: dbUrl(serverUrl, db),
    db,
    drop: () => admin.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).then(() => undefined, (error) => log(`drop ${db}: ${String(error)}`))
  }
}

/** Run the adapter's send role to its end; its `SENT <ms> <calls>` line, split. */
export const sendAll = async (adapter: Adapter, name: string, env: Record<string, string>, timeoutMs: number): Promise<Array<string>> => {
  const sender = startAdapter(name, adapter, "send", env)
  const sent = (await sender.waitLine("SENT", timeoutMs)).split(" ")
  await Promise.race([sender.closed, sleep(10_000)])
  await stopProcess(sender, 2_000)
  return sent
}
