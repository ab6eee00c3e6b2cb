/**
 * Durable workflows on leasehold (see README and docs/workflows.md): effect's `effect/workflow`
 * API, run by `LeaseholdWorkflow.layer`. A chain, a fan-out/fan-in, a sleep of a day, an approval
 * by `DurableDeferred`, and awaiting the result of a leasehold task. examples/workflows.test.ts
 * runs them (the day-long sleep on the TestClock, with effect's memory engine).
 */
import { Effect, Layer, Option, Schedule, Schema } from "effect"
import { Activity, DurableClock, DurableDeferred, Workflow } from "effect/workflow"
import { Task, TaskClient } from "leasehold"

// A chain: each step an activity whose result is recorded; a replay after a crash skips finished steps.
export const Onboard = Workflow.make("Onboard", {
  payload: { user: Schema.String },
  success: Schema.String,
  idempotencyKey: ({ user }) => user // the execution id: executing it again finds the same execution
})
const OnboardLive = Onboard.toLayer(({ user }) =>
  Effect.gen(function*() {
    const account = yield* Activity.make({ name: "create-account", success: Schema.String, execute: Effect.succeed(`acct-${user}`) })
    yield* Activity.make({ name: "send-welcome", execute: Effect.log(`welcome, ${user} (${account})`) })
    return account
  })
)

// Fan-out, fan-in: n activities at once, their results summed once all are recorded.
export const SumOfSquares = Workflow.make("SumOfSquares", {
  payload: { id: Schema.String, n: Schema.Number },
  success: Schema.Number,
  idempotencyKey: ({ id }) => id
})
const SumOfSquaresLive = SumOfSquares.toLayer(({ n }) =>
  Effect.all(
    Array.from({ length: n }, (_, i) => Activity.make({ name: `square-${i}`, success: Schema.Number, execute: Effect.succeed(i * i) })),
    { concurrency: "unbounded" }
  ).pipe(Effect.map((squares) => squares.reduce((sum, x) => sum + x, 0)))
)

// Sleep a day: while it sleeps the execution holds no lease and no runner; it wakes at its clock.
export const Reminder = Workflow.make("Reminder", {
  payload: { user: Schema.String },
  success: Schema.String,
  idempotencyKey: ({ user }) => `reminder-${user}`
})
const ReminderLive = Reminder.toLayer(({ user }) =>
  Effect.gen(function*() {
    yield* DurableClock.sleep({ name: "a-day", duration: "1 day" })
    return yield* Activity.make({ name: "remind", success: Schema.String, execute: Effect.succeed(`reminded ${user}`) })
  })
)

// An approval: the execution waits (holding nothing) until someone, anywhere, completes the deferred.
export const Approval = DurableDeferred.make("approval", { success: Schema.Boolean })
export const Expense = Workflow.make("Expense", {
  payload: { id: Schema.String, cents: Schema.Number },
  success: Schema.String,
  idempotencyKey: ({ id }) => id
})
const ExpenseLive = Expense.toLayer(({ cents }) =>
  Effect.map(DurableDeferred.await(Approval), (approved) => approved ? `paid ${cents}` : "refused")
)

/** Approve or refuse an expense from any process with the engine layer (an HTTP handler, the CLI): by its token. */
export const decide = (executionId: string, approved: boolean) =>
  DurableDeferred.succeed(Approval, {
    token: DurableDeferred.tokenFromExecutionId(Approval, { workflow: Expense, executionId }),
    value: approved
  })

// Await a task's result: an activity sends a leasehold task (deduplicated while it is live) and waits
// for the result its worker's ack keeps. A crash between the send and the recorded result sends again
// only if the first message already finished: at least once, like any activity with outside effects.
export const resize = Task.define({ name: "resize", payload: Schema.String, success: Schema.Number })
export const Thumbnail = Workflow.make("Thumbnail", {
  payload: { image: Schema.String },
  success: Schema.Number,
  idempotencyKey: ({ image }) => image
})
const ThumbnailLive = Thumbnail.toLayer(({ image }) =>
  Activity.make({
    name: "resize",
    success: Schema.Number,
    execute: Effect.gen(function*() {
      const sent = yield* TaskClient.send(resize, image, { dedupKey: yield* Activity.idempotencyKey("resize") })
      return yield* TaskClient.result(resize, sent.id).pipe(
        Effect.flatMap(Option.match({ onNone: () => Effect.fail("not yet" as const), onSome: Effect.succeed })),
        Effect.retry({ while: (e) => e === "not yet", schedule: Schedule.spaced("1 second") })
      )
    }).pipe(Effect.orDie)
  })
)

/** The workflows without the task-awaiting one (it needs a `TaskClient`): what the test runs. */
export const WorkflowsLive = Layer.mergeAll(OnboardLive, SumOfSquaresLive, ReminderLive, ExpenseLive)

/** Every workflow of this page, registered with the `WorkflowEngine` in context; `TaskClient` for Thumbnail. */
export const AllWorkflowsLive = Layer.merge(WorkflowsLive, ThumbnailLive)
