/**
 * The dashboard's views (issue 31) in Debian's Chromium (headless, playwright-core), against a
 * worker's HTTP server (`Http.layerWithAdmin`) running a real consumer on real PostgreSQL:
 *
 * - the overview's charts move while messages flow (the throughput chart's total grows from
 *   refresh to refresh; the depth chart gets the samples the worker stores);
 * - a search finds a message by a payload field, and the search is the view's URL;
 * - the message page of a dead letter shows each of its attempts with its error;
 * - a bulk redrive of 1,000 dead letters shows the count and asks first (nothing redriven
 *   meanwhile), then redrives them all;
 * - a cancel from the message page of a running message stops its handler;
 * - the schedules and consumers pages list theirs (the consumers' queues, concurrency and lease
 *   as their heartbeat writes them); screenshots of the main pages go to
 *   .tmp/dashboard-<view>.png (docs/ holds copies).
 *
 * Skipped, saying why, only when chromium is missing outside CI (support/RequireTool.ts).
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Option } from "effect"
import { mkdirSync } from "node:fs"
import type { Page } from "playwright-core"
import * as Consumer from "../src/Consumer.ts"
import * as Finish from "./support/Finish.ts"
import { chromiumFor, dashboardWorker, launch, openDashboard, waitPage } from "./support/Browser.ts"

const chromiumTool = chromiumFor("DashboardViews.test.ts")
const token = "dashboard-views-token-7c1e95"

/** A screenshot of the page (whole, or the window only: a long table is the same row again). */
const shot = (page: Page, view: string, fullPage = true) =>
  Effect.promise(() => {
    mkdirSync(".tmp", { recursive: true })
    return page.screenshot({ path: `.tmp/dashboard-${view}.png`, fullPage })
  })

/** A data attribute of the chart of `kind`, as a number (undefined while there is no chart). */
const chartFigure = (page: Page, kind: string, figure: string) =>
  page.evaluate(([k, f]) => {
    const svg = (globalThis as any).document.querySelector(`svg[data-chart="${k}"]`)
    return svg === null ? undefined : Number(svg.dataset[f!])
  }, [kind, figure] as const)

/** The ids of the rows of table body `id`. */
const rowIds = (page: Page, id: string) =>
  page.$$eval(`#${id} tr[data-message]`, (rows) => rows.map((r: any) => r.dataset.message as string))

