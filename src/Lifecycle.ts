/**
 * A message's lifecycle as callers see it: the completion events a store announces when a run
 * ends (completed, retried, dead-lettered, cancelled), the progress a running handler reports,
 * and the store operations behind them (a group of `QueueStoreShape`, as `FlowControl`'s is).
 * `TaskClient` builds awaiting a result, reading progress and the events stream on them.
 *
 * @since 0.6.0
 */
import { Effect, Schema, type Scope } from "effect"
import type { ClaimRef } from "./Message.ts"
import { MessageId } from "./Message.ts"
import { InvalidInput, type StoreError } from "./QueueError.ts"
import * as Validate from "./internal/validate.ts"

/** How one run of a message ended, as a completion event says it. */
export const CompletionOutcome = Schema.Literals(["completed", "retried", "dead-lettered", "cancelled"])
/** @see {@link CompletionOutcome} */
export type CompletionOutcome = typeof CompletionOutcome.Type

/**
 * One run of a message ended: `completed` (acked), `retried` (it runs again after its backoff),
 * `dead-lettered`, or `cancelled`; `at` is the store's time of the write. Heard at most once per
 * subscriber, while subscribed (see {@link LifecycleOperations.completions}).
 */
export const CompletionEvent = Schema.Struct({
  messageId: MessageId,
  queue: Schema.String,
  task: Schema.String,
  outcome: CompletionOutcome,
  at: Schema.Date
})
/** @see {@link CompletionEvent} */
export type CompletionEvent = typeof CompletionEvent.Type

/** The store operations of the caller's lifecycle: progress and completion events. */
export interface LifecycleOperations {
  /**
   * Record `progress` (JSON, at most {@link limits.maxProgressBytes} bytes) on the message a
   * claim holds, fenced by `(id, leaseToken)`: `false` when the claim no longer holds it (a stale
   * run writes nothing). Read back with `get` (`MessageInfo.progress`). Refused with
   * `InvalidInput` (field `progress`) when it is not JSON data or too large.
   */
  readonly setProgress: (ref: ClaimRef, progress: unknown) => Effect.Effect<boolean, InvalidInput | StoreError>
  /**
   * Hear the completion events of `queues` (every queue when `undefined`) for the life of the
   * current scope: the returned effect takes the next one, waiting for it. Delivered at most
   * once, only while subscribed, never replayed: an event written while the subscription was
   * not listening (before it, a reconnect of the PostgreSQL listener, a subscriber too slow to
   * keep up with a bounded buffer) is not heard. Ends a consumer finishes are announced (at
   * their commit on PostgreSQL), and cancels of waiting messages; a cancelled message a claim
   * or the reaper removes is not.
   */
  readonly completions: (
    queues: ReadonlyArray<string> | undefined
  ) => Effect.Effect<Effect.Effect<CompletionEvent>, never, Scope.Scope>
}

/** The bounds of progress. */
export const limits = {
  /** Largest progress value kept, as JSON bytes: 4 KiB. */
  maxProgressBytes: 4 * 1024,
  /** A handler's progress is written at most this often (last value wins): 500 ms. */
  progressIntervalMs: 500,
  /** Events a slow subscriber may fall behind by before the oldest are dropped. */
  eventBuffer: 4_096
} as const

/** The rule a progress value keeps. */
export const progressRule = `JSON data of at most ${limits.maxProgressBytes} bytes`

/** Encode a progress value as JSON text, or refuse it (`InvalidInput`, field `progress`). */
export const progressJson = (progress: unknown): Effect.Effect<string, InvalidInput> =>
  Effect.flatMap(Validate.jsonData("progress", progress), (json) => {
    const bytes = json.length * 3 <= limits.maxProgressBytes ? json.length : Buffer.byteLength(json, "utf8")
    return bytes <= limits.maxProgressBytes ? Effect.succeed(json) : Effect.fail(
      new InvalidInput({
        field: "progress",
        rule: progressRule,
        message: `progress is ${bytes} bytes of JSON (rule: ${progressRule}): report a summary (a count, a percentage), not the data`
      })
    )
  })

/** The lifecycle operations checked before a store runs them: the progress value encoded and bounded. */
export const checkedOperations = (shape: LifecycleOperations): LifecycleOperations => ({
  setProgress: (ref, progress) => Effect.flatMap(progressJson(progress), () => shape.setProgress(ref, progress)),
  completions: shape.completions
})

/**
 * A subscription's `take` that answers only the events of `queues` (every event for
 * `undefined`): what both stores' `completions` return over their `PubSub`.
 */
export const ofQueues = (take: Effect.Effect<CompletionEvent>, queues: ReadonlyArray<string> | undefined): Effect.Effect<CompletionEvent> => {
  if (queues === undefined) return take
  const wanted = new Set(queues)
  const next: Effect.Effect<CompletionEvent> = Effect.flatMap(take, (event) => wanted.has(event.queue) ? Effect.succeed(event) : next)
  return next
}
