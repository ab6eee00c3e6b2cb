/**
 * The dashboard's routes of the admin API (issue 31) over the network, on real PostgreSQL
 * (`Http.layerAdminServer`; their guards are in Admin.test.ts with the other routes):
 *
 * - `/api/stats/throughput` and `/api/stats/depth` answer the fleet's figures from the
 *   database (a server running no consumer counts what others did); bad windows are 400s;
 * - `/api/messages` searches by a payload field; a bad path is a 400 naming `payload`;
 * - `/api/bulk/:action/count` then `POST /api/bulk/:action`: the count, then all of them, then
 *   nothing on a second run; `POST /api/messages/retry` makes a delayed message ready;
 * - `/api/schedules` with `seen`, and a trigger that sends (404 for an unknown key);
 * - a base path: `/ops/leasehold/api/...` answered as `/api/...`, `/ops/leasehold` redirected
 *   to `/ops/leasehold/`, the page served there; a bad base path refused;
 * - over the memory store (no `Insights`) the figures say `available: false`, search and bulk
 *   routes are a 503 saying so.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Option } from "effect"
import * as MemoryQueueStore from "../src/MemoryQueueStore.ts"
import * as QueueConfig from "../src/QueueConfig.ts"
import * as Finish from "./support/Finish.ts"
import { bearer, request, serve } from "./support/AdminServer.ts"
import * as PgTest from "./support/PgTest.ts"

const token = "s3cret-admin-token-0123456789"
const auth = bearer(token)

describe("the dashboard's admin routes on real PostgreSQL", () => {
  it.live("figures, search, bulk with its count, retry now, schedules", () =>
    Effect.scoped(Effect.gen(function*() {
      const { base, store } = yield* serve(PgTest.storeLayer({ clock: "database" }), { token })
      const sent = yield* store.send("orders", [
        { task: "bill", payload: { customer: { id: 42 } }, maxAttempts: 1 },
        { task: "bill", payload: { customer: { id: 7 } }, maxAttempts: 1 },
        { task: "bill", payload: { customer: { id: 42 } }, maxAttempts: 1 }
      ])
      const claims = yield* store.claim("orders", { lease: "1 minute", limit: 3, consumer: "elsewhere" })
      yield* Finish.ack(store, claims.find((c) => c.id === sent[1]!.id)!)
      for (const c of claims.filter((c) => c.id !== sent[1]!.id)) yield* Finish.deadLetter(store, c, { reason: "max attempts", error: "boom" })

      // The acked one is deleted; its history answers.
      const history = yield* request(base, "GET", `/api/messages/${sent[1]!.id}/attempts`, { auth })
      assert.deepStrictEqual(history.body.map((a: any) => a.outcome), ["acked"])
      const tp = yield* request(base, "GET", "/api/stats/throughput?minutes=5&queue=orders", { auth })
      assert.strictEqual(tp.status, 200, tp.text)
      assert.strictEqual(tp.body.minutes, 5)
      assert.isTrue(tp.body.available)
      const total = (key: string) => tp.body.rows.reduce((n: number, r: any) => n + r[key], 0)
      assert.strictEqual(total("completed"), 1, "counted from the history: this server ran no consumer")
      assert.strictEqual(total("deadLettered"), 2)
      for (const bad of ["0", "1441", "x", "-1"]) {
        const refused = yield* request(base, "GET", `/api/stats/throughput?minutes=${bad}`, { auth })
        assert.strictEqual(refused.status, 400, bad)
        assert.strictEqual(refused.body.field, "minutes")
      }
      const depth = yield* request(base, "GET", "/api/stats/depth", { auth })
      assert.strictEqual(depth.status, 200, depth.text)
      assert.deepInclude(depth.body, { minutes: 180, everyMs: 10_000 })

      const found = yield* request(base, "GET", `/api/messages?queue=orders&payload=${encodeURIComponent("customer.id = 42")}`, { auth })
      assert.strictEqual(found.status, 200, found.text)
      assert.deepStrictEqual(found.body.messages.map((m: any) => m.id), [sent[2]!.id, sent[0]!.id])
      const badPath = yield* request(base, "GET", `/api/messages?payload=${encodeURIComponent("customer.id); DROP TABLE x; -- = 1")}`, { auth })
      assert.strictEqual(badPath.status, 400, badPath.text)
      assert.strictEqual(badPath.body.field, "payload")

      const count = yield* request(base, "GET", "/api/bulk/redrive/count?queue=orders", { auth })
      assert.deepStrictEqual(count.body, { action: "redrive", count: 2 })
      assert.strictEqual((yield* request(base, "GET", "/api/bulk/explode/count", { auth })).status, 400)
      const ran = yield* request(base, "POST", "/api/bulk/redrive", { auth, body: { queue: "orders", confirmed: 2 } })
      assert.deepStrictEqual(ran.body, { action: "redrive", touched: 2, batches: 1, more: false })
      const again = yield* request(base, "POST", "/api/bulk/redrive", { auth, body: { queue: "orders" } })
      assert.strictEqual(again.body.touched, 0, "idempotent")
      assert.strictEqual((yield* store.stats("orders")).ready, 2)

      const [later] = yield* store.send("orders", [{ task: "bill", payload: {}, delay: 3_600_000 }])
      const retried = yield* request(base, "POST", "/api/messages/retry", { auth, body: { ids: [later!.id, sent[0]!.id] } })
      assert.deepStrictEqual(retried.body, { retried: [later!.id] })
      assert.strictEqual(Option.getOrThrow(yield* store.get(later!.id)).state, "ready")

      yield* store.upsertSchedules([
        { key: "nightly", cron: "0 3 * * *", tz: "UTC", queue: "orders", task: "report", payload: { n: 1 }, nextSlot: new Date(Date.now() + 3_600_000) }
      ], { seenBy: "worker-a", now: new Date() })
      const schedules = yield* request(base, "GET", "/api/schedules", { auth })
      assert.strictEqual(schedules.status, 200, schedules.text)
      assert.deepInclude(schedules.body[0], { key: "nightly", seen: true, lastSeenBy: "worker-a", cron: "0 3 * * *" })
      const trigger = yield* request(base, "POST", "/api/schedules/nightly/trigger", { auth })
      assert.strictEqual(trigger.status, 200, trigger.text)
      assert.strictEqual(Option.getOrThrow(yield* store.get(trigger.body.id)).task, "report")
      assert.strictEqual((yield* request(base, "POST", "/api/schedules/nope/trigger", { auth })).status, 404)
    })))

  it.live("a base path: answered under it and at the root, the bare path redirected, a bad one refused", () =>
    Effect.scoped(Effect.gen(function*() {
      const { base } = yield* serve(PgTest.storeLayer({ clock: "database" }), { token, env: { LEASEHOLD_HTTP_BASE_PATH: "/ops/leasehold" } })
      const under = yield* request(base, "GET", "/ops/leasehold/api/queues", { auth })
      assert.strictEqual(under.status, 200, under.text)
      assert.strictEqual(under.headers.get("cache-control"), "no-store")
      assert.strictEqual((yield* request(base, "GET", "/api/queues", { auth })).status, 200)
      const page = yield* request(base, "GET", "/ops/leasehold/")
      assert.strictEqual(page.status, 200)
      assert.include(page.text, "<title>leasehold</title>")
      const bare = yield* Effect.promise(() => fetch(`${base}/ops/leasehold`, { redirect: "manual" }))
      assert.strictEqual(bare.status, 308)
      assert.strictEqual(bare.headers.get("location"), "/ops/leasehold/")
      for (const bad of ["ops", "/ops/", "/a b", "/../x"]) {
        assert.isTrue(Exit.isFailure(yield* Effect.exit(QueueConfig.basePath(bad))), bad)
      }
    })))

  it.live("over the memory store: no figures, said so; search and bulk a 503 naming what they need", () =>
    Effect.scoped(Effect.gen(function*() {
      const { base } = yield* serve(MemoryQueueStore.layer(), { token })
      for (const path of ["/api/stats/throughput", "/api/stats/depth"]) {
        const answer = yield* request(base, "GET", path, { auth })
        assert.strictEqual(answer.status, 200, path)
        assert.isFalse(answer.body.available, "no figures, said so")
      }
      for (const path of ["/api/messages", "/api/bulk/purge/count"]) {
        const answer = yield* request(base, "GET", path, { auth })
        assert.strictEqual(answer.status, 503, path)
        assert.include(answer.body.message, "need the PostgreSQL store")
      }
      assert.strictEqual((yield* request(base, "GET", "/api/schedules", { auth })).status, 200, "the schedules are the store's own")
    })))
})
