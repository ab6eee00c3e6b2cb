/**
 * The dashboard's remaining actions (issue 31: "drive every page and action") in Debian's
 * Chromium (headless, playwright-core), against a worker's HTTP server (`Http.layerWithAdmin`)
 * running a real consumer on real PostgreSQL. DashboardViews.test.ts drives the message page's
 * cancel and the bulk redrive; this file drives the others, on a queue no consumer takes (so
 * nothing moves but what the page does):
 *
 * - the message page: "retry now" of a delayed message, "redrive" of a dead letter, "purge" of
 *   another, which asks first (still dead until confirmed);
 * - the search view's bulk purge of the dead letters, bulk retry of the delayed, bulk cancel of
 *   the ready: each shows its count and asks first, touches nothing before the confirmation,
 *   then touches exactly what it counted.
 *
 * Skipped, saying why, only when chromium is missing outside CI (support/RequireTool.ts).
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Option } from "effect"
import type { Page } from "playwright-core"
import type * as Consumer from "../src/Consumer.ts"
import type { MessageId } from "../src/Message.ts"
import type { QueueStoreShape } from "../src/QueueStore.ts"
import * as Finish from "./support/Finish.ts"
import { chromiumFor, dashboardWorker, launch, openDashboard, waitPage } from "./support/Browser.ts"

const chromiumTool = chromiumFor("DashboardActions.test.ts")
const token = "dashboard-actions-token-41b7d2"
const queue = "desk"

/** The state of message `id` as the store reads it now ("gone" once deleted). */
const stateOf = (store: QueueStoreShape, id: MessageId) =>
  Effect.map(store.get(id), Option.match({ onNone: () => "gone", onSome: (m) => m.state as string }))

/** Wait until message `id` is in `state`. */
const waitState = (store: QueueStoreShape, id: MessageId, state: string) =>
  waitPage(`message ${id} ${state}`, async () => (await Effect.runPromise(stateOf(store, id))) === state ? true : undefined)

/** Open message `id`'s page and click its action `label` once the page offers it. */
const clickMessageAction = (page: Page, base: string, id: string, label: string) =>
  Effect.gen(function*() {
    yield* Effect.promise(() => page.goto(`${base}/#/message/${id}`))
    const selector = `#message-actions button[data-action="${label}"]`
    yield* waitPage(`the "${label}" button of message ${id}`, () => page.$(selector).then((e) => e ?? undefined))
    yield* Effect.promise(() => page.click(selector))
  })

/**
 * In the search view filtered by `state`, start bulk `action`: answers the count the page asks
 * about, the confirmation not yet given.
 */
const askBulk = (page: Page, base: string, state: string, action: string) =>
  Effect.gen(function*() {
    yield* Effect.promise(() => page.goto(`${base}/#/search?queue=${queue}&state=${state}`))
    yield* waitPage(`the ${state} messages listed`, async () => {
      const rows = await page.$$(`#search-results tr[data-message]`)
      return rows.length > 0 ? true : undefined
    })
    yield* Effect.promise(() => page.selectOption("#bulk-action", action))
    yield* Effect.promise(() => page.click("#bulk-start"))
    const asked = yield* waitPage(`the ${action} confirmation`, async () => {
      const box = await page.$(`#bulk-confirm [data-confirm="confirm ${action}"] [data-field="count"]`)
      return box === null ? undefined : (await box.textContent()) ?? undefined
    })
    return Number(asked)
  })

/** Confirm bulk `action` and wait for the page's outcome notice of `count` messages. */
const confirmBulk = (page: Page, action: string, count: number) =>
  Effect.gen(function*() {
    yield* Effect.promise(() => page.click(`#bulk-confirm button[data-action="confirm ${action}"]`))
    yield* waitPage(`the bulk ${action} outcome`, async () =>
      ((await page.textContent("#notice")) ?? "").includes(`bulk ${action}: ${count} message(s)`) ? true : undefined)
  })

