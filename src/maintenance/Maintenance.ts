/**
 * The shape of every maintenance loop: a named periodic task `{ name, every, run }`
 * run for good by one helper, which logs a failed run and goes on, and restarts
 * the loop after a defect. The family: the reaper and forgetting old consumer
 * rows (`reaper.ts`, `forgetConsumers.ts`, run by each registered consumer),
 * attempt-history and unique-key pruning (`prune.ts`, run by each consumer) and
 * the depth sampler (`depth.ts`, one per process through `QueueDepth.layer`), and
 * the workflow engine's pruning of finished executions (`workflowRetention.ts`).
 *
 * @since 0.1.0
 */
import { Cause, Effect, type Fiber, type Scope } from "effect"
import { detached } from "../internal/detached.ts"

/** A maintenance task: `run` every `every` milliseconds, for the life of a scope. */
export interface Task<E extends { readonly message: string } = never> {
  /** Names the loop in the log (annotation `task`, and a defect's restart). */
  readonly name: string
  /** Milliseconds between the end of one run and the start of the next. */
  readonly every: number
  /** One round. A failure is logged (see `failed`) and the next round comes as usual. */
  readonly run: Effect.Effect<void, E>
  /** The first round at once (default: after `every`). */
  readonly firstAtOnce?: boolean | undefined
  /** The WARN line of a failed round: what it did not do, and why (default: `<name> failed: <message>`). */
  readonly failed?: ((error: E) => string) | undefined
}

/**
 * Run a background loop for good: a defect (a bug) is logged at ERROR and the
 * loop restarted after a pause, never left to end the fiber silently.
 */
export const forever = (name: string, loop: Effect.Effect<never>): Effect.Effect<never> =>
  Effect.forever(loop.pipe(
    Effect.catchCause((cause) =>
      Cause.hasInterruptsOnly(cause)
        ? Effect.failCause(cause)
        : Effect.andThen(Effect.logError(`${name} failed, restarting in 1s:\n${Cause.pretty(cause)}`), Effect.sleep(1_000))
    )
  )) as Effect.Effect<never>

/** The task's loop: its rounds, `every` apart, for good (see {@link forever}). */
export const loop = <E extends { readonly message: string }>(task: Task<E>): Effect.Effect<never> => {
  // Detached: a round blocked on a connection that stopped answering (a partition) must not hold
  // the scope's close (and so a shutdown); interrupted, the loop ends at once and the round's fiber
  // is interrupted in the background. Every round is harmless to finish late (fenced releases,
  // idempotent deletes, a sample).
  const round = detached(task.run).pipe(
    Effect.catch((error) => Effect.logWarning(task.failed?.(error) ?? `${task.name} failed: ${error.message}`))
  )
  const rounds = Effect.forever(Effect.andThen(Effect.sleep(task.every), round)) as Effect.Effect<never>
  return forever(task.name, task.firstAtOnce === true ? Effect.andThen(round, rounds) : rounds).pipe(
    Effect.annotateLogs({ task: task.name })
  )
}

/** Run the task in the background for the life of the current scope. */
export const fork = <E extends { readonly message: string }>(task: Task<E>): Effect.Effect<Fiber.Fiber<never>, never, Scope.Scope> =>
  Effect.forkScoped(loop(task))
