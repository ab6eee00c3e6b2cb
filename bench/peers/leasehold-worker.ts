/**
 * leasehold's worker for the SIGKILL-to-rerun run of `npm run bench:peers`:
 * ../throughput/leasehold-worker.ts (the README's worker: `Consumer.layerFromEnv`
 * + `ConsumerPresence.layerFromEnv()` + `PgQueueStore.layer()` +
 * `QueueConfig.pgLayerFromEnv()`, `Consumer.launch` under `NodeRuntime.runMain`,
 * every setting the default but URL, schema, queue and concurrency) with the
 * job body of common.ts's `runJob`: with PEERS_HANG=1 the handler prints RUN and
 * never finishes (its lease is renewed as long as the process lives). The
 * throughput and latency runs use ../throughput/leasehold-worker.ts itself.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Effect, Layer } from "effect"
import * as Consumer from "../../src/Consumer.ts"
import * as ConsumerPresence from "../../src/ConsumerPresence.ts"
import * as PgQueueStore from "../../src/PgQueueStore.ts"
import * as QueueConfig from "../../src/QueueConfig.ts"
import { announceReady, makeRecorder, workerEnv } from "../throughput/protocol.ts"
import { runJob } from "./common.ts"

const job = runJob(makeRecorder(workerEnv("leasehold worker")))

const handler: Consumer.Handler = (message) => Effect.promise(() => job(message.payload))

const WorkerLayer = Consumer.layerFromEnv(handler).pipe(
  Layer.provide(ConsumerPresence.layerFromEnv()),
  Layer.provide(PgQueueStore.layer()),
  Layer.provide(QueueConfig.pgLayerFromEnv({ applicationName: "peers-leasehold" }))
)

const Ready = Layer.effectDiscard(Effect.gen(function*() {
  yield* Consumer.Consumer
  announceReady()
}))

Consumer.launch(Ready.pipe(Layer.provideMerge(WorkerLayer))).pipe(NodeRuntime.runMain({ teardown: Consumer.teardown }))
