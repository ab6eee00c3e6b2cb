/**
 * The flow-control routes of the admin API over the network (`fetch`), on the memory store and
 * on real PostgreSQL (one suite, both stores):
 * - PUT stores an operator's limits (rates as `{ count, periodMs }` or `"100/1m"`, the task in
 *   the body or the query) and answers the queue's limits; GET lists them; DELETE clears;
 *   PUT weight; GET flow shows keys at their limit, a blocked FIFO key, the full rate window;
 * - refusals: a 400 naming the field and the rule for every value the rules refuse (bounds,
 *   unknown fields, task-level key limits, fifo with a key concurrency, two tasks), and nothing
 *   written;
 * - security: the writes need the admin token (401 without or wrong, 403 with none configured),
 *   the reads need it once one is set; nothing written by a refused request.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, type Layer } from "effect"
import * as MemoryQueueStore from "../src/MemoryQueueStore.ts"
import type { QueueStore } from "../src/QueueStore.ts"
import { bearer, type Reply, request, serve } from "./support/AdminServer.ts"
import * as Finish from "./support/Finish.ts"
import * as PgTest from "./support/PgTest.ts"

const token = "flow-admin-token-0123456789"
const auth = bearer(token)

const stores: ReadonlyArray<readonly [string, () => Layer.Layer<QueueStore, unknown>]> = [
  ["the memory store", () => MemoryQueueStore.layer()],
  ["PostgreSQL", () => PgTest.storeLayer({ clock: "database" })]
]

const expect400 = (reply: Reply, field: string, rule: RegExp, what: string) => {
  assert.strictEqual(reply.status, 400, `${what}: ${reply.text}`)
  assert.strictEqual(reply.body._tag, "BadRequest", `${what}: ${reply.text}`)
  assert.strictEqual(reply.body.field, field, `${what}: ${reply.text}`)
  assert.match(reply.body.rule, rule, `${what}: ${reply.text}`)
}

for (const [name, storeLayer] of stores) {
  describe(`Admin flow routes on ${name}`, () => {
    it.live("PUT stores limits and answers them, GET lists, DELETE clears, PUT weight; flow shows what holds a queue back", () =>
      Effect.scoped(Effect.gen(function*() {
        const { base, store } = yield* serve(storeLayer(), { token })
        const put = yield* request(base, "PUT", "/api/queues/mail/limits", {
          auth,
          body: { concurrency: 5, keyConcurrency: 2, rate: "100/1m", keyRate: { count: 5, periodMs: 1_000 }, fair: true }
        })
        assert.strictEqual(put.status, 200, put.text)
        assert.lengthOf(put.body, 1)
        assert.deepInclude(put.body[0], {
          queue: "mail",
          task: null,
          limits: { concurrency: 5, keyConcurrency: 2, rate: { count: 100, periodMs: 60_000 }, keyRate: { count: 5, periodMs: 1_000 }, fair: true },
          source: "operator"
        })
        assert.isString(put.body[0].updatedAt)
        // The task in the query or in the body.
        const byQuery = yield* request(base, "PUT", "/api/queues/mail/limits?task=send", { auth, body: { rate: "5/1s" } })
        assert.strictEqual(byQuery.status, 200, byQuery.text)
        const byBody = yield* request(base, "PUT", "/api/queues/mail/limits", { auth, body: { task: "render", concurrency: 1 } })
        assert.strictEqual(byBody.status, 200, byBody.text)
        assert.deepStrictEqual(byBody.body.map((r: any) => [r.task, r.limits]), [
          [null, put.body[0].limits],
          ["render", { concurrency: 1 }],
          ["send", { rate: { count: 5, periodMs: 1_000 } }]
        ])
        // A declaration in code leaves them as they are.
        assert.isFalse(yield* store.setLimits({ queue: "mail" }, { concurrency: 50 }, { source: "code" }))
        yield* store.setLimits({ queue: "other" }, { concurrency: 7 }, { source: "code" })
        const all = yield* request(base, "GET", "/api/limits", { auth })
        assert.strictEqual(all.status, 200, all.text)
        assert.deepStrictEqual(all.body.map((r: any) => [r.queue, r.task, r.source]), [
          ["mail", null, "operator"],
          ["mail", "render", "operator"],
          ["mail", "send", "operator"],
          ["other", null, "code"]
        ])
        const one = yield* request(base, "GET", "/api/queues/other/limits", { auth })
        assert.deepStrictEqual(one.body.map((r: any) => r.limits), [{ concurrency: 7 }])

        const cleared = yield* request(base, "DELETE", "/api/queues/mail/limits?task=send", { auth })
        assert.strictEqual(cleared.status, 200, cleared.text)
        assert.deepStrictEqual(cleared.body.map((r: any) => r.task), [null, "render"])
        assert.deepStrictEqual((yield* store.limits("mail")).map((r) => r.task), [null, "render"])
        // No limits at all is a clear too.
        const emptied = yield* request(base, "PUT", "/api/queues/mail/limits?task=render", { auth, body: {} })
        assert.deepStrictEqual(emptied.body.map((r: any) => r.task), [null])

        const weighed = yield* request(base, "PUT", "/api/queues/mail/weight", { auth, body: { key: "tenant-1", weight: 3 } })
        assert.strictEqual(weighed.status, 200, weighed.text)
        assert.deepStrictEqual(weighed.body, { queue: "mail", key: "tenant-1", weight: 3 })

        // A FIFO queue with 3 starts an hour: a's head runs, b's failed and backs off (blocked), c's fills the window.
        yield* request(base, "PUT", "/api/queues/ledger/limits", { auth, body: { fifo: true, rate: "3/1h" } })
        const [a1, , b1, , c1] = yield* store.send("ledger", ["a", "a", "b", "b", "c"].map((key, n) => ({ task: "post", payload: { n }, key })))
        const first = yield* store.claim("ledger", { lease: "10 minutes", limit: 2, consumer: "admin-test" })
        assert.deepStrictEqual(first.map((c) => c.id), [a1!.id, b1!.id])
        assert.strictEqual(yield* Finish.retry(store, first[1]!, { delay: "1 hour", error: "ledger down" }), "written")
        const second = yield* store.claim("ledger", { lease: "10 minutes", limit: 5, consumer: "admin-test" })
        assert.deepStrictEqual(second.map((c) => c.id), [c1!.id])
        const flow = yield* request(base, "GET", "/api/queues/ledger/flow", { auth })
        assert.strictEqual(flow.status, 200, flow.text)
        assert.strictEqual(flow.body.queue, "ledger")
        assert.strictEqual(flow.body.inFlight, 2)
        assert.deepStrictEqual(flow.body.limits.map((r: any) => r.limits), [{ fifo: true, rate: { count: 3, periodMs: 3_600_000 } }])
        assert.sameDeepMembers(flow.body.keysAtLimit, [{ key: "a", inFlight: 1 }, { key: "c", inFlight: 1 }])
        assert.lengthOf(flow.body.blockedKeys, 1)
        assert.deepInclude(flow.body.blockedKeys[0], { key: "b", headId: b1!.id, attempts: 1, lastError: "ledger down" })
        assert.isAbove(Date.parse(flow.body.blockedKeys[0].visibleAt), Date.now() + 3_000_000)
        assert.lengthOf(flow.body.throttles, 1)
        assert.deepInclude(flow.body.throttles[0], { task: null, key: null })
        assert.isAbove(Date.parse(flow.body.throttles[0].nextAt), Date.now() + 3_000_000)

        const openapi = yield* request(base, "GET", "/openapi.json")
        for (const path of ["/api/limits", "/api/queues/{queue}/limits", "/api/queues/{queue}/weight", "/api/queues/{queue}/flow"]) {
          assert.property(openapi.body.paths, path)
        }
        assert.match(openapi.body.paths["/api/queues/{queue}/limits"].put.summary, /needs the admin token/)
        assert.match(openapi.body.paths["/api/queues/{queue}/limits"].delete.summary, /needs the admin token/)
      })))

    it.live("refused values: 400 naming the field and the rule, nothing written", () =>
      Effect.scoped(Effect.gen(function*() {
        const { base, store } = yield* serve(storeLayer(), { token })
        yield* store.setLimits({ queue: "mail" }, { concurrency: 4 })
        const before = yield* store.limits()
        const refusals: ReadonlyArray<readonly [string, unknown, string, RegExp]> = [
          ["/api/queues/mail/limits", { concurrency: 0 }, "concurrency", /an integer from 1 to 100000/],
          ["/api/queues/mail/limits", { concurrency: 2.5 }, "concurrency", /an integer from 1 to 100000/],
          ["/api/queues/mail/limits", { concurrency: "5" }, "concurrency", /./],
          ["/api/queues/mail/limits", { keyConcurrency: 10_001 }, "keyConcurrency", /an integer from 1 to 10000/],
          ["/api/queues/mail/limits", { rate: "5" }, "rate", /COUNT\/PERIOD such as 100\/1m/],
          ["/api/queues/mail/limits", { keyRate: "0/1s" }, "keyRate.count", /an integer from 1 to 10000/],
          ["/api/queues/mail/limits", { rate: { count: 5, periodMs: 5 } }, "rate.periodMs", /whole milliseconds from 10 to 86400000/],
          ["/api/queues/mail/limits", { fifo: true, keyConcurrency: 2 }, "keyConcurrency", /1 or absent with fifo/],
          ["/api/queues/mail/limits?task=send", { keyConcurrency: 2 }, "keyConcurrency", /a limit of the whole queue, not of a task/],
          ["/api/queues/mail/limits?task=send", { fair: true }, "fair", /a limit of the whole queue, not of a task/],
          ["/api/queues/mail/limits?task=send", { task: "render", concurrency: 1 }, "task", /not two different ones/],
          ["/api/queues/mail/limits", { concurency: 2 }, "concurency", /./],
          ["/api/queues/mail/limits", { task: "no spaces", concurrency: 2 }, "task", /1-128 characters/],
          ["/api/queues/no%20spaces/limits", { concurrency: 2 }, "queue", /1-128 characters/],
          ["/api/queues/mail/weight", { key: "k", weight: 0 }, "weight", /an integer from 1 to 100/],
          ["/api/queues/mail/weight", { key: "k", weight: 101 }, "weight", /an integer from 1 to 100/],
          ["/api/queues/mail/weight", { key: "", weight: 1 }, "key", /1 to 200 characters, no control characters/],
          ["/api/queues/mail/weight", { key: "k\u0007", weight: 1 }, "key", /no control characters/],
          ["/api/queues/mail/weight", { weight: 1 }, "key", /required/]
        ]
        for (const [path, body, field, rule] of refusals) {
          expect400(yield* request(base, "PUT", path, { auth, body }), field, rule, `PUT ${path} ${JSON.stringify(body)}`)
        }
        expect400(yield* request(base, "DELETE", "/api/queues/mail/limits?task=no%20spaces", { auth }), "task", /1-128 characters/, "DELETE")
        expect400(yield* request(base, "GET", "/api/queues/no%20spaces/flow", { auth }), "queue", /1-128 characters/, "GET flow")
        assert.deepStrictEqual(yield* store.limits(), before, "nothing written")
      })))

    it.live("security: writes need the token (401 without or wrong, 403 with none configured); reads need it once one is set", () =>
      Effect.scoped(Effect.gen(function*() {
        const writes = [
          ["PUT", "/api/queues/mail/limits", { concurrency: 1 }],
          ["PUT", "/api/queues/mail/limits?task=send", { rate: "1/1s" }],
          ["DELETE", "/api/queues/mail/limits", undefined],
          ["PUT", "/api/queues/mail/weight", { key: "k", weight: 2 }]
        ] as const
        const reads = ["/api/limits", "/api/queues/mail/limits", "/api/queues/mail/flow"]
        const guarded = yield* serve(storeLayer(), { token })
        yield* guarded.store.setLimits({ queue: "mail" }, { concurrency: 4 })
        const before = yield* guarded.store.limits()
        for (const [method, path, body] of writes) {
          const none = yield* request(guarded.base, method, path, { body })
          assert.strictEqual(none.status, 401, `${method} ${path}: ${none.text}`)
          const wrong = yield* request(guarded.base, method, path, { body, auth: bearer(`${token}x`) })
          assert.strictEqual(wrong.status, 401, `${method} ${path}: ${wrong.text}`)
          assert.match(wrong.body.message, /wrong admin token/)
        }
        for (const path of reads) {
          assert.strictEqual((yield* request(guarded.base, "GET", path)).status, 401, path)
          assert.strictEqual((yield* request(guarded.base, "GET", path, { auth })).status, 200, path)
        }
        assert.deepStrictEqual(yield* guarded.store.limits(), before, "nothing written by a refused request")

        // No token configured: changes are off (403, saying so); reads open on this machine only.
        const open = yield* serve(storeLayer(), {})
        for (const [method, path, body] of writes) {
          const refused = yield* request(open.base, method, path, { body, auth })
          assert.strictEqual(refused.status, 403, `${method} ${path}: ${refused.text}`)
          assert.match(refused.body.message, /no admin token is set \(set LEASEHOLD_ADMIN_TOKEN/)
        }
        assert.deepStrictEqual(yield* open.store.limits(), [])
        for (const path of reads) assert.strictEqual((yield* request(open.base, "GET", path)).status, 200, path)
      })))
  })
}
