/**
 * A probe of the rate limit's clock (found by the flow chaos run, run.ts --flow): before 0f8352a a
 * limited claim recorded its start at `now()`, the start of its transaction, which is before it
 * waited on the queue's claim lock; it now records the time of its claim statement, which runs
 * once the lock is held. This makes claims wait on the lock on purpose (another session holds the
 * lock for `PROBE_HOLD_MS` every `PROBE_EVERY_MS`) while `PROBE_CLAIMERS` claimers take one
 * message at a time from a queue with `rate: { count: PROBE_COUNT, periodMs: PROBE_PERIOD_MS }`,
 * and counts, with the lease recorder of the chaos run (lib.ts), the claims in every sliding window
 * on the recorded starts (`leased_at`) and on the claim statement's clock (`clock_timestamp()`).
 *
 *   node bench/chaos/flow-rate-probe.ts
 *
 * Prints both maxima and the worst window on the clock; exits 0 (a measurement, not a test).
 *
 *   node bench/chaos/flow-rate-probe.ts --prune
 *
 * The same stale time, step by step, with a rate of 2 per second: claims A and B; one second
 * later claim X's transaction begins (its `now()` puts A and B in its window) and, before X
 * claims, claim Y, a little later, prunes A and B from the stored window (they are out of Y's);
 * X then counts only Y and claims: A, B and X are 3 starts in X's window on the recorded times.
 * X runs in a transaction of the caller's (the store's claim takes a savepoint there): the
 * deterministic form of a claim that began, then waited on the claim lock behind a claim that
 * began after it.
 */
import { Effect, Layer, ManagedRuntime, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { PgClient } from "@effect/sql-pg"
import { startPostgres } from "../../dev/EmbeddedPostgres.ts"
import * as PgQueueStore from "../../src/PgQueueStore.ts"
import { QueueStore } from "../../src/QueueStore.ts"
import { windowCounts } from "./analyze.ts"
import { createLeaseRecorder, envInt, openDb, readLeases, sleep } from "./lib.ts"

const SCHEMA = "probe"
const QUEUE = "probe"
const claimers = envInt("PROBE_CLAIMERS", 8)
const count = envInt("PROBE_COUNT", 10)
const periodMs = envInt("PROBE_PERIOD_MS", 1_000)
const holdMs = envInt("PROBE_HOLD_MS", 300)
const everyMs = envInt("PROBE_EVERY_MS", 700)
const runMs = envInt("PROBE_RUN_MS", 8_000)
const keyed = process.env["PROBE_KEY_RATE"] === "1"

/** The --prune steps (see the header), with a period of 2 s: enough room for a loaded machine. */
const prune = async (
  runtime: ManagedRuntime.ManagedRuntime<SqlClient.SqlClient | QueueStore, unknown>,
  store: QueueStore["Service"],
  db: Awaited<ReturnType<typeof openDb>>
) => {
  const P = 2_000
  await runtime.runPromise(store.setLimits({ queue: QUEUE }, { rate: { count: 2, periodMs: P } }))
  await runtime.runPromise(store.send(QUEUE, Array.from({ length: 10 }, (_, n) => ({ task: "t", payload: { n } }))))
  const claim = (consumer: string) => store.claim(QUEUE, { consumer, limit: 1, lease: "60 seconds" })
  const a = await runtime.runPromise(claim("A"))
  const b = await runtime.runPromise(claim("B"))
  const [aRec, bRec] = (await readLeases(db, SCHEMA)).map((l) => l.leasedMs)
  // X begins before A leaves the window (its now() keeps A and B in), then waits for Y.
  await sleep(aRec! + P - 300 - Date.now())
  let yDone!: () => void
  const afterY = new Promise<void>((r) => (yDone = r))
  const x = runtime.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.withTransaction(Effect.gen(function*() {
      yield* sql`SELECT now()`
      yield* Effect.promise(() => afterY)
      return yield* claim("X")
    }))
  ))
  // Y begins after B left the window: it prunes A and B.
  await sleep(bRec! + P + 100 - Date.now())
  const y = await runtime.runPromise(claim("Y"))
  yDone()
  const xs = await x
  const leases = await readLeases(db, SCHEMA)
  const t0 = leases[0]!.leasedMs
  console.log(`flow rate probe --prune: rate 2/${P} ms; claimed A ${a.length}, B ${b.length}, Y ${y.length}, X ${xs.length}`)
  for (const l of leases) {
    console.log(`  ${l.consumer}: recorded (leased_at) +${(l.leasedMs - t0).toFixed(1)} ms, claim statement +${(l.claimedMs - t0).toFixed(1)} ms`)
  }
  const recorded = windowCounts(leases.map((l) => l.leasedMs), P, 2)
  const clock = windowCounts(leases.map((l) => l.claimedMs), P, 2)
  console.log(`most claims in a ${P} ms window: recorded (leased_at) ${recorded.max}, claim statement's clock ${clock.max} (count 2)`)
}

