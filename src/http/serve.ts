/**
 * What serves leasehold's HTTP API (`Http`'s layers): the Node HTTP server, the router with the
 * server's own rules (security headers, the `Host` check, the base path), the health and metrics
 * handlers, and for an admin server the admin API, the dashboard page and the API reference.
 * Loaded when one of `Http`'s server layers is built: a worker that serves no HTTP never loads
 * it, nor effect's router builder, the dashboard or `node:http` (test/ImportCost.test.ts).
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Effect, Layer, Option } from "effect"
import * as HttpEffect from "effect/http/HttpEffect"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import type * as HttpApi from "effect/http-api/HttpApi"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import type * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiScalar from "effect/http-api/HttpApiScalar"
import { createServer } from "node:http"
import * as Admin from "../Admin.ts"
import * as QueueConfig from "../QueueConfig.ts"
import { AdminServerApi, Api, ApiWithAdmin, Listening } from "./api.ts"
import * as Dashboard from "./dashboard.ts"
import { healthHandlers, metricsHandlers, type ProbeOptions } from "./health.ts"
import * as HttpSecurity from "./security.ts"

/** What an admin server is configured by besides its address (`Http.AdminHttpOptions`). */
export interface AdminServeOptions extends ProbeOptions {
  readonly token?: Admin.AdminOptions["token"]
  readonly allowedHosts?: ReadonlyArray<string> | undefined
  readonly basePath?: string | undefined
}

/** Serve `routes` on `address`, providing {@link Listening}. */
const serveRoutes = <E, R>(address: QueueConfig.HttpAddress, routes: Layer.Layer<never, E, R>, check?: HostCheck) => {
  const server = NodeHttpServer.layer(() => createServer(), { port: address.port, host: address.host })
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
  options: AdminServeOptions,
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

/** `Http.layer`'s server: the health and metrics routes on `address`. */
export const serve = (address: QueueConfig.HttpAddress, options: ProbeOptions) =>
  serveRoutes(address, HttpApiBuilder.layer(Api).pipe(Layer.provide([healthHandlers(options), metricsHandlers])))

/** `Http.layerWithAdmin`'s server: health, metrics and the admin API, with the pages. */
export const serveWithAdmin = (address: QueueConfig.HttpAddress, options: AdminServeOptions) =>
  serveAdminApi(address, options, ApiWithAdmin, (admin) => Layer.mergeAll(healthHandlers(options), metricsHandlers, admin))

/** `Http.layerAdminServer`'s server: metrics and the admin API, with the pages, without a consumer. */
export const serveAdminServer = (address: QueueConfig.HttpAddress, options: AdminServeOptions) =>
  serveAdminApi(address, options, AdminServerApi, (admin) => Layer.merge(metricsHandlers, admin))
