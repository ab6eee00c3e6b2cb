/**
 * The dashboard's workflow views in Debian's Chromium (headless, playwright-core), against a
 * worker's HTTP server with leasehold's workflow engine running beside it on the same real
 * PostgreSQL schema:
 *
 * - one Chain completes after its two activities (its deferred done from outside), one stays
 *   suspended on its `go` deferred, one Doomed fails after two attempts, one Waits is interrupted
 *   while suspended;
 * - the list (`#/workflows`) shows each with its status (complete, suspended on deferred go,
 *   failed, interrupted), and its status filter is the URL;
 * - the completed Chain's page lists its activities with their results; the suspended one's shows
 *   its deferred waiting; the failed one's shows each attempt's error;
 * - screenshots of the list and the completed Chain's page go to .tmp/dashboard-workflows.png and
 *   .tmp/dashboard-workflow.png (docs/ holds copies).
 *
 * Skipped, saying why, only when chromium is missing outside CI (support/RequireTool.ts).
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { DurableDeferred } from "effect/workflow"
import { mkdirSync } from "node:fs"
import type { Page } from "playwright-core"
import * as LeaseholdWorkflow from "../src/LeaseholdWorkflow.ts"
import { chromiumFor, dashboardWorker, launch, openDashboard, waitPage } from "./support/Browser.ts"
import * as W from "./workflow/workflows.ts"

const chromiumTool = chromiumFor("DashboardWorkflows.test.ts")
const token = "dashboard-workflows-token-51d0a2"

/** The list's status cells, keyed by the row's execution id. */
const statusCells = (page: Page) =>
  page.$$eval("#workflow-rows tr[data-execution]", (rows) =>
    Object.fromEntries(rows.map((r: any) => [r.dataset.execution, r.querySelector('[data-field="status"]').textContent])))

/** [activity, attempt, outcome, detail] of the execution page's attempts. */
const attemptCells = (page: Page) =>
  page.$$eval("#workflow-activities tr[data-activity]", (rows) =>
    rows.map((r: any) => ["activity", "attempt", "outcome", "detail"].map((f) => r.querySelector(`[data-field="${f}"]`).textContent)))

/** Go to an execution's page and wait until it shows that execution (its payload's id): the previous one's tables are gone. */
const openExecution = (page: Page, base: string, workflow: string, executionId: string, payloadId: string) =>
  Effect.andThen(
    Effect.promise(() => page.goto(`${base}/#/workflow/${workflow}/${encodeURIComponent(executionId)}`)),
    waitPage(`the page of ${payloadId}`, async () => ((await page.textContent("#workflow-payload")) ?? "").includes(payloadId) ? true : undefined)
  )

