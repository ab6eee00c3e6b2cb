/**
 * leasehold's HTTP server, for orchestrators and scrapers:
 *
 * - `GET /healthz`: liveness from `Consumer.health`. 200 while the claim loop
 *   makes progress; 503 with the reason (`stale` since when, `failed`, or
 *   `stopping`) otherwise. Restart the process when it stays 503.
 * - `GET /readyz`: readiness. 200 when the database answers `SELECT 1` within
 *   the timeout, leasehold's migrations are all applied, and (when session
 *   liveness is provided) this consumer is registered; 503 naming the checks
 *   that failed otherwise.
 * - `GET /metrics`: every metric in Prometheus text format while
 *   `Observability.layerPrometheus()` is provided; 404 otherwise.
 *
 * The routes are an `HttpApi` ({@link Api}) built with `effect/http-api`, so
 * an application can add groups to the same API. {@link layerWithAdmin} adds
 * the admin API (`Admin`), the dashboard at `/` and the OpenAPI document;
 * {@link layerAdminServer} serves those without a consumer. No
 * response and no log line carries the database URL: every error detail goes
 * through the same redaction as leasehold's errors. Every response carries a
 * Content-Security-Policy (no frame ancestors; a page runs only its own inline
 * script and style), `X-Content-Type-Options: nosniff`, `Referrer-Policy:
 * no-referrer` and `X-Frame-Options: DENY`.
 *
 * @since 0.1.0
 */
import { Context, Duration, Effect, Layer, Option, Schema } from "effect"
import { HttpEffect, HttpRouter, HttpServer, type HttpServerError, HttpServerRequest, HttpServerResponse } from "effect/http"
import { HttpApi, HttpApiBuilder, HttpApiEndpoint, HttpApiGroup, HttpApiScalar, HttpApiSchema, OpenApi } from "effect/http-api"
import { SqlClient } from "effect/sql"
import { createServer } from "node:http"
import * as Admin from "./Admin.ts"
import { Consumer } from "./Consumer.ts"
import { ConsumerPresence } from "./ConsumerPresence.ts"
import * as Dashboard from "./http/dashboard.ts"
import { seconds } from "./internal/format.ts"
import * as HttpSecurity from "./http/security.ts"
import { redactSecrets } from "./internal/redact.ts"
import * as Migrations from "./Migrations.ts"
import * as Probe from "./pg/probe.ts"
import { Prometheus, prometheusContentType } from "./Observability.ts"
import { StoreSettings } from "./StoreSettings.ts"
import * as QueueConfig from "./QueueConfig.ts"
import { classify, type ConfigInvalid } from "./QueueError.ts"
import type { QueueStore } from "./QueueStore.ts"

/** `GET /healthz` 200: the claim loop is making progress. */
export const Live = Schema.Struct({
  status: Schema.Literal("live"),
  /** The last progress of the claim loop (ISO 8601). */
  lastProgressAt: Schema.String,
  inFlight: Schema.Number
})

/** `GET /healthz` 503: the claim loop is stale, has failed, or the consumer is stopping. */
export class Unhealthy extends Schema.TaggedError<Unhealthy>()("Unhealthy", {
  reason: Schema.Literals(["stale", "failed", "stopping"]),
  message: Schema.String,
  lastProgressAt: Schema.String,
  inFlight: Schema.Number
}, { httpApiStatus: 503 }) {}

/** One readiness check: `database`, `migrations` or `presence`; `skipped` when it could not be asked. */
export const Check = Schema.Struct({
  name: Schema.Literals(["database", "migrations", "presence"]),
  status: Schema.Literals(["ok", "failed", "skipped"]),
  detail: Schema.String
})

/** `GET /readyz` 200: every check passed. */
export const Ready = Schema.Struct({ status: Schema.Literal("ready"), checks: Schema.Array(Check) })

/** `GET /readyz` 503: `failed` names the checks that failed (a skipped one is not among them). */
export class NotReady extends Schema.TaggedError<NotReady>()("NotReady", {
  failed: Schema.Array(Schema.String),
  message: Schema.String,
  checks: Schema.Array(Check)
}, { httpApiStatus: 503 }) {}

/** `GET /metrics` 404: no Prometheus export was provided. */
export class MetricsOff extends Schema.TaggedError<MetricsOff>()("MetricsOff", {
  message: Schema.String
}, { httpApiStatus: 404 }) {}

