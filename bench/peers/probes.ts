/**
 * The two per-adapter probes of `npm run bench` (bench/peers/run.ts), each in a database of its
 * own: pickup latency across processes (an idle worker at C = 10, single sends from another
 * process; repeated, each repetition a fresh database and worker) and SIGKILL-to-rerun (a worker
 * killed while its job runs: the time until the job runs again on a second worker, already running
 * and idle, or started at once after the kill).
 */
import { sleep } from "../chaos/lib.ts"
import { fmtLatencies, type Proc, stopProcess } from "../support/orchestrator.ts"
import { wallMs } from "../throughput/protocol.ts"
import { type Adapter, config, log } from "./config.ts"
import { adapterEnv, createDatabase, type PgClient, sendAll, startAdapter } from "./processes.ts"

/** One adapter's pickup latencies (ms, the measured sends only). */
export interface LatencyResult {
  readonly adapter: Adapter
  /** Which repetition (a fresh database and worker each). */
  readonly rep: number
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

/** Pickup latency: handler start - send time of PEERS_LATENCY_SENDS single jobs sent PEERS_LATENCY_INTERVAL apart (repetition `rep`). */
export const latencyRun = async (admin: PgClient, serverUrl: string, adapter: Adapter, rep: number): Promise<LatencyResult> => {
  const { url, drop } = await preparedDatabase(admin, serverUrl, adapter, `latency_r${rep}`, "latency", 0)
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
    log(`${adapter} pickup latency (run ${rep}): ${values.length}/${config.latencySends} measured, ${fmtLatencies(values)}`)
    return { adapter, rep, values, expected: config.latencySends }
  } finally {
    await stopProcess(w)
    await drop()
  }
}

/**
 * How the job's second worker B stands when A is SIGKILLed: `standing`, already running and idle
 * (started once A runs the job, READY, then given a second to go idle), the way a fleet sees a
 * crash; `fresh`, started at once after the kill, its start-up included (a lone worker restarted
 * by its supervisor).
 */
export type KillKind = "standing" | "fresh"

/** One adapter's SIGKILL-to-rerun. */
export interface KillResult {
  readonly adapter: Adapter
  readonly kind: KillKind
  /** Kill -> the job's handler start on B; undefined: not within the budget. */
  readonly rerunMs: number | undefined
  /** Kill -> B's READY line (fresh: its start-up, as this orchestrator reads it); undefined: none, or B was standing. */
  readonly readyMs: number | undefined
}

/** The wait after a standing worker's READY before the kill: its start-up's own work (first claim, LISTEN) done. */
const IDLE_BEFORE_KILL_MS = 1_000

/** One never-ending job; its worker A SIGKILLed half a second into it (or more: B's start-up); B standing or fresh. */
export const killRun = async (admin: PgClient, serverUrl: string, adapter: Adapter, kind: KillKind): Promise<KillResult> => {
  const { url, drop } = await preparedDatabase(admin, serverUrl, adapter, `kill_${kind}`, "throughput", 1)
  const env = adapterEnv(adapter, url, "hang", 1)
  const a = startAdapter(`${adapter}-kill-${kind}-a`, adapter, "hang", env)
  let b: Proc | undefined
  try {
    await a.waitLine("RUN", 120_000)
    if (kind === "standing") {
      b = startAdapter(`${adapter}-kill-${kind}-b`, adapter, "hang", env)
      await b.waitLine("READY", 120_000)
      await sleep(IDLE_BEFORE_KILL_MS)
    } else await sleep(500)
    const killedAt = wallMs()
    a.child.kill("SIGKILL")
    if (kind === "fresh") {
      await Promise.race([a.closed, sleep(5_000)])
      b = startAdapter(`${adapter}-kill-${kind}-b`, adapter, "hang", env)
    }
    const started = b!
    const ready = kind === "fresh" ? started.waitLine("READY", config.killBudgetMs).then(() => wallMs() - killedAt, () => undefined) : undefined
    const rerun = await started.waitLine("RUN", config.killBudgetMs).then((line) => Number(line.split(" ")[1]) - killedAt, () => undefined)
    const readyMs = ready === undefined ? undefined : await Promise.race([ready, sleep(1_000).then(() => undefined)])
    log(
      `${adapter} SIGKILL-to-rerun, ${kind} worker: ${rerun === undefined ? `not rerun within ${fmtS(config.killBudgetMs)}` : fmtS(rerun)}` +
        (kind === "fresh" ? ` (B ready ${readyMs === undefined ? "?" : fmtS(readyMs)} after the kill)` : "")
    )
    return { adapter, kind, rerunMs: rerun, readyMs }
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
