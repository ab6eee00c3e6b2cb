/**
 * The shapes of the dashboard's routes of the admin API (issue 31): fleet-wide figures
 * (throughput per minute, depth history), search, bulk actions, retry now and schedules.
 * Each input check carries the rule its 400 states. Re-exported by `Admin`.
 *
 * @since 0.5.0
 */
import { Schema } from "effect"
import { bulkActions } from "../Insights.ts"
import { MessageIdInput, QueueName, StateInput, TaskName } from "./adminSchema.ts"

/** A window in minutes in a query: decimal text, 1 to 1440 (a day). */
export const MinutesInput = Schema.String.check(
  Schema.isPattern(/^(?:1440|14[0-3][0-9]|1[0-3][0-9]{2}|[1-9][0-9]{0,2})$/, { message: "a whole number of minutes from 1 to 1440" })
)

/** A bulk action in a path. */
export const BulkActionInput = Schema.Literals(bulkActions).annotate({ message: "one of redrive, purge, cancel, retry" })

/** A flow key in a query or body (any text up to 200 characters, as a send takes it). */
const KeyInput = Schema.String.check(Schema.isMaxLength(200, { message: "at most 200 characters" }))
/** A payload criterion, `customer.id = 42` (checked by `Insights.parsePayloadMatch`). */
const PayloadInput = Schema.String.check(Schema.isMaxLength(2000, { message: "at most 2000 characters" }))

/** The criteria of a search, a count and a bulk action; each narrows the selection. */
export const FilterFields = {
  queue: Schema.optionalKey(QueueName),
  task: Schema.optionalKey(TaskName),
  state: Schema.optionalKey(StateInput),
  key: Schema.optionalKey(KeyInput),
  /** Ids from this one (inclusive). */
  from: Schema.optionalKey(MessageIdInput),
  /** Ids up to this one (inclusive). */
  to: Schema.optionalKey(MessageIdInput),
  /** `<path> = <value>`: a payload field and the value it must have. */
  payload: Schema.optionalKey(PayloadInput)
}

/** A bulk action's body: the filter, and the count the operator confirmed (logged beside what it did). */
export const BulkInput = Schema.Struct({
  ...FilterFields,
  confirmed: Schema.optionalKey(Schema.Number)
})

/** Finished attempts of one task in one minute, by how they ended. */
export const ThroughputRowSchema = Schema.Struct({
  minute: Schema.Date,
  queue: Schema.String,
  task: Schema.String,
  completed: Schema.Number,
  retried: Schema.Number,
  deadLettered: Schema.Number,
  leaseLost: Schema.Number,
  cancelled: Schema.Number
})

/**
 * `GET /api/stats/throughput`: the window (its minutes up to `now`) and its rows, oldest minute
 * first; `available` false (and no rows) over a store without the figures (the memory store).
 */
export const ThroughputAnswer = Schema.Struct({
  now: Schema.Date,
  minutes: Schema.Number,
  available: Schema.Boolean,
  rows: Schema.Array(ThroughputRowSchema)
})

/** One queue's depths at one sample. */
export const DepthSampleSchema = Schema.Struct({
  at: Schema.Date,
  queue: Schema.String,
  ready: Schema.Number,
  delayed: Schema.Number,
  inFlight: Schema.Number,
  dead: Schema.Number,
  oldestReadyAgeMs: Schema.Number
})

/** `GET /api/stats/depth`: the samples of the window, oldest first, and how often they are taken; `available` as above. */
export const DepthAnswer = Schema.Struct({
  now: Schema.Date,
  minutes: Schema.Number,
  available: Schema.Boolean,
  everyMs: Schema.Number,
  samples: Schema.Array(DepthSampleSchema)
})

/** `GET /api/bulk/:action/count`: how many messages the action would touch now. */
export const BulkCount = Schema.Struct({ action: BulkActionInput, count: Schema.Number })

/** `POST /api/bulk/:action`: what it did; `more` when the batch cap stopped it (run it again). */
export const BulkOutcomeSchema = Schema.Struct({
  action: BulkActionInput,
  touched: Schema.Number,
  batches: Schema.Number,
  more: Schema.Boolean
})

/** A stored schedule, with whether a running worker still declares it (`seen`; the CLI's NOT SEEN otherwise). */
export const ScheduleRow = Schema.Struct({
  key: Schema.String,
  cron: Schema.String,
  tz: Schema.String,
  queue: Schema.String,
  task: Schema.String,
  payload: Schema.Unknown,
  lastSlot: Schema.Date,
  nextSlot: Schema.NullOr(Schema.Date),
  firedAt: Schema.NullOr(Schema.Date),
  lastSeenAt: Schema.Date,
  lastSeenBy: Schema.String,
  seen: Schema.Boolean
})

/** `POST /api/schedules/:key/trigger`: the message sent (or the one its dedup key found). */
export const TriggerOutcome = Schema.Struct({ key: Schema.String, id: Schema.String, deduplicated: Schema.Boolean })