/** Liveness and readiness. */
export const HealthGroup = HttpApiGroup.make("health")
  .add(HttpApiEndpoint.get("healthz", "/healthz", { success: Live, error: Unhealthy }))
  .add(HttpApiEndpoint.get("readyz", "/readyz", { success: Ready, error: NotReady }))

/** The Prometheus scrape route. */
export const MetricsGroup = HttpApiGroup.make("metrics")
  .add(HttpApiEndpoint.get("metrics", "/metrics", {
    success: Schema.String.pipe(HttpApiSchema.asText({ contentType: prometheusContentType })),
    error: MetricsOff
  }))

/** leasehold's HTTP API: extend it with `Api.add(...)` and serve it with `HttpApiBuilder.layer`. */
export const Api = HttpApi.make("leasehold").add(HealthGroup, MetricsGroup)

/** How the HTTP server checks readiness. */
export interface ProbeOptions {
  /** Longest wait for the database's answer to `SELECT 1` (default 2 s). */
  readonly databaseTimeout?: Duration.Input | undefined
}

/** Where and how to serve. */
export interface HttpOptions extends ProbeOptions {
  /** 0 picks a free port (see {@link Listening}). */
  readonly port: number
  /** Default 127.0.0.1 (this machine only); `0.0.0.0` or `::` for every interface. */
  readonly host?: string | undefined
}

/** The address the server listens on, once it does. */
export class Listening extends Context.Service<Listening, {
  /** e.g. `http://127.0.0.1:9464` */
  readonly url: string
  readonly port: number
}>()("leasehold/Http/Listening") {}

const detail = (error: { readonly message: string }) => redactSecrets(error.message)

/** `/healthz`: the consumer's own view of its liveness. */
const liveness = (consumer: Consumer["Service"]) =>
  Effect.gen(function*() {
    const health = yield* consumer.health
    const lastProgressAt = health.lastProgressAt.toISOString()
    if (health.healthy && !health.stopping) return { status: "live" as const, lastProgressAt, inFlight: health.inFlight }
    const fields = { lastProgressAt, inFlight: health.inFlight }
    // A failed loop has completed `failure`: it answers at once.
    const failure = yield* consumer.failure.pipe(Effect.flip, Effect.timeoutOption(10))
    if (Option.isSome(failure)) {
      return yield* new Unhealthy({ ...fields, reason: "failed", message: `claim loop failed: ${detail(failure.value)}` })
    }
    if (health.stopping) return yield* new Unhealthy({ ...fields, reason: "stopping", message: "the consumer is shutting down" })
    const stale = Date.now() - health.lastProgressAt.getTime()
    return yield* new Unhealthy({
      ...fields,
      reason: "stale",
      message: `no claim loop progress since ${lastProgressAt} (${seconds(stale)} ago; stale after ${seconds(consumer.settings.healthStaleMs)})`
    })
  })

type CheckResult = typeof Check.Type

const check = (name: CheckResult["name"], ok: boolean | "skipped", text: string): CheckResult => ({
  name,
  status: ok === "skipped" ? ok : ok ? "ok" : "failed",
  detail: redactSecrets(text)
})

/** What readiness looks at besides the consumer: each optional. */
interface Probed {
  readonly sql: Option.Option<SqlClient.SqlClient>
  readonly store: Option.Option<StoreSettings["Service"]>
  readonly presence: Option.Option<ConsumerPresence["Service"]>
}

