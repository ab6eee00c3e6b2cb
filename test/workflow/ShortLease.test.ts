/**
 * A short workflow lease under a busy pool (the 2 s chaos run that completed nothing): one engine
 * with a lease of 600 ms, 16 runs at once on a main pool of 2 connections that every activity
 * keeps busy (each holds a connection 150 ms). Runs must still make progress: every execution
 * completes with its result, each activity body runs once, no run loses its lease, and no
 * execution is claimed again while its run goes on in the same process.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer, Metric, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { Activity, Workflow } from "effect/workflow"
import * as LeaseholdWorkflow from "../../src/LeaseholdWorkflow.ts"
import * as Migrations from "../../src/Migrations.ts"
import * as QueueMetrics from "../../src/QueueMetrics.ts"
import * as PgTest from "../support/PgTest.ts"

const schema = PgTest.uniqueSchema("wfl")
const COUNT = 32
const ran = new Map<string, number>()

/** Three activities, each holding a connection of the main pool for 150 ms. */
const Busy = Workflow.make("Busy", { payload: { n: Schema.Number }, success: Schema.Number, idempotencyKey: ({ n }) => `busy-${n}` })

const step = (n: number, name: string) =>
  Activity.make({
    name,
    success: Schema.Number,
    execute: Effect.gen(function*() {
      ran.set(`${n}:${name}`, (ran.get(`${n}:${name}`) ?? 0) + 1)
      const sql = yield* SqlClient.SqlClient
      yield* Effect.orDie(sql`SELECT pg_sleep(0.15)`)
      return n
    })
  })

const BusyLive = Busy.toLayer(({ n }) =>
  Effect.gen(function*() {
    const a = yield* step(n, "a")
    const b = yield* step(n, "b")
    const c = yield* step(n, "c")
    return a + b + c
  })
)

const Engine = LeaseholdWorkflow.layer({ schema, pollInterval: "100 millis", lease: "600 millis", concurrency: 16 }).pipe(
  Layer.provideMerge(Migrations.layer({ schema })),
  Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
  Layer.provideMerge(PgTest.clientLayer({ maxConnections: 2 }))
)

const lostRuns = Effect.map(Metric.value(QueueMetrics.workflowRunsBy("lost")), (s) => Number(s.count))

layer(BusyLive.pipe(Layer.provideMerge(Engine)), { excludeTestServices: true, timeout: 120_000 })("a short lease on a busy pool", (it) => {
  it.effect("every execution completes, each activity once, no lease lost", () =>
    Effect.gen(function*() {
      const lostBefore = yield* lostRuns
      const results = yield* Effect.forEach(
        Array.from({ length: COUNT }, (_, n) => n),
        (n) => Busy.execute({ n }),
        { concurrency: "unbounded" }
      ).pipe(Effect.timeout("90 seconds"))
      assert.deepStrictEqual(results, Array.from({ length: COUNT }, (_, n) => 3 * n))
      const reruns = [...ran.values()].filter((count) => count > 1).length
      assert.strictEqual(reruns, 0, "an activity body ran twice: its run lost its lease")
      assert.strictEqual((yield* lostRuns) - lostBefore, 0, "a run lost its lease")
      const sql = yield* SqlClient.SqlClient
      const [row] = yield* sql<{ runs: number }>`SELECT max(runs)::int AS runs FROM ${sql(`${schema}.workflow_executions`)}`
      assert.strictEqual(row?.runs, 1, "an execution was claimed again while its run went on")
    }))
})
