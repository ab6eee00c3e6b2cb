/**
 * `npm run bench:statements`: what leasehold's two hot statements cost, apart
 * from the consumer. One process, its own PostgreSQL (durable settings, as
 * `npm run bench:own`), no concurrency: each side drains the same 10,000 messages
 * in cycles of N (`BENCH_BATCH`, default 10 and 50), alternating
 * (`BENCH_REPS`, default 3; the side that goes first flips every repetition,
 * since each leaves dead rows for the next to step over), medians printed:
 *   - leasehold: `PgQueueStore.claim` of N, then `PgQueueStore.complete` of
 *     N acks (fenced, with their attempt-history rows);
 *   - raw: the raw worker's claim of N (`FOR UPDATE SKIP LOCKED`, new lease
 *     token) and its `DELETE ... WHERE id = ANY(...)`.
 * Per cycle: wall time and this process's CPU (user + system; on this
 * machine's VM, waiting for an answer costs CPU too, so CPU partly follows
 * wall time), and leasehold's split between claim and complete. Use it to
 * see whether a change to a statement helps before `npm run bench:own` says what
 * it is worth end to end.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { startPostgres } from "../../dev/EmbeddedPostgres.ts"
import * as PgQueueStore from "../../src/PgQueueStore.ts"
import { QueueStore } from "../../src/QueueStore.ts"
import { ackOf } from "../support/completions.ts"

const envList = (name: string, fallback: string) =>
  (process.env[name] ?? fallback).split(",").map((v) => {
    if (!/^\d+$/.test(v.trim()) || Number(v) < 1) throw new Error(`${name}: expected positive whole numbers, got ${JSON.stringify(v)}`)
    return Number(v)
  })
const batches = envList("BENCH_BATCH", "10,50")
const [reps = 3] = envList("BENCH_REPS", "3")
const MESSAGES = 10_000

interface Sample {
  readonly wallMs: number
  readonly cpuMs: number
  readonly claimMs?: number
  readonly completeMs?: number
}


const median = (xs: ReadonlyArray<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

const program = Effect.gen(function*() {
  const store = yield* QueueStore
  const sql = (yield* SqlClient.SqlClient).withoutTransforms()
  const fill = Effect.gen(function*() {
    for (let i = 0; i < MESSAGES; i += 500) {
      yield* store.send("q", Array.from({ length: 500 }, (_, j) => ({ task: "t", payload: { i: i + j } })))
    }
  })

  /** Drain the queue in cycles; `cycle` answers how many messages it took (0: empty). */
  const drain = (cycle: (split: { claim: number; complete: number }) => Effect.Effect<number, unknown>) =>
    Effect.gen(function*() {
      yield* fill
      const split = { claim: 0, complete: 0 }
      const t0 = performance.now()
      const c0 = process.cpuUsage()
      let cycles = 0
      while ((yield* cycle(split)) > 0) cycles++
      const cpu = process.cpuUsage(c0)
      const wall = performance.now() - t0
      return {
        wallMs: wall / cycles,
        cpuMs: (cpu.user + cpu.system) / 1000 / cycles,
        claimMs: split.claim / cycles,
        completeMs: split.complete / cycles
      } satisfies Sample
    })

  const leasehold = (n: number) => (split: { claim: number; complete: number }) =>
    Effect.gen(function*() {
      const t0 = performance.now()
      const claims = yield* store.claim("q", { lease: 30_000, limit: n, consumer: "bench" })
      const t1 = performance.now()
      split.claim += t1 - t0
      if (claims.length === 0) return 0
      yield* store.complete(claims.map((c) => ackOf(c)))
      split.complete += performance.now() - t1
      return claims.length
    })

  // The raw worker's two statements (bench/throughput/raw-worker.ts), on the store's own table.
  const raw = (n: number) => () =>
    Effect.gen(function*() {
      const rows = yield* sql<{ id: bigint }>`
        WITH picked AS (
          SELECT id FROM leasehold.messages
          WHERE queue = 'q' AND state = 'ready' AND visible_at <= now()
          ORDER BY priority, visible_at, id LIMIT ${n} FOR UPDATE SKIP LOCKED
        )
        UPDATE leasehold.messages AS m
        SET visible_at = now() + interval '30 seconds', attempts = m.attempts + 1,
            lease_token = gen_random_uuid(), leased_by = 'raw', leased_at = now()
        FROM picked WHERE m.id = picked.id
        RETURNING m.id, m.payload`
      if (rows.length === 0) return 0
      yield* sql`DELETE FROM leasehold.messages WHERE id = ANY(${`{${rows.map((r) => r.id).join(",")}}`}::bigint[])`
      return rows.length
    })

  console.log(`statements: ${MESSAGES.toLocaleString("en-US")} messages drained per run, cycles of N, ${reps} alternating runs, medians`)
  console.log("N   leasehold ms/cycle  (claim + complete)   cpu    raw ms/cycle  cpu    wall ratio (raw / leasehold)")
  for (const n of batches) {
    const mine: Array<Sample> = []
    const theirs: Array<Sample> = []
    // Each side leaves dead rows behind for the next one to step over (the table is shared, and
    // autovacuum may or may not have run): the order flips every repetition so neither always goes second.
    for (let r = 0; r < reps; r++) {
      if (r % 2 === 0) {
        theirs.push(yield* drain(raw(n)))
        mine.push(yield* drain(leasehold(n)))
      } else {
        mine.push(yield* drain(leasehold(n)))
        theirs.push(yield* drain(raw(n)))
      }
    }
    const m = (xs: ReadonlyArray<Sample>, f: (s: Sample) => number) => median(xs.map(f))
    const lw = m(mine, (s) => s.wallMs)
    const rw = m(theirs, (s) => s.wallMs)
    console.log(
      `${String(n).padEnd(3)} ${lw.toFixed(2).padStart(8)}            (${m(mine, (s) => s.claimMs!).toFixed(2)} + ${
        m(mine, (s) => s.completeMs!).toFixed(2)
      })   ${m(mine, (s) => s.cpuMs).toFixed(2).padStart(5)}  ${rw.toFixed(2).padStart(8)}      ${m(theirs, (s) => s.cpuMs).toFixed(2).padStart(5)}  ${
        (rw / lw).toFixed(2)
      }`
    )
  }
})

const server = await startPostgres({})
try {
  const Pg = PgClient.layer({ url: Redacted.make(server.url), maxConnections: 4, applicationName: "bench-statements" })
  await Effect.runPromise(program.pipe(Effect.provide(PgQueueStore.layer().pipe(Layer.provideMerge(Pg)))))
} finally {
  await server.destroy()
}
