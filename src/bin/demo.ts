/**
 * The demo: starts a throwaway PostgreSQL (embedded, nothing to set up), sends
 * a few messages, and runs a real consumer on them, printing what happens:
 * claims, a task that outlives its lease and keeps it by renewal, a failure
 * retried with backoff, a bad message dead-lettered, and a graceful shutdown.
 *
 * Run with `npm run demo`. Set LEASEHOLD_DATABASE_URL to use your own database instead.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Effect, Layer, Metric, Redacted, References } from "effect"
import * as Consumer from "../Consumer.ts"
import * as EmbeddedPostgres from "../internal/EmbeddedPostgres.ts"
import * as PgQueueStore from "../PgQueueStore.ts"
import * as QueueConfig from "../QueueConfig.ts"
import * as QueueMetrics from "../QueueMetrics.ts"
import { QueueStore } from "../QueueStore.ts"

const queue = "demo"
const lease = "2 seconds"

/** The demo's tasks, dispatched by task name. */
const handler: Consumer.Handler = (message, context) => {
  const payload = message.payload as Record<string, unknown>
  switch (message.task) {
    case "greet":
      return Effect.logInfo(`greet: hello, ${String(payload["name"])}!`)
    case "slow-report":
      // Runs 3x the lease: the renewer keeps the lease alive (see "lease renewed" lines).
      return Effect.gen(function*() {
        yield* Effect.logInfo(`slow-report: working for 6s with a ${lease} lease`)
        yield* Effect.sleep("6 seconds")
        yield* Effect.logInfo(`slow-report: done on attempt ${context.attempt}, lease held throughout`)
      })
    case "flaky":
      return context.attempt < 2
        ? Effect.fail(new Error(`flaky: upstream unavailable (attempt ${context.attempt})`))
        : Effect.logInfo(`flaky: succeeded on attempt ${context.attempt}`)
    default:
      return Effect.fail(new Error(`no handler for task "${message.task}"`))
  }
}

const program = Effect.gen(function*() {
  const store = yield* QueueStore
  yield* store.send(queue, [
    { task: "greet", payload: { name: "leasehold" } },
    { task: "slow-report", payload: { report: 42 } },
    { task: "flaky", payload: {}, maxAttempts: 3 },
    { task: "mystery", payload: { x: 1 }, maxAttempts: 1 }
  ])
  yield* Effect.logInfo(`sent 4 messages to "${queue}": ${JSON.stringify(yield* store.stats(queue))}`)
  yield* Effect.scoped(Effect.gen(function*() {
    yield* Layer.build(Consumer.layer(handler, {
      queues: [queue],
      lease,
      pollInterval: "200 millis",
      retryBase: "500 millis",
      concurrency: 4
    }))
    // Wait until nothing is ready, delayed or in flight.
    while (true) {
      yield* Effect.sleep("250 millis")
      const s = yield* store.stats(queue)
      if (s.ready + s.delayed + s.inFlight === 0) break
    }
  }))
  const renewals = yield* Metric.value(QueueMetrics.renewals)
  yield* Effect.logInfo(`all done: ${JSON.stringify(yield* store.stats(queue))}; leases renewed: ${JSON.stringify(renewals)}`)
  for (const dead of yield* store.deadLetters({ queue })) {
    yield* Effect.logInfo(`dead letter ${dead.id} (${dead.task}): ${dead.reason}`)
  }
})

/** Use LEASEHOLD_DATABASE_URL when set, else an embedded server for the length of the demo. */
const database = Layer.unwrap(Effect.gen(function*() {
  const configured = process.env[QueueConfig.variables.databaseUrl]
  if (configured !== undefined && configured !== "") return QueueConfig.pgLayer(Redacted.make(configured))
  yield* Effect.logInfo("starting an embedded PostgreSQL for the demo...")
  const server = yield* EmbeddedPostgres.acquire()
  yield* Effect.logInfo(`embedded PostgreSQL ready on port ${server.port}`)
  return QueueConfig.pgLayer(Redacted.make(server.url))
}))

program.pipe(
  Effect.provide(PgQueueStore.layer({ schema: "leasehold_demo" }).pipe(Layer.provideMerge(database))),
  Effect.provideService(References.MinimumLogLevel, "Debug"),
  NodeRuntime.runMain
)
