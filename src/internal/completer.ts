/**
 * Completing a message: the last step of a claim, after its handler ended and
 * its renewer let go of it. Writes the decided outcome (ack, retry,
 * dead-letter, release) fenced by the lease token, retries connection-dead
 * failures only while the lease still covers the message, bounds every
 * attempt, and reports the result: metrics, one log line, the attempt history.
 */
import { Cause, Clock, Effect, Metric, Option } from "effect"
import type { Claim } from "../Message.ts"
import { ConnectionDead, type StoreError } from "../QueueError.ts"
import * as QueueMetrics from "../QueueMetrics.ts"
import type { QueueStoreShape } from "../QueueStore.ts"
import * as Abandon from "./abandon.ts"
import { MAX_DELAY_MS } from "./validate.ts"
import { seconds } from "./format.ts"
import * as Outcome from "./outcome.ts"

/** What the completer needs to know about the consumer it works for. */
export interface CompleterOptions {
  readonly store: QueueStoreShape
  readonly consumerId: string
  /** The longest one attempt of a finishing write (or of its history record) may take. */
  readonly attemptTimeoutMs: number
}

/** One finished run, ready to be written. */
export interface Finished {
  readonly claim: Claim
  readonly action: Outcome.Action
  /** Clock time the run started (for the history). */
  readonly startedAt: number
  /** When this consumer's lease of the message ends as far as it knows (Clock ms). */
  readonly leaseEndsAt: number
}

/** The outcome of a finishing write: the lease was held (`true`), was gone (`false`), or the write failed. */
export type Held = boolean | "failed"

/** The completer of one consumer. */
export interface Completer {
  /**
   * Write and report the outcome of one finished run. Never fails and never
   * dies; returns within the lease (each attempt is bounded, and a failing
   * write is given up when the lease runs out: the message then runs again
   * elsewhere, as after a crash).
   */
  readonly complete: (finished: Finished) => Effect.Effect<Held>
}

/**
 * An action the store will accept: a retry delay that is not a finite number
 * from 0 to the store's limit (a bad custom retry policy) is clamped, and said so.
 */
export const sanitize = (action: Outcome.Action): { readonly action: Outcome.Action; readonly problem?: string } => {
  if (action._tag !== "Retry") return { action }
  const delayMs = action.delayMs
  if (Number.isFinite(delayMs) && delayMs >= 0 && delayMs <= MAX_DELAY_MS) return { action }
  const clamped = Number.isNaN(delayMs) || delayMs < 0 ? 0 : MAX_DELAY_MS
  return {
    action: { ...action, delayMs: clamped },
    problem: `retry delay ${delayMs} ms is not a duration from 0 to ${MAX_DELAY_MS} ms; retrying in ${clamped} ms instead`
  }
}

const FIRST_RETRY_MS = 100
const MAX_RETRY_MS = 2_000

