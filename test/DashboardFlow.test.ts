/**
 * The dashboard's flow-control panel in a real browser (Debian's Chromium, headless) over the
 * admin server (`Http.layerAdminServer`), on the memory store and on real PostgreSQL:
 *
 * - no limits stored: the panel says so; limits set in the store appear at the next refresh,
 *   cleared they go; more than 50 queues with limits: the first 50 and a note saying so;
 * - a queue's limits (its own and a task's: concurrency, rates as `100/1m`, key concurrency,
 *   key rate, FIFO, fair, source), its in-flight count, a key at its limit, a FIFO key blocked
 *   by a failed head (head id, attempts, last error, due in about an hour) and a full rate
 *   window with its wait, each as the page shows it;
 * - the page's rates read as `FlowControl.formatRate` writes them;
 * - a screenshot of the panel is saved to .tmp/dashboard-flow.png;
 * - keys and last errors that are HTML (`<img src=x onerror=...>`, `<script>`) show as text:
 *   no element made of them, nothing run.
 *
 * Skipped, saying why, only when chromium is missing outside CI (support/RequireTool.ts).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, type Layer } from "effect"
import { mkdirSync } from "node:fs"
import type { Page } from "playwright-core"
import * as FlowControl from "../src/FlowControl.ts"
import { flowQueueCap } from "../src/http/dashboardFlow.ts"
import * as MemoryQueueStore from "../src/MemoryQueueStore.ts"
import type { QueueStore, QueueStoreShape } from "../src/QueueStore.ts"
import { serve } from "./support/AdminServer.ts"
import { chromiumFor, launch, openDashboard, waitPage } from "./support/Browser.ts"
import * as Finish from "./support/Finish.ts"
import * as PgTest from "./support/PgTest.ts"

const chromiumTool = chromiumFor("DashboardFlow.test.ts")
const token = "dashboard-flow-token-7d21e9"

const stores: ReadonlyArray<readonly [string, () => Layer.Layer<QueueStore, unknown>]> = [
  ["the memory store", () => MemoryQueueStore.layer()],
  ["PostgreSQL", () => PgTest.storeLayer({ clock: "database" })]
]

/** Keys and errors an attacker could choose: shown as text, they run nothing. */
const evilKey = `<img src=x onerror="globalThis.pwned='key'">`
const evilError = `<img src=x onerror="globalThis.pwned='error'"><script>globalThis.pwned='script'</script> ledger down`

/** The rows of one table of the panel: each a record of its cells by field. */
type Rows = Array<Record<string, string>>

/** One queue's part of the panel as the page shows it. */
interface FlowBlock {
  readonly title: string
  readonly inFlight: string
  readonly captions: Record<string, string>
  readonly tables: Record<string, Rows>
}

/** The panel as the page shows it: its queues' blocks, its text, the elements it holds and whether any script of the data ran. */
const readPanel = (page: Page) =>
  page.evaluate(() => {
    // Runs in the page (this project's TypeScript has no DOM types).
    const doc = (globalThis as any).document
    const cells = (tr: any) => Object.fromEntries(Array.from(tr.querySelectorAll("td[data-field]")).map((td: any) => [td.dataset.field, td.textContent]))
    const blocks: Record<string, unknown> = {}
    for (const section of Array.from(doc.querySelectorAll("#flow section[data-flow-queue]")) as Array<any>) {
      const tables: Record<string, unknown> = {}
      const captions: Record<string, string> = {}
      // A list is a table with its caption, or (empty) a line saying so.
      for (const part of Array.from(section.querySelectorAll("[data-flow]")) as Array<any>) {
        captions[part.dataset.flow] = part.tagName === "TABLE" ? part.caption.textContent : part.textContent
        tables[part.dataset.flow] = Array.from(part.querySelectorAll("tbody tr")).map(cells)
      }
      blocks[section.dataset.flowQueue] = {
        title: section.querySelector("h3").textContent,
        inFlight: section.querySelector(`[data-field="inFlight"]`).textContent,
        captions,
        tables
      }
    }
    const panel = doc.querySelector("#flow")
    return {
      blocks: blocks as Record<string, any>,
      text: panel.textContent as string,
      elements: Array.from(panel.querySelectorAll("img, script, b")).length,
      pwned: ((globalThis as any).pwned ?? null) as string | null
    }
  })

