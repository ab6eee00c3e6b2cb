/**
 * The admin API served for a test: `Http.layerAdminServer` on an ephemeral port over a store
 * layer, for the length of the test's scope, and requests to it with `fetch`.
 */
import { ConfigProvider, Context, Effect, Exit, Layer, Logger, Option, Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as Http from "../../src/Http.ts"
import { QueueStore } from "../../src/QueueStore.ts"
import { StoreSettings } from "../../src/StoreSettings.ts"

/** A response: its status, its body as JSON (undefined when it is not JSON) and as text, and its headers. */
export interface Reply {
  readonly status: number
  readonly body: any
  readonly text: string
  readonly contentType: string | null
  readonly authenticate: string | null
  readonly headers: Headers
}

/** A request to the server at `base`, with a JSON body and an Authorization header when given. */
export const request = (base: string, method: "GET" | "POST" | "PUT" | "DELETE", path: string, options: { body?: unknown; raw?: string; auth?: string } = {}) =>
  Effect.promise(async (): Promise<Reply> => {
    const headers: Record<string, string> = {}
    if (options.body !== undefined || options.raw !== undefined) headers["content-type"] = "application/json"
    if (options.auth !== undefined) headers.authorization = options.auth
    const body = options.raw ?? (options.body === undefined ? undefined : JSON.stringify(options.body))
    const response = await fetch(`${base}${path}`, {
      method,
      headers,
      ...(body === undefined ? {} : { body }),
      signal: AbortSignal.timeout(10_000)
    })
    const text = await response.text()
    let json: unknown = undefined
    try {
      json = JSON.parse(text)
    } catch {
      json = undefined
    }
    return {
      status: response.status,
      body: json,
      text,
      contentType: response.headers.get("content-type"),
      authenticate: response.headers.get("www-authenticate"),
      headers: response.headers
    }
  })

/** Serve the admin API over `store` (in the returned context), for the length of the test's scope. */
export const serve = <E>(
  storeLayer: Layer.Layer<QueueStore, E>,
  options: {
    readonly token?: string
    readonly env?: Record<string, string>
    readonly logs?: Array<string>
    readonly host?: string
    readonly allowedHosts?: ReadonlyArray<string>
  } = {}
) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    yield* Effect.addFinalizer(() => Scope.close(scope, Exit.void))
    const logs = options.logs ?? []
    const logger = Logger.make<unknown, void>(({ logLevel, message }) => {
      logs.push(`${logLevel} ${Array.isArray(message) ? message.map(String).join(" ") : String(message)}`)
    })
    const layer = Http.layerAdminServer({ port: 0, token: options.token, host: options.host, allowedHosts: options.allowedHosts }).pipe(
      Layer.provideMerge(storeLayer),
      Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env: options.env ?? {} }))),
      Layer.provide(Logger.layer([logger], { mergeWithExisting: true }))
    )
    const context = yield* Layer.buildWithScope(layer, scope)
    const listening = Context.get(context, Http.Listening)
    // A server bound to every interface is asked on 127.0.0.1.
    const base = options.host === "0.0.0.0" ? `http://127.0.0.1:${listening.port}` : listening.url
    return {
      base,
      store: Context.get(context, QueueStore),
      sql: Context.getOption(context, SqlClient.SqlClient),
      schema: Option.map(Context.getOption(context, StoreSettings), (s) => s.schema)
    }
  })

/** An Authorization header bearing `t`. */
export const bearer = (t: string) => `Bearer ${t}`
