/**
 * A run's progress writer (`HandlerContext.progress`): made on the handler's first report, it
 * keeps the last value reported and writes it in the background, at most every
 * `Lifecycle.limits.progressIntervalMs` (a chatty handler costs one UPDATE per interval, not one
 * per report), fenced by the claim's lease token. The handler never waits for the database: a
 * report fails only for a value that is not JSON or too large. Stopped when the run ends.
 *
 * @since 0.6.0
 */
import { Effect } from "effect"
import * as Lifecycle from "../Lifecycle.ts"
import type { ClaimRef } from "../Message.ts"
import type { InvalidInput } from "../QueueError.ts"
import type { QueueStoreShape } from "../QueueStore.ts"

/** The progress writer of one run. */
export interface ProgressWriter {
  /** Check `value` and keep it as the one to write next (the last reported wins). */
  readonly report: (value: unknown) => Effect.Effect<void, InvalidInput>
  /** The run ended: write nothing more (a write under way lands or finds its lease gone). */
  readonly stop: () => void
}

const NOTHING: unique symbol = Symbol("nothing pending")

/** A writer for the run holding `ref`, writing through `store`. */
export const make = (store: QueueStoreShape, ref: ClaimRef, intervalMs: number = Lifecycle.limits.progressIntervalMs): ProgressWriter => {
  let pending: unknown = NOTHING
  let writing = false
  let stopped = false
  /** Write what is pending, then wait an interval; again while something new came meanwhile. */
  const drain: Effect.Effect<void> = Effect.suspend(() => {
    if (pending === NOTHING || stopped) {
      writing = false
      return Effect.void
    }
    const value = pending
    pending = NOTHING
    return store.setProgress(ref, value).pipe(
      Effect.flatMap((held) => {
        if (held) return Effect.void
        // A stale run (its lease taken, or the message finished): nothing more it reports is written.
        stopped = true
        return Effect.logDebug("progress not written: this run no longer holds the message")
      }),
      Effect.catch((error) => Effect.logWarning(`progress not written: ${error.message}`)),
      Effect.andThen(Effect.sleep(intervalMs)),
      Effect.andThen(drain)
    )
  })
  return {
    report: (value) =>
      Effect.flatMap(Lifecycle.progressJson(value), (json) => {
        // A snapshot: the handler may change its object after reporting it.
        pending = JSON.parse(json)
        if (writing || stopped) return Effect.void
        writing = true
        // Detached: the report may come from a short-lived fiber of the handler; `stop` ends it with the run.
        return Effect.asVoid(Effect.forkDetach(drain))
      }),
    stop: () => {
      stopped = true
    }
  }
}