/** Wait until the panel's state passes `accept`; the last state seen is in the failure. */
const waitPanel = (page: Page, what: string, accept: (panel: Awaited<ReturnType<typeof readPanel>>) => boolean) => {
  let last: unknown = "nothing read yet"
  return waitPage(`the flow panel to show ${what}`, async () => {
    const panel = await readPanel(page)
    last = panel
    return accept(panel) ? panel : undefined
  }, () => JSON.stringify(last))
}

/** The page on the admin server over `storeLayer`, and its store. */
const dashboardOn = (storeLayer: Layer.Layer<QueueStore, unknown>) =>
  Effect.gen(function*() {
    const { base, store } = yield* serve(storeLayer, { token })
    const browser = yield* launch(chromiumTool)
    const { page, problems } = yield* openDashboard(browser, `${base}/`, token)
    return { page, problems, store }
  })

/**
 * "mail": every queue limit, a task's rate, and a key at its key concurrency (2 of its 3 in
 * flight). "ledger": FIFO at 3 starts an hour: a's head runs, b's failed with an HTML error and
 * backs off an hour (blocked), c's fills the window (throttled).
 */
const holdBack = (store: QueueStoreShape) =>
  Effect.gen(function*() {
    yield* store.setLimits({ queue: "mail" }, {
      concurrency: 5,
      rate: { count: 100, periodMs: 60_000 },
      keyConcurrency: 2,
      keyRate: { count: 5, periodMs: 1_000 },
      fair: true
    }, { source: "code" })
    yield* store.setLimits({ queue: "mail", task: "send" }, { rate: { count: 10, periodMs: 250 } })
    yield* store.send("mail", [1, 2, 3].map((n) => ({ task: "send", payload: { n }, key: evilKey })))
    const mail = yield* store.claim("mail", { lease: "10 minutes", limit: 5, consumer: "flow-test" })
    assert.lengthOf(mail, 2, "the key's concurrency holds the third back")

    yield* store.setLimits({ queue: "ledger" }, { fifo: true, rate: { count: 3, periodMs: 3_600_000 } })
    const [, , b1] = yield* store.send("ledger", ["a", "a", "b", "b", "c"].map((key, n) => ({ task: "post", payload: { n }, key })))
    const first = yield* store.claim("ledger", { lease: "10 minutes", limit: 2, consumer: "flow-test" })
    assert.strictEqual(yield* Finish.retry(store, first[1]!, { delay: "1 hour", error: evilError }), "written")
    const second = yield* store.claim("ledger", { lease: "10 minutes", limit: 5, consumer: "flow-test" })
    assert.lengthOf(second, 1, "c's head, the window's third start")
    return { blockedHead: b1!.id }
  })

