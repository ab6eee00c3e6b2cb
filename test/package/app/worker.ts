/**
 * The scratch app's worker, built as the README's (examples/worker.ts), from the installed package:
 * with `LEASEHOLD_HTTP_PORT` set it serves `/healthz`, `/readyz` and `/metrics`, whose modules the
 * package loads only when that layer is built (dist/http/serve.js, effect's PrometheusMetrics).
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Layer } from "effect"
import { Consumer, ConsumerPresence, Http, Observability, PgQueueStore, QueueConfig, Task } from "leasehold"
import { greet, reject, slow } from "./tasks.ts"

const WorkerLayer = Consumer.layerFromEnv(Task.dispatcher(greet, reject, slow)).pipe(
  Layer.provideMerge(ConsumerPresence.layerFromEnv()),
  Layer.provideMerge(PgQueueStore.layer()),
  Layer.provideMerge(QueueConfig.pgLayerFromEnv())
)

const Observed = Http.layerFromEnv().pipe(Layer.provideMerge(WorkerLayer), Layer.provide(Observability.layerPrometheus()))

Consumer.launch(Observed).pipe(NodeRuntime.runMain({ teardown: Consumer.teardown }))
