/**
 * Debian's Chromium for the dashboard's browser tests (headless, driven by playwright-core;
 * nothing downloads a browser): where it is, whether the suite runs (support/RequireTool.ts),
 * a browser for the length of the test's scope, waiting on what a page shows, and the worker
 * the dashboard tests open (a real consumer with session liveness on real PostgreSQL, its HTTP
 * server with the admin API).
 */
import { Context, Deferred, Effect, Exit, Layer, Scope } from "effect"
import { SqlClient } from "effect/sql"
import { type Browser, chromium, type Page } from "playwright-core"
import * as Consumer from "../../src/Consumer.ts"
import * as ConsumerPresence from "../../src/ConsumerPresence.ts"
import * as Http from "../../src/Http.ts"
import type * as QueueConfig from "../../src/QueueConfig.ts"
import { QueueStore } from "../../src/QueueStore.ts"
import { StoreSettings } from "../../src/StoreSettings.ts"
import * as PgTest from "./PgTest.ts"
import { requireTool, type Tool } from "./RequireTool.ts"
import { waitForAsync } from "./Wait.ts"

/** Chromium as a suite named `suite` needs it. */
export const chromiumFor = (suite: string): Tool => requireTool("chromium", suite)

/** A headless Chromium (the tool's path, else Debian's), closed when the scope closes. */
export const launch = (tool: Tool) =>
  Effect.acquireRelease(
    Effect.promise(() => chromium.launch({ executablePath: tool.path ?? "/usr/bin/chromium", headless: true, args: ["--no-sandbox"] })),
    (b: Browser) => Effect.promise(() => b.close())
  )

/** Poll `check` (20 s, every 100 ms) until it yields a value, or die naming `what`; `describe` adds the last state seen. */
export const waitPage = <A>(what: string, check: () => Promise<A | undefined>, describe?: () => string) =>
  Effect.promise(() => waitForAsync(what, check, { timeoutMs: 20_000, intervalMs: 100, describe }))

/**
 * A new page of `browser` on `url` with `token` in its sessionStorage before it loads (so its
 * first refresh reads with it), and the script errors it reports (uncaught errors, console errors).
 */
export const openDashboard = (browser: Browser, url: string, token: string) =>
  Effect.gen(function*() {
    const page: Page = yield* Effect.promise(() => browser.newPage({ viewport: { width: 1280, height: 900 } }))
    const problems: Array<string> = []
    page.on("pageerror", (error) => problems.push(`page error: ${error.message}`))
    page.on("console", (message) => {
      if (message.type() === "error") problems.push(`console: ${message.text()}`)
    })
    yield* Effect.promise(() => page.addInitScript((t) => (globalThis as any).sessionStorage.setItem("leasehold-token", t), token))
    yield* Effect.promise(() => page.goto(url))
    return { page, problems }
  })

/**
 * A worker for a dashboard test, for the length of the test's scope: `Http.layerWithAdmin` with
 * `token` over a real consumer (`options`; fast polling, a short lease) with session liveness on
 * a fresh PostgreSQL schema (its client and schema returned too, for a workflow engine beside it). On the way out `gate` is opened first, so a handler waiting on it
 * lets the consumer stop at once, whatever the test reached.
 */
export const dashboardWorker = (
  handler: Consumer.Handler,
  options: { readonly token: string; readonly gate: Deferred.Deferred<void> } & QueueConfig.ConsumerOptions
) =>
  Effect.gen(function*() {
    const { gate, token, ...consumer } = options
    const scope = yield* Scope.make()
    yield* Effect.addFinalizer(() => Effect.andThen(Deferred.succeed(gate, undefined), Scope.close(scope, Exit.void)))
    const context = yield* Layer.buildWithScope(
      Http.layerWithAdmin({ port: 0, token }).pipe(
        Layer.provideMerge(Consumer.layer(handler, { pollInterval: "100 millis", lease: "5 seconds", shutdownGrace: "2 seconds", ...consumer })),
        Layer.provideMerge(ConsumerPresence.layerPg({ mode: "on", heartbeat: 250, staleAfter: 2_000, reapEvery: 500 })),
        Layer.provideMerge(PgTest.storeLayer({ clock: "database", maxConnections: 10 }))
      ),
      scope
    )
    return {
      base: Context.get(context, Http.Listening).url,
      store: Context.get(context, QueueStore),
      sql: Context.get(context, SqlClient.SqlClient),
      schema: Context.get(context, StoreSettings).schema
    }
  })
