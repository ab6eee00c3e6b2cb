/**
 * The README's day-long sleep (examples/workflows.ts, `Reminder`) on leasehold's engine: while it
 * sleeps the execution holds no lease and is visible again exactly at its clock, a day after it
 * was scheduled; when that day has passed it wakes and completes, run twice in all. leasehold's
 * clocks are on the database's time (`now()`), so the day passes as explicit timestamps (the
 * clock's due time and the row's visible time moved a day back), not on the TestClock; the
 * example test runs the same sleep on the TestClock with effect's memory engine.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer, Option } from "effect"
import { SqlClient } from "effect/sql"
import * as LeaseholdWorkflow from "../../src/LeaseholdWorkflow.ts"
import * as Migrations from "../../src/Migrations.ts"
import { Reminder, WorkflowsLive } from "../../examples/workflows.ts"
import * as PgTest from "../support/PgTest.ts"
import { waitFor } from "../support/Wait.ts"

const schema = PgTest.uniqueSchema("wfday")
const Engine = LeaseholdWorkflow.layer({ schema, pollInterval: "200 millis", lease: "3 seconds" }).pipe(
  Layer.provideMerge(Migrations.layer({ schema })),
  Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
  Layer.provideMerge(PgTest.clientLayer())
)

const DAY_MS = 86_400_000

layer(WorkflowsLive.pipe(Layer.provideMerge(Engine)), { excludeTestServices: true, timeout: 60_000 })("a day-long sleep on leasehold's engine", (it) => {
  it.effect("holds nothing for the day, is due exactly a day on, and wakes to complete when the day has passed", () =>
    Effect.gen(function*() {
      const user = `ada-${Date.now()}`
      const executionId = yield* Reminder.executionId({ user })
      yield* Reminder.execute({ user }, { discard: true })
      const asleep = yield* waitFor("the reminder to suspend on its clock", Effect.map(
        LeaseholdWorkflow.list({ schema, workflow: "Reminder" }),
        (rows) => Option.fromNullishOr(rows.find((r) => r.execution_id === executionId && r.status === "suspended"))
      ))
      assert.isFalse(asleep.held, "no lease while it sleeps")
      assert.strictEqual(asleep.runs, 1)
      const clocks = asleep.clocks as Array<{ name: string; due_at: string }>
      assert.deepStrictEqual(clocks.map((c) => c.name), ["DurableClock/a-day"])
      const dueMs = new Date(clocks[0]!.due_at).getTime()
      // (to the millisecond: one side is parsed from jsonb text, the other from a timestamptz column)
      assert.isAtMost(Math.abs((asleep.next_run_at?.getTime() ?? 0) - dueMs), 1, "visible again at its clock, not before")
      const sql = yield* SqlClient.SqlClient
      const [now] = yield* sql<{ now: Date }>`SELECT now() AS now`
      const ahead = dueMs - now!.now.getTime()
      assert.isAtLeast(ahead, DAY_MS - 60_000, "a day ahead")
      assert.isAtMost(ahead, DAY_MS)

      // The day passes: the clock and the row's visible time a day earlier, as the database would see them tomorrow.
      const key = sql`workflow = 'Reminder' AND execution_id = ${executionId}`
      yield* sql`UPDATE ${sql(`${schema}.workflow_clocks`)} SET due_at = due_at - interval '1 day' WHERE ${key}`
      yield* sql`UPDATE ${sql(`${schema}.workflow_executions`)} SET visible_at = visible_at - interval '1 day'
                 WHERE ${key} AND status = 'suspended' AND lease_token IS NULL`
      assert.strictEqual(yield* Reminder.execute({ user }), `reminded ${user}`)
      const [done] = yield* LeaseholdWorkflow.list({ schema, workflow: "Reminder" })
      assert.deepStrictEqual([done?.execution_id, done?.status, done?.outcome, done?.runs], [executionId, "complete", "success", 2])
    }))
})
