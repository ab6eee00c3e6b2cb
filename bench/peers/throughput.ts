/**
 * One throughput run of `npm run bench` (bench/peers/run.ts), in two parts, each in a fresh
 * database: **cold**, PEERS_COLD jobs bulk-sent, then a fresh worker process at concurrency C, no
 * warm-up: its jobs/s from its first handler start to the queue seen empty; **steady**, PEERS_JOBS
 * jobs bulk-sent (the send timed), then another fresh worker: its first PEERS_COLD jobs are its
 * warm-up (not measured), the rest from the PEERS_COLD-th handler start to the queue seen empty,
 * with its peak RSS and its CPU over that window. Each send is followed by `VACUUM ANALYZE` and
 * `CHECKPOINT`.
 */
import { sleep } from "../chaos/lib.ts"
import { cpuSeconds, fmtMb, fmtPct, fmtRate, handledOrBudget, type Proc, stopProcess, vmHwmKb } from "../support/orchestrator.ts"
import { wallMs } from "../throughput/protocol.ts"
import { type Adapter, config, log, steadyJobs } from "./config.ts"
import { adapterEnv, connect, createDatabase, type PgClient, REMAINING_PREFIX, remaining, sendAll, startAdapter } from "./processes.ts"

/** One adapter's figures at one C in one repetition. */
export interface Result {
  readonly adapter: Adapter
  readonly c: number
  readonly rep: number
  readonly sendRate: number
  /** The cold run's jobs/s (undefined: it failed). */
  readonly coldRate: number | undefined
  /** The cold run did not finish within the budget: coldRate is over the jobs finished by then. */
  readonly coldPartial?: boolean
  /** The steady run's warm-up did not finish within the budget: no steady rate. */
  readonly warmupPartial?: boolean
  readonly steadyRate: number | undefined
  /** Steady jobs finished in the window: all of them, or fewer when the budget ran out. */
  readonly steadyDone: number
  readonly rssKb: number | undefined
  readonly cpuShare: number | undefined
  /** PEERS_PG_STATS=1: the steady window's statements as the server counted them, per job finished. */
  readonly server?: ServerCost
}

/** What the server spent per job finished in a steady window (pg_stat_statements, the orchestrator's own reads left out). */
export interface ServerCost {
  /** Statement execution, microseconds (commits' WAL flushes not included). */
  readonly execUs: number
  /** WAL bytes written by the statements. */
  readonly walBytes: number
}

/**
 * The steady window's statements in database `db`, per job: everything the adapter's processes ran
 * there since the reset at the window's start, but the orchestrator's counts of unfinished jobs and
 * statements that wait on the server by design (leasehold's presence probe answers after a
 * `pg_sleep`: its execution time is a wait, two sessions' worth of the window, not work).
 */
const serverCost = async (admin: PgClient, db: string, jobs: number): Promise<ServerCost> => {
  const row = (await admin.query(
    `SELECT coalesce(sum(total_exec_time), 0)::float8 AS exec_ms, coalesce(sum(wal_bytes), 0)::float8 AS wal
     FROM pg_stat_statements
     WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1) AND NOT starts_with(query, $2)
       AND query NOT ILIKE '%pg_sleep(%'`,
    [db, REMAINING_PREFIX]
  )).rows[0]!
  return { execUs: (Number(row["exec_ms"]) * 1000) / Math.max(1, jobs), walBytes: Number(row["wal"]) / Math.max(1, jobs) }
}

const forever = 24 * 3_600_000

/** A measured window: from `start` to the queue seen empty after the last handler, or the budget; `jobs` of the window finished. */
const window = async (client: PgClient, adapter: Adapter, w: Proc, start: number, jobs: number, tag: string) => {
  if (await handledOrBudget(w, start, config.runBudgetMs, forever) === "budget") {
    const n = await remaining(client, adapter)
    return { end: wallMs(), done: Math.max(0, jobs - n) }
  }
  const deadline = Date.now() + 60_000
  while (true) {
    const n = await remaining(client, adapter)
    if (n === 0) return { end: wallMs(), done: jobs }
    if (Date.now() > deadline) throw new Error(`${tag}: ${n} jobs still unfinished 60 s after the last handler ran`)
    await sleep(2)
  }
}

