/**
 * The typed errors of leasehold, and the classification of database failures
 * into the one kind worth retrying ({@link ConnectionDead}) and the rest
 * ({@link QueryFailed}).
 *
 * @since 0.1.0
 */
import { Cause, Effect, Schema } from "effect"
import * as SqlError from "effect/sql/SqlError"
import { redactSecrets } from "./internal/redact.ts"

/**
 * The connection or the server went away (SQLSTATE class 08, 57P01-57P03,
 * ECONNRESET, ECONNREFUSED, EPIPE, ETIMEDOUT, EHOSTUNREACH, ENETUNREACH,
 * "Connection terminated"), or the server refused a new connection (class 53
 * at connect: 53300 too many connections, per server or per role; 57P03). The
 * statement may or may not have run.
 * Retry it when it is safe to: every leasehold write is fenced, so a retried
 * renew or ack never touches someone else's lease.
 */
export class ConnectionDead extends Schema.TaggedError<ConnectionDead>()("ConnectionDead", {
  operation: Schema.String,
  message: Schema.String,
  code: Schema.optional(Schema.String)
}) {
  /** Connection-dead errors are the only ones leasehold retries. */
  get retryable(): true {
    return true
  }
}

/**
 * The database answered, and the answer was an error: a bug, a bad statement,
 * a constraint, a timeout. Never retried as if it were a blip.
 */
export class QueryFailed extends Schema.TaggedError<QueryFailed>()("QueryFailed", {
  operation: Schema.String,
  message: Schema.String,
  code: Schema.optional(Schema.String)
}) {
  /** A failed query is not retried by leasehold. */
  get retryable(): false {
    return false
  }
}

/**
 * Input refused before anything was written: a bad queue or task name, a
 * payload that cannot be encoded as JSON or is over the size limit, a negative
 * delay. `field` names the input, `rule` the rule it broke.
 */
export class InvalidInput extends Schema.TaggedError<InvalidInput>()("InvalidInput", {
  field: Schema.String,
  rule: Schema.String,
  message: Schema.String
}) {}

/** A failure of the storage layer: the only errors a `QueueStore` operation fails with. */
export type StoreError = ConnectionDead | QueryFailed

const connectionDeadCodes = new Set([
  "57P01", // admin_shutdown: backend terminated (pg_terminate_backend)
  "57P02", // crash_shutdown
  "57P03", // cannot_connect_now: server starting or shutting down
  "ECONNRESET",
  "ECONNREFUSED",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EAI_AGAIN"
])

const connectionDeadMessage = /connection (terminated|closed|ended|lost)|socket hang up|server closed the connection/i

/** Five digits or upper-case letters; Node's errno codes (EPIPE, ECONNRESET, ...) all start with E. */
const isSqlState = (code: string): boolean => /^[0-9A-Z]{5}$/.test(code) && !code.startsWith("E")

const codeOf = (cause: unknown): string | undefined => {
  if (typeof cause === "object" && cause !== null && "code" in cause) {
    const code = (cause as { readonly code: unknown }).code
    return typeof code === "string" ? code : undefined
  }
  return undefined
}

const messageOf = (error: SqlError.SqlError): string => {
  const reason = error.reason
  const cause = reason.cause
  const causeMessage = cause instanceof Error ? cause.message : typeof cause === "string" ? cause : ""
  return [reason.message, causeMessage].filter((s) => s !== undefined && s !== "").join(": ") || reason._tag
}

/**
 * Whether the server refused to open a connection for want of resources: SQLSTATE class 53 in
 * its answer to the startup message (53300 too many connections, for the server or for the
 * role). The driver reports those as `UnknownError` with `operation: "connect"` (the startup's
 * ErrorResponse; statements report `operation: "query"`), so a class-53 error of a statement
 * (53100 disk full, 53200 out of memory while it ran) is not one: the server took the
 * statement and failed it, which is the statement's failure, not a dead connection.
 */
const refusedAtConnect = (error: SqlError.SqlError, code: string | undefined): boolean =>
  error.reason.operation === "connect" && code !== undefined && code.startsWith("53")

/**
 * The driver's own refusals of its configuration, which it reports as a `ConnectionError` at
 * connect on every attempt: a URL it cannot parse (`ERR_INVALID_URL`, a scheme, port,
 * percent-encoding, sslmode or connect_timeout it does not take), no user name, a bad startup
 * parameter. Nothing about the connection: retrying cannot help. (`QueueConfig.pgLayer` refuses
 * such a URL at start with `ConfigInvalid`; this covers a client built another way.)
 */
