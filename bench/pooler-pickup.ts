/**
 * Pickup latency behind a pooler: how long from a send's commit to the start
 * of its handler on an idle consumer, with the consumer's default 1 s poll,
 * when leasehold connects
 *
 * - directly (LISTEN wakes the consumer),
 * - through PgBouncer in session mode (LISTEN works through it),
 * - through PgBouncer in transaction mode without a direct URL (no LISTEN:
 *   the consumer finds the message at its next poll),
 * - through PgBouncer in transaction mode with LEASEHOLD_DIRECT_DATABASE_URL
 *   (LISTEN on the direct URL, everything else through the pooler).
 *
 *   node bench/pooler-pickup.ts
 *
 * Each case: one consumer (in this process, so one clock), idle; PICKUP_SENDS
 * (default 20) single sends through the same store, each after a random
 * 1.1-1.6 s pause so the consumer is asleep in its poll. A fresh embedded
 * PostgreSQL (fast, non-durable settings) and PgBouncer 1.18 (pool 3) on this
 * machine.
 */
import { Deferred, Effect, Layer, Redacted, References } from "effect"
import * as Consumer from "../src/Consumer.ts"
import { startPostgres } from "../dev/EmbeddedPostgres.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import type * as Pooler from "../src/Pooler.ts"
import * as QueueConfig from "../src/QueueConfig.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as PgBouncer from "../test/support/PgBouncer.ts"

const SENDS = Number(process.env["PICKUP_SENDS"] ?? 20)

interface Case {
  readonly name: string
  readonly url: (urls: { readonly server: string; readonly session: string; readonly transaction: string }) => string
  readonly pooler: Pooler.Mode
  readonly direct: boolean
}

const cases: ReadonlyArray<Case> = [
  { name: "direct", url: (u) => u.server, pooler: "none", direct: false },
  { name: "PgBouncer session mode", url: (u) => u.session, pooler: "session", direct: false },
  { name: "PgBouncer transaction mode", url: (u) => u.transaction, pooler: "transaction", direct: false },
  { name: "PgBouncer transaction mode + direct URL", url: (u) => u.transaction, pooler: "transaction", direct: true }
]

const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!

/** Pickup latencies (ms) of one case. */
const measure = (url: string, c: Case, serverUrl: string) =>
  Effect.scoped(Effect.gen(function*() {
    const started = new Map<string, Deferred.Deferred<number>>()
    const handler: Consumer.Handler = (message) =>
      Effect.suspend(() => {
        const done = started.get(String((message.payload as { key: string }).key))
        return done === undefined ? Effect.void : Deferred.succeed(done, performance.now())
      })
    const schema = `pickup_${Math.random().toString(36).slice(2, 8)}`
    const context = yield* Layer.build(
      Consumer.layer(handler, { queues: ["pickup"], concurrency: 4, pollInterval: "1s" }).pipe(
        Layer.provideMerge(PgQueueStore.layer({ schema })),
        Layer.provideMerge(QueueConfig.pgLayer(Redacted.make(url), {
          pooler: c.pooler,
          maxConnections: 4,
          directUrl: c.direct ? Redacted.make(serverUrl) : undefined
        }))
      )
    )
    const store = Layer.succeedContext(context)
    return yield* Effect.gen(function*() {
      const s = yield* QueueStore
      const latencies: Array<number> = []
      for (let i = 0; i < SENDS; i++) {
        yield* Effect.sleep(1_100 + Math.random() * 500)
        const key = `${i}`
        const done = yield* Deferred.make<number>()
        started.set(key, done)
        yield* s.send("pickup", [{ task: "t", payload: { key } }])
        const sentAt = performance.now() // the send has committed
        const startAt = yield* Deferred.await(done).pipe(Effect.timeout("10 seconds"))
        latencies.push(Math.max(0, startAt - sentAt))
      }
      return latencies.sort((a, b) => a - b)
    }).pipe(Effect.provide(store))
  }))

const main = async () => {
  const server = await startPostgres({ forTests: true })
  const session = await PgBouncer.start({ mode: "session", serverUrl: server.url, poolSize: 20 })
  const transaction = await PgBouncer.start({ mode: "transaction", serverUrl: server.url, poolSize: 3 })
  try {
    const urls = { server: server.url, session: session.url, transaction: transaction.url }
    console.log(`pickup latency, idle consumer, poll 1 s, ${SENDS} sends per case (send committed -> handler start)`)
    console.log("| connection | p50 | p95 | max |\n|---|---|---|---|")
    for (const c of cases) {
      const sorted = await Effect.runPromise(measure(c.url(urls), c, server.url).pipe(Effect.provideService(References.MinimumLogLevel, "Warn")))
      const f = (ms: number) => `${ms.toFixed(1)} ms`
      console.log(`| ${c.name} | ${f(percentile(sorted, 50))} | ${f(percentile(sorted, 95))} | ${f(sorted[sorted.length - 1]!)} |`)
    }
  } finally {
    await transaction.stop()
    await session.stop()
    await server.destroy()
  }
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error)
    process.exit(1)
  }
)