/** `/readyz`: the database, the migrations, and presence when configured. */
const readiness = (consumer: Consumer["Service"], { presence, sql, store }: Probed, options: ProbeOptions) =>
  Effect.gen(function*() {
    const timeout = Duration.fromInputUnsafe(options.databaseTimeout ?? "2 seconds")
    const checks: Array<CheckResult> = []
    if (Option.isNone(sql)) {
      checks.push(check("database", true, "no SQL client (in-memory store)"), check("migrations", true, "no SQL client"))
    } else {
      const client = sql.value
      const answered = yield* Probe.ping(client).pipe(classify("readiness probe"), Effect.timeoutOption(timeout), Effect.result)
      const database = answered._tag === "Failure"
        ? check("database", false, detail(answered.failure))
        : Option.isNone(answered.success)
        ? check("database", false, `no answer to SELECT 1 within ${seconds(Duration.toMillis(timeout))}`)
        : check("database", true, "SELECT 1 answered")
      checks.push(database)
      if (database.status !== "ok") {
        checks.push(check("migrations", "skipped", "not checked: the database is unreachable"))
      } else {
        const schema = Option.isSome(store) ? store.value.schema : Migrations.defaultSchema
        const pending = yield* Migrations.pending({ schema }).pipe(
          Effect.provideService(SqlClient.SqlClient, client),
          Effect.timeoutOption(timeout),
          Effect.result
        )
        checks.push(
          pending._tag === "Failure"
            ? check("migrations", false, detail(pending.failure))
            : Option.isNone(pending.success)
            ? check("migrations", false, `no answer within ${seconds(Duration.toMillis(timeout))}`)
            : pending.success.value.length > 0
            ? check("migrations", false, `schema ${schema}: ${pending.success.value.length} migration(s) not applied (${pending.success.value.map(([id, name]) => `${id} ${name}`).join(", ")})`)
            : check("migrations", true, `schema ${schema}: all ${Migrations.known.length} applied`)
        )
      }
    }
    checks.push(yield* presenceCheck(consumer, presence))
    const failed = checks.filter((c) => c.status === "failed")
    if (failed.length === 0) return { status: "ready" as const, checks }
    return yield* new NotReady({
      failed: failed.map((c) => c.name),
      message: `not ready: ${failed.map((c) => `${c.name} (${c.detail})`).join("; ")}`,
      checks
    })
  })

const presenceCheck = (consumer: Consumer["Service"], presence: Option.Option<ConsumerPresence["Service"]>) =>
  Effect.gen(function*() {
    if (Option.isNone(presence)) return check("presence", true, "session liveness not configured")
    if (presence.value.registration === undefined) return check("presence", true, "registration not observable")
    const id = consumer.settings.consumerId
    const registration = yield* presence.value.registration(id)
    if (Option.isNone(registration)) return check("presence", false, `consumer ${id} is not registered`)
    const status = yield* registration.value.status
    switch (status.liveness) {
      case "active":
        return check("presence", true, `registered, lock held by backend ${status.backendPid}`)
      case "off":
        return check("presence", true, "session liveness off")
      case "unavailable":
        return check("presence", true, "session liveness unavailable (transaction-mode pooler?): lease expiry only")
      case "reconnecting":
        return check("presence", false, "the presence session is being re-established (its claims stay protected by their leases)")
    }
  })

/** The handlers of {@link HealthGroup} over the `Consumer` in context. */
export const healthHandlers = (options: ProbeOptions = {}) =>
  HttpApiBuilder.group(Api, "health", (handlers) =>
    Effect.gen(function*() {
      const consumer = yield* Consumer
      // Optional services, read once: the readiness checks skip what is not there.
      const probed: Probed = {
        sql: yield* Effect.serviceOption(SqlClient.SqlClient),
        store: yield* Effect.serviceOption(StoreSettings),
        presence: yield* Effect.serviceOption(ConsumerPresence)
      }
      return handlers
        .handle("healthz", () => liveness(consumer))
        .handle("readyz", () => readiness(consumer, probed, options))
    }))

/** The handler of {@link MetricsGroup}: the Prometheus export in context, if any. */
export const metricsHandlers = HttpApiBuilder.group(Api, "metrics", (handlers) =>
  Effect.gen(function*() {
    const prometheus = yield* Effect.serviceOption(Prometheus)
    return handlers.handle("metrics", () =>
      Option.isSome(prometheus)
        ? prometheus.value.scrape
        : Effect.fail(new MetricsOff({ message: "Prometheus export is off: provide Observability.layerPrometheus()" })))
  }))

/** Serve `routes` on `address`, providing {@link Listening}. */
const serveRoutes = <E, R>(address: QueueConfig.HttpAddress, routes: Layer.Layer<never, E, R>, check?: HostCheck) => {
  // Loaded on first use: @effect/platform-node's HTTP server (and what it imports) costs a worker
  // that serves no HTTP ~30 MB of RSS when imported up front.
  const server = Layer.unwrap(Effect.map(
    Effect.promise(() => import("@effect/platform-node/NodeHttpServer")),
    (NodeHttpServer) => NodeHttpServer.layer(() => createServer(), { port: address.port, host: address.host })
  ))
  const listening = Layer.effect(
    Listening,
    Effect.map(HttpServer.HttpServer, (http) =>
      Listening.of({
        url: HttpServer.formatAddress(http.address),
        port: "port" in http.address ? http.address.port : address.port
      }))
  )
  // No request log: probes and scrapes every few seconds would drown the worker's own lines.
  return Layer.merge(HttpRouter.serve(Layer.merge(routes, serverRules(check)), { disableLogger: true }), listening).pipe(
    Layer.provide(server)
  )
}

