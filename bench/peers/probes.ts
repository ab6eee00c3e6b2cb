/**
 * The two per-adapter probes of `npm run bench` (bench/peers/run.ts), each in a database of its
 * own: pickup latency across processes (an idle worker at C = 10, single sends from another
 * process) and SIGKILL-to-rerun (a worker killed while its job runs, a fresh worker started at
 * once: the time until the job runs again).
 */
import { sleep } from "../chaos/lib.ts"
import { fmtLatencies, type Proc, stopProcess } from "../support/orchestrator.ts"
import { wallMs } from "../throughput/protocol.ts"
import { type Adapter, config, log } from "./config.ts"
import { adapterEnv, createDatabase, type PgClient, sendAll, startAdapter } from "./processes.ts"

/** One adapter's pickup latencies (ms, the measured sends only). */
export interface LatencyResult {
  readonly adapter: Adapter
  readonly values: ReadonlyArray<number>
  readonly expected: number
}

/** Seconds with one decimal. */
export const fmtS = (ms: number) => `${(ms / 1000).toFixed(1)} s`

/** A fresh database set up by the adapter's send role with `jobs` jobs (0: setup only). */
const preparedDatabase = async (admin: PgClient, serverUrl: string, adapter: Adapter, tag: string, mode: "throughput" | "latency", jobs: number) => {
  const db = await createDatabase(admin, serverUrl, adapter, tag)
  await sendAll(adapter, `${adapter}-${tag}-setup`, adapterEnv(adapter, db.url, "send", 10, mode, jobs), 120_000)
  return db
}

/** Pickup latency: handler start - send time of PEERS_LATENCY_SENDS single jobs sent PEERS_LATENCY_INTERVAL apart. */
export const latencyRun = async (admin: PgClient, serverUrl: string, adapter: Adapter): Promise<LatencyResult> => {
  const { url, drop } = await preparedDatabase(admin, serverUrl, adapter, "latency", "latency", 0)
  const w = startAdapter(`${adapter}-latency`, adapter, "work", adapterEnv(adapter, url, "work", 10, "latency"))
  try {
    await w.waitLine("READY", 120_000)
    await sleep(1_500) // let it go idle
    const producer = startAdapter(`${adapter}-latency-producer`, adapter, "single", adapterEnv(adapter, url, "single", 10, "latency"))
    const total = config.latencySends + config.latencyWarm
    await producer.waitLine("SENT", total * config.latencyIntervalMs + 120_000).finally(() => stopProcess(producer, 5_000))
    const deadline = Date.now() + 10_000
    while (w.lines.filter((l) => l.startsWith("LAT ")).length < total && Date.now() < deadline) await sleep(20)
    const values = w.lines.filter((l) => l.startsWith("LAT ")).map((l) => l.split(" ")).filter((f) => f[2] === "0").map((f) => Number(f[1]))
    log(`${adapter} pickup latency: ${values.length}/${config.latencySends} measured, ${fmtLatencies(values)}`)
    return { adapter, values, expected: config.latencySends }
  } finally {
    await stopProcess(w)
    await drop()
  }
}

/** One adapter's SIGKILL-to-rerun. */
export interface KillResult {
  readonly adapter: Adapter
  /** Kill -> the job's handler start on the fresh worker; undefined: not within the budget. */
  readonly rerunMs: number | undefined
  /** Kill -> the fresh worker's READY line (its start-up, as this orchestrator reads it); undefined: none. */
  readonly readyMs: number | undefined
}

/** One never-ending job; its worker SIGKILLed half a second into it; a fresh worker started at once. */
export const killRun = async (admin: PgClient, serverUrl: string, adapter: Adapter): Promise<KillResult> => {
  const { url, drop } = await preparedDatabase(admin, serverUrl, adapter, "kill", "throughput", 1)
  const env = adapterEnv(adapter, url, "hang", 1)
  const a = startAdapter(`${adapter}-kill-a`, adapter, "hang", env)
  let b: Proc | undefined
  try {
    await a.waitLine("RUN", 120_000)
    await sleep(500)
    const killedAt = wallMs()
    a.child.kill("SIGKILL")
    await Promise.race([a.closed, sleep(5_000)])
    b = startAdapter(`${adapter}-kill-b`, adapter, "hang", env)
    const ready = b.waitLine("READY", config.killBudgetMs).then(() => wallMs() - killedAt, () => undefined)
    const rerun = await b.waitLine("RUN", config.killBudgetMs).then((line) => Number(line.split(" ")[1]) - killedAt, () => undefined)
    const readyMs = await Promise.race([ready, sleep(1_000).then(() => undefined)])
    log(
      `${adapter} SIGKILL-to-rerun: ${rerun === undefined ? `not rerun within ${fmtS(config.killBudgetMs)}` : fmtS(rerun)}` +
        ` (B ready ${readyMs === undefined ? "?" : fmtS(readyMs)} after the kill)`
    )
    return { adapter, rerunMs: rerun, readyMs }
  } finally {
    a.child.kill("SIGKILL")
    b?.child.kill("SIGKILL")
    await Promise.race([Promise.all([a.closed, b?.closed]), sleep(5_000)])
    await drop()
  }
}

/** What each adapter documents as the bound on a killed worker's job (printed beside the measurement). */
export const killBound: Record<Adapter, string> = {
  "raw-pg": "its 30 s visibility timeout (vt)",
  "leasehold": "session liveness (a dead worker's presence lock seen free for 0.3 s), else one 30 s lease",
  "graphile-worker": "a locked job is freed after 4 hours",
  "pg-boss": "an active job expires after expireInSeconds (default 15 min)"
}
