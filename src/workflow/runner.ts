/**
 * The runner of one process: the claim loop (executions of the registered workflows, up to the
 * concurrency), and each run under its lease: clocks fired, the workflow replayed under a
 * renewer fiber, its result written fenced (docs/workflows.md).
 *
 * @since 0.1.0
 */
import { Context, Effect, Exit, Fiber, Metric, Schema, Scope } from "effect"
import * as Workflow from "effect/workflow/Workflow"
import * as WorkflowEngine from "effect/workflow/WorkflowEngine"
import { isConnectionDead } from "../QueueError.ts"
import * as QueueMetrics from "../QueueMetrics.ts"
import * as Sql from "../pg/workflow.ts"
import * as Codec from "./codec.ts"
import { donePayload } from "./signals.ts"
import { type EngineState, keyOf, type Registered, type Run, statement } from "./state.ts"

/** How long a run that died of a defect waits before it is claimed again. */
const DEFECT_DELAY_MS = 5_000

/**
 * The claim loop, until the drain: claim what fits (never an execution this process is still
 * running), fork a run per claim into `runs`, then wait for a signal or the poll interval.
 * `beforeClaim` runs before each claim that may take something (the presence registration).
 */
export const claimLoop = (
  state: EngineState,
  engine: WorkflowEngine.WorkflowEngine["Service"],
  options: { readonly runs: Scope.Scope; readonly beforeClaim: Effect.Effect<void> }
) =>
  Effect.gen(function*() {
    while (!state.draining) {
      const names = [...state.registry.keys()]
      const free = state.settings.concurrency - state.runs.size
      if (names.length > 0 && free > 0) yield* options.beforeClaim
      const claimer = { holder: state.holder, running: [...state.runs.values()].map((run) => run.claimed) }
      const claimed = names.length === 0 || free <= 0
        ? []
        : yield* Sql.claim(state.w, names, free, state.settings.leaseMs, claimer).pipe(
          Effect.catch((error) => Effect.as(Effect.logWarning("leasehold workflow: claim failed", error), []))
        )
      for (const row of claimed) {
        const entry = state.registry.get(row.workflow)
        if (entry !== undefined) yield* Effect.forkIn(runOne(state, engine, entry, row), options.runs)
        else yield* statement(Sql.release(state.w, row, 0)) // unregistered since the claim began
      }
      if (claimed.length > 0 && claimed.length === free) continue
      yield* state.signals.waitUntil({ check: Effect.succeedNone, wanted: (p) => p === "run", ms: state.settings.pollMs })
    }
  })

const decodePayload = (workflow: Workflow.Any, payload: unknown) =>
  Effect.orDie(Schema.decodeUnknownEffect(Schema.toCodecJson(workflow.payloadSchema))(payload)) as Effect.Effect<object>

/**
 * A safe interrupt takes effect when the run would suspend (as in effect's memory engine); an
 * unsafe one always: the run interrupts itself as `interrupted`, so finalizers and compensations run.
 */
const applyInterrupt = (run: Run) => (exit: Exit.Exit<unknown, unknown>) => {
  const instance = run.instance
  const suspendOnFailure = Context.get(instance.workflow.annotations, Workflow.SuspendOnFailure)
  if (
    run.interrupt === 0 ||
    (run.interrupt < 2 && !instance.suspended && !instance.abandoned && !(suspendOnFailure && Exit.isFailure(exit)))
  ) return Effect.void
  instance.interrupted = true
  instance.suspended = false
  return Effect.withFiber((fiber) => Effect.interruptible(Fiber.interrupt(fiber)))
}

/** Run one claimed execution to its next suspension or its end, under its lease. */
const runOne = (
  state: EngineState,
  engine: WorkflowEngine.WorkflowEngine["Service"],
  entry: Registered,
  claimed: Sql.Claimed
) =>
  Effect.gen(function*() {
    const key = keyOf(claimed.workflow, claimed.executionId)
    const instance = WorkflowEngine.WorkflowInstance.initial(entry.workflow, claimed.executionId)
    const run: Run = {
      claimed,
      instance,
      fiber: undefined,
      interrupt: claimed.interrupt,
      lost: false,
      awaiting: { deferreds: new Set(), children: new Set() }
    }
    state.runs.set(key, run)
    yield* Metric.update(QueueMetrics.workflowInFlight, state.runs.size)
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        if (state.runs.get(key) === run) state.runs.delete(key)
        return Metric.update(QueueMetrics.workflowInFlight, state.runs.size)
      })
    )
    const renewer = yield* Effect.forkScoped(renew(state, run))
    yield* statement(Sql.fireClocks(state.w, claimed, Codec.voidExitJson))
    const payload = yield* decodePayload(entry.workflow, claimed.payload)
    const fiber = yield* entry.execute(payload, claimed.executionId).pipe(
      Effect.onExit(applyInterrupt(run)),
      Workflow.intoResult,
      Effect.provideService(WorkflowEngine.WorkflowEngine, engine),
      Effect.provideService(WorkflowEngine.WorkflowInstance, instance),
      Effect.forkIn(entry.scope)
    )
    run.fiber = fiber
    const exit = yield* Fiber.await(fiber)
    yield* Fiber.interrupt(renewer).pipe(Effect.timeout("2 seconds"), Effect.ignore)
    yield* settle(state, run, exit)
  }).pipe(
    Effect.scoped,
    Effect.catchCause((cause) => Effect.logError("leasehold workflow: run failed", cause)),
    Effect.annotateLogs({ workflow: claimed.workflow, executionId: claimed.executionId }),
    Effect.ensuring(state.signals.publish("run")) // a slot came back
  )

