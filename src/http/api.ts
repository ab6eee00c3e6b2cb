/**
 * The definitions of leasehold's HTTP API (`Http` re-exports them): the health and metrics
 * groups, their schemas, the API they make and the admin server's APIs. Values an application
 * may extend or serve, so they are built when the module loads; what serves them (the handlers,
 * the router, the Node server, the dashboard page) is in `http/health.ts` and `http/serve.ts`,
 * loaded when a server layer is built.
 */
import { Context, Schema } from "effect"
import * as HttpApi from "effect/http-api/HttpApi"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"
import * as OpenApi from "effect/http-api/OpenApi"
import { prometheusContentType } from "../Observability.ts"
import { AdminGroup } from "./adminApi.ts"

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

/** The address the server listens on, once it does. */
export class Listening extends Context.Service<Listening, {
  /** e.g. `http://127.0.0.1:9464` */
  readonly url: string
  readonly port: number
}>()("leasehold/Http/Listening") {}

const apiDescription = "Operate leasehold queues: the admin routes under /api (they need Authorization: Bearer " +
  "LEASEHOLD_ADMIN_TOKEN whenever one is set; without one, changes are off, and reads too unless the server is bound to " +
  "this machine), and the worker's health and metrics where it serves them (no token)."

/** {@link Api} with the admin routes: what `Http.layerWithAdmin` serves. */
export const ApiWithAdmin = Api.add(AdminGroup).annotate(OpenApi.Title, "leasehold").annotate(OpenApi.Description, apiDescription)

/** The API of a server without a consumer (`leasehold serve`): metrics and the admin routes. */
export const AdminServerApi = HttpApi.make("leasehold").add(MetricsGroup, AdminGroup)
  .annotate(OpenApi.Title, "leasehold")
  .annotate(OpenApi.Description, apiDescription)
