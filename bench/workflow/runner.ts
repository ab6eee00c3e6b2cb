/**
 * A runner process of the workflow chaos run (bench/workflow/chaos.ts): leasehold's workflow engine
 * on `LEASEHOLD_SCHEMA` (lease `BENCH_WF_LEASE_MS`, default 5000; 16 runs at once; session liveness as
 * `LEASEHOLD_SESSION_LIVENESS` says) running the `Chaos` workflow.
 * Prints `READY` once registered.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Effect, Layer } from "effect"
import * as ConsumerPresence from "../../src/ConsumerPresence.ts"
import * as LeaseholdWorkflow from "../../src/LeaseholdWorkflow.ts"
import * as QueueConfig from "../../src/QueueConfig.ts"
import { chaosLayer } from "./chaosWorkflow.ts"

const schema = process.env["LEASEHOLD_SCHEMA"] ?? "leasehold"

// A starved process, without burning CPU: every BENCH_WF_STALL_EVERY_MS the event loop is blocked
// for BENCH_WF_STALL_MS (Atomics.wait), so timers fire late and replies wait, as on a loaded machine.
const stallMs = Number(process.env["BENCH_WF_STALL_MS"] ?? 0)
if (stallMs > 0) {
  const cell = new Int32Array(new SharedArrayBuffer(4))
  setInterval(() => Atomics.wait(cell, 0, 0, stallMs), Number(process.env["BENCH_WF_STALL_EVERY_MS"] ?? 200)).unref()
}

const Pg = QueueConfig.pgLayerFromEnv({ applicationName: "leasehold-workflow-bench", maxConnections: 6 })

const Ready = Layer.effectDiscard(Effect.sync(() => process.stdout.write("READY\n")))

const Runner = Ready.pipe(
  Layer.provideMerge(chaosLayer(schema)),
  Layer.provideMerge(LeaseholdWorkflow.layer({
    schema,
    lease: Number(process.env["BENCH_WF_LEASE_MS"] ?? 5_000),
    concurrency: 16,
    pollInterval: "250 millis"
  })),
  // Session liveness as LEASEHOLD_SESSION_LIVENESS says (the orchestrator passes BENCH_WF_LIVENESS).
  Layer.provideMerge(ConsumerPresence.layerFromEnv({ migrate: false })), // the orchestrator migrated
  Layer.provideMerge(Pg)
)

Layer.launch(Runner).pipe(NodeRuntime.runMain)
