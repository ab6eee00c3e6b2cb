/**
 * effect's `DurableQueue` on leasehold's engine (docs/workflows.md): a workflow hands an item to a
 * `DurableQueue` and suspends on its deferred; a worker takes it from the persisted queue and
 * completes the deferred by token, which wakes the execution at once (the engine's `deferredDone`,
 * from any process). The persisted queue here is effect's SQL store on the same database.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import * as PersistedQueue from "effect/persistence/PersistedQueue"
import { SqlClient } from "effect/sql"
import { DurableQueue, Workflow } from "effect/workflow"
import * as LeaseholdWorkflow from "../../src/LeaseholdWorkflow.ts"
import * as Migrations from "../../src/Migrations.ts"
import * as PgTest from "../support/PgTest.ts"

const schema = PgTest.uniqueSchema("wfq")
const handled: Array<number> = []

const Pricing = DurableQueue.make({
  name: "Pricing",
  payload: { n: Schema.Number },
  success: Schema.Number,
  idempotencyKey: ({ n }) => String(n)
})

const Delegate = Workflow.make("Delegate", {
  payload: { id: Schema.String, n: Schema.Number },
  success: Schema.Number,
  idempotencyKey: ({ id }) => id
})

const DelegateLive = Delegate.toLayer(({ n }) => Effect.map(DurableQueue.process(Pricing, { n }), (price) => price + 1))

const PricingWorker = DurableQueue.worker(Pricing, ({ n }) => Effect.sync(() => {
  handled.push(n)
  return n * 10
}))

// effect's store names its index after the table: a plain name (in the search path), dropped after.
const table = `effect_queue_${schema}`
const DropTable = Layer.effectDiscard(Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* Effect.addFinalizer(() => sql`DROP TABLE IF EXISTS ${sql(table)}`.pipe(Effect.ignore))
}))
const Queue = PersistedQueue.layer.pipe(
  Layer.provideMerge(PersistedQueue.layerStoreSql({ tableName: table, pollInterval: "100 millis" })),
  Layer.provideMerge(DropTable)
)

const Engine = LeaseholdWorkflow.layer({ schema, pollInterval: "100 millis" }).pipe(
  Layer.provideMerge(Migrations.layer({ schema })),
  Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
  Layer.provideMerge(PgTest.clientLayer({ maxConnections: 4 }))
)

const App = Layer.mergeAll(DelegateLive, PricingWorker).pipe(Layer.provideMerge(Queue), Layer.provideMerge(Engine))

layer(App, { excludeTestServices: true, timeout: 60_000 })("DurableQueue on leasehold's engine", (it) => {
  it.effect("a workflow awaits a queue item's result; the worker's completion wakes it", () =>
    Effect.gen(function*() {
      const results = yield* Effect.all([
        Delegate.execute({ id: `dq-${Date.now()}-a`, n: 4 }),
        Delegate.execute({ id: `dq-${Date.now()}-b`, n: 7 })
      ], { concurrency: "unbounded" }).pipe(Effect.timeout("30 seconds"))
      assert.deepStrictEqual(results, [41, 71])
      assert.sameMembers(handled, [4, 7], "each item handled once")
    }))
})
