/**
 * Migration 14: who holds a workflow execution (see docs/workflows.md, "Crashes").
 *
 * - `workflow_executions.leased_by`: the presence consumer id of the runner holding the
 *   execution's lease (null while none holds it, or when the runner has no session liveness),
 *   so the reaper releases a dead runner's executions within session liveness, as it releases
 *   its message claims, instead of after the workflow lease.
 */
import { Effect } from "effect"
import * as SqlClient from "effect/sql/SqlClient"

/** Build the migration for `schema` (already validated as an identifier). */
export default (schema: string) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const executions = sql(`${schema}.workflow_executions`)
    yield* sql`ALTER TABLE ${executions} ADD COLUMN leased_by text`
    // The reaper finds a dead runner's executions by holder: only held rows are indexed.
    yield* sql`CREATE INDEX workflow_executions_leased_by_idx ON ${executions} (leased_by) WHERE leased_by IS NOT NULL`
  })
