/**
 * One run of `npm run bench:bloat`: a fresh database, the adapter's sender enqueues the
 * messages (VACUUM ANALYZE and CHECKPOINT after, as bench/peers does), then, in a bloated run,
 * a REPEATABLE READ transaction on a connection of its own reads one row of the queue table
 * (its snapshot is taken, and held) and stays idle; then one worker at C runs until every
 * message is finished or BLOAT_DURATION has passed since its first handler started, sampled
 * every BLOAT_SAMPLE (sample.ts).
 */
import { sleep } from "../chaos/lib.ts"
import { type Proc, startProcess, stopProcess } from "../support/orchestrator.ts"
import { wallMs } from "../throughput/protocol.ts"
import { roleEnv, specOf } from "./adapters.ts"
import { prepareClaim } from "./explain.ts"
import { connect, databaseUrl, type PgSession, scalar } from "./pg.ts"
import { finishedSoFar, type Sample, type Sampler, takeSample } from "./sample.ts"
import { type Adapter, type Mode, settings } from "./settings.ts"

/** What one run measured. */
export interface RunResult {
  readonly adapter: Adapter
  readonly mode: Mode
  readonly sendRate: number
  /** Handler runs in all (the worker's COUNT line) and the seconds from the first to the end. */
  readonly handled: number
  readonly seconds: number
  /** Every message ran (else the duration ran out). */
  readonly complete: boolean
  /** The idle transaction's snapshot xmin (bloated runs). */
  readonly holderXmin: string | undefined
  readonly samples: ReadonlyArray<Sample>
}

/** Where a run's processes log, and how to tell the orchestrator's log. */
export interface RunContext {
  readonly admin: PgSession
  readonly serverUrl: string
  readonly buildDir: string
  readonly log: (text: string) => void
}

const start = (name: string, script: string, env: Record<string, string>): Proc =>
  startProcess({ name, script, logDir: settings.logDir, env, nodeArgs: ["--no-experimental-strip-types"] })

/** Enqueue the run's messages with the adapter's sender; its rate. */
const send = async (ctx: RunContext, adapter: Adapter, tag: string, url: string): Promise<number> => {
  const sender = start(`${tag}-send`, specOf(adapter).script(ctx.buildDir, "send"), roleEnv(adapter, url, "send", settings.jobs))
  const sent = (await sender.waitLine("SENT", 30 * 60_000)).split(" ")
  await Promise.race([sender.closed, sleep(10_000)])
  await stopProcess(sender, 2_000)
  return settings.jobs / (Number(sent[1]) / 1000)
}

/** Open the idle REPEATABLE READ transaction, its snapshot taken; its backend's xmin. */
const holdSnapshot = async (url: string, queueTable: string): Promise<{ readonly session: PgSession; readonly xmin: string }> => {
  const session = await connect(url, "bloat-idle-snapshot")
  await session.query("BEGIN ISOLATION LEVEL REPEATABLE READ")
  await session.query(`SELECT 1 FROM ${queueTable} LIMIT 1`)
  const xmin = await session.query("SELECT backend_xmin::text AS x FROM pg_stat_activity WHERE pid = pg_backend_pid()")
  return { session, xmin: String(xmin.rows[0]?.["x"] ?? "?") }
}

/** Sample the running worker until it has run every message, died, or the duration ran out. */
const sampleWhileRunning = async (sampler: Sampler, worker: Proc, first: number, log: (text: string) => void) => {
  const samples: Array<Sample> = [await takeSample(sampler, (wallMs() - first) / 1000, { t: 0, finished: 0 })]
  const handled = worker.waitLine("HANDLED", 24 * 3_600_000).then((l) => Number(l.split(" ")[2]), () => undefined)
  let done: number | undefined
  void handled.then((t) => (done = t))
  let previous = samples[0]!
  while (done === undefined && worker.exit === undefined && wallMs() - first < settings.durationMs) {
    await Promise.race([handled, sleep(settings.sampleMs - ((wallMs() - first) % settings.sampleMs))])
    if (done !== undefined) break
    const sample = await takeSample(sampler, (wallMs() - first) / 1000, previous)
    samples.push(sample)
    previous = sample
    if (samples.length % Math.max(1, Math.round(30_000 / settings.sampleMs)) === 0) {
      log(`  t=${sample.t.toFixed(0)} s: ${sample.finished} finished, ${Math.round(sample.rate)}/s, claim ${sample.claim.hit + sample.claim.read} buffers, ${sample.claim.ms.toFixed(1)} ms`)
    }
  }
  if (done !== undefined) {
    // The last sample once the statistics count every message (the last acks landed and were
    // flushed, within a second), 10 s at most; timed then, not at the last handler start.
    const deadline = wallMs() + 10_000
    while ((await finishedSoFar(sampler)) < settings.jobs && wallMs() < deadline) await sleep(100)
    samples.push(await takeSample(sampler, (wallMs() - first) / 1000, previous))
  }
  return { samples, handledAt: done }
}

/** One run of `adapter` in `mode`. */
export const runOne = async (ctx: RunContext, adapter: Adapter, mode: Mode): Promise<RunResult> => {
  const spec = specOf(adapter)
  const tag = `${adapter}-${mode}`
  const db = `bloat_${adapter.replace(/-/g, "_")}_${mode}_${process.pid}`
  await ctx.admin.query(`CREATE DATABASE ${db}`)
  const url = databaseUrl(ctx.serverUrl, db)
  let worker: Proc | undefined
  let holder: { readonly session: PgSession; readonly xmin: string } | undefined
  const session = await connect(url, "bloat-sampler")
  try {
    const sendRate = await send(ctx, adapter, tag, url)
    await session.query("VACUUM ANALYZE")
    await session.query("CHECKPOINT")
    const tables = await spec.tables(session)
    const queueTable = tables[0]!.name
    const claim = await spec.claimSelect(session, queueTable)
    await prepareClaim(session, claim)
    if (mode === "bloated") holder = await holdSnapshot(url, queueTable)
    const sampler: Sampler = { session, spec, tables, claim, base: await scalar(session, spec.finishedSql(queueTable)) }
    ctx.log(`${tag}: ${settings.jobs} sent at ${Math.round(sendRate)}/s${holder === undefined ? "" : `; idle REPEATABLE READ snapshot held, xmin ${holder.xmin}`}`)
    const w = (worker = start(tag, spec.script(ctx.buildDir, "work"), roleEnv(adapter, url, "work", settings.jobs)))
    await w.waitLine("READY", 120_000)
    const first = Number((await w.waitLine("FIRST", 600_000)).split(" ")[1])
    const { samples, handledAt } = await sampleWhileRunning(sampler, w, first, ctx.log)
    const end = handledAt ?? wallMs()
    await stopProcess(w)
    const count = Number(w.linesWith("COUNT ")[0]?.split(" ")[1] ?? Number.NaN)
    const seconds = (end - first) / 1000
    ctx.log(`${tag}: ${count} handled in ${seconds.toFixed(1)} s = ${Math.round(count / seconds)}/s${handledAt === undefined ? " (duration ran out)" : ""}`)
    return { adapter, mode, sendRate, handled: count, seconds, complete: handledAt !== undefined, holderXmin: holder?.xmin, samples }
  } finally {
    if (worker !== undefined) await stopProcess(worker)
    await holder?.session.query("ROLLBACK").catch(() => undefined)
    await holder?.session.end().catch(() => undefined)
    await session.end().catch(() => undefined)
    await ctx.admin.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch((error) => ctx.log(`drop ${db}: ${String(error)}`))
  }
}