/** Make the completer of one consumer. */
export const make = (options: CompleterOptions): Completer => {
  const { store, consumerId, attemptTimeoutMs } = options

  /** The store call of an action, or `undefined` when nothing is to be written. */
  const statement = (claim: Claim, action: Outcome.Action): Effect.Effect<boolean, StoreError> | undefined => {
    switch (action._tag) {
      case "Ack":
        return store.ack(claim)
      case "Retry":
        return store.retry(claim, { delay: action.delayMs, error: action.error })
      case "DeadLetter":
        return store.deadLetter(claim, { reason: action.reason, error: action.error })
      case "Release":
        return store.release(claim)
      case "Abandon":
        return undefined
    }
  }

  /**
   * A finishing write, fenced by the lease token. Each attempt is bounded by
   * `attemptTimeoutMs`; an attempt that times out may or may not have landed
   * and counts as connection-dead. Connection-dead failures are retried with
   * backoff while the lease still covers the message: until then nobody else
   * can run it, so waiting is safe and a backend-kill storm does not turn into
   * duplicate runs. Any other failure, or a defect, is final. So a write takes
   * at most the time left on the lease plus one attempt. (An attempt after the
   * lease ran out is harmless: fenced, it lands only if nobody claimed since.)
   */
  const fencedWrite = (f: Finished, name: string, write: Effect.Effect<boolean, StoreError>): Effect.Effect<Held> => {
    const attempt = (delay: number): Effect.Effect<Held> =>
      Abandon.within(write, attemptTimeoutMs).pipe(
        Effect.flatMap(Option.match({
          onNone: () => Effect.fail(new ConnectionDead({ operation: name, message: `${name}: no answer within ${seconds(attemptTimeoutMs)}` })),
          onSome: Effect.succeed
        })),
        Effect.catchTag("ConnectionDead", (error) =>
          Effect.gen(function*() {
            const now = yield* Clock.currentTimeMillis
            if (now + delay >= f.leaseEndsAt) return yield* error
            yield* Effect.logWarning(`${name} failed, connection dead; retrying in ${delay}ms: ${error.message}`)
            yield* Effect.sleep(delay)
            return yield* attempt(Math.min(delay * 2, MAX_RETRY_MS))
          })),
        Effect.catch((error) =>
          Effect.gen(function*() {
            yield* Metric.update(QueueMetrics.finishFailures, 1)
            yield* Effect.logError(`${name} could not be written; the message runs again after its lease: ${error.message}`)
            return "failed" as const
          })
        )
      )
    return attempt(FIRST_RETRY_MS).pipe(Effect.withSpan(`leasehold.${name}`))
  }

  /** Metrics and one log line for a written outcome. */
  const announce = (action: Outcome.Action, held: Held) =>
    Effect.gen(function*() {
      switch (action._tag) {
        case "Ack":
          if (held === true) yield* Metric.update(QueueMetrics.acked, 1)
          if (held === false) {
            yield* Metric.update(QueueMetrics.doubleRuns, 1)
            yield* Effect.logWarning("double run: the ack found the lease gone; another consumer has taken this message")
          }
          break
        case "Retry":
          if (held === true) {
            yield* Metric.update(QueueMetrics.retried, 1)
            yield* Effect.logWarning(`retry in ${seconds(action.delayMs)}:\n${action.error}`)
          }
          break
        case "DeadLetter":
          if (held === true) {
            yield* Metric.update(QueueMetrics.deadLettered, 1)
            yield* Effect.logWarning(`dead-lettered: ${action.reason}${action.error === undefined ? "" : `\n${action.error}`}`)
          }
          break
        case "Release":
          if (held === true) {
            yield* Metric.update(QueueMetrics.released, 1)
            yield* Effect.logInfo("released on shutdown")
          }
          break
        case "Abandon":
          yield* Effect.logError("handler stopped: another consumer holds the message now")
          break
      }
    })

  /** The attempt's record in the history: best effort, bounded like the write. */
  const record = (f: Finished, held: Held) =>
    Effect.gen(function*() {
      const { action, claim } = f
      const error = action._tag === "Abandon"
        ? action.error
        : action._tag === "Retry" || action._tag === "DeadLetter"
        ? (action.error ?? (action._tag === "DeadLetter" ? action.reason : null))
        : held === "failed"
        ? "the finishing write failed"
        : null
      const recorded = yield* Abandon.within(
        store.recordAttempt({
          messageId: claim.id,
          queue: claim.queue,
          task: claim.task,
          attempt: claim.attempts,
          consumer: consumerId,
          startedAt: new Date(f.startedAt),
          endedAt: new Date(yield* Clock.currentTimeMillis),
          outcome: Outcome.historyOutcome(action, held === true),
          error
        }),
        attemptTimeoutMs
      )
      if (Option.isNone(recorded)) yield* Effect.logWarning(`attempt history not recorded: no answer within ${seconds(attemptTimeoutMs)}`)
    }).pipe(Effect.catch((e) => Effect.logWarning(`attempt history not recorded: ${e.message}`)))

  /**
   * A defect while completing (a bug, a retry delay the store refuses) must not
   * leave the message leased silently: report it at ERROR and hand the message
   * back for a retry now, the attempt counted (so a defect that repeats ends in
   * dead letters once the attempts are used up, never in a loop).
   */
  const onDefect = (f: Finished, cause: Cause.Cause<unknown>) =>
    Effect.gen(function*() {
      yield* Metric.update(QueueMetrics.finishFailures, 1)
      const error = `completing the message failed (a bug); retrying it now:\n${Cause.pretty(cause)}`
      yield* Effect.logError(error)
      const action: Outcome.Action = { _tag: "Retry", delayMs: 0, error }
      const held = yield* fencedWrite(f, "retry", store.retry(f.claim, { delay: 0, error })).pipe(
        Effect.catchCause(() => Effect.succeed<Held>("failed"))
      )
      yield* record({ ...f, action }, held).pipe(Effect.catchCause(() => Effect.void))
      return "failed" as const
    })

  return {
    complete: (finished) =>
      Effect.gen(function*() {
        const { action, problem } = sanitize(finished.action)
        if (problem !== undefined) yield* Effect.logError(`bad retry policy: ${problem}`)
        const f = { ...finished, action }
        const write = statement(f.claim, f.action)
        const held: Held = write === undefined ? false : yield* fencedWrite(f, f.action._tag === "DeadLetter" ? "deadLetter" : f.action._tag.toLowerCase(), write)
        yield* announce(f.action, held)
        yield* record(f, held)
        return held
      }).pipe(Effect.catchCause((cause) => onDefect(finished, cause)))
  }
}
