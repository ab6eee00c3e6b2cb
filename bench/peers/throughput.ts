/**
 * One throughput run of `npm run bench` (bench/peers/run.ts): a fresh database, the adapter's
 * bulk send (timed), `VACUUM ANALYZE` and `CHECKPOINT`, then ONE worker process at concurrency C,
 * its cold part (the first PEERS_COLD jobs from its first handler start), its steady part (the
 * rest, to the queue seen empty), its peak RSS and its CPU over the steady window.
 */
import { sleep } from "../chaos/lib.ts"
import { cpuSeconds, fmtMb, fmtPct, fmtRate, handledOrBudget, type Proc, stopProcess, vmHwmKb } from "../support/orchestrator.ts"
import { wallMs } from "../throughput/protocol.ts"
import { type Adapter, config, log, steadyJobs } from "./config.ts"
import { adapterEnv, connect, createDatabase, type PgClient, remaining, sendAll, startAdapter } from "./processes.ts"

/** One adapter's figures at one C in one repetition. */
export interface Result {
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

const forever = 24 * 3_600_000

/** The steady window: from `start` to the queue seen empty after the last handler, or the budget. */
const steadyWindow = async (client: PgClient, adapter: Adapter, w: Proc, start: number, tag: string) => {
  if (await handledOrBudget(w, start, config.runBudgetMs, forever) === "budget") {
    const n = await remaining(client, adapter)
    return { end: wallMs(), done: Math.max(0, steadyJobs - n) }
  }
  const deadline = Date.now() + 60_000
  while (true) {
    const n = await remaining(client, adapter)
    if (n === 0) return { end: wallMs(), done: steadyJobs }
    if (Date.now() > deadline) throw new Error(`${tag}: ${n} jobs still unfinished 60 s after the last handler ran`)
    await sleep(2)
  }
}

/** The worker's run on a full queue: cold, then steady (or cold only, when the budget ran out in it). */
const measureWorker = async (client: PgClient, adapter: Adapter, w: Proc, c: number, rep: number, sendRate: number, tag: string): Promise<Result> => {
  await w.waitLine("READY", 120_000)
  const first = Number((await w.waitLine("FIRST", 600_000)).split(" ")[1])
  // The cold part has the same budget from the first handler start.
  const warm = await w.waitLine("WARM", config.runBudgetMs > 0 ? Math.max(1, first + config.runBudgetMs - wallMs()) : forever)
    .catch((error) => {
      if (w.exit !== undefined || config.runBudgetMs <= 0) throw error
      return undefined
    })
  if (warm === undefined) {
    const finished = config.jobs - await remaining(client, adapter)
    const coldRate = finished / ((wallMs() - first) / 1000)
    log(`${tag}: cold: only ${finished} of ${config.cold} jobs finished within the ${Math.round(config.runBudgetMs / 1000)} s budget = ${fmtRate(coldRate)} jobs/s; no steady part`)
    return { adapter, c, rep, sendRate, coldRate, coldPartial: true, steadyRate: undefined, steadyDone: 0, rssKb: vmHwmKb(w.pid), cpuShare: undefined }
  }
  const start = Number(warm.split(" ")[2])
  const cpu0 = cpuSeconds(w.pid)
  const { end, done } = await steadyWindow(client, adapter, w, start, tag)
  const cpu1 = cpuSeconds(w.pid)
  const ms = end - start
  const result: Result = {
    adapter,
    c,
    rep,
    sendRate,
    coldRate: (config.cold - 1) / ((start - first) / 1000),
    steadyRate: done / (ms / 1000),
    steadyDone: done,
    rssKb: vmHwmKb(w.pid),
    cpuShare: cpu0 === undefined || cpu1 === undefined ? undefined : (cpu1 - cpu0) / (ms / 1000)
  }
  log(
    `${tag}: cold ${fmtRate(result.coldRate)} jobs/s; steady ${done === steadyJobs ? `all ${done}` : `${done} of ${steadyJobs} (budget)`} in ${(ms / 1000).toFixed(2)} s = ` +
      `${fmtRate(result.steadyRate)} jobs/s; peak RSS ${fmtMb(result.rssKb)}, CPU ${fmtPct(result.cpuShare)}`
  )
  return result
}

/** One run: send, then the worker, in a database of its own (dropped after). */
export const throughputRun = async (admin: PgClient, serverUrl: string, adapter: Adapter, c: number, rep: number): Promise<Result> => {
  const tag = `${adapter}-c${c}-r${rep}`
  const { url, drop } = await createDatabase(admin, serverUrl, adapter, `c${c}_r${rep}`)
  let worker: Proc | undefined
  try {
    const sent = await sendAll(adapter, `${tag}-send`, adapterEnv(adapter, url, "send", c), 30 * 60_000)
    const sendRate = config.jobs / (Number(sent[1]) / 1000)
    log(`${tag}: bulk send ${fmtRate(sendRate)} jobs/s (${sent[2]} calls of ${config.chunk})`)
    const client = await connect(url)
    try {
      await client.query("VACUUM ANALYZE")
      await client.query("CHECKPOINT")
      const queued = await remaining(client, adapter)
      if (queued !== config.jobs) throw new Error(`${tag}: ${queued} jobs in the queue after the send, expected ${config.jobs}`)
      worker = startAdapter(tag, adapter, "work", adapterEnv(adapter, url, "work", c))
      return await measureWorker(client, adapter, worker, c, rep, sendRate, tag)
    } finally {
      if (worker !== undefined) await stopProcess(worker)
      await client.end().catch(() => undefined)
    }
  } finally {
    await drop()
  }
}
