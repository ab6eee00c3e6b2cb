/**
 * leasehold's admin API: see and steer queues over HTTP, on the same server as
 * health and metrics (`Http.layerWithAdmin`) or standalone (`leasehold serve`,
 * `Http.layerAdminServer`). An `effect/http-api` group ({@link AdminGroup}) under
 * `/api`, described by an OpenAPI document (`/openapi.json`, browsable at
 * `/docs`), behind the dashboard page at `/`.
 *
 * - Every route requires `Authorization: Bearer <LEASEHOLD_ADMIN_TOKEN>` once a
 *   token is set, compared in constant time: 401 when missing or wrong.
 * - With no token set, every route that changes something (pause, resume,
 *   cancel, redrive, purge) answers 403, and so does every reading route
 *   (queues, consumers, messages, dead letters, counters: they show payloads,
 *   errors, hosts and pids) unless the server answers this machine only
 *   ({@link AdminOptions.loopbackOnly}). A refused request writes nothing.
 * - Every input is decoded by a schema: a bad queue name, message id, state,
 *   page size or body is a 400 {@link BadRequest} naming the field and the rule.
 * - Database failures are a 503 whose message never carries the database URL.
 *
 * @since 0.1.0
 */
import { Effect, Layer, Metric, Option, Redacted, Schema } from "effect"
import {
  HttpApi,
  HttpApiBuilder,
  HttpApiEndpoint,
  HttpApiError,
  HttpApiGroup,
  HttpApiMiddleware,
  HttpApiSecurity,
  OpenApi
} from "effect/http-api"
import { HttpServerRequest } from "effect/http"
import { SqlClient } from "effect/sql"
import * as SchemaIssue from "effect/SchemaIssue"
import { createHash, timingSafeEqual } from "node:crypto"
import * as ConsumerPresence from "./ConsumerPresence.ts"
import { redactSecrets } from "./internal/redact.ts"
import * as Validate from "./internal/validate.ts"
import { Attempt, DeadLetter, type MessageId, MessageInfo, MessageState } from "./Message.ts"
import { StoreSettings } from "./StoreSettings.ts"
import * as QueueConfig from "./QueueConfig.ts"
import type { ConfigInvalid, InvalidInput, StoreError } from "./QueueError.ts"
import * as QueueMetrics from "./QueueMetrics.ts"
import { type DeadLetterFilter, QueueStore } from "./QueueStore.ts"

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
  sessionLiveness: Schema.Boolean
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
// Middleware

/** Guards the changing routes: a bearer token compared in constant time. */
export class AdminAuth extends HttpApiMiddleware.Service<AdminAuth>()("leasehold/Admin/AdminAuth", {
  error: [Unauthorized, Forbidden],
  security: { bearer: HttpApiSecurity.bearer }
}) {}

/** Guards the reading routes: the same token once one is set; none set, open only on a server for this machine. */
export class ReadAuth extends HttpApiMiddleware.Service<ReadAuth>()("leasehold/Admin/ReadAuth", {
  error: [Unauthorized, Forbidden],
  security: { bearer: HttpApiSecurity.bearer }
}) {}

/** Turns a request that fails its schema into a {@link BadRequest} naming the field and the rule. */
export class InputErrors extends HttpApiMiddleware.Service<InputErrors>()("leasehold/Admin/InputErrors", {
  error: BadRequest
}) {}

// ---------------------------------------------------------------------------
// The group

const queueParams = { queue: QueueName }
const readErrors = [Unavailable] as const

/** An endpoint with its one-line summary in the OpenAPI document. */
const summarized = <E extends { readonly annotate: (key: typeof OpenApi.Summary, value: string) => unknown }>(
  endpoint: E,
  summary: string
): E => endpoint.annotate(OpenApi.Summary, summary) as E

