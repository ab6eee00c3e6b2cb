/**
 * The consumer in-process on real PostgreSQL, in real time: a handler that
 * outlives its lease several times over keeps its message through renewals,
 * also while the lease pool's connections are being killed, and another
 * consumer polling all along never gets it.
 */
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it } from "@effect/vitest"
import { Context, Deferred, Effect, Exit, Fiber, Layer, Metric, Option, Redacted, Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as Consumer from "../src/Consumer.ts"
import type { MessageId } from "../src/Message.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import * as QueueMetrics from "../src/QueueMetrics.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitFor } from "./support/Wait.ts"

const QUEUE = "consumer_pg"
const LEASE = "1 second"
const LEASE_MS = 1_000
const HANDLER_MS = 3 * LEASE_MS

const count = (metric: Metric.Metric<number, Metric.CounterState<number>>) =>
  Effect.map(Metric.value(metric), (state) => Number(state.count))

/** The counters a test compares before and after. */
const snapshot = Effect.all({
  claimed: count(QueueMetrics.claimed),
  acked: count(QueueMetrics.acked),
  retried: count(QueueMetrics.retried),
  released: count(QueueMetrics.released),
  renewals: count(QueueMetrics.renewals),
  renewalFailures: count(QueueMetrics.renewalFailures),
  doubleRuns: count(QueueMetrics.doubleRuns),
  finishFailures: count(QueueMetrics.finishFailures)
})
type Snapshot = Effect.Success<typeof snapshot>

const delta = (before: Snapshot, after: Snapshot): Snapshot => {
  const out: Record<string, number> = {}
  for (const key of Object.keys(before) as Array<keyof Snapshot>) out[key] = after[key] - before[key]
  return out as unknown as Snapshot
}

/** One handler run, as the handler saw it. */
interface Run {
  readonly id: MessageId
  readonly consumer: string
  readonly attempt: number
  readonly startedAt: number
  ended: boolean
  interrupted: boolean
}

/** A handler that sleeps `HANDLER_MS` for every message and records each run. */
const slowHandler = (runs: Array<Run>): Consumer.Handler => (message, context) =>
  Effect.gen(function*() {
    const run: Run = { id: message.id, consumer: context.consumerId, attempt: context.attempt, startedAt: Date.now(), ended: false, interrupted: false }
    runs.push(run)
    yield* Effect.sleep(HANDLER_MS).pipe(Effect.onInterrupt(() => Effect.sync(() => { run.interrupted = true })))
    run.ended = true
  })

/** Start a consumer in its own scope (a child of the test's), so the test can stop it. */
const startConsumer = (handler: Consumer.Handler, consumerId: string) =>
  Effect.gen(function*() {
    const scope = yield* Scope.fork(yield* Scope.Scope)
    const context = yield* Layer.buildWithScope(
      Consumer.layer(handler, { queues: [QUEUE], consumerId, lease: LEASE, pollInterval: "50ms" }),
      scope
    )
    return { consumer: Context.get(context, Consumer.Consumer), stop: Scope.close(scope, Exit.void) }
  })


/**
 * The store on its own pool tagged `applicationName` (the lease pool is
 * `<applicationName>-lease`), in `schema`, timed by the database. A name of its
 * own lets a test kill its lease pool's backends without touching the pools of
 * test files running at the same time.
 */
const storeOn = (schema: string, applicationName: string) =>
  PgQueueStore.layer({ clock: "database", schema }).pipe(
    Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
    Layer.provideMerge(PgClient.layer({ url: Redacted.make(PgTest.databaseUrl()), maxConnections: 6, applicationName }))
  )

