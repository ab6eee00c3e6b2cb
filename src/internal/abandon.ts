/**
 * Bounding an effect that may not stop when asked: a statement on a frozen
 * connection can take seconds to give up after an interruption, and a timeout
 * that waits for its loser (as `Effect.timeout` does) would wait that long too.
 */
import { Effect, Fiber, type Option } from "effect"

/**
 * Run `effect` on a fiber of its own and wait at most `ms` for it. On timeout
 * answer `None` at once and interrupt the abandoned fiber in the background.
 * Only for effects whose late completion is harmless (fenced writes).
 */
export const within = <A, E, R>(effect: Effect.Effect<A, E, R>, ms: number): Effect.Effect<Option.Option<A>, E, R> =>
  Effect.gen(function*() {
    const fiber = yield* Effect.forkDetach(effect)
    // The timeout interrupts the join (at once), not the fiber; the join's interruption hands the
    // fiber's to the background. The race's fibers are interruptible even where the caller is not
    // (a finalizer), so the bound holds there too.
    return yield* Fiber.join(fiber).pipe(
      Effect.onInterrupt(() => Effect.forkDetach(Fiber.interrupt(fiber))),
      Effect.timeoutOption(Math.max(0, ms))
    )
  })
