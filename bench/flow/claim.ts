/**
 * `npm run bench:flow`: what a claim costs on a queue with flow limits (issue 27, "Cheap").
 *
 * One process, its own PostgreSQL (durable settings, as `npm run bench:own`; `BENCH_FAST_PG=1` turns
 * them off), no consumer: `PgQueueStore.claim` called in a loop, each call timed (wall time in
 * this process: for a limited claim that is its transaction: BEGIN, the queue's advisory lock and
 * its limits, the claim statement, COMMIT). For every claim batch N (`BENCH_BATCH`, default
 * 10,50) and every variant (`BENCH_FLOW_VARIANTS`), a fresh schema gets `BENCH_BACKLOG` messages
 * (default 100,000) over `BENCH_KEYS` distinct keys (default 10,000; each message's key drawn
 * from a fixed pseudo-random sequence), the limits set before the sends (fair turns are given at
 * send), then VACUUM ANALYZE and CHECKPOINT:
 * All variants of one N are prepared first; then their claims are interleaved, one claim of each in
 * turn (the first of a turn rotating), so the machine's drift (it is shared) falls on all alike:
 *   - cold: the first `BENCH_COLD` claims (default 20) on that fresh backlog, nothing in flight;
 *   - steady: claims with `BENCH_INFLIGHT` leases (default 1,000) in flight: after each claim the
 *     oldest claims beyond that are acked (`complete`, not timed), so the live-slot probes of a
 *     limited claim count real leases, as in a busy worker fleet; `BENCH_WARM` claims (50)
 *     unmeasured, then `BENCH_CLAIMS` (200) measured.
 * Variants: `preflow` (the plain claim of the code before flow control, from the checkout at
 * `BENCH_PREFLOW`, messages without keys: its schema has no key column), `nokey` (this code, no
 * limits, messages without keys: the same claim on the same rows as `preflow`), `none` (no limits,
 * keyed messages: the plain claim of this code), `key` (keyConcurrency 5), `fair`, `fifo`, `rate` (10,000 starts a
 * second, the most a rate may allow: not reached here, the window holding the last second's starts), `keyrate` (5 a
 * second per key), `keyfair` (keyConcurrency 5 and fair).
 *
 * `BENCH_EXPLAIN=1` (default) logs, through auto_explain (preloaded), one steady claim of each
 * variant at the largest N with EXPLAIN (ANALYZE, BUFFERS), into the log folder.
 *
 * Knobs: BENCH_BATCH, BENCH_FLOW_VARIANTS, BENCH_BACKLOG, BENCH_KEYS, BENCH_COLD, BENCH_INFLIGHT,
 * BENCH_WARM, BENCH_CLAIMS, BENCH_REPS (default 1; more: rounds repeated, medians of the rounds' p50/p95),
 * BENCH_PREFLOW, BENCH_EXPLAIN, BENCH_FAST_PG, BENCH_LOG_DIR.
 */
import { execFileSync } from "node:child_process"
import { mkdirSync, writeFileSync } from "node:fs"
import { availableParallelism, cpus, loadavg } from "node:os"
import { join } from "node:path"
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { startPostgres } from "../../dev/EmbeddedPostgres.ts"
import type { FlowLimits } from "../../src/FlowControl.ts"
import type { Claim } from "../../src/Message.ts"
import * as PgQueueStore from "../../src/PgQueueStore.ts"
import type { QueueStoreShape } from "../../src/QueueStore.ts"
import { envInt, percentile, repoRoot, sleep, table } from "../chaos/lib.ts"
import { ackOf } from "../support/completions.ts"

const envList = (name: string, fallback: string) =>
  (process.env[name] ?? fallback).split(",").map((v) => v.trim()).filter((v) => v !== "")

const LIMITS: Record<string, FlowLimits | null> = {
  preflow: null,
  nokey: null,
  none: null,
  key: { keyConcurrency: 5 },
  fair: { fair: true },
  fifo: { fifo: true },
  rate: { rate: { count: 10_000, periodMs: 1_000 } },
  keyrate: { keyRate: { count: 5, periodMs: 1_000 } },
  keyfair: { keyConcurrency: 5, fair: true }
}

