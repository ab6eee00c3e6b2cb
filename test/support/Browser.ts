/**
 * Debian's Chromium for the dashboard's browser tests (headless, driven by playwright-core;
 * nothing downloads a browser): where it is, whether the suite runs (support/RequireTool.ts),
 * a browser for the length of the test's scope, and waiting on what a page shows.
 */
import { Effect } from "effect"
import { type Browser, chromium, type Page } from "playwright-core"
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
