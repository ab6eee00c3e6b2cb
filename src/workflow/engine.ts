/**
 * effect's `WorkflowEngine.Encoded` contract on leasehold's tables (docs/workflows.md): what a
 * caller and a running workflow ask of the engine. Runs themselves are claimed and driven by
 * `runner.ts`; this module starts executions, reads and records results, completes deferreds,
 * schedules clocks and wakes executions.
 *
 * @since 0.1.0
 */
import { Context, Duration, Effect, Fiber, Metric, Option, Schema } from "effect"
import * as Workflow from "effect/workflow/Workflow"
import * as WorkflowEngine from "effect/workflow/WorkflowEngine"
import * as QueueMetrics from "../QueueMetrics.ts"
import * as Sql from "../pg/workflow.ts"
import * as Codec from "./codec.ts"
import { donePayload } from "./signals.ts"
import { type EngineState, keyOf, type Run, statement } from "./state.ts"
import { runTransactional, WithTransaction } from "./transactional.ts"

const keyFor = (workflow: Workflow.Any, executionId: string): Sql.Key => ({ workflow: workflow._tag, executionId })

/** The run this process holds for the calling workflow instance (every in-run operation has one). */
const currentRun = (state: EngineState) =>
  Effect.flatMap(WorkflowEngine.WorkflowInstance, (instance) => {
    const run = state.runs.get(keyOf(instance.workflow._tag, instance.executionId))
    return run === undefined
      ? Effect.die(`leasehold workflow: ${instance.workflow._tag}/${instance.executionId} is not held by this process`)
      : Effect.succeed({ instance, run })
  })

/** The execution's last result, once a run has written one and no run is under way. */
const settled = (state: EngineState, key: Sql.Key, completeOnly: boolean) =>
  Effect.gen(function*() {
    const row = yield* statement(Sql.status(state.w, key))
    if (row === undefined || row.result === null) return Option.none()
    if (row.status !== "complete" && (completeOnly || row.status !== "suspended")) return Option.none()
    return Option.some(yield* Codec.decodeResult(row.result))
  })

/** Wait (notified, polled as a fallback) until {@link settled} has an answer. */
const awaitSettled = (state: EngineState, key: Sql.Key, completeOnly: boolean) => {
  const done = donePayload(key.workflow, key.executionId)
  const loop: Effect.Effect<Workflow.Result<unknown, unknown>> = state.signals.waitUntil({
    check: settled(state, key, completeOnly),
    wanted: (payload) => payload === done,
    ms: state.settings.pollMs
  }).pipe(Effect.flatMap(Option.match({ onNone: () => loop, onSome: Effect.succeed })))
  return loop
}

const encodePayload = (workflow: Workflow.Any, payload: object) =>
  Effect.orDie(Schema.encodeUnknownEffect(Schema.toCodecJson(workflow.payloadSchema))(payload)) as Effect.Effect<unknown>

/** `execute`: start the execution (its id is its idempotency key), then, unless discarded, its result. */
const execute = (state: EngineState): WorkflowEngine.Encoded["execute"] => (workflow, options) =>
  Effect.gen(function*() {
    const key = keyFor(workflow, options.executionId)
    const parent = options.parent !== undefined && options.detached !== true
      ? keyFor(options.parent.workflow, options.parent.executionId)
      : undefined
    const started = yield* statement(Sql.start(state.w, key, yield* encodePayload(workflow, options.payload), parent))
    if (started) yield* state.signals.publish("run")
    if (options.discard) return undefined as never
    // Inside a workflow the child runs wherever it is claimed: the parent suspends until it is woken.
    if (options.parent !== undefined) {
      const now = yield* settled(state, key, true)
      if (Option.isSome(now)) return now.value as never
      state.runs.get(keyOf(options.parent.workflow._tag, options.parent.executionId))?.awaiting.children.add(
        `${key.workflow}/${key.executionId}`
      )
      return new Workflow.Suspended({}) as never
    }
    return (yield* awaitSettled(state, key, false)) as never
  })