/** The admin routes, under `/api`. Add it to an `HttpApi` named `leasehold` (as `Http` does). */
export const AdminGroup = HttpApiGroup.make("admin")
  .add(summarized(
    HttpApiEndpoint.get("queues", "/api/queues", { success: Schema.Array(QueueRow), error: readErrors }).middleware(ReadAuth),
    "Every queue with messages, history or a pause: counts and whether it is paused"
  ))
  .add(summarized(
    HttpApiEndpoint.post("pause", "/api/queues/:queue/pause", { params: queueParams, success: QueueRow, error: readErrors })
      .middleware(AdminAuth),
    "Stop consumers claiming from a queue (running messages finish); needs the admin token"
  ))
  .add(summarized(
    HttpApiEndpoint.post("resume", "/api/queues/:queue/resume", { params: queueParams, success: QueueRow, error: readErrors })
      .middleware(AdminAuth),
    "Let consumers claim from a paused queue again; needs the admin token"
  ))
  .add(summarized(
    HttpApiEndpoint.get("messages", "/api/queues/:queue/messages", {
      params: queueParams,
      query: { state: Schema.optionalKey(StateInput), limit: Schema.optionalKey(Limit), after: Schema.optionalKey(MessageIdInput) },
      success: MessagePage,
      error: readErrors
    }).middleware(ReadAuth),
    "A page of a queue's messages in id order, optionally in one state; next is the after of the next page"
  ))
  .add(summarized(
    HttpApiEndpoint.post("cancelWhere", "/api/queues/:queue/cancel", {
      params: queueParams,
      payload: Schema.Struct({ task: Schema.optionalKey(TaskName) }),
      success: CancelOutcome,
      error: readErrors
    }).middleware(AdminAuth),
    "Cancel every message of a queue, or of one task in it; needs the admin token"
  ))
  .add(summarized(
    HttpApiEndpoint.get("consumers", "/api/consumers", { success: Schema.Array(ConsumerRow), error: readErrors }).middleware(ReadAuth),
    "Registered consumers: host, pid, heartbeat age, messages in flight"
  ))
  .add(summarized(
    HttpApiEndpoint.get("inFlight", "/api/in-flight", {
      query: { limit: Schema.optionalKey(Limit) },
      success: Schema.Array(MessageInfo),
      error: readErrors
    }).middleware(ReadAuth),
    "Messages in flight on every queue (at most limit per queue), with their holder and lease"
  ))
  .add(summarized(
    HttpApiEndpoint.get("message", "/api/messages/:id", {
      params: { id: MessageIdInput },
      success: MessageDetail,
      error: [Unavailable, NotFound]
    }).middleware(ReadAuth),
    "One message, live or dead, with its attempt history"
  ))
  .add(summarized(
    HttpApiEndpoint.post("cancel", "/api/messages/cancel", {
      payload: Schema.Struct({ ids: Ids }),
      success: CancelOutcome,
      error: readErrors
    }).middleware(AdminAuth),
    "Cancel messages by id: waiting ones are deleted, running ones stopped at once; needs the admin token"
  ))
  .add(summarized(
    HttpApiEndpoint.get("deadLetters", "/api/dead-letters", {
      query: { queue: Schema.optionalKey(QueueName), limit: Schema.optionalKey(Limit) },
      success: Schema.Array(DeadLetter),
      error: readErrors
    }).middleware(ReadAuth),
    "Dead letters, oldest death first, with their reason and last error"
  ))
  .add(summarized(
    HttpApiEndpoint.post("redrive", "/api/dead-letters/redrive", {
      payload: DeadLetterSelection,
      success: Schema.Struct({ redriven: Schema.Array(Schema.String) }),
      error: readErrors
    }).middleware(AdminAuth),
    "Return dead letters (a queue's, some ids, or all) to ready with a fresh attempt budget; needs the admin token"
  ))
  .add(summarized(
    HttpApiEndpoint.post("purge", "/api/dead-letters/purge", {
      payload: DeadLetterSelection,
      success: Schema.Struct({ purged: Schema.Array(Schema.String) }),
      error: readErrors
    }).middleware(AdminAuth),
    "Delete dead letters (a queue's, some ids, or all) for good; needs the admin token"
  ))
  .add(summarized(
    HttpApiEndpoint.get("counters", "/api/counters", { success: Counters }).middleware(ReadAuth),
    "Counters of this process: leases lost by reason, double runs, claims reaped, cancels"
  ))
  .middleware(InputErrors)

/** An API of the admin group alone (the handlers are built against it; any `leasehold` API holding the group can serve them). */
export const AdminApi = HttpApi.make("leasehold").add(AdminGroup)

// ---------------------------------------------------------------------------
// Handlers

const formatIssues = SchemaIssue.makeFormatterStandardSchemaV1()

