/**
 * What the benchmark's worker processes (leasehold-worker.ts, raw-worker.ts)
 * share: their settings from the environment, the no-op handler that counts
 * and times messages, and the stdout lines the orchestrator (run.ts) reads.
 *
 * Stdout protocol (one line each; stdout to a pipe is synchronous):
 *   READY <pid>                   set up (pool, schema, consumer), now claiming
 *   FIRST <wallMs>                the first handler started (throughput mode)
 *   WARM <count> <wallMs>         the handler has run BENCH_WARMUP times: the measured part starts (throughput mode)
 *   HANDLED <count> <wallMs>      the handler has run BENCH_EXPECT times (throughput mode)
 *   LAT <ms> <warm 0|1> <sentAt> <startAt>   handler start - send time of one message, and both times (latency mode)
 *   CLAIMED <startAt> <endAt>     a claim statement that took messages (latency mode, BENCH_LATENCY_BREAKDOWN=1; leasehold)
 *   COUNT <count> <maxRssKb>      handler runs in total and peak RSS (resourceUsage), printed on exit
 *
 * Times are wall-clock milliseconds with sub-millisecond precision,
 * `performance.timeOrigin + performance.now()`, comparable across processes
 * on one machine.
 */
import { writeSync } from "node:fs"

export const wallMs = (): number => performance.timeOrigin + performance.now()

/** The queue every benchmark message goes to. */
export const QUEUE = "bench"

/** The NOTIFY channel the raw baseline listens on (leasehold's sends notify a channel of their own). */
export const rawChannel = (schema: string) => `raw_${schema}`

export type Mode = "throughput" | "latency"

export interface WorkerEnv {
  readonly schema: string
  readonly mode: Mode
  /** Throughput mode: print HANDLED after this many handler runs (warm-up included). */
  readonly expect: number
  /** Throughput mode: print WARM after this many handler runs (0: none). */
  readonly warmup: number
  readonly concurrency: number
  /** Latency mode: print each claim statement's span too (BENCH_LATENCY_BREAKDOWN=1, breakdown.ts). */
  readonly breakdown: boolean
}

export const workerEnv = (who: string): WorkerEnv => {
  const schema = process.env["BENCH_SCHEMA"] ?? ""
  if (!/^[a-z_][a-z0-9_]*$/.test(schema)) {
    console.error(`${who}: BENCH_SCHEMA must be a plain identifier, got ${JSON.stringify(schema)}`)
    process.exit(2)
  }
  const mode = process.env["BENCH_MODE"] === "latency" ? "latency" : "throughput"
  return {
    schema,
    mode,
    expect: Number(process.env["BENCH_EXPECT"] ?? "0"),
    warmup: Number(process.env["BENCH_WARMUP"] ?? "0"),
    concurrency: Number(process.env["BENCH_CONCURRENCY"] ?? "10"),
    breakdown: mode === "latency" && process.env["BENCH_LATENCY_BREAKDOWN"] === "1"
  }
}

/** One line on stdout, written synchronously. */
export const line = (text: string) => {
  writeSync(1, `${text}\n`)
}

export const announceReady = () => line(`READY ${process.pid}`)

/**
 * The no-op handler's body: count the run, and in throughput mode note the
 * first start, the end of the warm-up and the moment the expected count is reached; in latency mode
 * print start - send time (the payload carries `sentAt`).
 */
export const makeRecorder = (env: WorkerEnv) => {
  let count = 0
  process.on("exit", () => line(`COUNT ${count} ${process.resourceUsage().maxRSS}`))
  return (payload: unknown): void => {
    const now = wallMs()
    count++
    if (env.mode === "latency") {
      const p = payload as { readonly sentAt?: number; readonly warm?: boolean } | null
      if (p !== null && typeof p.sentAt === "number") {
        line(`LAT ${(now - p.sentAt).toFixed(3)} ${p.warm === true ? 1 : 0} ${p.sentAt.toFixed(3)} ${now.toFixed(3)}`)
      }
      return
    }
    if (count === 1) line(`FIRST ${now.toFixed(3)}`)
    if (count === env.warmup) line(`WARM ${count} ${now.toFixed(3)}`)
    if (count === env.expect) line(`HANDLED ${count} ${now.toFixed(3)}`)
  }
}
