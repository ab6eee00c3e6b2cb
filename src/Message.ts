/**
 * Messages, claims and the inputs that create them.
 *
 * @since 0.1.0
 */
import type { Duration } from "effect"
import { Schema } from "effect"

/** The id of a message: a decimal string (a `bigint` in the database), stable across redrives. */
export const MessageId = Schema.String.pipe(Schema.brand("leasehold/MessageId"))
/** @see {@link MessageId} */
export type MessageId = typeof MessageId.Type

/**
 * The fencing token of one claim of one message. Every renew, ack, release,
 * retry and dead-letter matches `(id, token)`: a holder whose lease was taken
 * over matches nothing.
 */
export const LeaseToken = Schema.String.pipe(Schema.brand("leasehold/LeaseToken"))
/** @see {@link LeaseToken} */
export type LeaseToken = typeof LeaseToken.Type

/** A message as stored: what a consumer gets to decide what to run. */
export const Message = Schema.Struct({
  id: MessageId,
  queue: Schema.String,
  task: Schema.String,
  payload: Schema.Unknown,
  headers: Schema.Record(Schema.String, Schema.String),
  priority: Schema.Int,
  attempts: Schema.Int,
  maxAttempts: Schema.Int,
  enqueuedAt: Schema.Date,
  dedupKey: Schema.NullOr(Schema.String),
  lastError: Schema.NullOr(Schema.String),
  /** Claims of this message that ended because the lease ran out (the holder died or hung). */
  leaseExpiries: Schema.Int,
  /**
   * The flow key given at send (a tenant, an account): what per-key limits, fair claiming and
   * FIFO order go by. Set by both stores (`null` for none); optional for messages built by hand.
   */
  key: Schema.optionalKey(Schema.NullOr(Schema.String))
})
/** @see {@link Message} */
export type Message = typeof Message.Type

/**
 * A claimed message: the message plus the lease that hides it from other
 * consumers until `leaseExpiresAt`, and the token that fences every write.
 */
export const Claim = Schema.Struct({
  ...Message.fields,
  leaseToken: LeaseToken,
  leaseExpiresAt: Schema.Date,
  consumer: Schema.String,
  /**
   * When the message became ready before this claim (sent, its delay or retry
   * backoff over, or its previous lease expired), on the store's clock: the
   * wait-time metric counts from here. Set by both stores; optional for claims
   * built by hand.
   */
  readyAt: Schema.optionalKey(Schema.Date)
})
/** @see {@link Claim} */
export type Claim = typeof Claim.Type

/** The part of a claim that fenced writes need: which message, which lease. */
export interface ClaimRef {
  readonly id: MessageId
  readonly leaseToken: LeaseToken
}

/** Convenience: the fencing reference of a claim. */
export const claimRef = (claim: ClaimRef): ClaimRef => ({ id: claim.id, leaseToken: claim.leaseToken })

/**
 * What a producer sends. `payload` must be JSON-encodable. Lower `priority`
 * numbers run first (default 0). `delay` (milliseconds) hides the message until
 * due. A `dedupKey` makes `send` return the id of a live message of the same
 * queue with that key instead of enqueueing another.
 */
export interface NewMessage {
  readonly task: string
  readonly payload: unknown
  readonly headers?: Readonly<Record<string, string>> | undefined
  readonly priority?: number | undefined
  readonly delay?: number | undefined
  readonly maxAttempts?: number | undefined
  readonly dedupKey?: string | undefined
  /**
   * The flow key (a tenant id, an account): per-key concurrency and rate limits, fair claiming
   * and FIFO order go by it (see `FlowControl`). 1 to 200 characters, no control characters.
   */
  readonly key?: string | undefined
  /**
   * Reserve `key` on the queue for `for` (a duration) from now, whatever happens to the
   * message (acked, dead-lettered, purged): a send with the same key inside the window
   * returns this message's id with `deduplicated: true`. Not with `dedupKey`.
   */
  readonly unique?: UniqueWindow | undefined
}

/** A uniqueness window: the key, and how long after the send it stays reserved. */
export interface UniqueWindow {
  readonly key: string
  readonly for: Duration.Input
}

/**
 * The outcome of sending one message: its id, and whether a duplicate was found instead
 * (a live message with its `dedupKey`, or the holder of its `unique` key's window).
 */
export interface SendResult {
  readonly id: MessageId
  readonly deduplicated: boolean
}

/** A dead-lettered message: kept with its payload, why it died and when. */
export const DeadLetter = Schema.Struct({
  ...Message.fields,
  reason: Schema.String,
  deadAt: Schema.Date
})
/** @see {@link DeadLetter} */
export type DeadLetter = typeof DeadLetter.Type

/** Counts of one queue, for dashboards and the `stats` command. */
export interface QueueStats {
  readonly queue: string
  /** Visible now: a consumer would get these on its next claim. */
  readonly ready: number
  /** Waiting for their delay or retry backoff. */
  readonly delayed: number
  /** Leased by a consumer, lease not expired. */
  readonly inFlight: number
  /** Dead-lettered. */
  readonly dead: number
  /** Age in milliseconds of the oldest ready message, 0 when none. */
  readonly oldestReadyAgeMs: number
}