const fieldOf = (path: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined, slot: string): string => {
  const keys = (path ?? []).map((segment) => typeof segment === "object" && segment !== null ? segment.key : segment)
  if (keys.length === 0) return slot
  return keys.reduce<string>((out, key, i) =>
    typeof key === "number" ? `${out}[${key}]` : i === 0 ? String(key) : `${out}.${String(key)}`, "")
}

/** The first issue of a request that failed its schema, as a 400 naming the field and the rule. */
const badRequestOf = (error: HttpApiError.HttpApiSchemaError): BadRequest => {
  const slot = error.kind.toLowerCase()
  const [issue] = formatIssues(error.cause.issue).issues
  const field = fieldOf(issue?.path, slot)
  const rule = issue === undefined ? "a valid request" : issue.message === "Missing key" ? "required" : issue.message
  return new BadRequest({ field, rule, message: field === slot ? `${slot}: ${rule}` : `${slot} ${field}: ${rule}` })
}

/** Store failures as responses: a refused input is a 400, a database failure a 503 (redacted). */
const storeFailure = (error: InvalidInput | StoreError): BadRequest | Unavailable =>
  error._tag === "InvalidInput"
    ? new BadRequest({ field: error.field, rule: error.rule, message: error.message })
    : new Unavailable({ message: redactSecrets(`${error._tag}: ${error.message}`) })

const digest = (text: string) => createHash("sha256").update(text, "utf8").digest()

/** Whether `given` (never empty: the caller refuses that first) is the token: equal-length digests compared in constant time. */
const tokenMatches = (token: Redacted.Redacted, given: string): boolean =>
  timingSafeEqual(digest(Redacted.value(token)), digest(given))

const bearerHint = `send Authorization: Bearer <${QueueConfig.adminVariables.token}>`
const setToken = `set ${QueueConfig.adminVariables.token}`

/** The bearer check of one request against a configured token: undefined when it matches. */
const wrongBearer = (token: Redacted.Redacted, credential: Redacted.Redacted, what: string): Unauthorized | undefined => {
  const given = Redacted.value(credential)
  if (given === "") return new Unauthorized({ message: `${what}: ${bearerHint}` })
  return tokenMatches(token, given) ? undefined : new Unauthorized({ message: "wrong admin token" })
}

/**
 * The {@link AdminAuth} middleware over `token`: none refuses every changing
 * route with 403; a token admits only requests bearing it. Each change is
 * logged (INFO, method and path) before it runs, each refusal at WARN; never
 * the token.
 */
export const authLayer = (token: Option.Option<Redacted.Redacted>): Layer.Layer<AdminAuth> =>
  Layer.succeed(AdminAuth, {
    bearer: (handler, { credential }) =>
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        const what = `${request.method} ${request.url}`
        const refused = Option.isNone(token)
          ? new Forbidden({ message: `changes over HTTP are off: no admin token is set (${setToken} to enable them)` })
          : wrongBearer(token.value, credential, "this route changes something")
        if (refused !== undefined) {
          yield* Effect.logWarning(`admin: ${what} refused: ${refused.message}`)
          return yield* refused
        }
        yield* Effect.logInfo(`admin: ${what}`)
        return yield* handler
      })
  })

/**
 * The {@link ReadAuth} middleware: with `token`, only requests bearing it read; with none,
 * reads are open when `loopbackOnly` (the server answers this machine only) and refused
 * with 403 otherwise. Refusals are logged at DEBUG only: a dashboard left open without the
 * token asks five routes every 2 s.
 */
export const readAuthLayer = (token: Option.Option<Redacted.Redacted>, loopbackOnly: boolean): Layer.Layer<ReadAuth> =>
  Layer.succeed(ReadAuth, {
    bearer: (handler, { credential }) =>
      Effect.gen(function*() {
        const refused = Option.isSome(token)
          ? wrongBearer(token.value, credential, "this server requires the admin token to read")
          : loopbackOnly
          ? undefined
          : new Forbidden({
            message: `reads over HTTP are off: the server is reachable from other machines and no admin token is set ` +
              `(${setToken} to enable them; /healthz, /readyz and /metrics need none)`
          })
        if (refused === undefined) return yield* handler
        const request = yield* HttpServerRequest.HttpServerRequest
        yield* Effect.logDebug(`admin: ${request.method} ${request.url} refused: ${refused.message}`)
        return yield* refused
      })
  })