const serve = (address: QueueConfig.HttpAddress, options: ProbeOptions) =>
  serveRoutes(address, HttpApiBuilder.layer(Api).pipe(Layer.provide([healthHandlers(options), metricsHandlers])))

const apiDescription = "Operate leasehold queues: the admin routes under /api (they need Authorization: Bearer " +
  "LEASEHOLD_ADMIN_TOKEN whenever one is set; without one, changes are off, and reads too unless the server is bound to " +
  "this machine), and the worker's health and metrics where it serves them (no token)."

/** {@link Api} with the admin routes: what {@link layerWithAdmin} serves. */
export const ApiWithAdmin = Api.add(Admin.AdminGroup).annotate(OpenApi.Title, "leasehold").annotate(OpenApi.Description, apiDescription)

/** The API of a server without a consumer (`leasehold serve`): metrics and the admin routes. */
export const AdminServerApi = HttpApi.make("leasehold").add(MetricsGroup, Admin.AdminGroup)
  .annotate(OpenApi.Title, "leasehold")
  .annotate(OpenApi.Description, apiDescription)

/** The dashboard: its script and its styles admitted by their hashes, nothing else. */
const dashboardPage = HttpServerResponse.setHeader(
  HttpServerResponse.html(Dashboard.html),
  "content-security-policy",
  HttpSecurity.pagePolicy(Dashboard.html, { inlineStyles: false })
)

/** The dashboard at `/`, the OpenAPI document at `/openapi.json` and its reference page at `/docs`. */
const adminPages = <Groups extends HttpApiGroup.Constraint>(api: HttpApi.HttpApi<"leasehold", Groups>) =>
  Layer.mergeAll(
    HttpRouter.add("GET", "/", dashboardPage),
    HttpApiScalar.layer(api, { path: "/docs", scalar: { withDefaultFonts: false } })
  )

/** Where and how to serve the admin API too. */
export interface AdminHttpOptions extends HttpOptions, Omit<Admin.AdminOptions, "loopbackOnly"> {
  /**
   * The `Host` names the server answers besides the loopback ones (`localhost`, `127.x`,
   * `::1`), e.g. `["queues.example.com"]`; any other is answered 421 (the probes excepted).
   * Default: `LEASEHOLD_HTTP_ALLOWED_HOSTS` (comma-separated); with neither, a server bound
   * to this machine answers loopback names only and any other server every name.
   */
  readonly allowedHosts?: ReadonlyArray<string> | undefined
  /**
   * The path a reverse proxy serves the server under (`/leasehold`): requests under it are
   * answered as at the root (the root still answers). Default: `LEASEHOLD_HTTP_BASE_PATH`.
   */
  readonly basePath?: string | undefined
}

/**
 * {@link layer} plus the admin API (`/api/...`, see `Admin`), the dashboard
 * page at `/`, the OpenAPI document at `/openapi.json` and its reference at
 * `/docs`, on one server. Use it in a worker an operator should see and steer.
 * Needs the `QueueStore` besides the `Consumer`. Access (docs/admin.md): `/healthz`,
 * `/readyz` and `/metrics` are open to any request; the routes under `/api` need the admin
 * token (`token`, else `LEASEHOLD_ADMIN_TOKEN`) whenever one is set. With none set, the
 * changing routes answer 403, and so do the reading ones unless the server is bound to this
 * machine. The pages (`/`, `/docs`, `/openapi.json`) hold no data and need no token.
 */
export const layerWithAdmin = (
  options: AdminHttpOptions
): Layer.Layer<Listening, ConfigInvalid | HttpServerError.ServeError, Consumer | QueueStore> =>
  Layer.unwrap(Effect.map(QueueConfig.httpAddress(options), (address) => serveWithAdmin(address, options)))

/** Whether a server bound to `host` answers this machine only (`localhost`, `127.x`, `::1`, `::ffff:127.x`). */
export const servesThisMachineOnly = (host: string): boolean => HttpSecurity.isLoopback(host)

/** The policy of each page, computed once per response body (the pages are built once). */
const pagePolicies = new WeakMap<object, string>()

/**
 * The policy of a response that sets none: a page (the API reference) runs its own inline
 * scripts and may style itself at run time; anything else gets the strict one. The dashboard
 * sets its own, stricter (its styles by hash too).
 */