const driverConfigMessage =
  /^PgConnection: (Invalid connection URL|Unsupported connection URL protocol|Invalid port in URL|Invalid percent-encoding in URL|Unrecognized sslmode|Invalid connect_timeout|No username configured|Reserved startup parameter|Startup parameter)/

const isDriverConfigError = (error: SqlError.SqlError): boolean =>
  error.reason.operation === "connect" &&
  (codeOf(error.reason.cause) === "ERR_INVALID_URL" || driverConfigMessage.test(error.reason.message ?? ""))

/**
 * Whether a `SqlError` means the connection or server is gone, or that the
 * server refused a new connection (which is as dead for the caller). The driver
 * maps only SQLSTATE class 08 to `ConnectionError`; a terminated backend
 * (57P01), a server shutting down (57P03) and a refused connection (53300 at
 * connect) arrive as `UnknownError`, so the reason tag, its operation and the
 * underlying code are read.
 */
export const isConnectionDead = (error: SqlError.SqlError): boolean => {
  if (error.reason._tag === "ConnectionError") return !isDriverConfigError(error)
  const code = codeOf(error.reason.cause)
  if (code !== undefined && (code.startsWith("08") || connectionDeadCodes.has(code))) return true
  if (refusedAtConnect(error, code)) return true
  // Any other SQLSTATE is the server's answer: its text may quote data ("invalid input syntax
  // for type integer: \"connection closed\""), so the message is read only when there is none.
  if (code !== undefined && isSqlState(code)) return false
  return connectionDeadMessage.test(messageOf(error))
}

/** Turn a `SqlError` into {@link ConnectionDead} or {@link QueryFailed}, with secrets redacted. */
export const classifySqlError = (operation: string, error: SqlError.SqlError): StoreError => {
  const code = codeOf(error.reason.cause)
  const fields = {
    operation,
    message: redactSecrets(`${operation}: ${messageOf(error)}`),
    ...(code === undefined ? {} : { code })
  }
  return isConnectionDead(error) ? new ConnectionDead(fields) : new QueryFailed(fields)
}

/**
 * Run a database effect and classify its failures. Defects that are `SqlError`s
 * are classified too: `withTransaction` turns a failed ROLLBACK on a dead
 * connection into a defect, and that must still read as `ConnectionDead`.
 */
export const classify = (operation: string) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, Exclude<E, SqlError.SqlError> | StoreError, R> =>
  effect.pipe(
    Effect.catchCause((cause): Effect.Effect<never, Exclude<E, SqlError.SqlError> | StoreError> => {
      for (const reason of cause.reasons) {
        if (Cause.isFailReason(reason)) {
          return SqlError.isSqlError(reason.error)
            ? Effect.fail(classifySqlError(operation, reason.error))
            : Effect.fail(reason.error as Exclude<E, SqlError.SqlError>)
        }
        if (Cause.isDieReason(reason) && SqlError.isSqlError(reason.defect)) {
          return Effect.fail(classifySqlError(operation, reason.defect))
        }
      }
      return Effect.failCause(cause as Cause.Cause<never>)
    })
  )

/**
 * A consumer lost the lease of a message: the renewal came back without it
 * (`reclaimed`: another consumer holds it now), renewals failed for a whole
 * lease (`renewals-failing`), the renewer itself failed (`renewer-failed`), or
 * the local deadline passed without a successful renewal (`local-deadline`),
 * or the consumer's presence is about to be judged dead by other consumers'
 * reapers (`presence-lost`).
 */
export class LeaseLost extends Schema.TaggedError<LeaseLost>()("LeaseLost", {
  ids: Schema.Array(Schema.String),
  reason: Schema.Literals(["reclaimed", "renewals-failing", "renewer-failed", "local-deadline", "presence-lost"]),
  message: Schema.String
}) {}

/**
 * A commit step (`HandlerContext.commit`) did not commit, and its writes were rolled back with
 * its ack: `lease-lost`, the run no longer held its message (another consumer reclaimed it, or it
 * was deleted): a double run prevented, the message is left to its holder; `timed-out`, the step
 * ran past the lease it started with (a commit holds its message locked, so it is bounded);
 * `already-committed`, the run had committed once (a run commits at most once). The last two are
 * failures of the attempt like any other: retried with backoff.
 */
export class CommitFenced extends Schema.TaggedError<CommitFenced>()("CommitFenced", {
  messageId: Schema.String,
  reason: Schema.Literals(["lease-lost", "timed-out", "already-committed"]),
  message: Schema.String
}) {}