/** The {@link InputErrors} middleware. */
export const inputErrorsLayer: Layer.Layer<InputErrors> = HttpApiMiddleware.layerSchemaErrorTransform(
  InputErrors,
  (error) =>
    // Request slots are the caller's mistake (400); a response that fails to encode is ours: keep it a defect.
    error.kind === "Body" || error.kind === "ResponseHeaders" ? Effect.fail(error) : Effect.fail(badRequestOf(error))
)

const counterValue = (snapshot: ReadonlyArray<Metric.Metric.Snapshot>, id: string): number =>
  snapshot
    .filter((m) => m.id === id && m.type === "Counter" && Object.keys(m.attributes ?? {}).length === 0)
    .reduce((sum, m) => sum + Number((m.state as Metric.CounterState<number>).count), 0)

/** The counters only leasehold has, read from this process's metrics. */
export const counters: Effect.Effect<typeof Counters.Type> = Effect.map(Metric.snapshot, (snapshot) => {
  const leasesLost: Record<string, number> = {}
  for (const m of snapshot) {
    const reason = m.attributes?.["reason"]
    if (m.id !== QueueMetrics.leasesLost.id || m.type !== "Counter" || reason === undefined) continue
    leasesLost[String(reason)] = (leasesLost[String(reason)] ?? 0) + Number((m.state as Metric.CounterState<number>).count)
  }
  const count = (metric: { readonly id: string }) => counterValue(snapshot, metric.id)
  return {
    leasesLost,
    doubleRuns: count(QueueMetrics.doubleRuns),
    reaped: count(QueueMetrics.reaped),
    wedgedRenewers: count(QueueMetrics.wedgedRenewers),
    renewalFailures: count(QueueMetrics.renewalFailures),
    finishFailures: count(QueueMetrics.finishFailures),
    claimed: count(QueueMetrics.claimed),
    acked: count(QueueMetrics.acked),
    retried: count(QueueMetrics.retried),
    deadLettered: count(QueueMetrics.deadLettered),
    released: count(QueueMetrics.released),
    cancelled: count(QueueMetrics.cancelled)
  }
})

/** Exactly one of queue, ids or all: redrive and purge never act on "everything" by omission. */
const selection = (input: typeof DeadLetterSelection.Type): Effect.Effect<DeadLetterFilter, BadRequest> => {
  const given = [input.queue !== undefined, input.ids !== undefined, input.all === true].filter(Boolean).length
  if (given === 1) {
    return Effect.succeed({ queue: input.queue, ids: input.ids as ReadonlyArray<MessageId> | undefined, all: input.all })
  }
  const rule = "exactly one of queue, ids or all: true"
  return Effect.fail(new BadRequest({ field: "payload", rule, message: `payload: say which dead letters (${rule})` }))
}

const cancelOutcome = (asked: ReadonlyArray<string>, results: ReadonlyArray<{ readonly id: string; readonly result: "cancelled" | "cancelling" }>) => {
  const found = new Set(results.map((r) => String(r.id)))
  return {
    results: results.map((r) => ({ id: String(r.id), result: r.result })),
    unknown: [...new Set(asked.map((id) => String(BigInt(id))))].filter((id) => !found.has(id))
  }
}

const limitOf = (text: string | undefined, fallback: number) => text === undefined ? fallback : Number(text)

