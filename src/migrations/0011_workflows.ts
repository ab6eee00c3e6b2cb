/**
 * Migration 10: durable workflows (see docs/workflows.md).
 *
 * - `workflow_executions`: one row per execution, claimed like a message (`visible_at`,
 *   `lease_token`); `wake` and `interrupt` record what was heard while a run held it;
 *   `suspended_on` what its last run suspended on (deferreds, children), for operators.
 * - `workflow_activities`: recorded activity results per attempt, written fenced.
 * - `workflow_deferreds`: deferred results, first writer wins (clocks fire into it).
 * - `workflow_clocks`: durable clocks and when they are due.
 */
import { Effect } from "effect"
import * as SqlClient from "effect/sql/SqlClient"

/** Build the migration for `schema` (already validated as an identifier). */
export default (schema: string) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const executions = sql(`${schema}.workflow_executions`)
    yield* sql`CREATE TABLE ${executions} (
      workflow         text        NOT NULL,
      execution_id     text        NOT NULL,
      payload          jsonb       NOT NULL,
      parent_workflow  text,
      parent_execution text,
      status           text        NOT NULL DEFAULT 'runnable'
                                   CHECK (status IN ('runnable', 'running', 'suspended', 'complete')),
      result           jsonb,
      failed           boolean     NOT NULL DEFAULT false,
      suspended_on     jsonb,
      visible_at       timestamptz DEFAULT now(),
      lease_token      uuid,
      wake             smallint    NOT NULL DEFAULT 0 CHECK (wake BETWEEN 0 AND 2),
      interrupt        smallint    NOT NULL DEFAULT 0 CHECK (interrupt BETWEEN 0 AND 2),
      runs             integer     NOT NULL DEFAULT 0,
      created_at       timestamptz NOT NULL DEFAULT now(),
      updated_at       timestamptz NOT NULL DEFAULT now(),
      completed_at     timestamptz,
      PRIMARY KEY (workflow, execution_id)
    )`
    // The claim reads only rows that may run (runnable, woken, leases run out, clocks due).
    yield* sql`CREATE INDEX workflow_executions_visible_idx ON ${executions} (visible_at) WHERE visible_at IS NOT NULL`
    // Pruning finished executions by age.
    yield* sql`CREATE INDEX workflow_executions_completed_idx ON ${executions} (completed_at) WHERE completed_at IS NOT NULL`
    yield* sql`CREATE TABLE ${sql(`${schema}.workflow_activities`)} (
      workflow     text        NOT NULL,
      execution_id text        NOT NULL,
      activity     text        NOT NULL,
      attempt      integer     NOT NULL,
      result       jsonb       NOT NULL,
      recorded_at  timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (workflow, execution_id, activity, attempt),
      FOREIGN KEY (workflow, execution_id) REFERENCES ${executions} ON DELETE CASCADE
    )`
    // No foreign key: a deferred may be completed (by token) before its execution starts.
    yield* sql`CREATE TABLE ${sql(`${schema}.workflow_deferreds`)} (
      workflow     text        NOT NULL,
      execution_id text        NOT NULL,
      name         text        NOT NULL,
      exit         jsonb       NOT NULL,
      done_at      timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (workflow, execution_id, name)
    )`
    yield* sql`CREATE TABLE ${sql(`${schema}.workflow_clocks`)} (
      workflow     text        NOT NULL,
      execution_id text        NOT NULL,
      name         text        NOT NULL,
      due_at       timestamptz NOT NULL,
      PRIMARY KEY (workflow, execution_id, name),
      FOREIGN KEY (workflow, execution_id) REFERENCES ${executions} ON DELETE CASCADE
    )`
  })
