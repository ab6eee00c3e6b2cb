/**
 * The dashboard in a real browser: Debian's Chromium (headless, driven by
 * playwright-core; nothing downloads a browser) opens `/` of a worker's HTTP
 * server (`Http.layerWithAdmin`) running a real consumer on real PostgreSQL.
 *
 * - the queue row's counts move as messages are claimed and processed;
 * - the pause button (with the token in the page) stops claiming: the
 *   running messages finish, the ready ones stay ready, in the page and in the
 *   database, until resume;
 * - a running message's cancel button interrupts its handler and deletes it;
 * - a dead letter is listed and its redrive button sends it back to run;
 * - a screenshot is saved to .tmp/dashboard.png;
 * - the token guards reads too: without it or with a wrong one the page shows
 *   the 401 and no queue; a wrong one pauses nothing;
 * - the page, the API reference at /docs (every request kept on the server) and
 *   their Content-Security-Policy: nothing of theirs blocked, no framing.
 *
 * Skipped, saying why, only when chromium is missing outside CI
 * (support/RequireTool.ts; `.ci/run` installs it and sets CI, so there it always runs).
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Deferred, Effect, Layer, Option } from "effect"
import { mkdirSync } from "node:fs"
import type { Page } from "playwright-core"
import * as Consumer from "../src/Consumer.ts"
import * as Http from "../src/Http.ts"
import type { MessageId } from "../src/Message.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as PgTest from "./support/PgTest.ts"
import { chromiumFor, dashboardWorker, launch, openDashboard, waitPage } from "./support/Browser.ts"

const chromiumTool = chromiumFor("Dashboard.test.ts")
const runs = chromiumTool.runs
const token = "dashboard-test-token-4f9c21"

/** The cells of a queue's row as the page shows them, or undefined while it has none. */
const queueRow = (page: Page, queue: string) =>
  page.evaluate((q): Record<string, string> | undefined => {
    // Runs in the page (this project's TypeScript has no DOM types).
    const row = (globalThis as any).document.querySelector(`#queues tr[data-queue="${q}"]`)
    if (row === null) return undefined
    const out: Record<string, string> = {}
    for (const td of Array.from(row.querySelectorAll("td[data-field]")) as Array<any>) out[td.dataset.field] = td.textContent ?? ""
    return out
  }, queue)

/** Poll the page until `accept` takes the queue's row; the last row seen is in the failure. */
const waitRow = (page: Page, queue: string, what: string, accept: (row: Record<string, string>) => boolean) => {
  let last: unknown = "no row yet"
  return waitPage(`the page to show ${what}`, async () => {
    const row = await queueRow(page, queue)
    last = row
    return row !== undefined && accept(row) ? row : undefined
  }, () => JSON.stringify(last))
}

