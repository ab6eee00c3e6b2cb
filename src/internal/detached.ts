/**
 * Waiting on an effect that may not stop when asked: a statement on a frozen
 * connection can take seconds to give up after an interruption, and a wait that
 * waits for its loser (as `Effect.timeout` does) would wait that long too.
 */
import { Effect, Fiber, type Option } from "effect"

/**
 * Run `effect` on a fiber of its own and join it. If the caller is interrupted
 * (or gives up, see {@link within}), the join ends at once and the effect's
 * fiber is interrupted in the background. Only for effects whose late
 * completion is harmless (fenced writes and renewals).
 */
export const detached = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.gen(function*() {
    const fiber = yield* Effect.forkDetach(effect)
    return yield* Fiber.join(fiber).pipe(Effect.onInterrupt(() => Effect.forkDetach(Fiber.interrupt(fiber))))
  })

/**
 * {@link detached}, waiting at most `ms`: on timeout answer `None` at once.
 * The race's fibers are interruptible even where the caller is not (a
 * finalizer), so the bound holds there too.
 */
export const within = <A, E, R>(effect: Effect.Effect<A, E, R>, ms: number): Effect.Effect<Option.Option<A>, E, R> =>
  Effect.timeoutOption(detached(effect), Math.max(0, ms))