describe(`Dashboard actions in headless Chromium on a real worker and PostgreSQL${chromiumTool.skipNote}`, () => {
  it.live.skipIf(!chromiumTool.runs)("retry now, redrive and purge from the message page; bulk purge, retry and cancel ask first, then do what they counted", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const handler: Consumer.Handler = () => Effect.void
      const { base, store } = yield* dashboardWorker(handler, { token, gate, consumerId: "actions-worker", queues: ["elsewhere"] })

      // On a queue no consumer takes: 3 dead letters, 2 delayed an hour, 2 ready.
      const dead = yield* store.send(queue, Array.from({ length: 3 }, (_, n) => ({ task: "old", payload: { n }, maxAttempts: 1 })))
      const claims = yield* store.claim(queue, { lease: "1 minute", limit: 3, consumer: "elsewhere" })
      assert.lengthOf(claims, 3)
      yield* store.complete(yield* Effect.forEach(claims, (c) =>
        Finish.completion(store, c, { _tag: "DeadLetter", reason: "max attempts", error: "gone" }, "dead-lettered", "gone")))
      const delayed = yield* store.send(queue, Array.from({ length: 2 }, (_, n) => ({ task: "later", payload: { n }, delay: 3_600_000 })))
      const ready = yield* store.send(queue, Array.from({ length: 2 }, (_, n) => ({ task: "now", payload: { n } })))
      const [x1, x2, x3] = dead.map((s) => s.id)
      const [d1, d2] = delayed.map((s) => s.id)
      assert.deepInclude(yield* store.stats(queue), { dead: 3, delayed: 2, ready: 2 })

      const { page, problems } = yield* openDashboard(yield* launch(chromiumTool), `${base}/`, token)

      // The message page: retry now (delayed -> ready), redrive (dead -> ready), purge (asks, then gone).
      yield* clickMessageAction(page, base, d1!, "retry now")
      yield* waitState(store, d1!, "ready")
      yield* clickMessageAction(page, base, x1!, "redrive")
      yield* waitState(store, x1!, "ready")
      yield* clickMessageAction(page, base, x2!, "purge")
      yield* waitPage("the purge confirmation", () => page.$(`#message-confirm [data-confirm="confirm purge"]`).then((e) => e ?? undefined))
      assert.strictEqual(yield* stateOf(store, x2!), "dead", "nothing purged before the confirmation")
      yield* Effect.promise(() => page.click(`#message-confirm button[data-action="confirm purge"]`))
      yield* waitState(store, x2!, "gone")
      assert.deepInclude(yield* store.stats(queue), { dead: 1, delayed: 1, ready: 4 })

      // Bulk purge of the dead letters: counts 1 (x3), asks, purges it.
      assert.strictEqual(yield* askBulk(page, base, "dead", "purge"), 1)
      assert.strictEqual(yield* stateOf(store, x3!), "dead", "nothing purged before the confirmation")
      yield* confirmBulk(page, "purge", 1)
      assert.strictEqual(yield* stateOf(store, x3!), "gone")

      // Bulk retry of the delayed: counts 1 (d2), asks, makes it ready.
      assert.strictEqual(yield* askBulk(page, base, "delayed", "retry"), 1)
      assert.strictEqual(yield* stateOf(store, d2!), "delayed", "nothing retried before the confirmation")
      yield* confirmBulk(page, "retry", 1)
      assert.strictEqual(yield* stateOf(store, d2!), "ready")

      // Bulk cancel of the ready: the two sent ready, d1, x1 and d2: counts 5, asks, cancels them all.
      assert.strictEqual(yield* askBulk(page, base, "ready", "cancel"), 5)
      assert.strictEqual((yield* store.stats(queue)).ready, 5, "nothing cancelled before the confirmation")
      yield* confirmBulk(page, "cancel", 5)
      for (const id of [...ready.map((s) => s.id), d1!, x1!, d2!]) assert.strictEqual(yield* stateOf(store, id), "gone", `cancelled: ${id}`)
      assert.deepInclude(yield* store.stats(queue), { dead: 0, delayed: 0, ready: 0, inFlight: 0 })
      assert.strictEqual((yield* store.attempts(ready[0]!.id)).at(-1)?.outcome, "cancelled")

      // Message pages of purged and cancelled messages ask once more and get their 404 (the browser logs that).
      assert.deepStrictEqual(problems.filter((p) => !/Failed to load resource: .* 404/.test(p)), [], "no script errors in the page")
    }).pipe(Effect.scoped), { timeout: 120_000 })
})
