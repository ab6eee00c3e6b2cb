/**
 * Exactly-once activities on PostgreSQL (`LeaseholdWorkflow.WithTransaction`): a transactional
 * activity's writes commit with its recorded result, so a replay neither re-runs nor re-writes them;
 * a failed attempt's writes roll back (its failure is recorded on its own); and a holder whose lease
 * is gone commits nothing: the fence (the execution locked by its token) rolls the writes back.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Exit, Layer, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { Activity, DurableDeferred, Workflow, WorkflowEngine } from "effect/workflow"
import * as LeaseholdWorkflow from "../../src/LeaseholdWorkflow.ts"
import * as Migrations from "../../src/Migrations.ts"
import * as Sql from "../../src/pg/workflow.ts"
import * as Codec from "../../src/workflow/codec.ts"
import { runTransactional } from "../../src/workflow/transactional.ts"
import * as PgTest from "../support/PgTest.ts"
import { waitFor } from "../support/Wait.ts"

const schema = PgTest.uniqueSchema("wfx")
const ledger = `${schema}.ledger`

const Go = DurableDeferred.make("go")

/** Writes a ledger row for (execution, attempt) in the activity's transaction; fails before attempt `succeedOn`. */
const write = (id: string, succeedOn: number) =>
  Activity.make({
    name: "write",
    success: Schema.Number,
    error: Schema.String,
    execute: Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const attempt = yield* Activity.CurrentAttempt
      yield* Effect.orDie(sql`INSERT INTO ${sql(ledger)} (execution, attempt) VALUES (${id}, ${attempt})`)
      if (attempt < succeedOn) return yield* Effect.fail(`attempt ${attempt} failed`)
      return attempt
    })
  }).annotate(LeaseholdWorkflow.WithTransaction, true)

const Credit = Workflow.make("Credit", {
  payload: { id: Schema.String, succeedOn: Schema.Number },
  success: Schema.Number,
  error: Schema.String,
  idempotencyKey: ({ id }) => id
})
const CreditLive = Credit.toLayer(({ id, succeedOn }) =>
  Effect.gen(function*() {
    const attempt = yield* write(id, succeedOn).pipe(Activity.retry({ times: 3 }))
    yield* DurableDeferred.await(Go)
    return attempt
  })
)

const Db = Layer.effectDiscard(Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`CREATE TABLE ${sql(ledger)} (execution text, attempt int)`)).pipe(
  Layer.provideMerge(Migrations.layer({ schema })),
  Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
  Layer.provideMerge(PgTest.clientLayer())
)
const Engine = CreditLive.pipe(
  Layer.provideMerge(LeaseholdWorkflow.layer({ schema, pollInterval: "200 millis" })),
  Layer.provideMerge(Db)
)

const ledgerOf = (id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ attempt: number }>`SELECT attempt FROM ${sql(ledger)} WHERE execution = ${id} ORDER BY attempt`).pipe(
    Effect.map((rows) => rows.map((r) => r.attempt))
  )

const finishWith = (executionId: string) =>
  DurableDeferred.done(Go, { token: DurableDeferred.tokenFromExecutionId(Go, { workflow: Credit, executionId }), exit: Exit.void })

const suspended = (executionId: string) =>
  waitFor("the execution to suspend", Effect.map(Credit.poll(executionId), Option.filter((r) => r._tag === "Suspended")))

layer(Engine, { excludeTestServices: true, timeout: 60_000 })("exactly-once activities", (it) => {
  it.effect("the writes commit with the recorded result: a replay does not write them again", () =>
    Effect.gen(function*() {
      const id = `once-${Date.now()}`
      const executionId = yield* Credit.execute({ id, succeedOn: 1 }, { discard: true })
      yield* suspended(executionId)
      assert.deepStrictEqual(yield* ledgerOf(id), [1])
      yield* finishWith(executionId)
      assert.strictEqual(yield* Credit.execute({ id, succeedOn: 1 }), 1)
      assert.deepStrictEqual(yield* ledgerOf(id), [1], "the replay read the result; no second write")
    }))

  it.effect("a failed attempt's writes roll back; its failure is recorded", () =>
    Effect.gen(function*() {
      const id = `retry-${Date.now()}`
      const executionId = yield* Credit.execute({ id, succeedOn: 3 }, { discard: true })
      yield* suspended(executionId)
      assert.deepStrictEqual(yield* ledgerOf(id), [3], "attempts 1 and 2 failed: their rows rolled back")
      const attempts = yield* LeaseholdWorkflow.activities({ schema, workflow: "Credit", executionId })
      assert.deepStrictEqual(attempts.map((a) => [a.attempt, a.outcome]), [[1, "failure"], [2, "failure"], [3, "success"]])
      yield* finishWith(executionId)
    }))

  it.effect("a holder whose lease is gone commits nothing: its writes roll back", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const w = Sql.make(sql, schema)
      const key = { workflow: "Stale", executionId: `stale-${Date.now()}` }
      yield* Sql.start(w, key, {}, undefined)
      const [claimed] = yield* Sql.claim(w, ["Stale"], 1, 30_000)
      const stale = { ...claimed!, token: "00000000-0000-4000-8000-000000000000" }
      const instance = WorkflowEngine.WorkflowInstance.initial(Credit, key.executionId)
      const run = { claimed: stale, instance, fiber: undefined, interrupt: 0, lost: false, awaiting: { deferreds: new Set<string>(), children: new Set<string>() } }
      const state = { w, leaseSql: w, settings: { leaseMs: 30_000, pollMs: 200, concurrency: 1 }, registry: new Map(), runs: new Map(), signals: undefined as never, holder: null, atRisk: Effect.succeed(false), draining: false }
      const attempt = Effect.gen(function*() {
        yield* sql`INSERT INTO ${sql(ledger)} (execution, attempt) VALUES (${key.executionId}, 1)`.pipe(Effect.orDie)
        return yield* Codec.decodeResult({ _tag: "Complete", exit: { _tag: "Success", value: 1 } })
      })
      assert.strictEqual(yield* runTransactional(state, run, "write", 1, attempt), "lost")
      assert.deepStrictEqual(yield* ledgerOf(key.executionId), [], "the fence refused before the write")
      assert.strictEqual(yield* runTransactional(state, { ...run, claimed: claimed! }, "write", 1, attempt).pipe(Effect.map((r) => r !== "lost")), true)
      assert.deepStrictEqual(yield* ledgerOf(key.executionId), [1], "the holder's write committed with its record")
      assert.isDefined(yield* Sql.activityResult(w, key, "write", 1))
    }))
})