describe(`Dashboard in headless Chromium on a real worker and PostgreSQL${chromiumTool.skipNote}`, () => {
  it.live.skipIf(!runs)("counts move, pause stops claiming until resume, cancel interrupts a running handler, a dead letter is redriven; screenshot saved", () =>
    Effect.gen(function*() {
      // The handler: "work" waits for the gate (so messages stay in flight while the page looks);
      // "flaky" fails until `healed` (its message has one attempt: dead-lettered at once).
      const gate = yield* Deferred.make<void>()
      let healed = false
      const handled: Array<string> = []
      const handler: Consumer.Handler = (message) =>
        Effect.gen(function*() {
          if (message.task === "work") yield* Deferred.await(gate)
          if (message.task === "flaky" && !healed) return yield* Effect.fail(new Error("upstream said no"))
          handled.push(message.id)
        })
      const { base, store } = yield* dashboardWorker(handler, {
        token,
        gate,
        consumerId: "dashboard-worker",
        queues: ["emails", "reports"],
        concurrency: 2
      })

      // The token is in the tab's sessionStorage before the page loads (as after a reload): the
      // page reads with it from its first refresh, so no request of it is refused.
      const { page, problems } = yield* openDashboard(yield* launch(chromiumTool), `${base}/`, token)

      // A message that fails on its only attempt: a dead letter.
      const [flaky] = yield* store.send("reports", [{ task: "flaky", payload: { report: 7 }, maxAttempts: 1 }])
      yield* waitPage("the dead letter row", () => page.$(`#dead-letters tr[data-message="${flaky!.id}"]`).then((e) => e ?? undefined))
      // Its "dead at" is ISO 8601 in UTC, like the rest of the page and the CLI, not the browser's locale.
      const deadAt = yield* Effect.promise(() => page.textContent(`#dead-letters tr[data-message="${flaky!.id}"] td:nth-child(5)`))
      const [stored] = yield* store.deadLetters({ ids: [flaky!.id] })
      assert.strictEqual(deadAt, stored!.deadAt.toISOString())
      yield* waitRow(page, "reports", "reports: 1 dead", (r) => r.dead === "1")
      // Five messages that wait at the gate: two run (concurrency 2), three wait.
      const work = yield* store.send("emails", Array.from({ length: 5 }, (_, n) => ({ task: "work", payload: { n } })))
      yield* waitRow(page, "emails", "2 in flight and 3 ready", (r) => r.inFlight === "2" && r.ready === "3")
      yield* waitPage("the consumer row", () => page.$(`#consumers tr[data-consumer="dashboard-worker"]`).then((e) => e ?? undefined))
      yield* waitPage("two in-flight rows", async () => (await page.$$("#in-flight tr[data-message]")).length === 2 ? true : undefined)

      // Pause from the page; the running two finish, the three ready stay ready.
      yield* Effect.promise(() => page.click(`#queues tr[data-queue="emails"] button[data-action="pause"]`))
      yield* waitRow(page, "emails", "emails paused", (r) => r.paused === "paused")
      assert.isTrue((yield* store.queues()).find((q) => q.queue === "emails")!.paused, "paused in the database")
      yield* Effect.promise(() => page.screenshot({ path: screenshotPath(), fullPage: true }))
      // Cancel one of the two running from the page: its handler is interrupted, the message deleted.
      const running = yield* Effect.promise(() => page.$$eval("#in-flight tr[data-message]", (rows) => rows.map((r: any) => r.dataset.message as string)))
      const cancelled = running[0]!
      yield* Effect.promise(() => page.click(`#in-flight tr[data-message="${cancelled}"] button[data-action="cancel"]`))
      yield* waitPage("the cancelled message gone from the page", () =>
        page.$(`#in-flight tr[data-message="${cancelled}"]`).then((e) => e === null ? true : undefined))
      assert.isTrue(Option.isNone(yield* store.get(cancelled as MessageId)), "cancelled: deleted")
      assert.strictEqual((yield* store.attempts(cancelled as MessageId)).at(-1)?.outcome, "cancelled")
      assert.include(yield* Effect.promise(() => page.textContent("#notice")), `cancel ${cancelled}: done`)
      yield* Deferred.succeed(gate, undefined)
      yield* waitRow(page, "emails", "the running one finished, three still ready", (r) => r.inFlight === "0" && r.ready === "3")
      // Claiming stopped: over several refreshes (2 s each) and many polls (100 ms), nothing more ran.
      const paused = Date.now()
      yield* waitPage("3 s of pause", async () => Date.now() - paused >= 3_000 ? true : undefined)
      const row = yield* Effect.promise(() => queueRow(page, "emails"))
      assert.deepInclude(row, { ready: "3", inFlight: "0", paused: "paused" })
      assert.strictEqual((yield* store.stats("emails")).ready, 3, "the database agrees: nothing claimed while paused")
      assert.deepStrictEqual(handled.filter((id) => work.some((w) => w.id === id)), running.filter((id) => id !== cancelled))

      // Resume from the page: the rest runs.
      yield* Effect.promise(() => page.click(`#queues tr[data-queue="emails"] button[data-action="resume"]`))
      yield* waitRow(page, "emails", "emails drained after resume", (r) => r.paused === "no" && r.ready === "0" && r.inFlight === "0")
      assert.sameMembers(handled.filter((id) => work.some((w) => w.id === id)), work.map((w) => w.id).filter((id) => id !== cancelled))

      // Redrive the dead letter from the page; healed, it runs and is gone.
      healed = true
      yield* Effect.promise(() => page.click(`#dead-letters tr[data-message="${flaky!.id}"] button[data-action="redrive"]`))
      yield* waitPage("the dead letter gone from the page", () =>
        page.$(`#dead-letters tr[data-message="${flaky!.id}"]`).then((e) => e === null ? true : undefined))
      yield* waitPage("the redriven message handled", async () => handled.includes(flaky!.id) ? true : undefined)
      // Handled is not yet acked: the ack lands with the completer's next flush.
      yield* waitPage("the redriven message acked (gone from the table)", async () =>
        Option.isNone(await Effect.runPromise(store.get(flaky!.id))) ? true : undefined)
      const notice = yield* Effect.promise(() => page.textContent("#notice"))
      assert.include(notice, `redrive ${flaky!.id}: done`)

      // The counters come from this process's metrics: five messages acked (the page refreshes every 2 s).
      yield* waitPage("the acked counter at 5", async () => Number(await page.textContent(`[data-counter="acked"]`)) >= 5 ? true : undefined)
      assert.strictEqual(yield* Effect.promise(() => page.textContent(`[data-counter="doubleRuns"]`)), "0")
      assert.isAtLeast(Number(yield* Effect.promise(() => page.textContent(`[data-counter="cancelled"]`))), 1)
      assert.deepStrictEqual(problems, [], "no script errors in the page")
    }).pipe(Effect.scoped), { timeout: 60_000 })

  it.live.skipIf(!runs)("the token guards reads and changes: a wrong one shows 401 and pauses nothing; page and API reference run under their CSP", () =>
    Effect.gen(function*() {
      const context = yield* Layer.build(
        Http.layerAdminServer({ port: 0, token }).pipe(Layer.provideMerge(PgTest.storeLayer({ clock: "database" })))
      )
      const base = Context.get(context, Http.Listening).url
      const store = Context.get(context, QueueStore)
      yield* store.send("emails", [{ task: "work", payload: {} }])
      const browser = yield* launch(chromiumTool)
      const page = yield* Effect.promise(() => browser.newPage())
      // Anything the Content-Security-Policy blocked is reported on the console.
      const blocked: Array<string> = []
      page.on("console", (message) => {
        if (/Content Security Policy/i.test(message.text())) blocked.push(message.text())
      })
      page.on("pageerror", (error) => blocked.push(`page error: ${error.message}`))
      yield* Effect.promise(() => page.goto(`${base}/`))
      // No token: the reads are refused, the page says so and shows no queue.
      const status = (what: string, pattern: RegExp) =>
        waitPage(what, async () => {
          const text = await page.textContent("#status")
          return text !== null && pattern.test(text) ? text : undefined
        })
      yield* status("the refused read", /refresh failed: .*401 this server requires the admin token to read/)
      assert.isUndefined(yield* Effect.promise(() => queueRow(page, "emails")), "nothing read without the token")
      yield* Effect.promise(() => page.fill("#token", "not-the-token-at-all"))
      yield* status("the wrong token refused", /401 wrong admin token/)
      assert.isUndefined(yield* Effect.promise(() => queueRow(page, "emails")))
      // The right token: the page reads at once (typing refreshes), then a wrong one is typed again.
      yield* Effect.promise(() => page.fill("#token", token))
      yield* waitRow(page, "emails", "the emails row", (r) => r.ready === "1")
      yield* Effect.promise(() => page.fill("#token", "not-the-token-at-all"))
      yield* Effect.promise(() => page.click(`#queues tr[data-queue="emails"] button[data-action="pause"]`))
      const notice = yield* waitPage("the refusal", async () => {
        const text = await page.textContent("#notice")
        return text !== null && text.includes("401") ? text : undefined
      })
      assert.include(notice, "wrong admin token")
      assert.isFalse((yield* store.queues()).find((q) => q.queue === "emails")!.paused)
      // The token survives a reload (sessionStorage), as the page promises.
      yield* Effect.promise(() => page.reload())
      assert.strictEqual(yield* Effect.promise(() => page.inputValue("#token")), "not-the-token-at-all")
      assert.deepStrictEqual(blocked, [], "the page's own script and style run under its policy")

      // The API reference renders offline: every request it makes stays on this server.
      const external: Array<string> = []
      yield* Effect.promise(() =>
        page.route("**/*", (route) => {
          const url = route.request().url()
          if (url.startsWith(base)) return route.continue()
          external.push(url)
          return route.abort()
        })
      )
      yield* Effect.promise(() => page.goto(`${base}/docs`))
      // Rendered by the inline script: visible text, not the script's source.
      yield* Effect.promise(() => page.getByText("Download OpenAPI Document").first().waitFor({ state: "visible", timeout: 20_000 }))
      assert.deepStrictEqual(external, [], "no request left the server")
      assert.deepStrictEqual(blocked, [], "the API reference runs under its policy")
      // The policy forbids framing: a page of another origin that frames the dashboard gets nothing.
      const framing = yield* Effect.promise(() => browser.newPage())
      const refusals: Array<string> = []
      framing.on("console", (message) => refusals.push(message.text()))
      yield* Effect.promise(() => framing.setContent(`<iframe src="${base}/"></iframe>`))
      yield* waitPage("the frame refused", async () => refusals.some((t) => /frame-ancestors/.test(t)) ? true : undefined)
    }).pipe(Effect.scoped), { timeout: 60_000 })
})

const screenshotPath = () => {
  mkdirSync(".tmp", { recursive: true })
  return ".tmp/dashboard.png"
}
