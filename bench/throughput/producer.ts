/**
 * The producer of the pickup-latency measurement of `npm run bench:own`, in a
 * process of its own: it sends single messages at a steady pace, each
 * carrying its send time (`sentAt`, wall ms with sub-ms precision, taken just
 * before the send), to an idle worker in another process, which prints
 * handler start - sentAt.
 *
 *   BENCH_KIND=leasehold  leasehold's `QueueStore.send` (which notifies idle consumers)
 *   BENCH_KIND=raw        an INSERT and a pg_notify in one statement, for the raw baseline
 *
 * Environment: BENCH_DATABASE_URL, BENCH_SCHEMA, BENCH_SENDS, BENCH_INTERVAL_MS,
 * BENCH_WARM (sends first, marked `warm`, left out of the figures).
 * Prints `SENT <count>` when done. Run as compiled JavaScript, like the workers (see run.ts).
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import * as PgQueueStore from "../../src/PgQueueStore.ts"
import { QueueStore } from "../../src/QueueStore.ts"
import { QUEUE, rawChannel, wallMs } from "./protocol.ts"

const kind = process.env["BENCH_KIND"] === "raw" ? "raw" : "leasehold"
const schema = process.env["BENCH_SCHEMA"] ?? ""
const sends = Number(process.env["BENCH_SENDS"] ?? "200")
const intervalMs = Number(process.env["BENCH_INTERVAL_MS"] ?? "20")
/** Print `SENDT <sentAt> <ackedAt>` per send (BENCH_LATENCY_BREAKDOWN=1, breakdown.ts). */
const breakdown = process.env["BENCH_LATENCY_BREAKDOWN"] === "1"
const warm = Number(process.env["BENCH_WARM"] ?? "10")
if (!/^[a-z_][a-z0-9_]*$/.test(schema)) {
  console.error(`producer: BENCH_SCHEMA must be a plain identifier, got ${JSON.stringify(schema)}`)
  process.exit(2)
}

interface Payload {
  readonly sentAt: number
  readonly warm: boolean
}

const sendLeasehold = Effect.gen(function*() {
  const store = yield* QueueStore
  return (payload: () => Payload) =>
    Effect.suspend(() => store.send(QUEUE, [{ task: "noop", payload: payload() }])).pipe(Effect.asVoid)
})

const sendRaw = Effect.gen(function*() {
  const sql = (yield* SqlClient.SqlClient).withoutTransforms()
  const table = sql(`${schema}.messages`)
  return (payload: () => Payload) =>
    Effect.suspend(() =>
      sql`WITH ins AS (
            INSERT INTO ${table} (queue, task, payload) VALUES (${QUEUE}, 'noop', ${JSON.stringify(payload())}::jsonb)
            RETURNING id
          )
          SELECT pg_notify(${rawChannel(schema)}, ${QUEUE}) FROM ins`
    ).pipe(Effect.asVoid)
})

const program = Effect.gen(function*() {
  const send = kind === "raw" ? yield* sendRaw : yield* sendLeasehold
  const start = wallMs()
  const total = warm + sends
  for (let k = 0; k < total; k++) {
    const wait = start + k * intervalMs - wallMs()
    if (wait > 0) yield* Effect.sleep(Math.ceil(wait))
    let sentAt = 0
    yield* send(() => ({ sentAt: (sentAt = wallMs()), warm: k < warm }))
    // BENCH_LATENCY_BREAKDOWN=1: when this send began and when its commit was acknowledged (breakdown.ts).
    if (breakdown) console.log(`SENDT ${sentAt.toFixed(3)} ${wallMs().toFixed(3)}`)
  }
  console.log(`SENT ${sends}`)
})

const Pg = PgClient.layer({
  url: Redacted.make(process.env["BENCH_DATABASE_URL"] ?? ""),
  maxConnections: 2,
  applicationName: `bench-producer-${kind}`
})
const Store = PgQueueStore.layer({ schema, migrate: false })

Effect.runPromise(program.pipe(Effect.provide(Store.pipe(Layer.provideMerge(Pg))))).then(
  () => process.exit(0),
  (error) => {
    console.error(`producer: ${String(error)}`)
    process.exit(1)
  }
)