/** The handlers of {@link AdminGroup} over the `QueueStore` in context (consumers read when the store is on PostgreSQL). */
export const handlers = HttpApiBuilder.group(AdminApi, "admin", (handlers) =>
  Effect.gen(function*() {
    const store = yield* QueueStore
    const sql = yield* Effect.serviceOption(SqlClient.SqlClient)
    const settings = yield* Effect.serviceOption(StoreSettings)
    const queueRow = (queue: string) =>
      Effect.map(store.queues(), (all) =>
        all.find((q) => q.queue === queue) ?? { queue, ready: 0, delayed: 0, inFlight: 0, dead: 0, oldestReadyAgeMs: 0, paused: false, pausedAt: null })
    return handlers
      .handle("queues", () => Effect.mapError(store.queues(), storeFailure))
      .handle("pause", ({ params }) => store.pause(params.queue).pipe(Effect.andThen(queueRow(params.queue)), Effect.mapError(storeFailure)))
      .handle("resume", ({ params }) => store.resume(params.queue).pipe(Effect.andThen(queueRow(params.queue)), Effect.mapError(storeFailure)))
      .handle("messages", ({ params, query }) => {
        const limit = limitOf(query.limit, 100)
        return store.messages(params.queue, { state: query.state, limit, after: query.after }).pipe(
          Effect.map((messages) => ({ messages, next: messages.length === limit ? messages[messages.length - 1]!.id : null })),
          Effect.mapError(storeFailure)
        )
      })
      .handle("cancelWhere", ({ params, payload }) =>
        store.cancelWhere({ queue: params.queue, task: payload.task }).pipe(
          Effect.map((results) => cancelOutcome([], results)),
          Effect.mapError(storeFailure)
        ))
      .handle("consumers", () =>
        Option.isSome(sql) && Option.isSome(settings)
          ? Effect.mapError(ConsumerPresence.listConsumers(sql.value, settings.value.schema), storeFailure)
          : Effect.succeed([]))
      .handle("inFlight", ({ query }) =>
        store.queues().pipe(
          Effect.flatMap((queues) =>
            Effect.forEach(queues.filter((q) => q.inFlight > 0), (q) =>
              store.messages(q.queue, { state: "in-flight", limit: limitOf(query.limit, 100) }))
          ),
          Effect.map((pages) => pages.flat()),
          Effect.mapError(storeFailure)
        ))
      .handle("message", ({ params }) =>
        Effect.gen(function*() {
          const found = yield* store.get(params.id)
          if (Option.isNone(found)) {
            return yield* new NotFound({ message: `no message with id ${params.id} (finished and deleted, or never sent)` })
          }
          return { message: found.value, attempts: yield* store.attempts(params.id) }
        }).pipe(Effect.catchTags({ ConnectionDead: (e) => Effect.fail(storeFailure(e)), QueryFailed: (e) => Effect.fail(storeFailure(e)) })))
      .handle("cancel", ({ payload }) =>
        store.cancel(payload.ids).pipe(
          Effect.map((results) => cancelOutcome(payload.ids, results)),
          Effect.mapError(storeFailure)
        ))
      .handle("deadLetters", ({ query }) =>
        Effect.mapError(store.deadLetters({ queue: query.queue, limit: limitOf(query.limit, 100) }), storeFailure))
      .handle("redrive", ({ payload }) =>
        selection(payload).pipe(
          Effect.flatMap((filter) => Effect.mapError(store.redrive(filter), storeFailure)),
          Effect.map((ids) => ({ redriven: ids.map(String) }))
        ))
      .handle("purge", ({ payload }) =>
        selection(payload).pipe(
          Effect.flatMap((filter) => Effect.mapError(store.purge(filter), storeFailure)),
          Effect.map((ids) => ({ purged: ids.map(String) }))
        ))
      .handle("counters", () => counters)
  }))

/** How the admin API is configured. */
export interface AdminOptions {
  /**
   * The bearer token every route requires (at least 16 characters).
   * Default: `LEASEHOLD_ADMIN_TOKEN`; with neither, the changing routes answer 403,
   * and the reading ones too unless {@link loopbackOnly}.
   */
  readonly token?: Redacted.Redacted | string | undefined
  /**
   * The server answers this machine only (bound to a loopback address, and checking `Host`
   * against DNS rebinding, as `Http`'s servers do): with no token set, the reading routes are
   * open. Default false: without a token they answer 403, since they show payloads, results,
   * errors, hosts and pids. `Http` sets it from the address it binds.
   */
  readonly loopbackOnly?: boolean | undefined
}

/**
 * Everything {@link AdminGroup} needs to be served: its handlers and its three
 * middlewares. Give it to `HttpApiBuilder.layer` of an API holding the group;
 * `Http.layerWithAdmin` and `Http.layerAdminServer` do.
 */
export const layer = (
  options: AdminOptions = {}
): Layer.Layer<
  HttpApiGroup.Service<"leasehold", "admin"> | AdminAuth | ReadAuth | InputErrors,
  ConfigInvalid,
  QueueStore
> =>
  Layer.unwrap(Effect.gen(function*() {
    const token = options.token === undefined
      ? yield* QueueConfig.adminTokenFromEnv
      : Option.some(yield* QueueConfig.adminToken(typeof options.token === "string" ? Redacted.make(options.token) : options.token))
    return handlers.pipe(
      Layer.provideMerge(Layer.mergeAll(authLayer(token), readAuthLayer(token, options.loopbackOnly ?? false), inputErrorsLayer))
    )
  }))
