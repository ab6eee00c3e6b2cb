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
import { Effect, Layer, Metric, Option, Redacted } from "effect"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import * as HttpApiError from "effect/http-api/HttpApiError"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiMiddleware from "effect/http-api/HttpApiMiddleware"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as SqlClient from "effect/sql/SqlClient"
import * as SchemaIssue from "effect/SchemaIssue"
import { createHash, timingSafeEqual } from "node:crypto"
import * as ConsumerPresence from "./ConsumerPresence.ts"
import { redactSecrets } from "./internal/redact.ts"
import type { MessageId } from "./Message.ts"
import { StoreSettings } from "./StoreSettings.ts"
import * as QueueConfig from "./QueueConfig.ts"
import type { ConfigInvalid, InvalidInput, StoreError } from "./QueueError.ts"
import * as QueueMetrics from "./QueueMetrics.ts"
import { type DeadLetterFilter, QueueStore } from "./QueueStore.ts"
import { BadRequest, Unauthorized, Forbidden, NotFound, Unavailable, QueueName, TaskName, MessageIdInput, Limit, StateInput, Ids, DeadLetterSelection, QueueRow, ConsumerRow, MessageDetail, MessagePage, CancelOutcome, Counters, RateRow, RateInput, LimitsInput, WeightInput, LimitsView, LimitsRow, FlowStatusRow } from "./http/adminSchema.ts"
import { AdminAuth, ReadAuth, InputErrors, AdminGroup, AdminApi } from "./http/adminApi.ts"
import { flowRoutes } from "./http/adminFlow.ts"
import { insightRoutes } from "./http/adminInsights.ts"
import { BulkActionInput, BulkCount, BulkInput, BulkOutcomeSchema, DepthAnswer, DepthSampleSchema, FilterFields, MinutesInput, ScheduleRow, ThroughputAnswer, ThroughputRowSchema, TriggerOutcome } from "./http/adminInsightsSchema.ts"
import { Insights } from "./Insights.ts"
import { workflowRoutes } from "./http/adminWorkflows.ts"

export { BulkActionInput, BulkCount, BulkInput, BulkOutcomeSchema, DepthAnswer, DepthSampleSchema, FilterFields, MinutesInput, ScheduleRow, ThroughputAnswer, ThroughputRowSchema, TriggerOutcome }
export { BadRequest, Unauthorized, Forbidden, NotFound, Unavailable, QueueName, TaskName, MessageIdInput, Limit, StateInput, Ids, DeadLetterSelection, QueueRow, ConsumerRow, MessageDetail, MessagePage, CancelOutcome, Counters, RateRow, RateInput, LimitsInput, WeightInput, LimitsView, LimitsRow, FlowStatusRow, AdminAuth, ReadAuth, InputErrors, AdminGroup, AdminApi }

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
const storeFailure = (error: InvalidInput | StoreError | BadRequest): BadRequest | Unavailable =>
  error._tag === "BadRequest"
    ? error
    : error._tag === "InvalidInput"
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
    const flow = flowRoutes(store)
    const dash = insightRoutes(store, yield* Effect.serviceOption(Insights))
    const workflows = workflowRoutes(sql, Option.map(settings, (s) => s.schema))
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
      .handle("attempts", ({ params }) => Effect.mapError(store.attempts(params.id), storeFailure))
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
      .handle("limits", () => Effect.mapError(flow.limits, storeFailure))
      .handle("queueLimits", ({ params }) => Effect.mapError(flow.queueLimits(params.queue), storeFailure))
      .handle("setLimits", ({ params, query, payload }) => Effect.mapError(flow.setLimits(params.queue, query.task, payload), storeFailure))
      .handle("clearLimits", ({ params, query }) => Effect.mapError(flow.clearLimits(params.queue, query.task), storeFailure))
      .handle("keyWeight", ({ params, payload }) => Effect.mapError(flow.keyWeight(params.queue, payload), storeFailure))
      .handle("flow", ({ params }) => Effect.mapError(flow.flow(params.queue), storeFailure))
      .handle("workflows", ({ query }) => Effect.mapError(workflows.list({ ...query, limit: limitOf(query.limit, 100) }), storeFailure))
      .handle("workflow", ({ params }) =>
        workflows.show(params.workflow, params.executionId).pipe(
          Effect.catchTags({ ConnectionDead: (e) => Effect.fail(storeFailure(e)), QueryFailed: (e) => Effect.fail(storeFailure(e)) }),
          Effect.mapError((e) => (e._tag === "InvalidInput" ? storeFailure(e) : e))
        ))
      .handle("counters", () => counters)
      .handle("throughput", ({ query }) => Effect.mapError(dash.throughput(query), storeFailure))
      .handle("depthHistory", ({ query }) => Effect.mapError(dash.depthHistory(query), storeFailure))
      .handle("search", ({ query }) => Effect.mapError(dash.search(query), storeFailure))
      .handle("retry", ({ payload }) => Effect.mapError(dash.retry(payload.ids), storeFailure))
      .handle("bulkCount", ({ params, query }) => Effect.mapError(dash.bulkCount(params.action, query), storeFailure))
      .handle("bulk", ({ params, payload }) => Effect.mapError(dash.bulk(params.action, payload), storeFailure))
      .handle("schedules", () => Effect.mapError(dash.schedules, storeFailure))
      .handle("trigger", ({ params }) =>
        dash.trigger(params.key).pipe(Effect.catchTags({
          ConnectionDead: (e) => Effect.fail(storeFailure(e)),
          QueryFailed: (e) => Effect.fail(storeFailure(e)),
          InvalidInput: (e) => Effect.fail(new NotFound({ message: e.message }))
        })))
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