const main = async () => {
  const server = await startPostgres({ forTests: true })
  try {
    const db = await openDb(server.url, SCHEMA, "probe-orchestrator")
    await createLeaseRecorder(db, SCHEMA)
    const pg = PgClient.layer({ url: Redacted.make(server.url), maxConnections: claimers + 2, applicationName: "probe" })
    const runtime = ManagedRuntime.make(PgQueueStore.layer({ schema: SCHEMA, leasePool: false }).pipe(Layer.provideMerge(pg)))
    const store = await runtime.runPromise(Effect.gen(function*() {
      return yield* QueueStore
    }))
    if (process.argv.includes("--prune")) {
      await prune(runtime, store, db)
      await runtime.dispose()
      await db.dispose()
      return
    }
    const rate = { count, periodMs }
    await runtime.runPromise(store.setLimits({ queue: QUEUE }, keyed ? { keyRate: rate } : { rate }))
    const messages = Math.ceil((runMs / periodMs) * count * 2 + 100)
    await runtime.runPromise(store.send(QUEUE, Array.from({ length: messages }, (_, n) => ({ task: "t", payload: { n }, key: "k" }))))
    console.log(
      `flow rate probe: ${keyed ? "key rate" : "rate"} ${count}/${periodMs} ms, ${claimers} claimers taking 1 at a time, ` +
        `the claim lock held by another session ${holdMs} ms every ${everyMs} ms, ${runMs} ms`
    )
    const deadline = Date.now() + runMs
    const claimer = async (i: number) => {
      while (Date.now() < deadline) {
        const got = await runtime.runPromise(store.claim(QUEUE, { consumer: `c${i}`, limit: 1, lease: "60 seconds" }))
        if (got.length === 0) await sleep(5)
      }
    }
    const hog = async () => {
      while (Date.now() < deadline) {
        await sleep(everyMs)
        await runtime.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) =>
          sql.withTransaction(Effect.gen(function*() {
            yield* sql`SELECT pg_advisory_xact_lock(hashtextextended(${`${SCHEMA}.flow:${QUEUE}`}, 0))`
            yield* sql`SELECT pg_sleep(${holdMs / 1000})`
          }))
        ))
      }
    }
    await Promise.all([...Array.from({ length: claimers }, (_, i) => claimer(i)), ...(holdMs > 0 ? [hog()] : [])])
    const leases = await readLeases(db, SCHEMA)
    const recorded = windowCounts(leases.map((l) => l.leasedMs), periodMs, count)
    const clock = windowCounts(leases.map((l) => l.claimedMs), periodMs, count)
    const waits = leases.map((l) => l.claimedMs - l.leasedMs).sort((a, b) => a - b)
    console.log(`claims: ${leases.length}; claim statement's clock after the recorded start: median ${waits[Math.floor(waits.length / 2)]?.toFixed(1)} ms, max ${waits[waits.length - 1]?.toFixed(1)} ms`)
    console.log(`most claims in a ${periodMs} ms window on the recorded starts (leased_at): ${recorded.max} (count ${count}; ${recorded.over.length} windows over)`)
    console.log(`most claims in a ${periodMs} ms window on the claim statement's clock:      ${clock.max} (count ${count}; ${clock.over.length} windows over)`)
    const worst = clock.over.sort((a, b) => b.starts - a.starts)[0]
    if (worst !== undefined) {
      const t0 = leases[0]!.claimedMs
      console.log(`worst window on the clock, up to +${(worst.at - t0).toFixed(0)} ms: ${worst.starts} claims:`)
      for (const l of leases.filter((l) => l.claimedMs > worst.at - periodMs && l.claimedMs <= worst.at)) {
        console.log(`  claimed +${(l.claimedMs - t0).toFixed(1)} ms, recorded (leased_at) +${(l.leasedMs - t0).toFixed(1)} ms`)
      }
    }
    await runtime.dispose()
    await db.dispose()
  } finally {
    await server.destroy()
  }
}

main().then(() => process.exit(0), (error) => {
  console.error(error)
  process.exit(1)
})