/** The steady run's worker on a full queue: its warm-up, then the steady window (none when the budget ran out in the warm-up). */
const measureSteady = async (
  client: PgClient,
  adapter: Adapter,
  w: Proc,
  c: number,
  rep: number,
  sendRate: number,
  tag: string,
  stats: { readonly admin: PgClient; readonly db: string } | undefined
): Promise<Result> => {
  await w.waitLine("READY", 120_000)
  const first = Number((await w.waitLine("FIRST", 600_000)).split(" ")[1])
  // The warm-up has the same budget from the first handler start.
  const warm = await w.waitLine("WARM", config.runBudgetMs > 0 ? Math.max(1, first + config.runBudgetMs - wallMs()) : forever)
    .catch((error) => {
      if (w.exit !== undefined || config.runBudgetMs <= 0) throw error
      return undefined
    })
  if (warm === undefined) {
    log(`${tag}: the warm-up (${config.cold} jobs) did not finish within the ${Math.round(config.runBudgetMs / 1000)} s budget; no steady part`)
    return { adapter, c, rep, sendRate, coldRate: undefined, warmupPartial: true, steadyRate: undefined, steadyDone: 0, rssKb: vmHwmKb(w.pid), cpuShare: undefined }
  }
  const start = Number(warm.split(" ")[2])
  if (stats !== undefined) await stats.admin.query("SELECT pg_stat_statements_reset()")
  const cpu0 = cpuSeconds(w.pid)
  const { end, done } = await window(client, adapter, w, start, steadyJobs, tag)
  const cpu1 = cpuSeconds(w.pid)
  const server = stats === undefined ? undefined : await serverCost(stats.admin, stats.db, done)
  const ms = end - start
  const result: Result = {
    adapter,
    c,
    rep,
    sendRate,
    coldRate: undefined,
    steadyRate: done / (ms / 1000),
    steadyDone: done,
    rssKb: vmHwmKb(w.pid),
    cpuShare: cpu0 === undefined || cpu1 === undefined ? undefined : (cpu1 - cpu0) / (ms / 1000),
    ...(server === undefined ? {} : { server })
  }
  log(
    `${tag}: steady ${done === steadyJobs ? `all ${done}` : `${done} of ${steadyJobs} (budget)`} in ${(ms / 1000).toFixed(2)} s = ` +
      `${fmtRate(result.steadyRate)} jobs/s; peak RSS ${fmtMb(result.rssKb)}, CPU ${fmtPct(result.cpuShare)}` +
      (server === undefined ? "" : `; server ${server.execUs.toFixed(1)} us and ${Math.round(server.walBytes)} B of WAL a job`)
  )
  return result
}

/** A fresh database with `jobs` of the adapter's jobs bulk-sent, vacuumed and checkpointed; `f` runs with it, then it is dropped. */
const withQueue = async <A>(admin: PgClient, serverUrl: string, adapter: Adapter, c: number, part: string, jobs: number, f: (q: {
  readonly url: string
  readonly db: string
  readonly client: PgClient
  readonly sendRate: number
}) => Promise<A>): Promise<A> => {
  const tag = `${adapter}-c${c}-${part}`
  const { url, db, drop } = await createDatabase(admin, serverUrl, adapter, `c${c}_${part}`)
  try {
    const sent = await sendAll(adapter, `${tag}-send`, adapterEnv(adapter, url, "send", c, "throughput", jobs), 30 * 60_000)
    const sendRate = jobs / (Number(sent[1]) / 1000)
    log(`${tag}: bulk send of ${jobs} ${fmtRate(sendRate)} jobs/s (${sent[2]} calls of ${config.chunk})`)
    const client = await connect(url)
    try {
      await client.query("VACUUM ANALYZE")
      await client.query("CHECKPOINT")
      const queued = await remaining(client, adapter)
      if (queued !== jobs) throw new Error(`${tag}: ${queued} jobs in the queue after the send, expected ${jobs}`)
      return await f({ url, db, client, sendRate })
    } finally {
      await client.end().catch(() => undefined)
    }
  } finally {
    await drop()
  }
}

/** Start the adapter's worker, run `f` with it, stop it. */
const withWorker = async <A>(tag: string, adapter: Adapter, env: Record<string, string>, f: (w: Proc) => Promise<A>): Promise<A> => {
  const worker = startAdapter(tag, adapter, "work", env)
  try {
    return await f(worker)
  } finally {
    await stopProcess(worker)
  }
}

/** The cold run: PEERS_COLD jobs queued, a fresh worker, no warm-up: jobs/s from its first handler start to the queue seen empty. */
const coldRun = (admin: PgClient, serverUrl: string, adapter: Adapter, c: number, rep: number) =>
  withQueue(admin, serverUrl, adapter, c, `cold_r${rep}`, config.cold, ({ client, url }) => {
    const tag = `${adapter}-c${c}-r${rep}-cold`
    const env = { ...adapterEnv(adapter, url, "work", c), BENCH_EXPECT: String(config.cold), BENCH_WARMUP: "0" }
    return withWorker(tag, adapter, env, async (w) => {
      await w.waitLine("READY", 120_000)
      const first = Number((await w.waitLine("FIRST", 600_000)).split(" ")[1])
      const { end, done } = await window(client, adapter, w, first, config.cold, tag)
      const coldRate = done / ((end - first) / 1000)
      log(`${tag}: cold ${done === config.cold ? `all ${done}` : `${done} of ${config.cold} (budget)`} = ${fmtRate(coldRate)} jobs/s`)
      return { coldRate, coldPartial: done < config.cold }
    })
  })

/** One repetition at C: the cold run, then the steady run, each in a database of its own (dropped after). */
export const throughputRun = async (admin: PgClient, serverUrl: string, adapter: Adapter, c: number, rep: number): Promise<Result> => {
  const cold = await coldRun(admin, serverUrl, adapter, c, rep)
  const steady = await withQueue(admin, serverUrl, adapter, c, `r${rep}`, config.jobs, ({ client, db, sendRate, url }) => {
    const tag = `${adapter}-c${c}-r${rep}`
    const stats = config.pgStats ? { admin, db } : undefined
    return withWorker(tag, adapter, adapterEnv(adapter, url, "work", c), (w) => measureSteady(client, adapter, w, c, rep, sendRate, tag, stats))
  })
  return { ...steady, ...cold }
}