const preflowDir = process.env["BENCH_PREFLOW"] ?? ""
const config = {
  batches: envList("BENCH_BATCH", "10,50").map(Number),
  variants: envList("BENCH_FLOW_VARIANTS", `${preflowDir === "" ? "" : "preflow,"}none,key,fair,fifo,rate`),
  backlog: envInt("BENCH_BACKLOG", 100_000),
  keys: envInt("BENCH_KEYS", 10_000),
  cold: envInt("BENCH_COLD", 20),
  inflight: envInt("BENCH_INFLIGHT", 1_000),
  warm: envInt("BENCH_WARM", 50),
  claims: envInt("BENCH_CLAIMS", 200),
  reps: Math.max(1, envInt("BENCH_REPS", 1)),
  explain: process.env["BENCH_EXPLAIN"] !== "0",
  fastPg: process.env["BENCH_FAST_PG"] === "1",
  logDir: process.env["BENCH_LOG_DIR"] ?? join(repoRoot, ".tmp", "bench-flow", new Date().toISOString().replace(/[:.]/g, "-"))
}
for (const v of config.variants) {
  if (!(v in LIMITS)) throw new Error(`BENCH_FLOW_VARIANTS: unknown variant ${JSON.stringify(v)} (known: ${Object.keys(LIMITS).join(", ")})`)
  if (v === "preflow" && preflowDir === "") throw new Error("variant preflow needs BENCH_PREFLOW (a checkout of the code before flow control)")
}
for (const n of config.batches) if (!Number.isInteger(n) || n < 1) throw new Error(`BENCH_BATCH: expected positive whole numbers`)

const QUEUE = "q"

/** Variants whose messages carry no key: the pre-flow code (no key column) and `nokey`, its like on this code. */
const unkeyed = (variant: string) => variant === "preflow" || variant === "nokey"

/** The key of message i: a fixed pseudo-random draw among `keys` (the same in every schema). */
const keyOf = (i: number) => `k${(Math.imul(i + 1, 2654435761) >>> 0) % config.keys}`


type Make = typeof PgQueueStore.make

interface Run {
  readonly variant: string
  readonly n: number
  readonly cold: ReadonlyArray<number>
  readonly steady: ReadonlyArray<number>
  readonly steadyGot: ReadonlyArray<number>
  readonly coldGot: ReadonlyArray<number>
  readonly sendMs: number
}

const serverLog: Array<string> = []

const codeLine = (): string => {
  try {
    const head = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: repoRoot, encoding: "utf8" }).trim()
    const dirty = execFileSync("git", ["status", "--porcelain", "--", "src", "bench"], { cwd: repoRoot, encoding: "utf8" }).trim() !== ""
    return `${head}${dirty ? " with uncommitted changes in src/ or bench/" : ""}`
  } catch {
    return "(not a git checkout)"
  }
}

