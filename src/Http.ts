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
import { Effect, Layer, Option } from "effect"
import type * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import type * as HttpServerError from "effect/http/HttpServerError"
import type * as Admin from "./Admin.ts"
import type { Consumer } from "./Consumer.ts"
import type { Listening } from "./http/api.ts"
import type * as Health from "./http/health.ts"
import type * as Serve from "./http/serve.ts"
import * as HttpSecurity from "./http/security.ts"
import * as QueueConfig from "./QueueConfig.ts"
import type { ConfigInvalid } from "./QueueError.ts"
import type { QueueStore } from "./QueueStore.ts"

// The API's definitions load with this module (an application extends them); what serves them
// (http/serve.ts, http/health.ts: effect's router builder, the Node server, the dashboard page)
// loads when a server layer is built, so a worker that serves no HTTP does not pay for it.
export { AdminServerApi, Api, ApiWithAdmin, Check, HealthGroup, Listening, Live, MetricsGroup, MetricsOff, NotReady, Ready, Unhealthy } from "./http/api.ts"
export type { ProbeOptions } from "./http/health.ts"

const handling = Effect.promise(() => import("./http/health.ts"))

/** The server `build` makes from the serving module, loaded when the layer is built. */
const served = <A, E, R>(build: (serve: typeof Serve) => Layer.Layer<A, E, R>): Layer.Layer<A, E, R> =>
  Layer.unwrap(Effect.map(Effect.promise(() => import("./http/serve.ts")), build))

/** Where and how to serve. */
export interface HttpOptions extends Health.ProbeOptions {
  /** 0 picks a free port (see {@link Listening}). */
  readonly port: number
  /** Default 127.0.0.1 (this machine only); `0.0.0.0` or `::` for every interface. */
  readonly host?: string | undefined
}

/** The handlers of {@link HealthGroup} over the `Consumer` in context. */
export const healthHandlers = (
  options: Health.ProbeOptions = {}
): Layer.Layer<HttpApiGroup.Service<"leasehold", "health">, never, Consumer> =>
  Layer.unwrap(Effect.map(handling, (health) => health.healthHandlers(options)))

/** The handler of {@link MetricsGroup}: the Prometheus export in context, if any. */
export const metricsHandlers: Layer.Layer<HttpApiGroup.Service<"leasehold", "metrics">> = Layer.unwrap(
  Effect.map(handling, (health) => health.metricsHandlers)
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
  Layer.unwrap(Effect.map(QueueConfig.httpAddress(options), (address) => served((serve) => serve.serveWithAdmin(address, options))))

/** Whether a server bound to `host` answers this machine only (`localhost`, `127.x`, `::1`, `::ffff:127.x`). */
export const servesThisMachineOnly = (host: string): boolean => HttpSecurity.isLoopback(host)

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
    served((serve) => serve.serveAdminServer(address, options))))

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
  Layer.unwrap(Effect.map(QueueConfig.httpAddress(options), (address) => served((serve) => serve.serve(address, options))))

/**
 * {@link layer} configured by `LEASEHOLD_HTTP_PORT` (a whole number from 0 to
 * 65535) and `LEASEHOLD_HTTP_HOST` (default 127.0.0.1). Use it in a worker
 * whose deployment decides: with `LEASEHOLD_HTTP_PORT` unset or empty, no
 * server at all. A bad value fails with `ConfigInvalid` naming the variable.
 */
export const layerFromEnv = (
  options: Health.ProbeOptions = {}
): Layer.Layer<never, ConfigInvalid | HttpServerError.ServeError, Consumer> =>
  // Serving, the layer provides `Listening` too (not in its type: it may provide nothing).
  Layer.unwrap(Effect.map(QueueConfig.httpFromEnv, Option.match({
    onNone: (): Layer.Layer<never, HttpServerError.ServeError, Consumer> => Layer.empty,
    onSome: (address) => served((serve) => serve.serve(address, options))
  })))

/**
 * {@link layerWithAdmin} configured like {@link layerFromEnv} (`LEASEHOLD_HTTP_PORT`,
 * `LEASEHOLD_HTTP_HOST`; no server while the port is unset), the token from
 * `LEASEHOLD_ADMIN_TOKEN`, the `Host` allowlist from `LEASEHOLD_HTTP_ALLOWED_HOSTS`. Use it in a worker whose deployment decides
 * whether operators get the admin API and the dashboard.
 */
export const layerWithAdminFromEnv = (
  options: Health.ProbeOptions = {}
): Layer.Layer<never, ConfigInvalid | HttpServerError.ServeError, Consumer | QueueStore> =>
  Layer.unwrap(Effect.map(QueueConfig.httpFromEnv, Option.match({
    onNone: (): Layer.Layer<never, HttpServerError.ServeError, Consumer | QueueStore> => Layer.empty,
    onSome: (address) => served((serve) => serve.serveWithAdmin(address, options))
  })))
