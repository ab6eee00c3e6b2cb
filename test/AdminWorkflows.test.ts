/**
 * The workflow routes of the admin API over the network (`fetch`), on real PostgreSQL with
 * leasehold's workflow engine running beside the server on the store's schema:
 * - GET /api/workflows lists executions newest first, filtered by status and workflow, bounded
 *   by limit, with what each is suspended on and its clocks;
 * - GET /api/workflows/:workflow/:executionId shows one with its payload, result and outcome,
 *   activity attempts (with their stored exits), done deferreds and clocks (fired or not); an unknown one is a 404;
 * - a bad status or limit is a 400 naming the field; the routes need the token once one is set;
 * - on the memory store (no executions) the list is empty and every execution is not found.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Option } from "effect"
import { SqlClient } from "effect/sql"
import * as LeaseholdWorkflow from "../src/LeaseholdWorkflow.ts"
import * as MemoryQueueStore from "../src/MemoryQueueStore.ts"
import { bearer, request, serve } from "./support/AdminServer.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitFor } from "./support/Wait.ts"
import * as W from "./workflow/workflows.ts"

const token = "workflow-admin-token-0123456789"
const auth = bearer(token)

/** The suite's workflows on leasehold's engine, over the server's database and schema. */
const engineOn = (sql: SqlClient.SqlClient, schema: string) =>
  Layer.build(W.WorkflowsLive.pipe(
    Layer.provideMerge(LeaseholdWorkflow.layer({ schema, pollInterval: "100 millis" })),
    Layer.provide(Layer.succeed(SqlClient.SqlClient, sql))
  ))

describe("Admin workflow routes", () => {
  it.live("list by status and workflow; one execution with its attempts, deferreds and clocks", () =>
    Effect.scoped(Effect.gen(function*() {
      const served = yield* serve(PgTest.storeLayer({ clock: "database" }), { token })
      const schema = Option.getOrThrow(served.schema)
      const engine = yield* engineOn(Option.getOrThrow(served.sql), schema)
      const id = `adm-${Date.now()}`
      const [chain, nap, flaky] = yield* Effect.all([
        W.Chain.execute({ id }, { discard: true }),
        W.Nap.execute({ id: `${id}-nap` }, { discard: true }),
        W.Flaky.execute({ id: `${id}-flaky` }, { discard: true })
      ]).pipe(Effect.provide(engine))
      const get = (path: string) => request(served.base, "GET", path, { auth })

      const suspended = yield* waitFor("Chain to suspend on go", Effect.map(get("/api/workflows?status=suspended&workflow=Chain"), (r) =>
        Option.fromNullishOr(r.status === 200 ? r.body.find((e: any) => e.executionId === chain) : undefined)))
      assert.deepInclude(suspended, {
        workflow: "Chain",
        status: "suspended",
        held: false,
        holder: null,
        suspendedOn: { deferreds: ["go"], children: [] },
        clocks: [],
        activities: 1,
        outcome: null,
        nextRunAt: null,
        completedAt: null
      })
      assert.isString(suspended.updatedAt)
      const done = yield* waitFor("Flaky and Nap to complete", Effect.map(get("/api/workflows?status=complete"), (r) =>
        r.status === 200 && r.body.length === 2 ? Option.some(r.body) : Option.none()))
      assert.sameMembers(done.map((e: any) => e.executionId), [nap, flaky])
      assert.deepStrictEqual((yield* get("/api/workflows?limit=1")).body.length, 1)
      assert.deepStrictEqual((yield* get("/api/workflows?workflow=Nope")).body, [])

      const flakyShown = yield* get(`/api/workflows/Flaky/${flaky}`)
      assert.strictEqual(flakyShown.status, 200, flakyShown.text)
      assert.deepStrictEqual(flakyShown.body.execution.payload, { id: `${id}-flaky` })
      assert.strictEqual(flakyShown.body.execution.status, "complete")
      assert.strictEqual(flakyShown.body.execution.result._tag, "Complete")
      assert.strictEqual(flakyShown.body.execution.outcome, "success")
      assert.deepStrictEqual(flakyShown.body.activities.at(-1).exit, { _tag: "Success", value: 3 })
      assert.deepStrictEqual(flakyShown.body.activities[0].exit._tag, "Failure")
      assert.deepStrictEqual(flakyShown.body.activities.map((a: any) => [a.activity, a.attempt, a.outcome]), [
        ["flaky", 1, "failure"],
        ["flaky", 2, "failure"],
        ["flaky", 3, "success"]
      ])
      const napShown = yield* get(`/api/workflows/Nap/${nap}`)
      assert.deepStrictEqual(napShown.body.clocks.map((c: any) => [c.name, c.fired]), [["DurableClock/nap", true]])
      assert.deepStrictEqual(napShown.body.deferreds.map((d: any) => d.name), ["DurableClock/nap"])
      assert.isString(napShown.body.clocks[0].dueAt)

      const missing = yield* get(`/api/workflows/Chain/no-such-execution`)
      assert.strictEqual(missing.status, 404, missing.text)
      const badStatus = yield* get("/api/workflows?status=sleeping")
      assert.strictEqual(badStatus.status, 400, badStatus.text)
      assert.strictEqual(badStatus.body.field, "status")
      const badLimit = yield* get("/api/workflows?limit=0")
      assert.strictEqual(badLimit.status, 400, badLimit.text)
      const anonymous = yield* request(served.base, "GET", "/api/workflows")
      assert.strictEqual(anonymous.status, 401, anonymous.text)
      const anonymousOne = yield* request(served.base, "GET", `/api/workflows/Chain/${chain}`)
      assert.strictEqual(anonymousOne.status, 401, anonymousOne.text)
    })), 60_000)

  it.live("on the memory store: no executions", () =>
    Effect.scoped(Effect.gen(function*() {
      const { base } = yield* serve(MemoryQueueStore.layer(), { token })
      const list = yield* request(base, "GET", "/api/workflows", { auth })
      assert.strictEqual(list.status, 200, list.text)
      assert.deepStrictEqual(list.body, [])
      const one = yield* request(base, "GET", "/api/workflows/Chain/x", { auth })
      assert.strictEqual(one.status, 404, one.text)
    })))
})