const policyOf = (response: HttpServerResponse.HttpServerResponse): string => {
  const body = response.body
  if (body._tag !== "Uint8Array" || !body.contentType.startsWith("text/html")) return HttpSecurity.strictPolicy
  let policy = pagePolicies.get(body)
  if (policy === undefined) {
    policy = HttpSecurity.pagePolicy(body.text ?? new TextDecoder().decode(body.body), { inlineStyles: true })
    pagePolicies.set(body, policy)
  }
  return policy
}

/**
 * The headers every response gets just before it is sent (refusals and the 404 of no route
 * included): the security headers, `no-store` on `/api` (its answers carry payloads and
 * errors), and on a 401 how to authenticate (`WWW-Authenticate`).
 */
const finalHeaders = (request: HttpServerRequest.HttpServerRequest, response: HttpServerResponse.HttpServerResponse) =>
  Effect.succeed(HttpServerResponse.setHeaders(response, {
    ...HttpSecurity.commonHeaders,
    "content-security-policy": response.headers["content-security-policy"] ?? policyOf(response),
    ...(HttpSecurity.pathOf(request.url).includes("/api/") ? { "cache-control": "no-store" } : {}),
    ...(response.status === 401 ? { "www-authenticate": 'Bearer realm="leasehold"' } : {})
  }))

/** The `Host` rule of a server and how its refusal names what it admits. */
interface HostCheck {
  readonly rule: HttpSecurity.HostRule
  readonly bind: string
  /** The path a reverse proxy serves the server under, if any. */
  readonly basePath?: string | undefined
}

const hostCheck = (address: QueueConfig.HttpAddress, allowed: ReadonlyArray<string> | undefined, basePath?: string): HostCheck => ({
  rule: { bindLoopback: HttpSecurity.isLoopback(address.host), allowed },
  bind: address.host,
  basePath
})

/** The 421 of a request whose `Host` the rule does not admit; undefined when it is admitted. */
const hostRefusal = (check: HostCheck, request: HttpServerRequest.HttpServerRequest) => {
  const host = request.headers["host"]
  if (HttpSecurity.probePaths.has(HttpSecurity.pathOf(request.url)) || HttpSecurity.hostAllowed(check.rule, host)) return undefined
  const admitted = check.rule.allowed === undefined ? "localhost" : `localhost, ${check.rule.allowed.join(", ")}`
  return HttpServerResponse.text(`this server answers requests for ${admitted} only (bound to ${check.bind}); got Host: ${host}`, {
    status: 421
  })
}

/**
 * A server's own rules, around every route: the {@link finalHeaders} on every response and,
 * for the admin server, the `Host` check of every route but the probes
 * ({@link HttpSecurity.probePaths}: Kubernetes asks them by the pod's IP). Bound to this
 * machine without an allowlist, only loopback names are answered (421 otherwise): a web page
 * elsewhere could point a name of its own at 127.0.0.1 (DNS rebinding) and have a browser on
 * this machine read the routes.
 */
const serverRules = (check: HostCheck | undefined) =>
  HttpRouter.middleware((httpEffect) =>
    Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
      const refusal = check === undefined ? undefined : hostRefusal(check, request)
      const routed = refusal === undefined ? atBasePath(check?.basePath, request, httpEffect) : Effect.succeed(refusal)
      return HttpEffect.withPreResponseHandler(routed, finalHeaders)
    }), { global: true })

/** A request under the base path routed without it; the base path itself redirected to `base/` (HttpSecurity.underBasePath). */
const atBasePath = <E, R>(base: string | undefined, request: HttpServerRequest.HttpServerRequest, routes: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>) => {
  const url = base === undefined ? request.url : HttpSecurity.underBasePath(request.url, base)
  if (url === "redirect") return Effect.succeed(HttpServerResponse.redirect(`${base}/`, { status: 308 }))
  return url === request.url ? routes : Effect.provideService(routes, HttpServerRequest.HttpServerRequest, request.modify({ url }))
}

/**
 * The routes of an admin server on `address`, with its `Host` check: the token and the
 * allowlist from `options`, else from the environment. The read routes are open without a
 * token only while the server is bound to this machine.
 */