/** `activityExecute`: the recorded result of this attempt, or run it and record its result fenced. */
const activityExecute = (state: EngineState): WorkflowEngine.Encoded["activityExecute"] => (activity, attempt) =>
  Effect.gen(function*() {
    const { instance, run } = yield* currentRun(state)
    const key = keyFor(instance.workflow, instance.executionId)
    const recorded = yield* statement(Sql.activityResult(state.w, key, activity.name, attempt))
    if (recorded !== undefined) return yield* Codec.decodeResult(recorded)
    // A pending interrupt replays only to rebuild compensations: no new activities.
    if (run.interrupt > 0 && !instance.interrupted) return new Workflow.Suspended({})
    const activityInstance = WorkflowEngine.WorkflowInstance.initial(instance.workflow, instance.executionId)
    activityInstance.interrupted = instance.interrupted
    const execute = activity.executeEncoded.pipe(
      Workflow.intoResult,
      Effect.provideService(WorkflowEngine.WorkflowInstance, activityInstance)
    )
    if (Context.get(activity.annotations, WithTransaction)) {
      const outcome = yield* runTransactional(state, run, activity.name, attempt, execute)
      if (outcome === "lost") return yield* abandon(run, activity.name)
      // Committed with its record; or a failed attempt, rolled back, recorded below.
      if (outcome._tag === "Complete" && outcome.exit._tag === "Success") return outcome
      yield* record(state, run, activity.name, attempt, outcome)
      return outcome
    }
    const result = yield* execute
    if (result._tag === "Complete") yield* record(state, run, activity.name, attempt, result)
    return result
  })

/** Record an activity's result fenced; a lost lease abandons the run (it writes nothing more). */
const record = (state: EngineState, run: Run, name: string, attempt: number, result: Workflow.Result<unknown, unknown>) =>
  Effect.gen(function*() {
    const held = yield* statement(Sql.recordActivity(state.w, run.claimed, name, attempt, yield* Codec.encodeResult(result)))
    if (held) return yield* Metric.update(QueueMetrics.workflowActivitiesRecorded, 1)
    return yield* abandon(run, name)
  })

/** The lease is gone: the run is abandoned (it writes nothing more) and stops. */
const abandon = (run: Run, activity: string) =>
  Effect.gen(function*() {
    run.lost = true
    run.instance.abandoned = true
    yield* Effect.logWarning("leasehold workflow: lease lost; activity result not recorded").pipe(
      Effect.annotateLogs({ workflow: run.claimed.workflow, executionId: run.claimed.executionId, activity })
    )
    return yield* Effect.interrupt
  })

/** Build the `Encoded` operations on `state`; `register` also wakes the claim loop. */
export const encoded = (state: EngineState): WorkflowEngine.Encoded => ({
  register: (workflow, run) =>
    Effect.gen(function*() {
      state.registry.set(workflow._tag, { workflow, execute: run, scope: yield* Effect.scope })
      yield* Effect.addFinalizer(() => Effect.sync(() => state.registry.delete(workflow._tag)))
      yield* state.signals.publish("run")
    }),
  execute: execute(state),
  poll: (workflow, executionId) => settled(state, keyFor(workflow, executionId), false),
  interrupt: (workflow, executionId) => statement(Sql.wake(state.w, keyFor(workflow, executionId), 2, 1)),
  interruptUnsafe: (workflow, executionId) =>
    Effect.gen(function*() {
      yield* statement(Sql.wake(state.w, keyFor(workflow, executionId), 2, 2))
      const run = state.runs.get(keyOf(workflow._tag, executionId))
      if (run !== undefined) run.interrupt = 2
      if (run?.fiber !== undefined) yield* Effect.forkDetach(Fiber.interrupt(run.fiber))
    }),
  resume: (workflow, executionId) => statement(Sql.wake(state.w, keyFor(workflow, executionId), 2, 0)),
  awaitComplete: (workflow, executionId) => Effect.asVoid(awaitSettled(state, keyFor(workflow, executionId), true)),
  activityExecute: activityExecute(state),
  deferredResult: (deferred) =>
    Effect.gen(function*() {
      const instance = yield* WorkflowEngine.WorkflowInstance
      const exit = yield* statement(Sql.deferredResult(state.w, keyFor(instance.workflow, instance.executionId), deferred.name))
      if (exit !== undefined) return Option.some(yield* Codec.decodeExit(exit))
      state.runs.get(keyOf(instance.workflow._tag, instance.executionId))?.awaiting.deferreds.add(deferred.name)
      return Option.none()
    }),
  deferredDone: (options) =>
    Effect.gen(function*() {
      const key = { workflow: options.workflowName, executionId: options.executionId }
      yield* statement(Sql.deferredDone(state.w, key, options.deferredName, yield* Codec.encodeExit(options.exit)))
      yield* state.signals.publish("run")
    }),
  scheduleClock: (workflow, options) =>
    Effect.gen(function*() {
      const run = state.runs.get(keyOf(workflow._tag, options.executionId))
      if (run === undefined) return yield* Effect.die(`leasehold workflow: ${workflow._tag}/${options.executionId} is not held here`)
      yield* statement(
        Sql.scheduleClock(state.w, run.claimed, options.clock.deferred.name, Duration.toMillis(options.clock.duration))
      )
    })
})