/** A handler ran past its max runtime and was interrupted; the message is retried. */
export class MaxRuntimeExceeded extends Schema.TaggedError<MaxRuntimeExceeded>()("MaxRuntimeExceeded", {
  messageId: Schema.String,
  maxRuntimeMs: Schema.Number,
  message: Schema.String
}) {}

/**
 * An operator cancelled a running message (`QueueStore.cancel`): its consumer heard it in a
 * lease renewal and interrupted the handler. The message is deleted, never retried or
 * dead-lettered; its history says `cancelled`. `TaskClient.awaitResult` fails with it too, for a
 * message cancelled (running or not) before it succeeded.
 */
export class MessageCancelled extends Schema.TaggedError<MessageCancelled>()("MessageCancelled", {
  messageId: Schema.String,
  message: Schema.String
}) {}

/**
 * A configuration value is invalid: `variable` names it, `rule` says what it must be. Its
 * stack is its message line alone: a worker stopped by a bad setting prints what to fix,
 * not leasehold's frames (where the value was read says nothing the message does not).
 */
export class ConfigInvalid extends Schema.TaggedError<ConfigInvalid>()("ConfigInvalid", {
  variable: Schema.String,
  rule: Schema.String,
  message: Schema.String
}) {
  constructor(fields: { readonly variable: string; readonly rule: string; readonly message: string }, options?: Schema.MakeOptions) {
    super(fields, options)
    this.stack = `${this.name}: ${this.message}`
  }
}

/**
 * A message's payload did not decode with its task's schema. The consumer
 * dead-letters it at once, with this message as the reason: retrying cannot help.
 */
export class DecodeFailed extends Schema.TaggedError<DecodeFailed>()("DecodeFailed", {
  task: Schema.String,
  message: Schema.String
}) {}

/**
 * No handler for the message's task on this worker. The consumer retries it
 * after a delay a few times (a newer worker version may know it during a
 * rolling deploy), then dead-letters it.
 */
export class UnknownTask extends Schema.TaggedError<UnknownTask>()("UnknownTask", {
  task: Schema.String,
  message: Schema.String
}) {}

/**
 * Fail a handler with this to say retrying cannot help: the message goes
 * straight to dead letters with this message as the reason.
 */
export class Unrecoverable extends Schema.TaggedError<Unrecoverable>()("Unrecoverable", {
  message: Schema.String
}) {}

/**
 * A message's kept result cannot be given back: it was over the 64 KiB bound when
 * its handler returned it (`reason` `too-large`: the run succeeded, its value was
 * not kept), it held text PostgreSQL cannot store (`unstorable`: a NUL character or a lone
 * surrogate; the run succeeded, its value was not kept), or it does not decode with the task's
 * success schema (`schema`: the schema changed since). Fails `TaskClient.result` and `TaskClient.resultJson`.
 */
export class ResultUnreadable extends Schema.TaggedError<ResultUnreadable>()("ResultUnreadable", {
  messageId: Schema.String,
  reason: Schema.Literals(["too-large", "unstorable", "schema"]),
  message: Schema.String
}) {}

/**
 * A message awaited with `TaskClient.awaitResult` failed for good: it was dead-lettered (its
 * attempts used up, its payload undecodable, its handler `Unrecoverable`), with its `reason` and
 * the last error of its handler, when known (`null` once purged: its history keeps no reason).
 */
export class MessageDeadLettered extends Schema.TaggedError<MessageDeadLettered>()("MessageDeadLettered", {
  messageId: Schema.String,
  reason: Schema.String,
  lastError: Schema.NullOr(Schema.String),
  message: Schema.String
}) {}

/**
 * `TaskClient.awaitResult` waited `waitedMs` and the message had not ended: it is still
 * `state` (ready, delayed or in flight). Nothing happened to the message; await it again.
 */
export class AwaitTimedOut extends Schema.TaggedError<AwaitTimedOut>()("AwaitTimedOut", {
  messageId: Schema.String,
  state: Schema.String,
  waitedMs: Schema.Number,
  message: Schema.String
}) {}

/**
 * No message has this id, live or in its history: never sent (or its send did not commit), not
 * a message id, or it ended so long ago that its history was pruned.
 */
export class MessageNotFound extends Schema.TaggedError<MessageNotFound>()("MessageNotFound", {
  messageId: Schema.String,
  message: Schema.String
}) {}

/** Why `TaskClient.awaitResult` gives no result: every member is a Schema-backed tagged error. */
export type AwaitError = MessageDeadLettered | MessageCancelled | AwaitTimedOut | MessageNotFound