for (const [name, storeLayer] of stores) {
  describe(`Dashboard flow panel in headless Chromium on ${name}${chromiumTool.skipNote}`, () => {
    it.live.skipIf(!chromiumTool.runs)("no limits: the empty state; limits appear at the next refresh and go when cleared; over 50 queues: a note", () =>
      Effect.scoped(Effect.gen(function*() {
        const { page, problems, store } = yield* dashboardOn(storeLayer())
        yield* waitPanel(page, "the empty state", (p) => p.text.includes("No flow limits set"))
        yield* store.setLimits({ queue: "mail" }, { concurrency: 3 })
        const shown = yield* waitPanel(page, "mail's limits", (p) => p.blocks["mail"] !== undefined)
        assert.notInclude(shown.text, "No flow limits set")
        assert.deepInclude(shown.blocks["mail"].tables.limits[0], { task: "(whole queue)", concurrency: "3", rate: "-", source: "operator" })
        assert.strictEqual(shown.blocks["mail"].inFlight, "0")
        assert.deepStrictEqual(shown.blocks["mail"].tables.keysAtLimit, [])
        assert.strictEqual(shown.blocks["mail"].captions.keysAtLimit, "keys at their limit: none")
        assert.strictEqual(shown.blocks["mail"].captions.blockedKeys, "FIFO keys blocked by a waiting head: none")
        assert.strictEqual(shown.blocks["mail"].captions.throttles, "full rate windows (no start until then): none")
        yield* store.setLimits({ queue: "mail" }, null)
        yield* waitPanel(page, "the empty state again", (p) => p.text.includes("No flow limits set") && p.blocks["mail"] === undefined)

        const queues = Array.from({ length: flowQueueCap + 1 }, (_, n) => `q${String(n).padStart(3, "0")}`)
        yield* Effect.forEach(queues, (queue) => store.setLimits({ queue }, { concurrency: 1 }), { discard: true })
        const capped = yield* waitPanel(page, `${flowQueueCap} of ${queues.length} queues`, (p) => Object.keys(p.blocks).length === flowQueueCap)
        assert.include(capped.text, `showing the first ${flowQueueCap} of ${queues.length} queues with limits`)
        assert.sameMembers(Object.keys(capped.blocks), queues.slice(0, flowQueueCap))
        assert.deepStrictEqual(problems, [], "no script errors in the page")
      })), { timeout: 60_000 })

    it.live.skipIf(!chromiumTool.runs)("limits, in flight, a key at its limit, a blocked FIFO key and a full rate window, all as text", () =>
      Effect.scoped(Effect.gen(function*() {
        const { page, problems, store } = yield* dashboardOn(storeLayer())
        const { blockedHead } = yield* holdBack(store)
        const panel = yield* waitPanel(page, "mail and ledger held back", (p) =>
          p.blocks["mail"]?.tables.keysAtLimit.length === 1 && p.blocks["ledger"]?.tables.throttles.length === 1)

        const mail = panel.blocks["mail"] as FlowBlock
        assert.strictEqual(mail.inFlight, "2")
        assert.deepStrictEqual(mail.tables.limits!.map(({ updated: _, ...cells }) => cells), [
          { task: "(whole queue)", concurrency: "5", rate: "100/1m", keyConcurrency: "2", keyRate: "5/1s", fifo: "-", fair: "yes", source: "code" },
          { task: "send", concurrency: "-", rate: "10/250ms", keyConcurrency: "-", keyRate: "-", fifo: "-", fair: "-", source: "operator" }
        ])
        assert.deepStrictEqual(mail.tables.keysAtLimit, [{ key: evilKey, inFlight: "2" }])
        assert.strictEqual(mail.captions["keysAtLimit"], "keys at their limit (2 in flight each)")

        const ledger = panel.blocks["ledger"] as FlowBlock
        assert.strictEqual(ledger.inFlight, "2")
        assert.deepInclude(ledger.tables.limits![0], { task: "(whole queue)", rate: "3/1h", fifo: "yes", source: "operator" })
        assert.sameMembers(ledger.tables.keysAtLimit!.map((k) => k.key), ["a", "c"])
        assert.strictEqual(ledger.captions["keysAtLimit"], "keys at their limit (1 in flight each)")
        const [blocked] = ledger.tables.blockedKeys!
        assert.deepInclude(blocked, { key: "b", headId: blockedHead, attempts: "1", lastError: evilError })
        assert.match(blocked!.due!, /^in (59m \d+s|1h 0m)$/, "the head is due in about an hour")
        assert.isAbove(Date.parse(blocked!.dueAt!), Date.now() + 3_000_000)
        const [throttle] = ledger.tables.throttles!
        assert.deepInclude(throttle, { task: "-", key: "-" })
        assert.match(throttle!.wait!, /^in (59m \d+s|1h 0m)$/, "the window frees in about an hour")

        yield* Effect.promise(() => page.locator("#flow").screenshot({ path: screenshotPath() }))
        assert.strictEqual(panel.elements, 0, "no element made of the data")
        assert.isNull(panel.pwned, "no script of the data ran")
        assert.deepStrictEqual(problems, [], "no script errors in the page")
      })), { timeout: 60_000 })
  })
}

describe(`Dashboard flow panel's rates${chromiumTool.skipNote}`, () => {
  it.live.skipIf(!chromiumTool.runs)("read as FlowControl.formatRate writes them", () =>
    Effect.scoped(Effect.gen(function*() {
      const { page } = yield* dashboardOn(MemoryQueueStore.layer())
      const rates = [1, 10, 250, 999, 1_000, 1_500, 60_000, 90_000, 3_600_000, 5_400_000, 86_400_000].map((periodMs) => ({ count: 7, periodMs }))
      // The page's own formatRate (a global binding of its script, so an expression, not a function, names it).
      const shown = yield* Effect.promise(() => page.evaluate<Array<string>>(`${JSON.stringify(rates)}.map(formatRate)`))
      assert.deepStrictEqual(shown, rates.map(FlowControl.formatRate))
    })), { timeout: 60_000 })
})

/** Where the panel's screenshot goes (docs/dashboard-flow.png is a copy). */
const screenshotPath = () => {
  mkdirSync(".tmp", { recursive: true })
  return ".tmp/dashboard-flow.png"
}
