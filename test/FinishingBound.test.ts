/**
 * Finishing writes are bounded on the client: a network partition in the middle
 * of an ack (a TCP proxy of the test's own stops forwarding, both ways, and keeps
 * the sockets open) cannot hold the handler's scope, and so a shutdown, for
 * longer than the lease. Real PostgreSQL, real time.
 */
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it } from "@effect/vitest"
import { Context, Deferred, Effect, Exit, Layer, Metric, Option, Redacted, Scope } from "effect"
import * as Consumer from "../src/Consumer.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import * as QueueMetrics from "../src/QueueMetrics.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as PgProxy from "./support/PgProxy.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitFor } from "./support/Wait.ts"

const QUEUE = "partitioned"
const LEASE_MS = 3_000
const STOP_TIMEOUT_MS = 1_000
const GRACE_MS = 1_000

const count = (metric: Metric.Metric<number, Metric.CounterState<number>>) =>
  Effect.map(Metric.value(metric), (state) => Number(state.count))

describe("finishing writes under a network partition (real PostgreSQL, real time)", () => {
  it.live("an ack that never gets an answer is given up when the lease runs out; the shutdown completes within grace + lease + stop timeout", () =>
    Effect.gen(function*() {
      const schema = PgTest.uniqueSchema("partition")
      // The test's own view of the database: direct, never through the proxy.
      const direct = yield* Layer.build(
        PgQueueStore.layer({ schema, clock: "database" }).pipe(
          Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
          Layer.provideMerge(PgTest.clientLayer({ maxConnections: 2 }))
        )
      )
      const store = Context.get(direct, QueueStore)
      const proxy = yield* PgProxy.make(PgTest.databaseUrl())
      const [sent] = yield* store.send(QUEUE, [{ task: "t", payload: 1 }])

      // The consumer reaches the database only through the proxy.
      const gate = yield* Deferred.make<void>()
      const started = yield* Deferred.make<void>()
      const handler: Consumer.Handler = () => Deferred.succeed(started, undefined).pipe(Effect.andThen(Deferred.await(gate)))
      const proxied = yield* Layer.build(
        PgQueueStore.layer({ schema, clock: "database", migrate: false }).pipe(
          Layer.provideMerge(PgClient.layer({ url: Redacted.make(proxy.url), maxConnections: 4, applicationName: "partitioned" }))
        )
      )
      const scope = yield* Scope.make()
      yield* Layer.buildWithScope(
        Consumer.layer(handler, {
          queues: [QUEUE],
          consumerId: "partitioned",
          lease: LEASE_MS,
          pollInterval: "100 millis",
          renewerStopTimeout: STOP_TIMEOUT_MS,
          shutdownGrace: GRACE_MS
        }).pipe(Layer.provide(Layer.succeedContext(proxied))),
        scope
      )
      yield* Deferred.await(started).pipe(Effect.timeout("15 seconds"))
      const failuresBefore = yield* count(QueueMetrics.finishFailures)

      // Partition, then let the handler finish: its ack goes out and nothing comes back.
      proxy.freeze("partitioned")
      const finishedAt = Date.now()
      yield* Deferred.succeed(gate, undefined)
      yield* waitFor(
        "the ack to be given up",
        Effect.map(count(QueueMetrics.finishFailures), (n) => n > failuresBefore ? Option.some(n) : Option.none()),
        { timeoutMs: LEASE_MS + STOP_TIMEOUT_MS + 5_000 }
      )
      const gaveUpAfter = Date.now() - finishedAt
      assert.isAtMost(gaveUpAfter, LEASE_MS + STOP_TIMEOUT_MS, `ack given up after ${gaveUpAfter} ms`)

      // The shutdown, still partitioned, is bounded too.
      const closingAt = Date.now()
      yield* Scope.close(scope, Exit.void).pipe(Effect.timeout(GRACE_MS + LEASE_MS + STOP_TIMEOUT_MS + 3_000))
      const closedAfter = Date.now() - closingAt
      assert.isAtMost(closedAfter, GRACE_MS + LEASE_MS + STOP_TIMEOUT_MS + 1_000, `shutdown took ${closedAfter} ms`)

      // Nothing is lost: the message was never acked, and runs again once its lease is over.
      proxy.restore()
      const again = yield* waitFor(
        "the message to be claimable again",
        Effect.map(store.claim(QUEUE, { lease: "30 seconds", limit: 1, consumer: "after" }), (cs) => cs.length > 0 ? Option.some(cs) : Option.none()),
        { timeoutMs: LEASE_MS + 5_000, intervalMs: 200 }
      )
      assert.strictEqual(again[0]!.id, sent!.id)
    }), 60_000)
})
