/**
 * The leasehold side of `npm run bench:own`: one worker process built like the
 * README's worker (`Consumer.layerFromEnv` + `ConsumerPresence.layerFromEnv()`
 * + `PgQueueStore.layer()` + `QueueConfig.pgLayerFromEnv()`, run by
 * `Consumer.launch` under `NodeRuntime.runMain`), with a plain no-op handler. Every setting comes from
 * `LEASEHOLD_*` variables set by the orchestrator (bench/throughput/run.ts):
 * the URL, the schema, the queue, the concurrency, and only what a knob asks
 * for besides; everything else is the consumer's default.
 *
 * Run by the orchestrator as compiled JavaScript (tsc -p bench/throughput/tsconfig.json,
 * so the src/ it imports is leasehold's own build, like an application's dist/),
 * with Node directly (never through npm: its `sh -c` does not pass SIGTERM on).
 * Stdout protocol: see protocol.ts.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Effect, Exit, Layer, Tracer } from "effect"
import * as Consumer from "../../src/Consumer.ts"
import * as ConsumerPresence from "../../src/ConsumerPresence.ts"
import * as PgQueueStore from "../../src/PgQueueStore.ts"
import * as QueueConfig from "../../src/QueueConfig.ts"
import { announceReady, line, makeRecorder, wallMs, workerEnv } from "./protocol.ts"

const env = workerEnv("leasehold worker")
const record = makeRecorder(env)

const handler: Consumer.Handler = (message) => Effect.sync(() => record(message.payload))

/**
 * BENCH_LATENCY_BREAKDOWN=1: a tracer whose claim spans print `CLAIMED <start> <end>` (wall ms) when
 * the claim took messages, for breakdown.ts. Every other span is effect's own.
 */
class ClaimSpan extends Tracer.NativeSpan {
  readonly wallStart = wallMs()
  override end(endTime: bigint, exit: Exit.Exit<unknown, unknown>): void {
    super.end(endTime, exit)
    const count = this.attributes.get("count")
    if (this.name === "leasehold.claim" && typeof count === "number" && count > 0) {
      line(`CLAIMED ${this.wallStart.toFixed(3)} ${wallMs().toFixed(3)}`)
    }
  }
}
const ClaimTimes = env.breakdown
  ? Layer.succeed(Tracer.Tracer, Tracer.make({ span: (options) => new ClaimSpan(options) }))
  : Layer.empty

const WorkerLayer = Consumer.layerFromEnv(handler).pipe(
  Layer.provide(ConsumerPresence.layerFromEnv()),
  Layer.provide(PgQueueStore.layer()), // LEASEHOLD_SCHEMA, set by the orchestrator
  Layer.provide(QueueConfig.pgLayerFromEnv({ applicationName: "bench-leasehold" })),
  Layer.provide(ClaimTimes)
)

/** Announces readiness once the consumer is built (it is already claiming by then). */
const Ready = Layer.effectDiscard(Effect.gen(function*() {
  yield* Consumer.Consumer
  announceReady()
}))

Consumer.launch(Ready.pipe(Layer.provideMerge(WorkerLayer))).pipe(NodeRuntime.runMain({ teardown: Consumer.teardown }))
