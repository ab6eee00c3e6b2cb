/**
 * Awaiting a message's end without polling it: subscribe to the completion events of its queue,
 * then read where it stands (so an end before the subscription is seen, and one after it is
 * heard), then wait for an event naming it, reading again after each one and at least every
 * poll interval (a lost notification costs one interval, never a hang), all bounded by a timeout.
 * The store's rows and history are the truth; the events only say when to look.
 *
 * @since 0.6.0
 */
import { Duration, Effect, Option } from "effect"
import type { Attempt, MessageId, MessageInfo } from "../Message.ts"
import { isResultTooLarge, isResultUnstorable } from "../Message.ts"
import {
  type AwaitError,
  AwaitTimedOut,
  MessageCancelled,
  MessageDeadLettered,
  MessageNotFound,
  ResultUnreadable,
  type StoreError
} from "../QueueError.ts"
import { isMessageId, type QueueStoreShape } from "../QueueStore.ts"

/** How long to wait for a message's end, and how often to read it again without a notification. */
export interface AwaitOptions {
  /** The longest wait: past it the await fails with `AwaitTimedOut` (the message is left as it is). */
  readonly timeout: Duration.Input
  /** Read the message again at least this often, heard of or not (default 2 seconds). */
  readonly pollInterval?: Duration.Input | undefined
}

/** Where a message stands for an awaiter: still going (in `state`), or ended with its kept result (JSON, if any). */
type Standing =
  | { readonly _tag: "Pending"; readonly state: MessageInfo["state"]; readonly queue: string }
  | { readonly _tag: "Succeeded"; readonly result: Option.Option<unknown> }

/** The default of {@link AwaitOptions.pollInterval}. */
export const DEFAULT_POLL_MS = 2_000

/** The JSON kept with the acked attempt of a history, if any; the too-large and unstorable markers fail. */
export const keptResultOf = (id: MessageId, history: ReadonlyArray<Attempt>): Effect.Effect<Option.Option<unknown>, ResultUnreadable> => {
  const result = history.findLast((a) => a.outcome === "acked")?.result
  if (isResultUnstorable(result)) {
    return Effect.fail(
      new ResultUnreadable({ messageId: id, reason: "unstorable", message: `the result of message ${id} was not kept: ${result.path} ${result.reason}` })
    )
  }
  if (!isResultTooLarge(result)) return Effect.succeed(Option.fromUndefinedOr(result))
  return Effect.fail(
    new ResultUnreadable({
      messageId: id,
      reason: "too-large",
      message: `the result of message ${id} was ${result.bytes} bytes of JSON, over the ${result.limit}-byte bound: not kept`
    })
  )
}

/**
 * How a message that has no row any more ended, from its history: acked (its result), cancelled,
 * or dead-lettered and then purged. No history: no such message (or its history was pruned).
 */
const endedFromHistory = (store: QueueStoreShape, id: MessageId): Effect.Effect<Standing, AwaitError | ResultUnreadable | StoreError> =>
  Effect.flatMap(store.attempts(id), (history): Effect.Effect<Standing, AwaitError | ResultUnreadable> => {
    const last = history.findLast((a) => a.outcome === "acked" || a.outcome === "cancelled" || a.outcome === "dead-lettered")
    if (last?.outcome === "acked") return Effect.map(keptResultOf(id, history), (result) => ({ _tag: "Succeeded", result }))
    if (last?.outcome === "cancelled") {
      return Effect.fail(new MessageCancelled({ messageId: id, message: `message ${id} was cancelled before it succeeded` }))
    }
    if (last?.outcome === "dead-lettered") {
      return Effect.fail(
        new MessageDeadLettered({
          messageId: id,
          reason: "dead-lettered, then purged",
          lastError: last.error,
          message: `message ${id} was dead-lettered (and since purged): ${last.error ?? "no error recorded"}`
        })
      )
    }
    return Effect.fail(new MessageNotFound({ messageId: id, message: `no message ${id}: never sent, or its history was pruned` }))
  })

/** Where message `id` stands: its row (dead fails the await), else its history. */
const standing = (store: QueueStoreShape, id: MessageId): Effect.Effect<Standing, AwaitError | ResultUnreadable | StoreError> =>
  Effect.flatMap(store.get(id), (info): Effect.Effect<Standing, AwaitError | ResultUnreadable | StoreError> => {
    if (Option.isNone(info)) return endedFromHistory(store, id)
    const m = info.value
    if (m.state !== "dead") return Effect.succeed({ _tag: "Pending", state: m.state, queue: m.queue })
    return Effect.fail(
      new MessageDeadLettered({
        messageId: id,
        reason: m.deadReason ?? "",
        lastError: m.lastError,
        message: `message ${id} was dead-lettered: ${m.deadReason ?? "no reason recorded"}${m.lastError === null ? "" : ` (last error: ${m.lastError})`}`
      })
    )
  })

/**
 * Wait for message `id` to end; succeed with the JSON its acked attempt kept (`None` for none).
 * Fails with `MessageDeadLettered`, `MessageCancelled`, `MessageNotFound`, or `AwaitTimedOut`
 * when it is still going after `timeout`; with `ResultUnreadable` for a result not kept.
 */
export const awaitEnd = (
  store: QueueStoreShape,
  id: MessageId,
  options: AwaitOptions
): Effect.Effect<Option.Option<unknown>, AwaitError | ResultUnreadable | StoreError> =>
  Effect.gen(function*() {
    if (!isMessageId(id)) return yield* new MessageNotFound({ messageId: String(id), message: `${JSON.stringify(String(id))} is not a message id` })
    const timeoutMs = Duration.toMillis(Duration.fromInputUnsafe(options.timeout))
    const pollMs = Duration.toMillis(Duration.fromInputUnsafe(options.pollInterval ?? DEFAULT_POLL_MS))
    // First look: an ended (or unknown) message needs no subscription; a live one names its queue.
    const first = yield* standing(store, id)
    if (first._tag === "Succeeded") return first.result
    let last: MessageInfo["state"] = first.state
    const waited = Effect.scoped(Effect.gen(function*() {
      // Subscribed before the second look: an end after that look is heard.
      const next = yield* store.completions([first.queue])
      const heard: Effect.Effect<void> = Effect.flatMap(next, (event) => event.messageId === id ? Effect.void : heard)
      while (true) {
        const now = yield* standing(store, id)
        if (now._tag === "Succeeded") return now.result
        last = now.state
        yield* Effect.raceFirst(heard, Effect.sleep(pollMs))
      }
    }))
    const ended = yield* Effect.timeoutOption(waited, timeoutMs)
    if (Option.isSome(ended)) return ended.value
    return yield* new AwaitTimedOut({
      messageId: id,
      state: last,
      waitedMs: timeoutMs,
      message: `message ${id} had not ended after ${timeoutMs} ms: it is ${last}`
    })
  })
