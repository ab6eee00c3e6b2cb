/**
 * `leasehold workflows list | show | prune`: durable workflow executions (docs/workflows.md).
 * list and show are read-only; prune deletes finished executions (and may migrate, like send).
 */
import { Effect, Option } from "effect"
import * as Argument from "effect/cli/Argument"
import * as CliError from "effect/cli/CliError"
import * as Flag from "effect/cli/Flag"
import * as Command from "effect/cli/Command"
import * as LeaseholdWorkflow from "../LeaseholdWorkflow.ts"
import * as QueueConfig from "../QueueConfig.ts"
import { jsonFlag, limitFlag, refuse } from "./args.ts"
import { connect, print } from "./connect.ts"
import * as Out from "./output.ts"


/** The status as listed: a suspension on failure, and how a complete execution ended (success, failure, interrupted). */
const statusText = (r: { readonly status: string; readonly failed: boolean; readonly outcome: string | null }): string =>
  r.status === "suspended" && r.failed
    ? "suspended (failed)"
    : r.status === "complete" && r.outcome !== null && r.outcome !== "success"
    ? `complete (${r.outcome})`
    : r.status
const statusFlag = Flag.String("status").pipe(
  Flag.withMetavar("STATUS"),
  Flag.withDescription(`Only executions with this status: ${LeaseholdWorkflow.statuses.join(", ")}`),
  Flag.mapEffect((text) =>
    (LeaseholdWorkflow.statuses as ReadonlyArray<string>).includes(text)
      ? Effect.succeed(text)
      : refuse(`--status: ${JSON.stringify(text)} is not one of ${LeaseholdWorkflow.statuses.join(", ")}`)
  ),
  Flag.optional
)

const workflowFlag = Flag.String("workflow").pipe(
  Flag.withMetavar("NAME"),
  Flag.withDescription("Only executions of this workflow"),
  Flag.optional
)

/** What an execution waits for, in one cell: deferreds, children, clocks (with their due time). */
const waitingOn = (row: LeaseholdWorkflow.Execution): string => {
  const on = (row.suspended_on ?? { deferreds: [], children: [] }) as { deferreds?: Array<string>; children?: Array<string> }
  const clocks = (row.clocks ?? []) as Array<{ name: string; due_at: string }>
  return [
    ...(on.deferreds ?? []).filter((d) => !clocks.some((c) => c.name === d)).map((d) => `deferred ${d}`),
    ...(on.children ?? []).map((c) => `child ${c}`),
    ...clocks.map((c) => `clock ${c.name.replace(/^DurableClock\//, "")} at ${c.due_at}`)
  ].join(", ")
}

const executionsTable = (rows: ReadonlyArray<LeaseholdWorkflow.Execution>): string =>
  rows.length === 0
    ? "no workflow executions"
    : Out.table(
      ["WORKFLOW", "EXECUTION", "STATUS", "RUNS", "ACTIVITIES", "WAITING ON"],
      rows.map((r) => [
        r.workflow,
        r.execution_id,
        statusText(r),
        String(r.runs),
        String(r.activities),
        r.status === "suspended" ? waitingOn(r) : ""
      ]),
      new Set([3, 4])
    )

const workflowsList = Command.make(
  "list",
  { json: jsonFlag, limit: limitFlag, status: statusFlag, workflow: workflowFlag },
  (input) =>
    Effect.scoped(Effect.gen(function*() {
      const { context, schema } = yield* connect({ migrate: false })
      const rows = yield* LeaseholdWorkflow.list({
        schema,
        limit: input.limit,
        status: Option.getOrUndefined(input.status),
        workflow: Option.getOrUndefined(input.workflow)
      }).pipe(Effect.provideContext(context))
      yield* print(input.json ? Out.json(rows) : executionsTable(rows))
    }))
).pipe(Command.withDescription("Workflow executions, newest first: status, runs, recorded activities, what a suspended one waits on"))

const workflowsShow = Command.make(
  "show",
  {
    json: jsonFlag,
    workflow: Argument.String("workflow").pipe(Argument.withDescription("The workflow's name")),
    executionId: Argument.String("execution-id").pipe(Argument.withDescription("The execution id"))
  },
  (input) =>
    Effect.scoped(Effect.gen(function*() {
      const { context, schema } = yield* connect({ migrate: false })
      const rows = yield* LeaseholdWorkflow.activities({ schema, workflow: input.workflow, executionId: input.executionId }).pipe(
        Effect.provideContext(context)
      )
      yield* print(
        input.json
          ? Out.json(rows)
          : rows.length === 0
          ? "no recorded activities"
          : Out.table(
            ["ACTIVITY", "ATTEMPT", "OUTCOME", "RECORDED AT"],
            rows.map((r) => [r.activity, String(r.attempt), r.outcome, r.recorded_at.toISOString()]),
            new Set([1])
          )
      )
    }))
).pipe(Command.withDescription("An execution's recorded activity attempts: how each ended and when"))

const workflowsPrune = Command.make(
  "prune",
  {
    olderThan: Flag.String("older-than").pipe(
      Flag.withMetavar("DURATION"),
      Flag.withDescription("Delete executions completed longer ago than this (default 7d): 30s, 2h, 7d"),
      Flag.mapEffect((text) =>
        Effect.mapError(QueueConfig.parseDuration("--older-than", text), (e) => new CliError.ValidationError({ message: e.message }))
      ),
      Flag.withDefault(7 * 24 * 3600 * 1000)
    )
  },
  (input) =>
    Effect.scoped(Effect.gen(function*() {
      const { context, schema } = yield* connect({ migrate: true })
      const pruned = yield* LeaseholdWorkflow.prune({ schema, olderThan: input.olderThan }).pipe(Effect.provideContext(context))
      yield* print(Out.json({ pruned }))
    }))
).pipe(Command.withDescription("Delete finished workflow executions (and what they recorded) older than --older-than"))

/** The `workflows` command group. */
export const workflows = Command.make("workflows").pipe(
  Command.withDescription("List durable workflow executions, show their activities, prune finished ones"),
  Command.withSubcommands([workflowsList, workflowsShow, workflowsPrune])
)
