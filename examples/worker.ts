/**
 * A worker program (see README): `LEASEHOLD_DATABASE_URL=... node --conditions=leasehold-source examples/worker.ts`.
 *
 * Built from a dispatcher, the consumer consumes its tasks' queues (here `emails`) unless
 * `LEASEHOLD_QUEUES` names others. Run directly with Node (or `exec node` in an npm script):
 * `npm run`'s `sh -c` would not pass SIGTERM on.
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
// A claim loop that fails on anything but a dead connection (a missing table, a revoked
// permission) shuts down the same way, then fails the program: the error at ERROR, exit 1.
Consumer.launch(WorkerLayer).pipe(NodeRuntime.runMain({ teardown: Consumer.teardown }))