const serveAdminApi = <Groups extends HttpApiGroup.Constraint, E, R>(
  address: QueueConfig.HttpAddress,
  options: Omit<AdminHttpOptions, "port" | "host">,
  api: HttpApi.HttpApi<"leasehold", Groups>,
  handlers: (admin: ReturnType<typeof Admin.layer>) => Layer.Layer<HttpApiGroup.ToService<"leasehold", Groups>, E, R>
) =>
  Layer.unwrap(Effect.map(Effect.all([QueueConfig.allowedHostsOf(options.allowedHosts), QueueConfig.basePathOf(options.basePath)]), ([allowed, base]) =>
    serveRoutes(
      address,
      Layer.merge(
        HttpApiBuilder.layer(api, { openapiPath: "/openapi.json" }).pipe(
          Layer.provide(handlers(Admin.layer({ token: options.token, loopbackOnly: HttpSecurity.isLoopback(address.host) })))
        ),
        adminPages(api)
      ),
      hostCheck(address, Option.getOrUndefined(allowed), Option.getOrUndefined(base))
    )))

const serveWithAdmin = (address: QueueConfig.HttpAddress, options: ProbeOptions & Omit<AdminHttpOptions, "port" | "host">) =>
  serveAdminApi(address, options, ApiWithAdmin, (admin) => Layer.mergeAll(healthHandlers(options), metricsHandlers, admin))

/**
 * The admin API, the dashboard, the OpenAPI document and `/metrics` without a
 * consumer: what `leasehold serve` runs against a database. Needs only the
 * `QueueStore` (consumers are listed when it is `PgQueueStore`). Access as for
 * {@link layerWithAdmin}.
 */
export const layerAdminServer = (
  options: AdminHttpOptions
): Layer.Layer<Listening, ConfigInvalid | HttpServerError.ServeError, QueueStore> =>
  Layer.unwrap(Effect.map(QueueConfig.httpAddress(options), (address) =>
    serveAdminApi(address, options, AdminServerApi, (admin) => Layer.merge(metricsHandlers, admin))))

/**
 * Serve `/healthz`, `/readyz` and `/metrics` on `port` (bound to `host`,
 * default 127.0.0.1). Use it when an orchestrator (Kubernetes probes, a load
 * balancer, systemd) or Prometheus must see the worker over HTTP. It needs the
 * `Consumer`; it reads the `SqlClient`, the store's schema, session liveness
 * and the Prometheus export when they are in context, so provide it with
 * `Layer.provideMerge` of a worker layer that exposes them. Listens while the
 * layer is in use; a port that cannot be bound fails the layer.
 */
export const layer = (
  options: HttpOptions
): Layer.Layer<Listening, ConfigInvalid | HttpServerError.ServeError, Consumer> =>
  Layer.unwrap(Effect.map(QueueConfig.httpAddress(options), (address) => serve(address, options)))

/**
 * {@link layer} configured by `LEASEHOLD_HTTP_PORT` (a whole number from 0 to
 * 65535) and `LEASEHOLD_HTTP_HOST` (default 127.0.0.1). Use it in a worker
 * whose deployment decides: with `LEASEHOLD_HTTP_PORT` unset or empty, no
 * server at all. A bad value fails with `ConfigInvalid` naming the variable.
 */
export const layerFromEnv = (
  options: ProbeOptions = {}
): Layer.Layer<never, ConfigInvalid | HttpServerError.ServeError, Consumer> =>
  // Serving, the layer provides `Listening` too (not in its type: it may provide nothing).
  Layer.unwrap(Effect.map(QueueConfig.httpFromEnv, Option.match({
    onNone: (): Layer.Layer<never, HttpServerError.ServeError, Consumer> => Layer.empty,
    onSome: (address) => serve(address, options)
  })))

/**
 * {@link layerWithAdmin} configured like {@link layerFromEnv} (`LEASEHOLD_HTTP_PORT`,
 * `LEASEHOLD_HTTP_HOST`; no server while the port is unset), the token from
 * `LEASEHOLD_ADMIN_TOKEN`, the `Host` allowlist from `LEASEHOLD_HTTP_ALLOWED_HOSTS`. Use it in a worker whose deployment decides
 * whether operators get the admin API and the dashboard.
 */
export const layerWithAdminFromEnv = (
  options: ProbeOptions = {}
): Layer.Layer<never, ConfigInvalid | HttpServerError.ServeError, Consumer | QueueStore> =>
  Layer.unwrap(Effect.map(QueueConfig.httpFromEnv, Option.match({
    onNone: (): Layer.Layer<never, HttpServerError.ServeError, Consumer | QueueStore> => Layer.empty,
    onSome: (address) => serveWithAdmin(address, options)
  })))
