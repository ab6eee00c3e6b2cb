/**
 * The admin API's vocabulary: its errors (each with its status), the schemas that decode its
 * inputs (each check carries the rule its 400 states) and the shapes of its answers. Re-exported
 * by `Admin`, which users import.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import * as Validate from "../internal/validate.ts"
import { Attempt, MessageInfo, MessageState } from "../Message.ts"

// ---------------------------------------------------------------------------
// Errors

/** 400: an input failed its schema or a store check; `field` names it, `rule` says what is allowed. */
export class BadRequest extends Schema.TaggedError<BadRequest>()("BadRequest", {
  field: Schema.String,
  rule: Schema.String,
  message: Schema.String
}, { httpApiStatus: 400 }) {}

/** 401: a route without `Authorization: Bearer <token>` while a token is set, or with a wrong token. */
export class Unauthorized extends Schema.TaggedError<Unauthorized>()("Unauthorized", {
  message: Schema.String
}, { httpApiStatus: 401 }) {}

/** 403: no admin token is configured: changes over HTTP are off, and reads too on a server reachable from elsewhere. */
export class Forbidden extends Schema.TaggedError<Forbidden>()("Forbidden", {
  message: Schema.String
}, { httpApiStatus: 403 }) {}

/** 404: no message has this id (finished and deleted, or never sent). */
export class NotFound extends Schema.TaggedError<NotFound>()("NotFound", {
  message: Schema.String
}, { httpApiStatus: 404 }) {}

/** 503: the database failed or is unreachable (the message is redacted: no URL, no password). */
export class Unavailable extends Schema.TaggedError<Unavailable>()("Unavailable", {
  message: Schema.String
}, { httpApiStatus: 503 }) {}

// ---------------------------------------------------------------------------
// Inputs: each check carries the rule its 400 states.

/** The largest message id: ids are PostgreSQL `bigint` (int8). */
const maxMessageId = 9_223_372_036_854_775_807n
const idRule = `a message id: a whole number from 1 to ${maxMessageId}`
const limitRule = "a whole number from 1 to 1000"

/** A queue name in a path or body. */
export const QueueName = Schema.String.check(Schema.isPattern(Validate.namePattern, { message: Validate.nameRule }))
/** A task name in a body. */
export const TaskName = QueueName
const idPattern = /^[1-9][0-9]{0,18}$/
/** A message id in a path, query or body: 19 digits can still exceed int8, which the database would refuse (a 503). */
export const MessageIdInput = Schema.String.check(
  Schema.isPattern(idPattern, { message: idRule }),
  // Only a number of the pattern is compared: text that fails it has its one issue already.
  Schema.makeFilter((text: string) => !idPattern.test(text) || BigInt(text) <= maxMessageId, { message: idRule })
).pipe(Schema.brand("leasehold/MessageId"))
/** A page size in a query: decimal text, 1 to 1000. */
export const Limit = Schema.String.check(Schema.isPattern(/^(?:1000|[1-9][0-9]{0,2})$/, { message: limitRule }))
/** A message state in a query. */
export const StateInput = MessageState.annotate({ message: "one of ready, delayed, in-flight, dead" })
/** Message ids in a body: 1 to 1000 of them. */
export const Ids = Schema.Array(MessageIdInput).check(Schema.isBetweenLength(1, 1000, { message: "1 to 1000 message ids" }))

/** Which dead letters redrive and purge act on: exactly one of `queue`, `ids` or `all: true`. */
export const DeadLetterSelection = Schema.Struct({
  queue: Schema.optionalKey(QueueName),
  ids: Schema.optionalKey(Ids),
  all: Schema.optionalKey(Schema.Boolean)
})

// ---------------------------------------------------------------------------
// Outputs

/** A queue as the admin API lists it: its counts and whether it is paused. */
export const QueueRow = Schema.Struct({
  queue: Schema.String,
  ready: Schema.Number,
  delayed: Schema.Number,
  inFlight: Schema.Number,
  dead: Schema.Number,
  oldestReadyAgeMs: Schema.Number,
  paused: Schema.Boolean,
  pausedAt: Schema.NullOr(Schema.Date)
})

/** A registered consumer (see `ConsumerPresence.listConsumers`). */
export const ConsumerRow = Schema.Struct({
  id: Schema.String,
  host: Schema.String,
  pid: Schema.Number,
  startedAt: Schema.Date,
  heartbeatAt: Schema.Date,
  heartbeatAgeMs: Schema.Number,
  inFlight: Schema.Number,
  sessionLiveness: Schema.Boolean,
  /** What it runs with, from its heartbeat (null: a consumer of an older version). */
  settings: Schema.NullOr(Schema.Struct({ queues: Schema.Array(Schema.String), concurrency: Schema.Number, leaseMs: Schema.Number }))
})

