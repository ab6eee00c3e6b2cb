/**
 * The scratch app's worker, built as the README's (examples/worker.ts), from the installed package.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Layer } from "effect"
import { Consumer, ConsumerPresence, PgQueueStore, QueueConfig, Task } from "leasehold"
import { greet, reject, slow } from "./tasks.ts"

const WorkerLayer = Consumer.layerFromEnv(Task.dispatcher(greet, reject, slow)).pipe(
  Layer.provide(ConsumerPresence.layerFromEnv()),
  Layer.provide(PgQueueStore.layer()),
  Layer.provide(QueueConfig.pgLayerFromEnv())
)

Consumer.launch(WorkerLayer).pipe(NodeRuntime.runMain({ teardown: Consumer.teardown }))
