/**
 * The send and single roles (common.ts) of leasehold in `npm run bench` (bench/peers/run.ts):
 * migrate a schema (PgQueueStore.make, as a producer's store layer does), then `store.send`
 * PEERS_CHUNK no-op messages per call, as `TaskClient.sendMany` does for a task. The worker role
 * is ./leasehold-worker.ts. Imports `leasehold` by name, the installed tarball's dist/ (install.ts).
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Redacted } from "effect"
import { PgQueueStore } from "leasehold"
import { QUEUE, wallMs } from "../throughput/protocol.ts"
import { payloads, peerEnv } from "./common.ts"

const env = peerEnv()
const schema = process.env["LEASEHOLD_SCHEMA"] ?? "leasehold"

const program = Effect.gen(function*() {
  const store = yield* PgQueueStore.make({ schema, leasePool: false })
  if (env.role === "single") {
    // Pickup latency: one message per send, as a producer sends one task (common.ts's timedSingles, in Effect).
    const sends = Number(process.env["PEERS_SENDS"] ?? "200")
    const warm = Number(process.env["PEERS_WARM"] ?? "10")
    const intervalMs = Number(process.env["PEERS_INTERVAL_MS"] ?? "20")
    console.log("SETUP")
    const start = wallMs()
    for (let k = 0; k < warm + sends; k++) {
      const wait = start + k * intervalMs - wallMs()
      if (wait > 0) yield* Effect.sleep(Math.ceil(wait))
      yield* Effect.suspend(() => store.send(QUEUE, [{ task: "noop", payload: { sentAt: wallMs(), warm: k < warm } }]))
    }
    console.log(`SENT ${sends}`)
    return
  }
  console.log("SETUP")
  const started = wallMs()
  let calls = 0
  for (let from = 0; from < env.jobs; from += env.chunk) {
    yield* store.send(QUEUE, payloads(from, Math.min(env.chunk, env.jobs - from)).map((payload) => ({ task: "noop", payload })))
    calls++
  }
  console.log(`SENT ${(wallMs() - started).toFixed(3)} ${calls}`)
}).pipe(
  Effect.scoped,
  Effect.provide(PgClient.layer({ url: Redacted.make(env.url), maxConnections: 3, applicationName: "peers-leasehold-send" }))
)

Effect.runPromise(program).then(
  () => process.exit(0),
  (error) => {
    console.error(`leasehold send: ${String(error)}`)
    process.exit(1)
  }
)
