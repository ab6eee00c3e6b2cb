/**
 * The workflow of the workflow chaos run (bench/workflow/chaos.ts), shared by the orchestrator and
 * its runner processes: activity `a` (n + 1), a durable sleep of a second, an approval deferred
 * (the orchestrator completes it with 10n), a fan-out of three activities (n * i): 14n + 1 in all.
 * Every activity body writes (execution, activity, pid) to `<schema>.effects`, so re-runs are seen.
 */
import { Effect, Schedule, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { Activity, DurableClock, DurableDeferred, Workflow } from "effect/workflow"

/** The workflow. */
export const Chaos = Workflow.make("Chaos", {
  payload: { id: Schema.String, n: Schema.Number },
  success: Schema.Number,
  idempotencyKey: ({ id }) => id
})

/** The approval the orchestrator gives (10n). */
export const Approval = DurableDeferred.make("approval", { success: Schema.Number })

/** What a correct run returns for `n`. */
export const expected = (n: number): number => 14 * n + 1

/** What activity `name` returns for `n` (`a`: n + 1; `b0` to `b2`: n * i); undefined for no such activity. */
export const activityValue = (n: number, name: string): number | undefined => {
  if (name === "a") return n + 1
  const fanned = /^b([0-2])$/.exec(name)
  return fanned === null ? undefined : n * Number(fanned[1])
}

const effect = (schema: string, id: string, name: string, value: number) =>
  Activity.make({
    name,
    success: Schema.Number,
    execute: Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      // A killed backend fails the insert: retried, so the activity's result is its value, never a defect.
      yield* sql`INSERT INTO ${sql(`${schema}.effects`)} (execution, activity, pid) VALUES (${id}, ${name}, ${process.pid})`.pipe(
        Effect.retry({ times: 20, schedule: Schedule.spaced("200 millis") }),
        Effect.orDie
      )
      return value
    })
  })

/** The workflow's body, writing its effects to `schema`. */
export const chaosLayer = (schema: string) =>
  Chaos.toLayer(({ id, n }) =>
    Effect.gen(function*() {
      const a = yield* effect(schema, id, "a", activityValue(n, "a")!)
      yield* DurableClock.sleep({ name: "pause", duration: "1 second", inMemoryThreshold: 0 })
      const approval = yield* DurableDeferred.await(Approval)
      const fanned = yield* Effect.all([0, 1, 2].map((i) => effect(schema, id, `b${i}`, activityValue(n, `b${i}`)!)), { concurrency: "unbounded" })
      return a + approval + fanned.reduce((sum, x) => sum + x, 0)
    })
  )
