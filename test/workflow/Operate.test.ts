/**
 * Operating workflows on PostgreSQL (leasehold's engine in-process): executions listed with their
 * status and what they are suspended on (a deferred, a clock), an execution's recorded activity
 * attempts with their outcomes, the workflow metrics, and pruning of finished executions only.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer, Metric, Option } from "effect"
import { SqlClient } from "effect/sql"
import * as LeaseholdWorkflow from "../../src/LeaseholdWorkflow.ts"
import * as Migrations from "../../src/Migrations.ts"
import * as QueueMetrics from "../../src/QueueMetrics.ts"
import * as PgTest from "../support/PgTest.ts"
import { waitFor } from "../support/Wait.ts"
import * as W from "./workflows.ts"

const schema = PgTest.uniqueSchema("wfo")
const Engine = LeaseholdWorkflow.layer({ schema, pollInterval: "200 millis", lease: "3 seconds" }).pipe(
  Layer.provideMerge(Migrations.layer({ schema })),
  Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
  Layer.provideMerge(PgTest.clientLayer())
)

const count = (metric: Metric.Metric<number, Metric.CounterState<number>>) =>
  Effect.map(Metric.value(metric), (state) => Number(state.count))

const metrics = Effect.all({
  recorded: count(QueueMetrics.workflowActivitiesRecorded),
  complete: count(QueueMetrics.workflowRunsBy("complete")),
  suspended: count(QueueMetrics.workflowRunsBy("suspended"))
})

const listed = (workflow: string, executionId: string) =>
  Effect.map(LeaseholdWorkflow.list({ schema, workflow }), (rows) => rows.find((r) => r.execution_id === executionId))

layer(W.WorkflowsLive.pipe(Layer.provideMerge(Engine)), { excludeTestServices: true, timeout: 60_000 })("operating workflows", (it) => {
  it.effect("list shows status and what an execution is suspended on; activities show attempts", () =>
    Effect.gen(function*() {
      const id = `op-${Date.now()}`
      const before = yield* metrics
      const chain = yield* W.Chain.execute({ id }, { discard: true })
      const waiting = yield* waitFor("Chain to suspend", Effect.map(listed("Chain", chain), (row) =>
        Option.filter(Option.fromNullishOr(row), (r) => r.status === "suspended")))
      assert.deepStrictEqual(waiting.suspended_on, { deferreds: ["go"], children: [] })
      assert.strictEqual(waiting.activities, 1)
      assert.isFalse(waiting.held)
      assert.isNull(waiting.next_run_at, "nothing due: it holds nothing and waits to be woken")

      const doomed = yield* W.Doomed.execute({ id: `${id}-doomed` }, { discard: true })
      yield* waitFor("Doomed to complete", Effect.map(listed("Doomed", doomed), (row) =>
        Option.filter(Option.fromNullishOr(row), (r) => r.status === "complete")))
      const attempts = yield* LeaseholdWorkflow.activities({ schema, workflow: "Doomed", executionId: doomed })
      assert.deepStrictEqual(attempts.map((a) => [a.activity, a.attempt, a.outcome]), [["doomed", 1, "failure"], ["doomed", 2, "failure"]])
      const after = yield* metrics
      assert.strictEqual(after.recorded - before.recorded, 3, "Chain's a and Doomed's two attempts")
      assert.strictEqual(after.complete - before.complete, 1, "Doomed")
      assert.strictEqual(after.suspended - before.suspended, 1, "Chain, suspended on its deferred")

      const nap = yield* W.Nap.execute({ id: `${id}-nap` }, { discard: true })
      const sleeping = yield* waitFor("Nap to suspend", Effect.map(listed("Nap", nap), (row) =>
        Option.filter(Option.fromNullishOr(row), (r) => r.status === "suspended")))
      assert.deepStrictEqual((sleeping.clocks as Array<{ name: string }>).map((c) => c.name), ["DurableClock/nap"])
      assert.isNotNull(sleeping.next_run_at, "visible again at its clock")
    }))

  it.effect("prune deletes finished executions older than the bound, with what they recorded, and nothing else", () =>
    Effect.gen(function*() {
      const id = `prune-${Date.now()}`
      assert.strictEqual(yield* W.Flaky.execute({ id }), 3)
      const chain = yield* W.Chain.execute({ id: `${id}-chain` }, { discard: true })
      yield* waitFor("Chain to suspend", Effect.map(listed("Chain", chain), (row) =>
        Option.filter(Option.fromNullishOr(row), (r) => r.status === "suspended")))
      assert.strictEqual(yield* LeaseholdWorkflow.prune({ schema, olderThan: "1 hour" }), 0, "too young")
      const pruned = yield* LeaseholdWorkflow.prune({ schema, olderThan: 0 })
      assert.isAtLeast(pruned, 1)
      const flaky = yield* W.Flaky.executionId({ id })
      assert.isUndefined(yield* listed("Flaky", flaky))
      const sql = yield* SqlClient.SqlClient
      const left = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(`${schema}.workflow_activities`)} WHERE execution_id = ${flaky}`
      assert.strictEqual(left[0]!.n, 0)
      assert.strictEqual((yield* listed("Chain", chain))?.status, "suspended", "an unfinished execution stays")
    }))
})