/**
 * A queue as operators list it (`QueueStore.queues`): its counts, and whether it is paused
 * (claimed by no consumer; messages still accepted, in-flight ones finish normally).
 */
export interface QueueInfo extends QueueStats {
  readonly paused: boolean
  /** When it was paused; `null` when it is not. */
  readonly pausedAt: Date | null
}

/**
 * What a cancel did to one message: `cancelled` (it was ready, delayed or dead: removed at
 * once, its history records `cancelled`) or `cancelling` (it is running: flagged, and its
 * consumer, notified, stops the handler and removes it; at its next lease renewal should the
 * notification be lost).
 */
export interface CancelResult {
  readonly id: MessageId
  readonly result: "cancelled" | "cancelling"
}

/** How an attempt ended, as kept in the attempt history. */
export const AttemptOutcome = Schema.Literals([
  "acked",
  "retried",
  "dead-lettered",
  "released",
  "lease-lost",
  "lease-expired",
  "redriven",
  "cancelled"
])
/** @see {@link AttemptOutcome} */
export type AttemptOutcome = typeof AttemptOutcome.Type

/** One attempt of one message: who ran it, when, and how it ended. */
export const Attempt = Schema.Struct({
  messageId: MessageId,
  queue: Schema.String,
  task: Schema.String,
  attempt: Schema.Int,
  consumer: Schema.String,
  startedAt: Schema.Date,
  endedAt: Schema.Date,
  outcome: AttemptOutcome,
  error: Schema.NullOr(Schema.String),
  /**
   * What the handler returned, encoded through its task's success schema (JSON): only on a
   * run of a task with a success schema that returned something (not undefined or null).
   * Pruned with the rest of the record. Over 64 KiB it is the marker {@link isResultTooLarge} tells.
   */
  result: Schema.optionalKey(Schema.Unknown)
})
/** @see {@link Attempt} */
export type Attempt = typeof Attempt.Type

/**
 * Whether an attempt's `result` is the marker kept instead of a result over 64 KiB of JSON
 * (`{ leasehold: "result-too-large", bytes, limit }`): the run succeeded, its value was not kept.
 */
export const isResultTooLarge = (result: unknown): result is { readonly leasehold: "result-too-large"; readonly bytes: number; readonly limit: number } =>
  typeof result === "object" && result !== null && (result as { leasehold?: unknown }).leasehold === "result-too-large"

/**
 * Whether an attempt's `result` is the marker kept instead of a result PostgreSQL's jsonb cannot
 * store (`{ leasehold: "result-unstorable", path, reason }`: a NUL character or a lone UTF-16
 * surrogate in the string or key at `path`): the run succeeded and was acked, its value was not kept.
 */
export const isResultUnstorable = (result: unknown): result is { readonly leasehold: "result-unstorable"; readonly path: string; readonly reason: string } =>
  typeof result === "object" && result !== null && (result as { leasehold?: unknown }).leasehold === "result-unstorable"

/**
 * Where a message stands, as `stats` counts it: `ready` (claimable now, an expired lease
 * included), `delayed` (waiting for its delay or retry backoff), `in-flight` (leased, lease
 * not expired), `dead` (dead-lettered).
 */
export const MessageState = Schema.Literals(["ready", "delayed", "in-flight", "dead"])
/** @see {@link MessageState} */
export type MessageState = typeof MessageState.Type

/** A message as `get` and `messages` show it, live or dead: the message and where it stands. */
export const MessageInfo = Schema.Struct({
  ...Message.fields,
  state: MessageState,
  /**
   * When it became or becomes visible (ready, delayed) or its lease expires (in flight);
   * `null` when dead.
   */
  visibleAt: Schema.NullOr(Schema.Date),
  /** The consumer holding the lease, while in flight; `null` otherwise. */
  leasedBy: Schema.NullOr(Schema.String),
  /** When the current claim was taken, while in flight (how long it has run); `null` otherwise. */
  leasedAt: Schema.NullOr(Schema.Date),
  /**
   * When an operator asked to cancel it while in flight: its consumer stops the handler and
   * deletes it (at its next renewal, sooner when told at once); `null` otherwise.
   */
  cancelRequestedAt: Schema.NullOr(Schema.Date),
  /** Why it was dead-lettered, when dead. */
  deadReason: Schema.NullOr(Schema.String),
  /** When it was dead-lettered, when dead. */
  deadAt: Schema.NullOr(Schema.Date),
  /**
   * The last progress a handler of it reported (`HandlerContext.progress`, JSON), kept across
   * its retries; `null` when none has. Optional for infos built by hand.
   */
  progress: Schema.optionalKey(Schema.NullOr(Schema.Unknown)),
  /** When that progress was written, on the store's clock; `null` when none. */
  progressAt: Schema.optionalKey(Schema.NullOr(Schema.Date))
})
/** @see {@link MessageInfo} */
export type MessageInfo = typeof MessageInfo.Type