/** One message with its attempt history, oldest first. */
export const MessageDetail = Schema.Struct({ message: MessageInfo, attempts: Schema.Array(Attempt) })

/** A page of messages; `next` is the `after` of the next page, `null` on the last one. */
export const MessagePage = Schema.Struct({ messages: Schema.Array(MessageInfo), next: Schema.NullOr(Schema.String) })

/** What a cancel did: one result per message found; `unknown` lists the ids of no message. */
export const CancelOutcome = Schema.Struct({
  results: Schema.Array(Schema.Struct({ id: Schema.String, result: Schema.Literals(["cancelled", "cancelling"]) })),
  unknown: Schema.Array(Schema.String)
})

/** The counters only leasehold has, from this process's metrics (zero in a process running no consumer). */
export const Counters = Schema.Struct({
  /** Leases lost, by reason (reclaimed, renewals-failing, renewer-failed, local-deadline). */
  leasesLost: Schema.Record(Schema.String, Schema.Number),
  doubleRuns: Schema.Number,
  reaped: Schema.Number,
  wedgedRenewers: Schema.Number,
  renewalFailures: Schema.Number,
  finishFailures: Schema.Number,
  claimed: Schema.Number,
  acked: Schema.Number,
  retried: Schema.Number,
  deadLettered: Schema.Number,
  released: Schema.Number,
  /** Running messages whose handlers were interrupted by an operator's cancel. */
  cancelled: Schema.Number
})

// ---------------------------------------------------------------------------
// Flow control (docs/flow-control.md): the bounds are checked by `FlowControl.validateLimits`,
// whose refusal is the 400 (naming the field and the rule); the schemas say the shapes.

/** A rate as stored: at most `count` starts in any window of `periodMs` milliseconds. */
export const RateRow = Schema.Struct({ count: Schema.Number, periodMs: Schema.Number })

/** A rate in a body: `{ count, periodMs }`, or text as the CLI takes it (`"100/1m"`, `"5/1s"`, `"10/250ms"`). */
export const RateInput = Schema.Union([RateRow, Schema.String])

/**
 * The body of `PUT /api/queues/:queue/limits`: the limits to store (replacing the stored ones;
 * none: cleared), and the task they are of (or `?task=` in the query). Unknown fields are refused.
 */
export const LimitsInput = Schema.Struct({
  task: Schema.optionalKey(TaskName),
  concurrency: Schema.optionalKey(Schema.NullOr(Schema.Number)),
  rate: Schema.optionalKey(Schema.NullOr(RateInput)),
  keyConcurrency: Schema.optionalKey(Schema.NullOr(Schema.Number)),
  keyRate: Schema.optionalKey(Schema.NullOr(RateInput)),
  fifo: Schema.optionalKey(Schema.Boolean),
  fair: Schema.optionalKey(Schema.Boolean)
})

/** The body of `PUT /api/queues/:queue/weight`: a key's weight in fair claiming. */
export const WeightInput = Schema.Struct({ key: Schema.String, weight: Schema.Number })

/** Limits as stored: the absent ones left out. */
export const LimitsView = Schema.Struct({
  concurrency: Schema.optionalKey(Schema.Number),
  rate: Schema.optionalKey(RateRow),
  keyConcurrency: Schema.optionalKey(Schema.Number),
  keyRate: Schema.optionalKey(RateRow),
  fifo: Schema.optionalKey(Schema.Boolean),
  fair: Schema.optionalKey(Schema.Boolean)
})

/** The stored limits of a queue (`task: null`) or of one task in it, who wrote them and when. */
export const LimitsRow = Schema.Struct({
  queue: Schema.String,
  task: Schema.NullOr(Schema.String),
  limits: LimitsView,
  source: Schema.Literals(["code", "operator"]),
  updatedAt: Schema.Date
})

/** What holds a queue back now (`QueueStore.flowStatus`); each list holds at most 100. */
export const FlowStatusRow = Schema.Struct({
  queue: Schema.String,
  limits: Schema.Array(LimitsRow),
  inFlight: Schema.Number,
  keysAtLimit: Schema.Array(Schema.Struct({ key: Schema.String, inFlight: Schema.Number })),
  blockedKeys: Schema.Array(Schema.Struct({
    key: Schema.String,
    headId: Schema.String,
    attempts: Schema.Number,
    lastError: Schema.NullOr(Schema.String),
    visibleAt: Schema.Date
  })),
  throttles: Schema.Array(Schema.Struct({ task: Schema.NullOr(Schema.String), key: Schema.NullOr(Schema.String), nextAt: Schema.Date }))
})
