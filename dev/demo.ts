/**
 * The demo: starts a throwaway PostgreSQL (embedded, nothing to set up), sends
 * a few typed tasks, and runs a real consumer on them, printing what happens:
 * a task that outlives its lease and keeps it by renewal, a failure retried
 * with backoff, a payload that fails its schema dead-lettered, and a graceful
 * shutdown.
 *
 * Run with `npm run demo`. Set LEASEHOLD_DATABASE_URL to use your own database instead.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Effect, Layer, Metric, Redacted, References, Schema } from "effect"
import * as Consumer from "../src/Consumer.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import * as QueueConfig from "../src/QueueConfig.ts"
import * as QueueMetrics from "../src/QueueMetrics.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as Task from "../src/Task.ts"
import * as EmbeddedPostgres from "./EmbeddedPostgres.ts"

const queue = "demo"
const lease = "2 seconds"

/** The demo's tasks: typed payloads, per-task policies. */
const greet = Task.make({
  name: "greet",
  queue,
  payload: Schema.Struct({ name: Schema.String }),
  handler: ({ name }) => Effect.logInfo(`greet: hello, ${name}!`)
})

const slowReport = Task.make({
  name: "slow-report",
  queue,
  payload: Schema.Struct({ report: Schema.Number }),
  // Runs 3x the lease: the renewer keeps the lease alive (see the "lease renewed" lines).
  handler: ({ report }, context) =>
    Effect.gen(function*() {
      yield* Effect.logInfo(`slow-report ${report}: working for 6s with a ${lease} lease`)
      yield* Effect.sleep("6 seconds")
      yield* Effect.logInfo(`slow-report ${report}: done on attempt ${context.attempt}, lease held throughout`)
    })
})

const flaky = Task.make({
  name: "flaky",
  queue,
  payload: Schema.Struct({}),
  retry: { base: "500 millis" },
  maxAttempts: 3,
  handler: (_, context) =>
    context.attempt < 2
      ? Effect.fail(new Error(`flaky: upstream unavailable (attempt ${context.attempt})`))
      : Effect.logInfo(`flaky: succeeded on attempt ${context.attempt}`)
})

const chargeCard = Task.make({
  name: "charge-card",
  queue,
  payload: Schema.Struct({ cents: Schema.Int }),
  handler: ({ cents }) => Effect.logInfo(`charged ${cents} cents`)
})

const program = Effect.gen(function*() {
  const store = yield* QueueStore
  yield* Task.send(greet, { name: "leasehold" })
  yield* Task.send(slowReport, { report: 42 })
  yield* Task.send(flaky, {})
  // A message written by something that does not follow the schema: dead-lettered, never run.
  yield* store.send(queue, [{ task: "charge-card", payload: { cents: "a lot" } }])
  yield* Effect.logInfo(`sent 4 messages to "${queue}": ${JSON.stringify(yield* store.stats(queue))}`)
  // The worker runs (Consumer.launch) until nothing is ready, delayed or in flight; then it is
  // interrupted, which shuts it down gracefully. A claim loop that fails ends the demo with its error.
  const worker = Consumer.launch(Consumer.layer(Task.dispatcher(greet, slowReport, flaky, chargeCard), {
    lease,
    pollInterval: "200 millis",
    concurrency: 4
  }))
  const allDone = Effect.gen(function*() {
    while (true) {
      yield* Effect.sleep("250 millis")
      const s = yield* store.stats(queue)
      if (s.ready + s.delayed + s.inFlight === 0) return
    }
  })
  yield* Effect.raceFirst(worker, allDone)
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
  // Ctrl-C: the consumer drains (handlers finish within the grace, the rest released), exit 0.
  NodeRuntime.runMain({ teardown: Consumer.teardown })
)
