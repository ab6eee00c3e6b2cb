/**
 * A worker program (see README): `LEASEHOLD_DATABASE_URL=... node --conditions=leasehold-source examples/worker.ts`.
 *
 * Built from a dispatcher, the consumer consumes its tasks' queues (here `emails`) unless
 * `LEASEHOLD_QUEUES` names others. Run directly with Node (or `exec node` in an npm script):
 * `npm run`'s `sh -c` would not pass SIGTERM on.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Effect, Layer } from "effect"
import { Consumer, ConsumerPresence, Http, Observability, PgQueueStore, QueueConfig, QueueDepth, Task } from "leasehold"
import { sendWelcomeEmail } from "./tasks.ts"

// The declaration gets its handler here, in the worker: producers never import this code.
const welcomeEmail = Task.implement(sendWelcomeEmail, (email, context) =>
  email.to.endsWith("@invalid")
    ? Task.unrecoverable(`cannot deliver to ${email.to}`) // straight to dead letters
    : Effect.logInfo(`welcoming ${email.name} <${email.to}>, attempt ${context.attempt}`))

const WorkerLayer = Layer.mergeAll(
  Consumer.layerFromEnv(Task.dispatcher(welcomeEmail)),
  QueueDepth.layer() // leasehold_queue_* gauges (ready, delayed, in flight, dead) of the consumed queues, every 10 s
).pipe(
  Layer.provideMerge(ConsumerPresence.layerFromEnv()), // session liveness: a dead worker's claims come back in seconds
  Layer.provideMerge(PgQueueStore.layer()), // migrates LEASEHOLD_SCHEMA (default `leasehold`) when built; presence uses the same
  Layer.provideMerge(QueueConfig.pgLayerFromEnv())
)

// Http reads the consumer, store and presence above (hence provideMerge): /healthz, /readyz, /metrics.
const Observed = Http.layerFromEnv().pipe( // serves only when LEASEHOLD_HTTP_PORT is set
  Layer.provideMerge(WorkerLayer),
  Layer.provide(Observability.layerPrometheus()), // GET /metrics: every metric in Prometheus text format
  Layer.provide(Observability.layerOtlpFromEnv()) // traces, metrics, logs over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set
)

// SIGTERM/SIGINT: stop claiming, let handlers finish within the grace, release the rest; exit 0.
// A claim loop that fails on anything but a dead connection (a missing table, a revoked
// permission) shuts down the same way, then fails the program: the error at ERROR, exit 1.
Consumer.launch(Observed).pipe(NodeRuntime.runMain({ teardown: Consumer.teardown }))
