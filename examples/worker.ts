/**
 * A worker program (see README): `LEASEHOLD_DATABASE_URL=... LEASEHOLD_QUEUES=emails node examples/worker.ts`.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Layer } from "effect"
import { Consumer, ConsumerPresence, PgQueueStore, QueueConfig, Task } from "leasehold"
import { sendWelcomeEmail } from "./tasks.ts"

const WorkerLayer = Consumer.layerFromEnv(Task.dispatcher(sendWelcomeEmail)).pipe(
  Layer.provide(ConsumerPresence.layerFromEnv()), // session liveness: a dead worker's claims come back in seconds
  Layer.provide(PgQueueStore.layer()), // migrates LEASEHOLD_SCHEMA (default `leasehold`) when built; presence uses the same
  Layer.provide(QueueConfig.pgLayerFromEnv())
)

// SIGTERM/SIGINT: stop claiming, let handlers finish within the grace, release the rest; exit 0.
Layer.launch(WorkerLayer).pipe(NodeRuntime.runMain({ teardown: Consumer.teardown }))
