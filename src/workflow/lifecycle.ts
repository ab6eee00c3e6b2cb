/**
 * The runner's life around its runs (docs/workflows.md, "Crashes" and "Shutdown"): its presence
 * registration (session liveness, so the reaper releases a dead runner's executions within the
 * session's liveness, as it releases message claims), and the drain on shutdown (no more claims;
 * every run stopped, its execution released at once for another runner, not left to its lease).
 *
 * @since 0.1.0
 */
import { Clock, Effect, Fiber, Option, Scope } from "effect"
import { ConsumerPresence } from "../ConsumerPresence.ts"
import type { EngineState } from "./state.ts"

/** How long before another runner's reaper could release its executions a runner stops its runs. */
const PRESENCE_SAFETY_MS = 500

/** How often the drain looks for runs still under way. */
const DRAIN_CHECK_MS = 20

/**
 * Register this runner with session liveness when a `ConsumerPresence` is in context: once,
 * in `scope` (which outlives the runs), before its first claim. Without one (or with liveness
 * off), `holder` stays null and a dead runner's executions come back when their lease runs out.
 */
export const holderRegistration = (
  state: EngineState,
  consumerId: string,
  scope: Scope.Scope
): Effect.Effect<Effect.Effect<void>> =>
  Effect.map(Effect.serviceOption(ConsumerPresence), (presence) => {
    let done = Option.isNone(presence) || presence.value.mode === "off"
    return Effect.suspend(() => {
      if (done || Option.isNone(presence)) return Effect.void
      done = true
      return presence.value.register(consumerId).pipe(
        Scope.provide(scope),
        Effect.map((registration) => {
          state.holder = registration.consumerId
          state.atRisk = Effect.flatMap(registration.reapableAt, (reapableAt) =>
            Option.isNone(reapableAt)
              ? Effect.succeed(false)
              : Effect.map(Clock.currentTimeMillis, (now) => now >= reapableAt.value - PRESENCE_SAFETY_MS))
        })
      )
    })
  })

/**
 * The drain, run when the engine's scope closes: stop claiming, stop every run (abandoned: no
 * durable finalizer runs, the execution resumes elsewhere), and wait (at most `timeoutMs`) for
 * each to release its execution, fenced by its token, visible at once and announced.
 */
export const drain = (state: EngineState, claimLoop: Fiber.Fiber<unknown, unknown>, timeoutMs: number): Effect.Effect<void> =>
  Effect.gen(function*() {
    state.draining = true
    yield* Fiber.interrupt(claimLoop)
    const stopped = new Set<unknown>()
    const stopRuns = Effect.gen(function*() {
      for (const run of state.runs.values()) {
        if (run.fiber === undefined || stopped.has(run)) continue
        stopped.add(run)
        run.instance.abandoned = true
        yield* Effect.forkDetach(Fiber.interrupt(run.fiber))
      }
      return state.runs.size === 0
    })
    const released = yield* stopRuns.pipe(
      Effect.flatMap((empty) => (empty ? Effect.succeed(true) : Effect.as(Effect.sleep(DRAIN_CHECK_MS), false))),
      Effect.repeat({ until: (empty) => empty }),
      Effect.timeoutOption(timeoutMs)
    )
    if (Option.isNone(released)) {
      yield* Effect.logWarning(
        `leasehold workflow: ${state.runs.size} run(s) still under way after ${timeoutMs} ms of shutdown; their leases will run out`
      )
    }
  })
