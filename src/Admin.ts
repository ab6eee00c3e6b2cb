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
 *   cancel, retry now, redrive, purge, bulk actions, schedule triggers, flow limits and key
 *   weights) answers 403, and so does every reading route (queues, consumers, messages, search,
 *   dead letters, counters, fleet figures, bulk counts, schedules, limits, flow: they show
 *   payloads, errors, hosts and pids) unless the server answers this machine only
 *   ({@link AdminOptions.loopbackOnly}). A refused request writes nothing.
 * - Every input is decoded by a schema: a bad queue name, message id, state,
 *   page size or body is a 400 {@link BadRequest} naming the field and the rule.
 * - Database failures are a 503 whose message never carries the database URL.
 *
 * @since 0.1.0
 */
import { Effect, Layer, Option, Redacted } from "effect"
import type * as HttpApiError from "effect/http-api/HttpApiError"
import type * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiMiddleware from "effect/http-api/HttpApiMiddleware"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as SchemaIssue from "effect/SchemaIssue"
import { createHash, timingSafeEqual } from "node:crypto"
import * as QueueConfig from "./QueueConfig.ts"
import type { ConfigInvalid } from "./QueueError.ts"
import type { QueueStore } from "./QueueStore.ts"
import * as AdminCounters from "./http/adminCounters.ts"
import { BadRequest, Unauthorized, Forbidden, NotFound, Unavailable, QueueName, TaskName, MessageIdInput, Limit, StateInput, Ids, DeadLetterSelection, QueueRow, ConsumerRow, MessageDetail, MessagePage, CancelOutcome, Counters, RateRow, RateInput, LimitsInput, WeightInput, LimitsView, LimitsRow, FlowStatusRow } from "./http/adminSchema.ts"
import { AdminAuth, ReadAuth, InputErrors, AdminGroup, AdminApi } from "./http/adminApi.ts"
import { BulkActionInput, BulkCount, BulkInput, BulkOutcomeSchema, DepthAnswer, DepthSampleSchema, FilterFields, MinutesInput, ScheduleRow, ThroughputAnswer, ThroughputRowSchema, TriggerOutcome } from "./http/adminInsightsSchema.ts"

export { BulkActionInput, BulkCount, BulkInput, BulkOutcomeSchema, DepthAnswer, DepthSampleSchema, FilterFields, MinutesInput, ScheduleRow, ThroughputAnswer, ThroughputRowSchema, TriggerOutcome }
export { BadRequest, Unauthorized, Forbidden, NotFound, Unavailable, QueueName, TaskName, MessageIdInput, Limit, StateInput, Ids, DeadLetterSelection, QueueRow, ConsumerRow, MessageDetail, MessagePage, CancelOutcome, Counters, RateRow, RateInput, LimitsInput, WeightInput, LimitsView, LimitsRow, FlowStatusRow, AdminAuth, ReadAuth, InputErrors, AdminGroup, AdminApi }

// ---------------------------------------------------------------------------
// Middleware (the route handlers are in http/adminHandlers.ts, loaded when the layer is built)

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

/** The counters only leasehold has, read from this process's metrics. */
export const counters = AdminCounters.counters

/** The handlers of {@link AdminGroup} over the `QueueStore` in context (consumers read when the store is on PostgreSQL). */
export const handlers: Layer.Layer<HttpApiGroup.Service<"leasehold", "admin">, never, AdminAuth | InputErrors | QueueStore | ReadAuth> =
  // Loaded when the layer is built: a worker that serves no admin API never loads the routes.
  Layer.unwrap(Effect.map(Effect.promise(() => import("./http/adminHandlers.ts")), (routes) => routes.handlers))

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
