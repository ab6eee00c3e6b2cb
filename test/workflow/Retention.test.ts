/**
 * The workflow engine's retention on PostgreSQL (src/maintenance/workflowRetention.ts): finished
 * executions older than the retention go with their activities, deferreds and clocks; younger
 * ones, unfinished ones and a child whose parent is not complete stay (the parent's replay reads
 * the child's row and does not run it again); `off` (here from LEASEHOLD_WORKFLOW_RETENTION, over a
 * retention from code) prunes nothing. Ages are explicit timestamps
 * (`completed_at` set back in the database); the engine's own rounds run on the TestClock.
 */
import { assert, describe, layer } from "@effect/vitest"
import { ConfigProvider, Effect, Exit, Layer, Metric, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import { DurableDeferred, Workflow } from "effect/workflow"
import * as LeaseholdWorkflow from "../../src/LeaseholdWorkflow.ts"
import * as WorkflowRetention from "../../src/maintenance/workflowRetention.ts"
import * as Migrations from "../../src/Migrations.ts"
import * as Sql from "../../src/pg/workflow.ts"
import * as QueueMetrics from "../../src/QueueMetrics.ts"
import * as PgTest from "../support/PgTest.ts"
import { waitFor } from "../support/Wait.ts"
import * as W from "./workflows.ts"

const DAY_MS = 86_400_000

/** Holds on after its child: runs `Child` (n = 5, doubled), then waits for `Release`; returns 10 + 1. */
const Guardian = Workflow.make("Guardian", { payload: { id: Schema.String }, success: Schema.Number, idempotencyKey: ({ id }) => id })
const Release = DurableDeferred.make("release")
const GuardianLive = Guardian.toLayer(({ id }) =>
  Effect.gen(function*() {
    const doubled = yield* W.Child.execute({ id: `${id}-kid`, n: 5 })
    yield* DurableDeferred.await(Release)
    return doubled + 1
  })
)

const prunedCount = Effect.map(Metric.value(QueueMetrics.workflowPruned), (state) => Number(state.count))

/** Row counts of the four tables for one execution. */
const rowsOf = (schema: string, key: Key) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const count = (table: string) =>
      Effect.map(
        sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(`${schema}.${table}`)}
                           WHERE workflow = ${key.workflow} AND execution_id = ${key.executionId}`,
        (rows) => rows[0]!.n
      )
    return {
      executions: yield* count("workflow_executions"),
      activities: yield* count("workflow_activities"),
      deferreds: yield* count("workflow_deferreds"),
      clocks: yield* count("workflow_clocks")
    }
  })

/** An execution's key, from its workflow and payload id (an execution id is derived from its idempotency key). */
interface Key {
  readonly workflow: string
  readonly executionId: string
}
const keyOf = <W extends Workflow.Any>(workflow: W, payload: W["payloadSchema"]["Type"]) =>
  Effect.map(workflow.executionId(payload as never), (executionId): Key => ({ workflow: workflow._tag, executionId }))

/** Set back when an execution completed (an explicit timestamp: `ageMs` before the database's now). */
const completedAgo = (schema: string, key: Key, ageMs: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`UPDATE ${sql(`${schema}.workflow_executions`)}
        SET completed_at = now() - ${ageMs}::bigint * interval '1 millisecond'
        WHERE workflow = ${key.workflow} AND execution_id = ${key.executionId} AND status = 'complete'
        RETURNING 1`.pipe(Effect.flatMap((rows) => rows.length === 1 ? Effect.void : Effect.die(`${key.workflow}/${key.executionId} is not complete`))))

const statusOf = (schema: string, key: Key) =>
  Effect.map(LeaseholdWorkflow.list({ schema, workflow: key.workflow }), (rows) => rows.find((r) => r.execution_id === key.executionId)?.status)

const reached = (schema: string, key: Key, status: string) =>
  waitFor(`${key.workflow}/${key.executionId} to be ${status}`, Effect.map(statusOf(schema, key), (s) =>
    s === status ? Option.some(s) : Option.none()))

const engineRun = PgTest.uniqueSchema("wfret")
const EngineRun = LeaseholdWorkflow.layer({ schema: engineRun, pollInterval: "200 millis", lease: "3 seconds", retention: "7 days" }).pipe(
  Layer.provideMerge(Migrations.layer({ schema: engineRun })),
  Layer.provideMerge(PgTest.dropSchemaOnRelease(engineRun)),
  Layer.provideMerge(PgTest.clientLayer())
)

layer(Layer.mergeAll(W.WorkflowsLive, GuardianLive).pipe(Layer.provideMerge(EngineRun)), { excludeTestServices: true, timeout: 90_000 })(
  "retention of executions the engine ran",
  (it) => {
    it.effect("a round prunes finished executions past the retention with their rows; young, unfinished and needed ones stay", () =>
      Effect.gen(function*() {
        const id = `ret-${Date.now()}`
        const sql = yield* SqlClient.SqlClient
        const round = WorkflowRetention.make(Sql.make(sql, engineRun), 7 * DAY_MS).run
        const old = yield* keyOf(W.Flaky, { id: `${id}-old` })
        const nap = yield* keyOf(W.Nap, { id: `${id}-nap` })
        const young = yield* keyOf(W.Flaky, { id: `${id}-young` })
        const chain = yield* keyOf(W.Chain, { id: `${id}-chain` })
        const guardian = yield* keyOf(Guardian, { id: `${id}-guardian` })
        const kid = yield* keyOf(W.Child, { id: `${id}-guardian-kid`, n: 5 })
        // Old and finished: activity attempts (Flaky: three), and a fired clock with its deferred (Nap).
        assert.strictEqual(yield* W.Flaky.execute({ id: `${id}-old` }), 3)
        assert.strictEqual(yield* W.Nap.execute({ id: `${id}-nap` }), 7)
        // Young and finished.
        assert.strictEqual(yield* W.Flaky.execute({ id: `${id}-young` }), 3)
        // Unfinished: suspended on a deferred after its first activity.
        yield* W.Chain.execute({ id: `${id}-chain` }, { discard: true })
        yield* reached(engineRun, chain, "suspended")
        // A child complete while its parent waits on.
        yield* Guardian.execute({ id: `${id}-guardian` }, { discard: true })
        yield* reached(engineRun, kid, "complete")
        yield* reached(engineRun, guardian, "suspended")
        assert.deepStrictEqual(yield* rowsOf(engineRun, old), { executions: 1, activities: 3, deferreds: 0, clocks: 0 })
        assert.deepStrictEqual(yield* rowsOf(engineRun, nap), { executions: 1, activities: 1, deferreds: 1, clocks: 1 })

        yield* completedAgo(engineRun, old, 8 * DAY_MS)
        yield* completedAgo(engineRun, nap, 8 * DAY_MS)
        yield* completedAgo(engineRun, young, 6 * DAY_MS)
        yield* completedAgo(engineRun, kid, 30 * DAY_MS)
        const before = yield* prunedCount
        yield* round
        assert.strictEqual((yield* prunedCount) - before, 2, "the old Flaky and Nap")
        const none = { executions: 0, activities: 0, deferreds: 0, clocks: 0 }
        assert.deepStrictEqual(yield* rowsOf(engineRun, old), none)
        assert.deepStrictEqual(yield* rowsOf(engineRun, nap), none)
        assert.deepStrictEqual(yield* rowsOf(engineRun, young), { executions: 1, activities: 3, deferreds: 0, clocks: 0 })
        assert.strictEqual(yield* statusOf(engineRun, chain), "suspended", "unfinished: stays")
        assert.strictEqual(yield* statusOf(engineRun, kid), "complete", "its parent may still need it")

        // The parent goes on: its replay reads the child's result, and the child does not run again.
        yield* DurableDeferred.done(Release, {
          token: DurableDeferred.tokenFromExecutionId(Release, { workflow: Guardian, executionId: guardian.executionId }),
          exit: Exit.void
        })
        assert.strictEqual(yield* Guardian.execute({ id: `${id}-guardian` }), 11)
        assert.strictEqual(W.count(`${id}-guardian-kid`, "double"), 1, "the child ran once")
        // Once the parent is complete and old too, both go.
        yield* completedAgo(engineRun, guardian, 8 * DAY_MS)
        yield* round
        assert.deepStrictEqual(yield* rowsOf(engineRun, guardian), none, "the parent")
        assert.deepStrictEqual(yield* rowsOf(engineRun, kid), none, "and its child")
        assert.strictEqual(yield* statusOf(engineRun, chain), "suspended")
      }))
  }
)

/** Schemas where the engine's own loop runs on the TestClock: one with a retention of an hour, one `off`. */
const kept = PgTest.uniqueSchema("wfreth")
const off = PgTest.uniqueSchema("wfretoff")
const Schemas = Layer.mergeAll(
  Migrations.layer({ schema: kept }),
  Migrations.layer({ schema: off }),
  PgTest.dropSchemaOnRelease(kept),
  PgTest.dropSchemaOnRelease(off)
).pipe(Layer.provideMerge(PgTest.clientLayer()))

/**
 * Rows as a database holds them, with explicit ages (minutes): complete ones (each with an
 * activity, a clock and its deferred), a child of a suspended parent, a child of a complete one,
 * a child whose parent is gone, and unfinished executions.
 */
const fixtures = (schema: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const table = (name: string) => sql(`${schema}.${name}`)
    const execution = (id: string, status: string, ageMinutes: number | null, parent: string | null = null) =>
      sql`INSERT INTO ${table("workflow_executions")}
            (workflow, execution_id, payload, status, result, visible_at, completed_at, parent_workflow, parent_execution)
          VALUES ('Fixture', ${id}, '{}'::jsonb, ${status}, ${status === "complete" ? "{}" : null}::jsonb,
                  ${status === "complete" ? null : "infinity"}::timestamptz,
                  now() - ${ageMinutes}::int * interval '1 minute', ${parent === null ? null : "Fixture"}, ${parent})`
    const recorded = (id: string) =>
      Effect.all([
        sql`INSERT INTO ${table("workflow_activities")} (workflow, execution_id, activity, attempt, result)
            VALUES ('Fixture', ${id}, 'step', 1, '{}'::jsonb)`,
        sql`INSERT INTO ${table("workflow_clocks")} (workflow, execution_id, name, due_at)
            VALUES ('Fixture', ${id}, 'DurableClock/nap', now() - interval '1 day')`,
        sql`INSERT INTO ${table("workflow_deferreds")} (workflow, execution_id, name, exit)
            VALUES ('Fixture', ${id}, 'DurableClock/nap', '{}'::jsonb)`
      ])
    for (const [id, ageMinutes] of [["old-1", 30 * 24 * 60], ["old-2", 8 * 24 * 60], ["young", 30]] as const) {
      yield* execution(id, "complete", ageMinutes)
      yield* recorded(id)
    }
    yield* execution("waiting-parent", "suspended", null)
    yield* execution("needed-child", "complete", 30 * 24 * 60, "waiting-parent")
    yield* execution("done-parent", "complete", 30 * 24 * 60)
    yield* execution("free-child", "complete", 30 * 24 * 60, "done-parent")
    yield* execution("orphan-child", "complete", 30 * 24 * 60, "pruned-parent")
    yield* execution("runnable", "runnable", null)
    yield* execution("running", "running", null)
  })

const idsOf = (schema: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ execution_id: string }>`SELECT execution_id FROM ${sql(`${schema}.workflow_executions`)}`.pipe(
      Effect.map((rows) => rows.map((r) => r.execution_id).sort())
    ))

const all = ["done-parent", "free-child", "needed-child", "old-1", "old-2", "orphan-child", "runnable", "running", "waiting-parent", "young"]

describe("the engine's retention loop", () => {
  layer(Schemas, { timeout: 90_000 })((it) => {
    it.effect("every five minutes of the engine's clock it prunes what is past the retention; off prunes nothing", () =>
      Effect.gen(function*() {
        yield* fixtures(kept)
        yield* fixtures(off)
        assert.deepStrictEqual(yield* idsOf(kept), all)
        yield* Effect.scoped(Effect.gen(function*() {
          // Engines with no workflow registered: they claim nothing, so only their retention touches the rows.
          yield* Layer.build(LeaseholdWorkflow.layer({ schema: kept, retention: "1 hour" }))
          // `off` from the environment, over an hour from code: the variable wins.
          yield* Layer.build(LeaseholdWorkflow.layerFromEnv({ schema: off, retention: "1 hour" })).pipe(
            Effect.provide(ConfigProvider.layer(ConfigProvider.fromUnknown({ LEASEHOLD_WORKFLOW_RETENTION: "off" })))
          )
          yield* TestClock.adjust(WorkflowRetention.everyMs)
          const left = yield* TestClock.withLive(waitFor("the first round of the hour's retention", Effect.map(idsOf(kept), (ids) =>
            ids.includes("old-1") ? Option.none() : Option.some(ids))))
          assert.deepStrictEqual(left, ["needed-child", "runnable", "running", "waiting-parent", "young"])
          const sql = yield* SqlClient.SqlClient
          const orphans = yield* sql<{ n: number }>`
            SELECT (SELECT count(*) FROM ${sql(`${kept}.workflow_activities`)} WHERE execution_id <> 'young')::int
                 + (SELECT count(*) FROM ${sql(`${kept}.workflow_deferreds`)} WHERE execution_id <> 'young')::int
                 + (SELECT count(*) FROM ${sql(`${kept}.workflow_clocks`)} WHERE execution_id <> 'young')::int AS n`
          assert.strictEqual(orphans[0]!.n, 0, "the pruned executions' activities, deferreds and clocks went with them")
          // A later round of the same clock, seen by a row it prunes: `off`'s round, were there one,
          // began with the first and is over by now. `off` kept every row, 30-day-old ones too.
          yield* sql`INSERT INTO ${sql(`${kept}.workflow_executions`)} (workflow, execution_id, payload, status, visible_at, completed_at)
                     VALUES ('Fixture', 'late', '{}'::jsonb, 'complete', NULL, now() - interval '2 hours')`
          yield* TestClock.adjust(WorkflowRetention.everyMs)
          yield* TestClock.withLive(waitFor("the retention's second round", Effect.map(idsOf(kept), (ids) =>
            ids.includes("late") ? Option.none() : Option.some(ids))))
          assert.deepStrictEqual(yield* idsOf(off), all)
        }))
      }))
  })
})
