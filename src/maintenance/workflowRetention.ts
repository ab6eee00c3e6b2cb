/**
 * The workflow engine's retention, as a maintenance task: every few minutes each engine deletes
 * the executions that completed longer ago than its retention (`LeaseholdWorkflow.layer({
 * retention })`, `LEASEHOLD_WORKFLOW_RETENTION`, default 7 days), with their activities,
 * deferreds and clocks, in batches of one short statement each (`pg/workflowAdmin.ts`: never an
 * unfinished execution, nor a child whose parent is not complete). Several runners share the work
 * (the rows are taken SKIP LOCKED).
 *
 * @since 0.1.0
 */
import { Effect, Schedule } from "effect"
import type { WorkflowSql } from "../pg/workflow.ts"
import type { StoreError } from "../QueueError.ts"
import { PRUNE_BATCH, pruneFinished } from "../workflow/admin.ts"
import type { Task } from "./Maintenance.ts"

/** How often an engine prunes: five minutes. */
export const everyMs = 300_000

/**
 * The task of an engine on `w` keeping finished executions for `retentionMs`. A dead connection
 * is retried a few times within the round (every batch is idempotent: it deletes what is past
 * the retention now); anything else fails the round, which the loop logs, and the next round
 * comes as usual.
 */
export const make = (w: WorkflowSql, retentionMs: number): Task<StoreError> => ({
  name: "prune workflow executions",
  every: everyMs,
  run: pruneFinished(w, retentionMs, PRUNE_BATCH).pipe(
    Effect.retry({ while: (e) => e._tag === "ConnectionDead", schedule: Schedule.exponential(1_000), times: 3 }),
    Effect.flatMap((pruned) => pruned > 0 ? Effect.logDebug(`pruned ${pruned} finished workflow execution(s)`) : Effect.void)
  ),
  failed: (e) => `finished workflow executions not pruned: ${e.message}`
})