const program = (makePreflow: Make | undefined) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()

    const explainOnce = <A, E, R>(label: string, effect: Effect.Effect<A, E, R>) =>
      Effect.gen(function*() {
        yield* sql.unsafe("ALTER SYSTEM SET auto_explain.log_min_duration = 0")
        yield* sql.unsafe("SELECT pg_reload_conf()")
        yield* Effect.promise(() => sleep(300))
        const from = serverLog.length
        const result = yield* effect
        yield* Effect.promise(() => sleep(300))
        yield* sql.unsafe("ALTER SYSTEM RESET auto_explain.log_min_duration")
        yield* sql.unsafe("SELECT pg_reload_conf()")
        yield* Effect.promise(() => sleep(300))
        const file = join(config.logDir, `explain-${label}.txt`)
        writeFileSync(file, `${serverLog.slice(from).join("\n")}\n`)
        console.log(`  EXPLAIN (ANALYZE, BUFFERS) of one steady claim: ${file}`)
        return result
      })

    /** A fresh schema for one variant: its limits, the backlog, VACUUM ANALYZE, CHECKPOINT. */
    const prepare = (variant: string, n: number, rep: number) =>
      Effect.gen(function*() {
        const schema = `flow_${variant}_${n}_${rep}`
        yield* sql.unsafe(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)
        const make = variant === "preflow" ? makePreflow! : PgQueueStore.make
        const store = (yield* make({ schema, leasePool: false })) as unknown as QueueStoreShape
        const limits = LIMITS[variant]!
        if (limits !== null) yield* store.setLimits({ queue: QUEUE }, limits)
        const t0 = performance.now()
        const CHUNK = 5_000
        for (let from = 0; from < config.backlog; from += CHUNK) {
          yield* store.send(
            QUEUE,
            Array.from({ length: Math.min(CHUNK, config.backlog - from) }, (_, k) => ({
              task: "t",
              payload: { i: from + k },
              ...(unkeyed(variant) ? {} : { key: keyOf(from + k) })
            }))
          )
        }
        const sendMs = performance.now() - t0
        yield* sql.unsafe(`VACUUM ANALYZE ${schema}.messages`)
        const inFlight: Array<Claim> = []
        const claimTimed = Effect.gen(function*() {
          const s = performance.now()
          const claims = yield* store.claim(QUEUE, { lease: 600_000, limit: n, consumer: "bench" })
          const ms = performance.now() - s
          inFlight.push(...claims)
          return { ms, got: claims.length }
        })
        const settle = Effect.gen(function*() {
          const extra = inFlight.length - config.inflight
          if (extra > 0) yield* store.complete(inFlight.splice(0, extra).map((c) => ackOf(c)))
        })
        return { variant, n, schema, limits, sendMs, inFlight, claimTimed, settle }
      })

    /**
     * One round at batch N: every variant's schema prepared, then the claims of the variants
     * interleaved (one claim of each in turn, the first of the turn rotating), so the machine's
     * drift falls on all of them alike: cold claims, the fill up to the leases in flight, the
     * warm-up, the measured steady claims.
     */
    const round = (n: number, rep: number, explain: boolean) =>
      Effect.scoped(Effect.gen(function*() {
        const states = []
        for (const variant of config.variants) states.push(yield* prepare(variant, n, rep))
        yield* sql.unsafe("CHECKPOINT")
        const results = states.map((st) => ({
          st,
          cold: [] as Array<number>,
          coldGot: [] as Array<number>,
          steady: [] as Array<number>,
          steadyGot: [] as Array<number>
        }))
        const turn = (i: number) => results.map((_, k) => results[(i + k) % results.length]!)
        for (let i = 0; i < config.cold; i++) {
          for (const r of turn(i)) {
            const c = yield* r.st.claimTimed
            r.cold.push(c.ms)
            r.coldGot.push(c.got)
          }
        }
        for (const r of results) {
          for (let i = 0; r.st.inFlight.length < config.inflight && i < 10_000; i++) {
            if ((yield* r.st.claimTimed).got === 0) break
          }
        }
        for (let i = 0; i < config.warm; i++) {
          for (const r of turn(i)) {
            yield* r.st.claimTimed
            yield* r.st.settle
          }
        }
        for (let i = 0; i < config.claims; i++) {
          for (const r of turn(i)) {
            const c = yield* r.st.claimTimed
            r.steady.push(c.ms)
            r.steadyGot.push(c.got)
            yield* r.st.settle
          }
        }
        const f = (v: number | undefined) => (v === undefined ? "-" : v.toFixed(2))
        const runs: Array<Run> = []
        for (const r of results) {
          const { limits, schema, sendMs, variant } = r.st
          const window = limits !== null && (limits.rate != null || limits.keyRate != null)
            ? (yield* sql.unsafe<{ n: number | null }>(`SELECT max(cardinality(starts))::int AS n FROM ${schema}.flow_rates`))[0]?.n ?? 0
            : undefined
          console.log(
            `[+${((performance.now() - started) / 1000).toFixed(0)}s] ${variant} N=${n} rep ${rep}: cold p50 ${f(percentile(r.cold, 50))} ms, ` +
              `steady p50 ${f(percentile(r.steady, 50))} p95 ${f(percentile(r.steady, 95))} ms, claimed/claim ${f(percentile(r.steadyGot, 50))} ` +
              `(backlog sent in ${(sendMs / 1000).toFixed(1)} s${window === undefined ? "" : `; largest rate window at the end: ${window} starts`})`
          )
          if (explain) yield* explainOnce(`${variant}-${n}`, Effect.andThen(r.st.claimTimed, r.st.settle))
          runs.push({ variant, n, cold: r.cold, coldGot: r.coldGot, steady: r.steady, steadyGot: r.steadyGot, sendMs })
        }
        for (const r of results) yield* sql.unsafe(`DROP SCHEMA IF EXISTS ${r.st.schema} CASCADE`)
        return runs
      }))

    const runs: Array<Run> = []
    const maxN = Math.max(...config.batches)
    for (let rep = 1; rep <= config.reps; rep++) {
      for (const n of config.batches) runs.push(...(yield* round(n, rep, config.explain && rep === 1 && n === maxN)))
    }
    return runs
  })

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  const m = Math.floor(s.length / 2)
  return s.length === 0 ? Number.NaN : s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2
}

