/**
 * The typed failure of an effect, for tests that assert on it.
 */
import { assert } from "@effect/vitest"
import { Cause, Effect, Exit } from "effect"

/** The typed failure of `effect`; fails the test (with the whole cause) on success or on a defect. */
export const failureOf = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const exit = yield* Effect.exit(effect)
    if (Exit.isSuccess(exit)) return assert.fail(`expected a failure, got a success: ${String(exit.value)}`)
    const fail = exit.cause.reasons.find(Cause.isFailReason)
    if (fail === undefined) return assert.fail(`expected a typed failure, got:\n${Cause.pretty(exit.cause)}`)
    return fail.error
  })
