/**
 * A server restart is not a partition: while PostgreSQL is down for everyone,
 * no reaper can release anything (and after the start, reapers wait the stale
 * bound), so a consumer whose heartbeats are refused must not stop its handlers
 * as if it were about to be judged dead. Runs on a server of its own, stopped
 * and started by the test.
 */
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it } from "@effect/vitest"
import { Context, Deferred, Effect, Exit, Layer, Metric, Redacted, Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as Consumer from "../src/Consumer.ts"
import * as ConsumerPresence from "../src/ConsumerPresence.ts"
import * as EmbeddedPostgres from "../dev/EmbeddedPostgres.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import * as QueueMetrics from "../src/QueueMetrics.ts"
import { QueueStore } from "../src/QueueStore.ts"

const count = (metric: Metric.Metric<number, Metric.CounterState<number>>) =>
  Effect.map(Metric.value(metric), (state) => Number(state.count))

/** Poll `check` until true, or fail naming `what`. */
const waitUntil = <E, R>(what: string, check: Effect.Effect<boolean, E, R>, timeoutMs = 20_000) =>
  Effect.gen(function*() {
    const deadline = Date.now() + timeoutMs
    while (!(yield* check.pipe(Effect.orElseSucceed(() => false)))) {
      if (Date.now() > deadline) return yield* Effect.die(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`))
      yield* Effect.sleep(50)
    }
  })

describe("session liveness across a server restart", () => {
  it.live("a consumer whose heartbeats are refused while the server is down keeps its handlers; the message runs once", () =>
    Effect.gen(function*() {
      const server = yield* EmbeddedPostgres.acquire({ forTests: true })
      const schema = "restart_test"
      const scope = yield* Scope.make()
      const runs: Array<{ interrupted: boolean; ended: boolean }> = []
      const gate = yield* Deferred.make<void>()
      const handler: Consumer.Handler = () =>
        Effect.suspend(() => {
          const run = { interrupted: false, ended: false }
          runs.push(run)
          return Deferred.await(gate).pipe(
            Effect.andThen(Effect.sync(() => { run.ended = true })),
            Effect.onInterrupt(() => Effect.sync(() => { run.interrupted = true }))
          )
        })
      const stopsBefore = yield* count(QueueMetrics.leaseLostBy("presence-lost"))
      const services = yield* Layer.buildWithScope(
        Consumer.layer(handler, { consumerId: "survivor", lease: "10 seconds", pollInterval: "100 millis" }).pipe(
          Layer.provideMerge(ConsumerPresence.layerPg({ schema, mode: "on", heartbeat: 250, staleAfter: 1_500, reapEvery: 250 })),
          Layer.provideMerge(PgQueueStore.layer({ schema, clock: "database" })),
          Layer.provideMerge(PgClient.layer({ url: Redacted.make(server.url), maxConnections: 4, applicationName: "restart" }))
        ),
        scope
      )
      const store = Context.get(services, QueueStore)
      yield* store.send("default", [{ task: "long", payload: 1 }])
      yield* waitUntil("the handler to start", Effect.sync(() => runs.length === 1))

      // Down for 2.5 s: well past the stale bound (1.5 s) at which a cut-off consumer stops its handlers.
      yield* Effect.promise(() => server.stop())
      yield* Effect.sleep(2_500)
      yield* Effect.promise(() => server.start())
      yield* waitUntil("the store to answer again", Effect.as(store.stats("default"), true))

      assert.isFalse(runs[0]!.interrupted, "the handler was not stopped: nobody could have reaped this consumer")
      yield* Deferred.succeed(gate, undefined)
      yield* waitUntil("the message to be acked", Effect.map(store.stats("default"), (s) => s.ready + s.inFlight + s.delayed === 0))
      assert.strictEqual(runs.length, 1, "ran once")
      assert.isTrue(runs[0]!.ended)
      assert.strictEqual((yield* count(QueueMetrics.leaseLostBy("presence-lost"))) - stopsBefore, 0)
      const sql = Context.get(services, SqlClient.SqlClient)
      const history = yield* sql<{ outcome: string }>`SELECT outcome FROM ${sql(`${schema}.attempts`)} ORDER BY id`
      assert.deepStrictEqual(history.map((h) => h.outcome), ["acked"])
      yield* Scope.close(scope, Exit.void)
    }).pipe(Effect.scoped), { timeout: 60_000 })
})
