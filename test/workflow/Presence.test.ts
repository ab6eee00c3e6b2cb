/**
 * The workflow engine with session liveness (a `ConsumerPresence` in context; here a stand-in
 * whose registration the test steers): the runner registers before its first claim and claims
 * under its consumer id (`leased_by`), and when its registration says it could be judged dead
 * soon (presence session gone, heartbeats failing), its runs stop before another runner's reaper
 * could release their executions: they write nothing more.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer, Metric, Option } from "effect"
import { SqlClient } from "effect/sql"
import { ConsumerPresence, type Registration } from "../../src/ConsumerPresence.ts"
import * as LeaseholdWorkflow from "../../src/LeaseholdWorkflow.ts"
import * as Migrations from "../../src/Migrations.ts"
import * as QueueMetrics from "../../src/QueueMetrics.ts"
import * as PgTest from "../support/PgTest.ts"
import { waitFor } from "../support/Wait.ts"
import * as W from "./workflows.ts"

const schema = PgTest.uniqueSchema("wfr")
const consumerId = "runner-under-test"
const registered: Array<string> = []
let reapableAt = Option.none<number>()

const StandIn = Layer.succeed(ConsumerPresence, ConsumerPresence.of({
  mode: "on",
  register: (id) =>
    Effect.sync((): Registration => {
      registered.push(id)
      return {
        consumerId: id,
        status: Effect.die("not read"),
        reaped: Effect.never,
        reapableAt: Effect.sync(() => reapableAt)
      }
    }),
  sweep: () => Effect.succeed([])
}))

const Engine = LeaseholdWorkflow.layer({ schema, pollInterval: "100 millis", lease: "900 millis", consumerId }).pipe(
  Layer.provideMerge(StandIn),
  Layer.provideMerge(Migrations.layer({ schema })),
  Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
  Layer.provideMerge(PgTest.clientLayer({ maxConnections: 4 }))
)

const lostRuns = Effect.map(Metric.value(QueueMetrics.workflowRunsBy("lost")), (s) => Number(s.count))

layer(W.WorkflowsLive.pipe(Layer.provideMerge(Engine)), { excludeTestServices: true, timeout: 60_000 })("workflows with session liveness", (it) => {
  it.effect("claims under the presence id; a presence about to be judged dead stops the runs", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const id = `presence-${Date.now()}`
      const executionId = yield* W.Stuck.execute({ id }, { discard: true })
      const held = yield* waitFor("Stuck to be held inside its activity", Effect.map(
        sql<{ leased_by: string | null }>`SELECT leased_by FROM ${sql(`${schema}.workflow_executions`)}
          WHERE execution_id = ${executionId} AND lease_token IS NOT NULL`,
        (rows) => Option.filter(Option.fromNullishOr(rows[0]), () => W.count(id, "stuck") === 1)
      ))
      assert.deepStrictEqual(registered, [consumerId], "registered once, before the first claim")
      assert.strictEqual(held.leased_by, consumerId)
      const before = yield* lostRuns
      reapableAt = Option.some(0)
      yield* waitFor("the run to stop", Effect.map(lostRuns, (n) => (n > before ? Option.some(n) : Option.none())), 10_000)
      reapableAt = Option.none()
    }))
})
