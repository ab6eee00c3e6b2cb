/**
 * leasehold's worker in `npm run bench` (bench/peers/run.ts), the README's worker as an installed
 * app writes it: `Consumer.layerFromEnv` + `ConsumerPresence.layerFromEnv()` +
 * `PgQueueStore.layer()` + `QueueConfig.pgLayerFromEnv()`, run by `Consumer.launch` under
 * `NodeRuntime.runMain`, every setting the default but the URL, schema, queue and concurrency
 * (`LEASEHOLD_*`, set by the orchestrator). It imports `leasehold` by name: compiled into
 * `.tmp/peers/app`, that is `.tmp/peers/node_modules/leasehold`, the packed tarball, whose
 * `exports` load `dist/index.js` (install.ts). The job body is common.ts's `runJob`: a no-op that
 * counts and times, or with PEERS_HANG=1 (the SIGKILL-to-rerun run) a handler that never finishes.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Effect, Layer } from "effect"
import { Consumer, ConsumerPresence, PgQueueStore, QueueConfig } from "leasehold"
import { announceReady, makeRecorder, workerEnv } from "../throughput/protocol.ts"
import { runJob } from "./common.ts"

const record = makeRecorder(workerEnv("leasehold worker"))
const hang = runJob(record)

/** A plain synchronous no-op (as the README's worker would be), or the never-ending handler. */
const handler: Consumer.Handler = process.env["PEERS_HANG"] === "1"
  ? (message) => Effect.promise(() => hang(message.payload))
  : (message) => Effect.sync(() => record(message.payload))

const WorkerLayer = Consumer.layerFromEnv(handler).pipe(
  Layer.provide(ConsumerPresence.layerFromEnv()),
  Layer.provide(PgQueueStore.layer()),
  Layer.provide(QueueConfig.pgLayerFromEnv({ applicationName: "peers-leasehold" }))
)

/** Announces readiness once the consumer is built (it is already claiming by then). */
const Ready = Layer.effectDiscard(Effect.gen(function*() {
  yield* Consumer.Consumer
  announceReady()
}))

Consumer.launch(Ready.pipe(Layer.provideMerge(WorkerLayer))).pipe(NodeRuntime.runMain({ teardown: Consumer.teardown }))