/** Write how the run ended, fenced: its result (complete or suspended), or let the execution go. */
const settle = (state: EngineState, run: Run, exit: Exit.Exit<Workflow.Result<unknown, unknown>>) =>
  Effect.gen(function*() {
    const { claimed, instance } = run
    if (run.lost) return yield* lost("leasehold workflow: lease lost; the run wrote nothing more")
    if (Exit.isFailure(exit)) {
      // Interrupted without a result (shutdown, an unsafe interrupt) or a defect not captured.
      yield* statement(Sql.release(state.w, claimed, Exit.hasInterrupts(exit) ? 0 : DEFECT_DELAY_MS))
      return yield* Metric.update(QueueMetrics.workflowRunsBy("released"), 1)
    }
    const result = exit.value
    const complete = result._tag === "Complete"
    if (!complete) {
      // A suspended run's scope does not outlive it here (it may resume in another process).
      instance.abandoned = true
      yield* Scope.close(instance.scope, Exit.void)
    }
    const failed = result._tag === "Suspended" && result.failed === true
    const suspendedOn = complete
      ? undefined
      : { deferreds: [...run.awaiting.deferreds], children: [...run.awaiting.children] }
    const encoded = yield* Codec.encodeResult(result)
    const held = yield* statement(Sql.finish(state.w, claimed, { result: encoded, complete, failed, suspendedOn }))
    if (!held) return yield* lost("leasehold workflow: lease lost before the result was written")
    yield* Metric.update(QueueMetrics.workflowRunsBy(complete ? "complete" : "suspended"), 1)
    yield* state.signals.publish(donePayload(claimed.workflow, claimed.executionId))
  })

/** A run that found its lease gone: said, and counted. */
const lost = (message: string) =>
  Effect.andThen(Effect.logWarning(message), Metric.update(QueueMetrics.workflowRunsBy("lost"), 1))

/**
 * The renewer: every lease/3, extend the lease fenced by token. A lost lease (no row), or a
 * presence about to be judged dead, abandons the run and interrupts it; only connection-dead errors are retried on the next tick; an unsafe
 * interrupt heard here stops the run in progress.
 */
const renew = (state: EngineState, run: Run) =>
  Effect.gen(function*() {
    yield* Effect.sleep(Math.max(1, Math.floor(state.settings.leaseMs / 3)))
    if (yield* state.atRisk) {
      return yield* stopLost(run, "leasehold workflow: presence lost (session gone, heartbeats failing); stopping the run before its execution is reaped")
    }
    const interrupt = yield* Sql.renew(state.leaseSql, run.claimed, state.settings.leaseMs).pipe(
      Effect.catchIf(isConnectionDead, () => Effect.succeed(run.interrupt))
    )
    if (interrupt === undefined) return yield* stopLost(run, "leasehold workflow: lease lost; stopping the run")
    const unsafe = interrupt === 2 && run.interrupt < 2
    run.interrupt = interrupt
    if (unsafe && run.fiber !== undefined) yield* Effect.forkDetach(Fiber.interrupt(run.fiber))
  }).pipe(
    Effect.forever,
    // Not a dead connection: a bug or a refused statement. The lease cannot be kept: stop the run.
    Effect.catch((error) => stopLost(run, `leasehold workflow: renewal failed: ${String(error)}`))
  )

/** Abandon a run whose lease is gone: it writes nothing more, and its fiber is stopped. */
const stopLost = (run: Run, message: string) =>
  Effect.gen(function*() {
    run.lost = true
    run.instance.abandoned = true
    yield* Effect.logError(message)
    if (run.fiber !== undefined) yield* Effect.forkDetach(Fiber.interrupt(run.fiber))
  })
