/**
 * The worker of `npm run bench:commit` (bench/commit/run.ts): one process built like the README's
 * worker (`Consumer.layerFromEnv` + `ConsumerPresence.layerFromEnv()` + `PgQueueStore.layer()` +
 * `QueueConfig.pgLayerFromEnv()`, run by `Consumer.launch` under `NodeRuntime.runMain`), whose
 * handler, by `BENCH_VARIANT`:
 *   - `plain`:  `UPDATE counters SET n = n + 1 WHERE key = $1` (its own autocommit statement on
 *               the store's main pool), then the consumer's plain batched ack (at least once);
 *   - `commit`: the same UPDATE inside `context.commit(...)`: the UPDATE and the fenced ack in one
 *               transaction of their own (exactly once);
 *   - `noop`:   nothing (today's throughput: the plain batched ack alone).
 * The counter table is `<BENCH_SCHEMA>.counters (key int PRIMARY KEY, n bigint)`, created and
 * filled by the orchestrator; the message payload is `{ i, key }`.
 *
 * Stdout: the lines of bench/throughput/protocol.ts (READY, FIRST, WARM, HANDLED, COUNT), and on
 * exit `DBTIME <n> <p50 ms> <p95 ms> <mean ms>`: how long the handler's database part (the UPDATE,
 * or the whole commit step) took, over the runs after the warm-up; for the commit variant also
 * `DBPARTS <before> | <update> | <after>` (each `<n> <p50> <p95> <mean>`): call -> the effect's start
 * (the renewer let go, a main-pool connection, BEGIN, the lock), the UPDATE, the effect's end ->
 * the commit returned (the finishing write, COMMIT and its WAL flush).
 *
 * Run as compiled JavaScript (tsc -p bench/commit/tsconfig.json), with Node directly.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { writeSync } from "node:fs"
import * as Consumer from "../../src/Consumer.ts"
import * as ConsumerPresence from "../../src/ConsumerPresence.ts"
import * as PgQueueStore from "../../src/PgQueueStore.ts"
import * as QueueConfig from "../../src/QueueConfig.ts"
import { announceReady, makeRecorder, wallMs, workerEnv } from "../throughput/protocol.ts"

const env = workerEnv("commit bench worker")
const record = makeRecorder(env)
const variant = process.env["BENCH_VARIANT"] ?? ""
if (variant !== "plain" && variant !== "commit" && variant !== "noop") {
  console.error(`commit bench worker: BENCH_VARIANT must be plain, commit or noop, got ${JSON.stringify(variant)}`)
  process.exit(2)
}
const poolSize = process.env["BENCH_POOL"] === undefined || process.env["BENCH_POOL"] === "" ? undefined : Number(process.env["BENCH_POOL"])

/** Durations of the database part of each run after the warm-up (ms). */
const times: Array<number> = []
/** The commit variant's parts (ms): call -> effect start (renewer let go, a main-pool connection, BEGIN, the lock), the UPDATE, effect end -> commit returned (the finishing write, COMMIT and its flush). */
const parts = { before: [] as Array<number>, update: [] as Array<number>, after: [] as Array<number> }
let runs = 0
const stats = (values: ReadonlyArray<number>) => {
  const s = [...values].sort((a, b) => a - b)
  const at = (p: number) => (s.length === 0 ? 0 : s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!)
  const mean = s.length === 0 ? 0 : s.reduce((a, b) => a + b, 0) / s.length
  return `${s.length} ${at(50).toFixed(3)} ${at(95).toFixed(3)} ${mean.toFixed(3)}`
}
process.on("exit", () => {
  writeSync(1, `DBTIME ${stats(times)}\n`)
  if (parts.before.length > 0) writeSync(1, `DBPARTS ${stats(parts.before)} | ${stats(parts.update)} | ${stats(parts.after)}\n`)
})

const counters = `${env.schema}.counters`

const handler: Consumer.Handler<SqlClient.SqlClient> = (message, context) => {
  record(message.payload)
  runs++
  if (variant === "noop") return Effect.void
  const measured = runs > env.warmup
  return Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const key = (message.payload as { readonly key: number }).key
    const update = sql`UPDATE ${sql(counters)} SET n = n + 1 WHERE key = ${key}`
    const started = wallMs()
    if (variant === "commit") {
      let inside = 0
      let updated = 0
      yield* context.commit(Effect.gen(function*() {
        inside = wallMs()
        yield* update
        updated = wallMs()
      }))
      const ended = wallMs()
      if (measured) {
        times.push(ended - started)
        parts.before.push(inside - started)
        parts.update.push(updated - inside)
        parts.after.push(ended - updated)
      }
    } else {
      yield* update
      if (measured) times.push(wallMs() - started)
    }
  })
}

const PgLayer = QueueConfig.pgLayerFromEnv({ applicationName: `bench-commit-${variant}`, ...(poolSize === undefined ? {} : { maxConnections: poolSize }) })

const WorkerLayer = Consumer.layerFromEnv(handler).pipe(
  Layer.provide(ConsumerPresence.layerFromEnv()),
  Layer.provide(PgQueueStore.layer()), // LEASEHOLD_SCHEMA, set by the orchestrator
  Layer.provideMerge(PgLayer) // the handler's SqlClient is the store's (the one-pool rule)
)

/** Announces readiness once the consumer is built (it is already claiming by then). */
const Ready = Layer.effectDiscard(Effect.gen(function*() {
  yield* Consumer.Consumer
  announceReady()
}))

Consumer.launch(Ready.pipe(Layer.provideMerge(WorkerLayer))).pipe(NodeRuntime.runMain({ teardown: Consumer.teardown }))
