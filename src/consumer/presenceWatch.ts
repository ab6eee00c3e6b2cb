/**
 * The consumer's side of session liveness: when this consumer could be judged
 * dead by other consumers' reapers (every presence session holding its lock is
 * gone, and none regained in time), stop its handlers before that moment, so a
 * consumer cut off from the database never runs a message that another
 * consumer is about to run.
 */
import { Clock, Effect, Option } from "effect"
import type { Registration } from "../ConsumerPresence.ts"
import type { LeaseRenewer } from "./renew.ts"

const CHECK_MS = 25

/** Watch `registration`; `safetyMs` before it becomes reapable, declare every lease in `renewers` lost. */
export const watch = (options: {
  readonly registration: Registration
  readonly renewers: ReadonlySet<LeaseRenewer>
  readonly safetyMs: number
}) =>
  Effect.gen(function*() {
    let fencedFor: number | undefined
    while (true) {
      yield* Effect.sleep(CHECK_MS)
      const reapableAt = yield* options.registration.reapableAt
      if (Option.isNone(reapableAt)) {
        fencedFor = undefined
        continue
      }
      const now = yield* Clock.currentTimeMillis
      if (now < reapableAt.value - options.safetyMs || options.renewers.size === 0) continue
      if (fencedFor !== reapableAt.value) {
        fencedFor = reapableAt.value
        yield* Effect.logError(
          "presence lost: every presence session is gone and none was regained in time; other consumers may release " +
            "this consumer's claims soon, so its handlers are stopped"
        )
      }
      for (const renewer of options.renewers) {
        yield* renewer.loseAll(
          "presence-lost",
          "presence lost: cut off from the database long enough to be judged dead; stopped before another consumer could take over"
        )
      }
    }
  })