describe("Consumer on PostgreSQL (real time)", () => {
  it.live("a handler running 3x its lease keeps its message through renewals; a second consumer never gets it", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const runs: Array<Run> = []
      const handler = slowHandler(runs)
      const before = yield* snapshot

      const a = yield* startConsumer(handler, "consumer-a")
      const [sent] = yield* store.send(QUEUE, [{ task: "slow", payload: {} }])
      const id = sent!.id
      yield* waitFor("consumer A to start the message", Effect.sync(() => Option.fromNullishOr(runs[0])))
      const b = yield* startConsumer(handler, "consumer-b")

      // While the handler runs, the lease end (the earliest future visible_at of the queue) keeps moving forward.
      const leaseEnds: Array<number> = []
      while (!runs[0]!.ended && !runs[0]!.interrupted) {
        const next = yield* store.nextVisibleAt(QUEUE)
        if (Option.isSome(next) && leaseEnds[leaseEnds.length - 1] !== next.value.getTime()) leaseEnds.push(next.value.getTime())
        yield* Effect.sleep(100)
      }
      yield* waitFor(
        "the message to be acked",
        Effect.map(snapshot, (now) => now.acked - before.acked >= 1 ? Option.some(true) : Option.none()),
        10_000
      )
      // B keeps polling for another lease: nothing comes back.
      yield* Effect.sleep(LEASE_MS + 200)
      const stats = yield* store.stats(QUEUE)
      const d = delta(before, yield* snapshot)
      yield* Effect.log(`renewals ${d.renewals}, lease ends seen ${leaseEnds.length}, counters ${JSON.stringify(d)}`)

      assert.deepStrictEqual(
        runs.map((r) => ({ id: r.id, consumer: r.consumer, attempt: r.attempt, ended: r.ended, interrupted: r.interrupted })),
        [{ id, consumer: a.consumer.settings.consumerId, attempt: 1, ended: true, interrupted: false }],
        "exactly one run, on A, to completion"
      )
      assert.strictEqual(d.claimed, 1, "claimed once, by one consumer")
      assert.strictEqual(d.acked, 1, "acked exactly once")
      assert.strictEqual(d.doubleRuns, 0)
      assert.strictEqual(d.retried, 0)
      assert.strictEqual(d.released, 0)
      assert.strictEqual(d.finishFailures, 0)
      // Every lease/3 over 3 leases: about 9 renewals; allow for scheduling.
      assert.isAtLeast(d.renewals, 6, `renewals: ${d.renewals}`)
      assert.isAtLeast(leaseEnds.length, 5, `lease ends seen: ${leaseEnds.map((t) => new Date(t).toISOString()).join(", ")}`)
      for (let i = 1; i < leaseEnds.length; i++) assert.isAbove(leaseEnds[i]!, leaseEnds[i - 1]!, "the lease only moves forward")
      assert.isAtLeast(leaseEnds[leaseEnds.length - 1]! - leaseEnds[0]!, HANDLER_MS - 2 * LEASE_MS)
      assert.deepStrictEqual([stats.ready, stats.inFlight, stats.delayed, stats.dead], [0, 0, 0, 0], "the message is gone")

      yield* b.stop
      yield* a.stop
    }).pipe(Effect.provide(PgTest.storeLayer({ clock: "database" }))), { timeout: 30_000 })

  it.live("killing the lease pool's backends mid-run (idle, renewals and the ack in flight) loses nothing and runs nothing twice", () => {
    const schema = PgTest.uniqueSchema("cpg")
    const applicationName = `leasehold-cpg-${Math.random().toString(36).slice(2, 8)}`
    const leasePool = `${applicationName}-lease`
    return Effect.gen(function*() {
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      const runs: Array<Run> = []
      const handler = slowHandler(runs)
      const before = yield* snapshot

      const a = yield* startConsumer(handler, "consumer-a")
      const [sent] = yield* store.send(QUEUE, [{ task: "slow", payload: {} }])
      const id = sent!.id
      yield* waitFor("consumer A to start the message", Effect.sync(() => Option.fromNullishOr(runs[0])))
      const b = yield* startConsumer(handler, "consumer-b")

      const startedAt = runs[0]!.startedAt

      /** Kill every backend of the lease pool, whatever it is doing. */
      const killAll = Effect.map(
        sql<{ killed: number }>`
          SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))::int AS killed
          FROM pg_stat_activity WHERE application_name = ${leasePool}`,
        (rows) => rows[0]!.killed
      )

      /**
       * Hold the message's row lock so the next lease statement on it (a renewal,
       * or the ack) blocks in the server; kill the lease backends blocked on it
       * until one running `stopAt` is killed (or `timeoutMs` passes), then let go.
       * Returns the statements killed in flight.
       */
      const killInFlight = (stopAt: "UPDATE" | "WITH", timeoutMs: number) =>
        Effect.gen(function*() {
          const locked = yield* Deferred.make<boolean>()
          const done = yield* Deferred.make<void>()
          const holder = yield* Effect.forkChild(sql.withTransaction(Effect.gen(function*() {
            const rows = yield* sql`SELECT id FROM ${sql(`${schema}.messages`)} WHERE id = ${id}::bigint FOR UPDATE`
            yield* Deferred.succeed(locked, rows.length === 1)
            yield* Deferred.await(done)
          })))
          const killed: Array<string> = []
          if (yield* Deferred.await(locked)) {
            yield* waitFor(
              `a blocked ${stopAt} of the lease pool`,
              Effect.gen(function*() {
                // pg_stat_activity is read outside the lock's transaction: inside one it is a snapshot.
                const rows = yield* sql<{ query: string; killed: boolean }>`
                  SELECT query, pg_terminate_backend(pid) AS killed FROM pg_stat_activity
                  WHERE application_name = ${leasePool} AND wait_event_type = 'Lock'`
                for (const row of rows) if (row.killed) killed.push(row.query.trim().split(/\s+/)[0]!)
                return killed.includes(stopAt) ? Option.some(true) : Option.none()
              }),
              { timeoutMs, intervalMs: 5 }
            ).pipe(Effect.exit) // a timeout shows in the assertions on what was killed
          }
          yield* Deferred.succeed(done, undefined)
          yield* Fiber.join(holder)
          return killed
        })

      // 1. Kill the (idle) lease backends twice.
      const idleKills: Array<number> = []
      for (let i = 0; i < 2; i++) {
        yield* Effect.sleep(400)
        idleKills.push(yield* killAll)
      }
      // 2. Kill renewals in flight, with a successful renewal between two kills.
      const inFlight: Array<string> = []
      while (Date.now() - startedAt < 1_900) {
        inFlight.push(...(yield* killInFlight("UPDATE", 600)))
        yield* Effect.sleep(400)
      }
      // 3. Kill the ack in flight: hold the row from just before the handler ends.
      yield* Effect.sleep(Math.max(0, startedAt + HANDLER_MS - 250 - Date.now()))
      // The ack is written by the completion statement (a WITH ... DELETE ... of the finished batch).
      inFlight.push(...(yield* killInFlight("WITH", 2_000)))
      const kills = { idle: idleKills, inFlight }
      yield* waitFor(
        "the message to be acked",
        Effect.map(snapshot, (now) => now.acked - before.acked >= 1 ? Option.some(true) : Option.none()),
        10_000
      )
      yield* Effect.sleep(LEASE_MS + 200)
      const d = delta(before, yield* snapshot)
      const [left] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(`${schema}.messages`)}`
      yield* Effect.log(`backends killed ${JSON.stringify(kills)}; counters ${JSON.stringify(d)}`)

      assert.isAtLeast(idleKills.filter((k) => k > 0).length, 2, `idle lease backends must really be killed: ${JSON.stringify(kills)}`)
      assert.isAtLeast(inFlight.filter((q) => q === "UPDATE").length, 2, `renewals must be killed in flight: ${JSON.stringify(kills)}`)
      assert.include(inFlight, "WITH", `the ack must be killed in flight: ${JSON.stringify(kills)}`)
      assert.isAtLeast(d.renewalFailures, 2, "the killed renewals failed")
      assert.deepStrictEqual(
        runs.map((r) => ({ id: r.id, consumer: r.consumer, attempt: r.attempt, ended: r.ended, interrupted: r.interrupted })),
        [{ id, consumer: a.consumer.settings.consumerId, attempt: 1, ended: true, interrupted: false }],
        "exactly one run, on A, to completion"
      )
      assert.strictEqual(d.claimed, 1, "claimed once, by one consumer")
      assert.strictEqual(d.acked, 1, "acked exactly once")
      assert.strictEqual(d.doubleRuns, 0)
      assert.strictEqual(d.retried, 0)
      assert.strictEqual(d.finishFailures, 0)
      assert.isAtLeast(d.renewals, 4, `renewals: ${d.renewals}`)
      assert.strictEqual(left!.n, 0, "the message is gone")

      yield* b.stop
      yield* a.stop
    }).pipe(Effect.provide(storeOn(schema, applicationName)))
  }, { timeout: 30_000 })
})

describe("waking on sends (LISTEN/NOTIFY)", () => {
  it.live("an idle consumer with a one-minute poll runs a new message at once, also one sent in a committed transaction", () =>
    // Scoped inside the store's layer: the consumer always stops before its pool closes.
    Effect.scoped(Effect.gen(function*() {
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      const started: Array<{ id: string; at: number }> = []
      const handler: Consumer.Handler = (message) => Effect.sync(() => { started.push({ id: message.id, at: Date.now() }) })
      const scope = yield* Scope.fork(yield* Scope.Scope)
      yield* Layer.buildWithScope(
        Consumer.layer(handler, { queues: [QUEUE], consumerId: "listener", lease: LEASE, pollInterval: "1 minute" }),
        scope
      )
      // Let its first poll find nothing, so it is asleep for a minute.
      yield* Effect.sleep(300)
      const sentAt = Date.now()
      const [first] = yield* store.send(QUEUE, [{ task: "quick", payload: {} }])
      const run = yield* waitFor("the first message to run", Effect.sync(() => Option.fromNullishOr(started[0])), 10_000)
      assert.strictEqual(run.id, first!.id)
      // Well under the one-minute poll: the send woke the consumer.
      assert.isAtMost(run.at - sentAt, 5_000, `woke after ${run.at - sentAt} ms`)
      // A send inside a transaction wakes it when the transaction commits.
      yield* Effect.sleep(300)
      const [second] = yield* sql.withTransaction(store.send(QUEUE, [{ task: "quick", payload: {} }]))
      const committedAt = Date.now()
      const run2 = yield* waitFor("the second message to run", Effect.sync(() => Option.fromNullishOr(started[1])), 10_000)
      assert.strictEqual(run2.id, second!.id)
      assert.isAtMost(run2.at - committedAt, 5_000, `woke after ${run2.at - committedAt} ms`)
      yield* Effect.log(`woken by sends after ${run.at - sentAt} ms and ${run2.at - committedAt} ms (poll interval 1 minute)`)
      yield* Scope.close(scope, Exit.void)
    })).pipe(Effect.provide(PgTest.storeLayer({ clock: "database" }))), { timeout: 30_000 })
})

describe("two claim loops on PostgreSQL (a lane of 64 slots over a backlog)", () => {
  it.live("a 3,000-message backlog drains with two claims in flight at times: each message runs once and is acked once", () =>
    Effect.scoped(Effect.gen(function*() {
      const inner = yield* QueueStore
      let claimsInFlight = 0
      let mostInFlight = 0
      // The store as the consumer sees it, counting its claim statements in flight at once.
      const counting = Layer.succeed(QueueStore, {
        ...inner,
        claim: (queue, options) =>
          Effect.suspend(() => {
            mostInFlight = Math.max(mostInFlight, ++claimsInFlight)
            return inner.claim(queue, options)
          }).pipe(Effect.ensuring(Effect.sync(() => void claimsInFlight--)))
      })
      const runs = new Map<string, number>()
      const handler: Consumer.Handler = (message) => Effect.sync(() => void runs.set(message.id, (runs.get(message.id) ?? 0) + 1))
      const ids: Array<string> = []
      for (let i = 0; i < 3_000; i += 500) {
        const sent = yield* inner.send(QUEUE, Array.from({ length: 500 }, (_, j) => ({ task: "quick", payload: { n: i + j } })))
        ids.push(...sent.map((s) => s.id))
      }
      const before = yield* snapshot
      const scope = yield* Scope.fork(yield* Scope.Scope)
      yield* Layer.buildWithScope(
        Consumer.layer(handler, { queues: [QUEUE], consumerId: "two-loops", lease: "30 seconds", concurrency: 64, batchSize: 32, pollInterval: "50ms" })
          .pipe(Layer.provide(counting)),
        scope
      )
      yield* waitFor(
        "every message to be acked",
        Effect.map(snapshot, (now) => now.acked - before.acked >= ids.length ? Option.some(true) : Option.none()),
        60_000
      )
      yield* Scope.close(scope, Exit.void)
      const d = delta(before, yield* snapshot)
      assert.strictEqual(mostInFlight, 2, "the second loop claimed beside the first")
      assert.deepStrictEqual([...runs.keys()].sort(), [...ids].sort(), "every message ran")
      assert.deepStrictEqual([...runs.values()].filter((n) => n !== 1), [], "none ran twice")
      assert.strictEqual(d.claimed, ids.length, "each claimed once")
      assert.strictEqual(d.acked, ids.length)
      assert.strictEqual(d.doubleRuns, 0)
      assert.strictEqual(d.released, 0)
      assert.strictEqual((yield* inner.stats(QUEUE)).ready, 0)
    })).pipe(Effect.provide(PgTest.storeLayer({ clock: "database" }))), { timeout: 90_000 })
})