describe(`Dashboard workflow views in headless Chromium on a real engine and PostgreSQL${chromiumTool.skipNote}`, () => {
  it.live.skipIf(!chromiumTool.runs)("the list shows each execution's status; a page shows activities, a waiting deferred, errors", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const { base, sql, schema } = yield* dashboardWorker(() => Effect.void, { token, gate, queues: ["unused"] })
      const engine = yield* Layer.build(W.WorkflowsLive.pipe(
        Layer.provideMerge(LeaseholdWorkflow.layer({ schema, pollInterval: "100 millis" })),
        Layer.provide(Layer.succeed(SqlClient.SqlClient, sql))
      ))
      const id = `dash-${Date.now()}`
      const [done, waiting, doomed, stopped] = yield* Effect.all([
        W.Chain.execute({ id: `${id}-done` }, { discard: true }),
        W.Chain.execute({ id: `${id}-waiting` }, { discard: true }),
        W.Doomed.execute({ id: `${id}-doomed` }, { discard: true }),
        W.Waits.execute({ id: `${id}-stopped` }, { discard: true })
      ]).pipe(Effect.provide(engine))
      const { page, problems } = yield* openDashboard(yield* launch(chromiumTool), `${base}/`, token)
      yield* Effect.promise(() => page.click(`nav a[data-nav="workflows"]`))

      // Both Chains suspend on go; then the first one's deferred is done and it completes.
      yield* waitPage("both Chains suspended on go", async () => {
        const s = await statusCells(page)
        return s[done] === "suspended on deferred go" && s[waiting] === "suspended on deferred go" && s[stopped] === "suspended on deferred never"
          ? true
          : undefined
      })
      yield* W.Waits.interrupt(stopped).pipe(Effect.provide(engine))
      yield* DurableDeferred.done(W.Go, {
        token: DurableDeferred.tokenFromExecutionId(W.Go, { workflow: W.Chain, executionId: done }),
        exit: Exit.void
      }).pipe(Effect.provide(engine))
      const statuses = yield* waitPage("the list's statuses", async () => {
        const s = await statusCells(page)
        return s[done] === "complete" && s[doomed] === "failed" && s[stopped] === "interrupted" ? s : undefined
      })
      assert.strictEqual(statuses[waiting], "suspended on deferred go")
      mkdirSync(".tmp", { recursive: true })
      yield* Effect.promise(() => page.screenshot({ path: ".tmp/dashboard-workflows.png", fullPage: true }))

      // The status filter is the URL.
      yield* Effect.promise(() => page.selectOption(`#workflows-form select[name="status"]`, "complete"))
      yield* Effect.promise(() => page.click(`#workflows-form button[data-action="filter"]`))
      yield* waitPage("only the complete ones", async () => {
        const s = await statusCells(page)
        return Object.keys(s).length === 3 && s[waiting] === undefined ? true : undefined
      })
      assert.include(yield* Effect.promise(() => page.evaluate(() => (globalThis as any).location.hash as string)), "status=complete")

      // The completed Chain's page: its two activities with their results.
      yield* Effect.promise(() => page.click(`#workflow-rows tr[data-execution="${done}"] td[data-field="executionId"] a`))
      const attempts = yield* waitPage("the completed Chain's activities", async () => {
        const rows = await attemptCells(page)
        return rows.length === 2 ? rows : undefined
      })
      assert.deepStrictEqual(attempts, [["a", "1", "success", "result: 1"], ["b", "1", "success", "result: 2"]])
      assert.strictEqual(yield* Effect.promise(() => page.textContent(`#workflow-facts td[data-field="status"]`)), "complete")
      assert.strictEqual(yield* Effect.promise(() => page.textContent("#workflow-result")), "result: 3")
      assert.include(yield* Effect.promise(() => page.textContent("#workflow-payload")), `${id}-done`)
      assert.include(yield* Effect.promise(() => page.textContent(`#workflow-deferreds tr[data-deferred="go"] td[data-field="state"]`)), "done")
      yield* Effect.promise(() => page.screenshot({ path: ".tmp/dashboard-workflow.png", fullPage: true }))

      // The suspended one's page: its deferred waiting.
      yield* openExecution(page, base, "Chain", waiting, `${id}-waiting`)
      assert.strictEqual(yield* Effect.promise(() => page.textContent(`#workflow-deferreds tr[data-deferred="go"] td[data-field="state"]`)), "waiting")
      assert.strictEqual(yield* Effect.promise(() => page.textContent(`#workflow-facts td[data-field="status"]`)), "suspended on deferred go")
      assert.deepStrictEqual(yield* Effect.promise(() => attemptCells(page)), [["a", "1", "success", "result: 1"]])

      // The failed one's page: each attempt's error.
      yield* openExecution(page, base, "Doomed", doomed, `${id}-doomed`)
      const failures = yield* Effect.promise(() => attemptCells(page))
      assert.deepStrictEqual(failures.map((r) => r.slice(0, 3)), [["doomed", "1", "failure"], ["doomed", "2", "failure"]])
      assert.match(failures[1]![3]!, /^error: "attempt 2 failed"$/)
      assert.strictEqual(yield* Effect.promise(() => page.textContent(`#workflow-facts td[data-field="status"]`)), "failed")
      assert.deepStrictEqual(problems, [], "no script errors in the page")
    }).pipe(Effect.scoped), { timeout: 90_000 })
})