describe(`Dashboard views in headless Chromium on a real worker and PostgreSQL${chromiumTool.skipNote}`, () => {
  it.live.skipIf(!chromiumTool.runs)("charts move, search by payload, a message's attempts, a bulk redrive of 1,000 asks first, a cancel stops a handler", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      let interrupted = 0
      const handler: Consumer.Handler = (message, context) =>
        Effect.gen(function*() {
          if (message.task === "hold") {
            yield* context.progress({ step: 1, of: 3, order: "A-17" })
            yield* Deferred.await(gate).pipe(Effect.onInterrupt(() => Effect.sync(() => interrupted++)))
          }
          if (message.task === "flaky") return yield* Effect.fail(new Error(`upstream refused attempt ${message.attempts}`))
        })
      const { base, store } = yield* dashboardWorker(handler, {
        token,
        gate,
        consumerId: "views-worker",
        queues: ["orders", "held"],
        concurrency: 4,
        retryBase: "50 millis",
        retryMax: "100 millis"
      })
      yield* store.upsertSchedules([
        { key: "nightly-report", cron: "0 3 * * *", tz: "UTC", queue: "orders", task: "report", payload: {}, nextSlot: new Date(Date.now() + 3_600_000) }
      ], { seenBy: "views-worker", now: new Date() })
      const { page, problems } = yield* openDashboard(yield* launch(chromiumTool), `${base}/`, token)

      // Charts move while messages flow: batches sent while the page refreshes.
      const totals: Array<number> = []
      for (let round = 0; round < 4; round++) {
        yield* store.send("orders", Array.from({ length: 25 }, (_, n) => ({ task: "bill", payload: { customer: { id: round * 100 + n } } })))
        const seen = totals.at(-1) ?? -1
        const total = yield* waitPage(`the throughput chart past ${seen}`, async () => {
          const t = await chartFigure(page, "throughput", "total")
          return t !== undefined && t > seen && t >= (round + 1) * 25 ? t : undefined
        }, () => `totals so far ${totals.join(", ")}`)
        totals.push(total)
      }
      assert.isTrue(totals.every((t, i) => i === 0 || t > totals[i - 1]!), `the chart moved each time: ${totals.join(", ")}`)
      yield* waitPage("a depth sample in the chart", async () => ((await chartFigure(page, "depth", "samples")) ?? 0) >= 1 ? true : undefined)

      // A search by a payload field finds the one message; the search is the URL.
      const [wanted] = yield* store.send("held", [{ task: "hold", payload: { customer: { id: 4242 }, order: "A-17" } }])
      yield* Effect.promise(() => page.click(`nav a[data-nav="search"]`))
      yield* Effect.promise(() => page.fill(`#search-form input[name="payload"]`, "customer.id = 4242"))
      yield* Effect.promise(() => page.click(`#search-form button[data-action="search"]`))
      yield* waitPage("the search result", async () => {
        const ids = await rowIds(page, "search-results")
        return ids.length === 1 && ids[0] === wanted!.id ? true : undefined
      })
      assert.include(yield* Effect.promise(() => page.evaluate(() => (globalThis as any).location.hash as string)), "payload=customer.id")
      yield* shot(page, "search")

      // The message page of the running message: its holder; cancel stops the handler.
      yield* Effect.promise(() => page.click(`#search-results tr[data-message="${wanted!.id}"] a`))
      yield* waitPage("the lease holder on the message page", async () =>
        (await page.textContent(`#message-rows td[data-field="leasedBy"]`)) === "views-worker" ? true : undefined)
      assert.include(yield* Effect.promise(() => page.textContent("#message-payload")), "A-17")
      // The progress its handler reported, on its page.
      const progress = yield* waitPage("the reported progress on the message page", async () => {
        const text = await page.textContent("#message-progress-value").catch(() => null)
        return text !== null && text.includes('"step": 1') ? text : undefined
      })
      assert.include(progress, '"of": 3')
      yield* Effect.promise(() => page.click(`#message-actions button[data-action="cancel"]`))
      yield* waitPage("the handler interrupted", async () => interrupted === 1 ? true : undefined)
      yield* waitPage("the message gone", async () =>
        Option.isNone(await Effect.runPromise(store.get(wanted!.id))) ? true : undefined)
      assert.strictEqual((yield* store.attempts(wanted!.id)).at(-1)?.outcome, "cancelled")

      // A dead letter's page shows each attempt with its error.
      const [flaky] = yield* store.send("orders", [{ task: "flaky", payload: { customer: { id: 9 } }, maxAttempts: 3 }])
      yield* waitPage("the flaky message dead", async () =>
        Option.getOrUndefined(await Effect.runPromise(store.get(flaky!.id)))?.state === "dead" ? true : undefined)
      yield* Effect.promise(() => page.goto(`${base}/#/message/${flaky!.id}`))
      const attempts = yield* waitPage("three attempts listed", async () => {
        const rows = await page.$$eval("#message-attempts tr[data-attempt]", (trs) =>
          trs.map((tr: any) => [tr.querySelector('[data-field="outcome"]').textContent, tr.querySelector('[data-field="detail"]').textContent]))
        return rows.length === 3 ? rows : undefined
      })
      assert.deepStrictEqual(attempts.map((a) => a[0]), ["retried", "retried", "dead-lettered"])
      assert.isTrue(attempts.every((a) => /upstream refused attempt \d/.test(a[1]!)), JSON.stringify(attempts))
      yield* shot(page, "message")

      // 1,000 dead letters in a queue no consumer takes; a bulk redrive counts, asks, then redrives all.
      yield* store.send("archive", Array.from({ length: 1_000 }, (_, n) => ({ task: "old", payload: { n }, maxAttempts: 1 })))
      for (let left = 1_000; left > 0; left -= 500) {
        const claims = yield* store.claim("archive", { lease: "1 minute", limit: 500, consumer: "elsewhere" })
        yield* store.complete(yield* Effect.forEach(claims, (c) =>
          Finish.completion(store, c, { _tag: "DeadLetter", reason: "max attempts", error: "gone" }, "dead-lettered", "gone")))
      }
      yield* Effect.promise(() => page.goto(`${base}/#/search?queue=archive&state=dead`))
      yield* waitPage("the dead letters listed", async () => (await rowIds(page, "search-results")).length === 50 ? true : undefined)
      yield* Effect.promise(() => page.selectOption("#bulk-action", "redrive"))
      yield* Effect.promise(() => page.click("#bulk-start"))
      const asked = yield* waitPage("the confirmation", () => page.textContent(`#bulk-confirm [data-field="count"]`).then((t) => t ?? undefined))
      assert.strictEqual(asked, "1000")
      yield* shot(page, "bulk", false)
      assert.strictEqual((yield* store.stats("archive")).dead, 1_000, "nothing redriven before the confirmation")
      yield* Effect.promise(() => page.click(`#bulk-confirm button[data-action="confirm redrive"]`))
      yield* waitPage("the bulk outcome", async () => ((await page.textContent("#notice")) ?? "").includes("1000 message(s) in 2 batch(es)") ? true : undefined)
      const after = yield* store.stats("archive")
      assert.deepInclude(after, { dead: 0, ready: 1_000 })

      // Schedules and consumers.
      yield* Effect.promise(() => page.goto(`${base}/#/schedules`))
      yield* waitPage("the schedule row", () => page.$(`#schedules tr[data-schedule="nightly-report"]`).then((e) => e ?? undefined))
      assert.match((yield* Effect.promise(() => page.textContent(`#schedules tr[data-schedule="nightly-report"] td[data-field="seen"]`))) ?? "", /^yes, by views-worker/)
      yield* shot(page, "schedules")
      yield* Effect.promise(() => page.goto(`${base}/#/consumers`))
      yield* waitPage("the consumer row", () => page.$(`#consumer-rows tr[data-consumer="views-worker"]`).then((e) => e ?? undefined))
      assert.strictEqual(yield* Effect.promise(() => page.textContent(`#consumer-rows tr[data-consumer="views-worker"] td[data-field="liveness"]`)), "alive")
      const cellOf = (field: string) => page.textContent(`#consumer-rows tr[data-consumer="views-worker"] td[data-field="${field}"]`)
      assert.strictEqual(yield* Effect.promise(() => cellOf("queues")), "orders, held")
      assert.strictEqual(yield* Effect.promise(() => cellOf("concurrency")), "4")
      assert.strictEqual(yield* Effect.promise(() => cellOf("lease")), "5s")
      yield* shot(page, "consumers")
      // Back to the overview once the depth chart has a line (a second sample, 10 s after the first).
      yield* Effect.promise(() => page.goto(`${base}/#/`))
      yield* waitPage("two depth samples", async () => ((await chartFigure(page, "depth", "samples")) ?? 0) >= 2 ? true : undefined)
      yield* shot(page, "overview")
      // The message page of the cancelled message asked once more and got its 404 (the browser logs that).
      assert.deepStrictEqual(problems.filter((p) => !/Failed to load resource: .* 404/.test(p)), [], "no script errors in the page")
    }).pipe(Effect.scoped), { timeout: 120_000 })
})