const started = performance.now()
mkdirSync(config.logDir, { recursive: true })
const server = await startPostgres({
  forTests: config.fastPg,
  log: (line) => serverLog.push(line),
  settings: [
    "shared_preload_libraries=auto_explain",
    "auto_explain.log_analyze=on",
    "auto_explain.log_buffers=on",
    "auto_explain.log_timing=on",
    "auto_explain.log_nested_statements=off",
    // Every variant's schema of one N stays in shared buffers (the default 128 MB holds about three).
    "shared_buffers=1GB"
  ]
})
// A signal stops the server too (it runs detached: it would outlive this process).
let stopping: Promise<void> | undefined
const onSignal = () => {
  stopping ??= server.destroy().finally(() => process.exit(130))
}
process.once("SIGINT", onSignal)
process.once("SIGTERM", onSignal)
try {
  const makePreflow = config.variants.includes("preflow")
    ? ((await import(join(preflowDir, "src", "PgQueueStore.ts"))) as { make: Make }).make
    : undefined
  let preflowHead = ""
  if (makePreflow !== undefined) {
    try {
      preflowHead = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: preflowDir, encoding: "utf8" }).trim()
    } catch {
      preflowHead = "?"
    }
  }
  console.log(`flow claim bench: code ${codeLine()}${makePreflow === undefined ? "" : `; preflow: ${preflowDir} at ${preflowHead}`}`)
  console.log(`machine: ${availableParallelism()} cores (${cpus()[0]?.model.trim() ?? "?"}), Node ${process.versions.node}; load ${loadavg().map((l) => l.toFixed(2)).join(", ")}`)
  console.log(
    `per schema: ${config.backlog.toLocaleString("en-US")} messages over ${config.keys.toLocaleString("en-US")} keys; cold: first ${config.cold} claims; ` +
      `steady: ${config.inflight.toLocaleString("en-US")} leases in flight, ${config.warm} claims warm-up, ${config.claims} measured; ` +
      `the variants of one N interleaved, one claim each in turn; PostgreSQL ${config.fastPg ? "non-durable" : "durable"}, shared_buffers 1 GB; ${config.reps} round(s)`
  )
  console.log(`logs: ${config.logDir}`)
  const Pg = PgClient.layer({ url: Redacted.make(server.url), maxConnections: 4, applicationName: "bench-flow-claim" })
  const runs = await Effect.runPromise(program(makePreflow).pipe(Effect.provide(Layer.mergeAll(Pg))))
  const f = (v: number | undefined, d = 2) => (v === undefined || Number.isNaN(v) ? "-" : v.toFixed(d))
  const rows: Array<Array<string>> = [[
    "variant",
    "N",
    "cold p50 ms",
    "cold p95 ms",
    "steady p50 ms",
    "steady p95 ms",
    "claimed/claim",
    "steady us/msg",
    "p50 vs none"
  ]]
  for (const n of config.batches) {
    const stat = (variant: string, g: (r: Run) => number | undefined) =>
      median(runs.filter((r) => r.variant === variant && r.n === n).map(g).filter((v): v is number => v !== undefined))
    const noneP50 = stat("none", (r) => percentile(r.steady, 50))
    for (const variant of config.variants) {
      const p50 = stat(variant, (r) => percentile(r.steady, 50))
      const got = stat(variant, (r) => percentile(r.steadyGot, 50))
      rows.push([
        variant,
        String(n),
        f(stat(variant, (r) => percentile(r.cold, 50))),
        f(stat(variant, (r) => percentile(r.cold, 95))),
        f(p50),
        f(stat(variant, (r) => percentile(r.steady, 95))),
        f(got, 0),
        f((p50 / got) * 1000, 0),
        f(p50 / noneP50)
      ])
    }
  }
  console.log("")
  console.log(table(rows))
  console.log(`\nat end: load ${loadavg().map((l) => l.toFixed(2)).join(", ")}; ${((performance.now() - started) / 1000).toFixed(0)} s`)
} finally {
  await server.destroy()
}
