/**
 * The admin API over the network (`fetch`), served by `Http.layerAdminServer`
 * on an ephemeral port in front of a real `PgQueueStore` (real PostgreSQL):
 *
 * - happy path: queues with counts, pause/resume, a paged message list, one
 *   message with its attempt history, cancel, dead letters listed, redriven
 *   and purged, consumers, counters, the OpenAPI document, `/docs` and `/`;
 * - bad input: a 400 naming the field and the rule for a bad queue name,
 *   message id, state, page size, id list and dead-letter selection;
 * - security: a route without a token or with a wrong one is 401 while one is
 *   set, a changing one with no token configured 403 (saying so), and the
 *   database shows nothing written; a short token is refused at start without
 *   being quoted;
 * - a database failure is a 503 whose message carries no password;
 * - access by bind address: bound beyond this machine (0.0.0.0) without a token,
 *   the probes answer and every /api route is 403 naming LEASEHOLD_ADMIN_TOKEN;
 *   with one, 401 without it; the `Host` allowlist (code and environment);
 *   `::ffff:127.0.0.1` taken for loopback, as a bind address and in `Host`;
 * - the security headers (CSP with frame-ancestors 'none', nosniff,
 *   Referrer-Policy, X-Frame-Options) on every kind of response.
 */
import { assert, describe, it } from "@effect/vitest"
import { spawn } from "node:child_process"
import { request as httpRequest } from "node:http"
import { ConfigProvider, Context, Effect, Exit, Layer, Metric, Option } from "effect"
import * as Consumer from "../src/Consumer.ts"
import * as Http from "../src/Http.ts"
import { nameRule } from "../src/internal/validate.ts"
import * as MemoryQueueStore from "../src/MemoryQueueStore.ts"
import { claimRef } from "../src/Message.ts"
import { StoreSettings } from "../src/StoreSettings.ts"
import { QueryFailed } from "../src/QueueError.ts"
import * as QueueMetrics from "../src/QueueMetrics.ts"
import { QueueStore } from "../src/QueueStore.ts"
import { bearer, type Reply, request, serve } from "./support/AdminServer.ts"
import * as Finish from "./support/Finish.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitForAsync } from "./support/Wait.ts"

const token = "s3cret-admin-token-0123456789"

/** A GET naming `host` in its `Host` header (which `fetch` always sets itself), with `auth` as its Authorization. */
const getWithHost = (base: string, path: string, host: string, auth?: string) =>
  Effect.promise(() =>
    new Promise<{ status: number; text: string }>((resolve, reject) => {
      const headers: Record<string, string> = { host, ...(auth === undefined ? {} : { authorization: auth }) }
      const request = httpRequest(`${base}${path}`, { headers, timeout: 10_000 }, (response) => {
        let text = ""
        response.setEncoding("utf8")
        response.on("data", (chunk: string) => (text += chunk))
        response.on("end", () => resolve({ status: response.statusCode ?? 0, text }))
      })
      request.on("error", reject)
      request.end()
    })
  )

const pgStore = () => PgTest.storeLayer({ clock: "database" })

/** Every reading route of the admin API (with `id` for the message route). */
const readRoutes = (id: string) => [
  "/api/queues",
  "/api/queues/mail/messages",
  "/api/consumers",
  "/api/in-flight",
  `/api/messages/${id}`,
  "/api/dead-letters",
  "/api/counters",
  "/api/limits",
  "/api/queues/mail/limits",
  "/api/queues/mail/flow"
]

describe("Admin API on real PostgreSQL", () => {
  it.live("happy path: queues, pause/resume, messages, one message, cancel, dead letters, consumers, counters, docs", () =>
    Effect.scoped(Effect.gen(function*() {
      const { base, schema, sql, store } = yield* serve(pgStore(), { token })
      const auth = bearer(token)
      const sent = yield* store.send("mail", [1, 2, 3].map((n) => ({ task: "send", payload: { n } })))
      const [later] = yield* store.send("mail", [{ task: "send", payload: { n: 4 }, delay: 3_600_000 }])
      // One dead letter: claimed, then dead-lettered as a consumer finishes it, so it has a history too.
      const [doomed] = yield* store.send("reports", [{ task: "render", payload: { r: 1 } }])
      const [claim] = yield* store.claim("reports", { lease: "1 minute", limit: 1, consumer: "admin-test" })
      // Its handler reported progress before it died: kept on the dead letter, shown with it.
      assert.isTrue(yield* store.setProgress(claimRef(claim!), { step: 3, of: 4 }))
      const finished = yield* store.complete([{
        ref: claimRef(claim!),
        finish: { _tag: "DeadLetter", reason: "bad payload", error: "boom" },
        queue: "reports",
        task: "render",
        attempt: 1,
        consumer: "admin-test",
        startedAt: new Date(),
        outcome: "dead-lettered",
        error: "boom"
      }])
      assert.deepStrictEqual(finished, { held: [doomed!.id], cancelled: [] })

      const queues = yield* request(base, "GET", "/api/queues", { auth })
      assert.strictEqual(queues.status, 200)
      const mail = (queues.body as Array<any>).find((q) => q.queue === "mail")
      assert.deepInclude(mail, { ready: 3, delayed: 1, inFlight: 0, dead: 0, paused: false, pausedAt: null })
      assert.deepInclude((queues.body as Array<any>).find((q) => q.queue === "reports"), { dead: 1 })

      const paused = yield* request(base, "POST", "/api/queues/mail/pause", { auth })
      assert.strictEqual(paused.status, 200, paused.text)
      assert.deepInclude(paused.body, { queue: "mail", paused: true })
      assert.isString(paused.body.pausedAt)
      assert.isTrue((yield* store.queues()).find((q) => q.queue === "mail")!.paused, "paused in the database")
      assert.lengthOf(yield* store.claim("mail", { lease: "1 minute", limit: 10, consumer: "c" }), 0, "a paused queue is not claimed")
      const resumed = yield* request(base, "POST", "/api/queues/mail/resume", { auth })
      assert.deepInclude(resumed.body, { queue: "mail", paused: false, pausedAt: null })

      const page1 = yield* request(base, "GET", "/api/queues/mail/messages?state=ready&limit=2", { auth })
      assert.strictEqual(page1.status, 200, page1.text)
      assert.deepStrictEqual(page1.body.messages.map((m: any) => m.id), [sent[0]!.id, sent[1]!.id])
      assert.strictEqual(page1.body.next, sent[1]!.id)
      const page2 = yield* request(base, "GET", `/api/queues/mail/messages?state=ready&limit=2&after=${page1.body.next}`, { auth })
      assert.deepStrictEqual(page2.body.messages.map((m: any) => m.id), [sent[2]!.id])
      assert.isNull(page2.body.next)
      assert.deepStrictEqual(page2.body.messages[0].payload, { n: 3 })

      const one = yield* request(base, "GET", `/api/messages/${doomed!.id}`, { auth })
      assert.strictEqual(one.status, 200, one.text)
      assert.deepInclude(one.body.message, { id: doomed!.id, state: "dead", deadReason: "bad payload" })
      assert.deepStrictEqual(one.body.message.progress, { step: 3, of: 4 })
      assert.isString(one.body.message.progressAt)
      assert.deepStrictEqual(one.body.attempts.map((a: any) => [a.attempt, a.outcome, a.consumer]), [[1, "dead-lettered", "admin-test"]])
      const missing = yield* request(base, "GET", "/api/messages/999999999", { auth })
      assert.strictEqual(missing.status, 404)
      assert.match(missing.body.message, /no message with id 999999999/)

      const cancelled = yield* request(base, "POST", "/api/messages/cancel", { auth, body: { ids: [sent[0]!.id, "999999999"] } })
      assert.strictEqual(cancelled.status, 200, cancelled.text)
      assert.deepStrictEqual(cancelled.body, { results: [{ id: sent[0]!.id, result: "cancelled" }], unknown: ["999999999"] })
      assert.isTrue(Option.isNone(yield* store.get(sent[0]!.id)), "cancelled: gone from the database")

      const dead = yield* request(base, "GET", "/api/dead-letters?queue=reports", { auth })
      assert.deepStrictEqual(dead.body.map((d: any) => [d.id, d.reason, d.lastError]), [[doomed!.id, "bad payload", "boom"]])
      const redriven = yield* request(base, "POST", "/api/dead-letters/redrive", { auth, body: { ids: [doomed!.id] } })
      assert.deepStrictEqual(redriven.body, { redriven: [doomed!.id] })
      assert.strictEqual(Option.getOrThrow(yield* store.get(doomed!.id)).state, "ready", "redriven in the database")
      const [again] = yield* store.claim("reports", { lease: "1 minute", limit: 1, consumer: "admin-test" })
      yield* Finish.deadLetter(store, again!, { reason: "still bad" })
      const purged = yield* request(base, "POST", "/api/dead-letters/purge", { auth, body: { queue: "reports" } })
      assert.deepStrictEqual(purged.body, { purged: [doomed!.id] })
      assert.isTrue(Option.isNone(yield* store.get(doomed!.id)), "purged from the database")

      const bulk = yield* request(base, "POST", "/api/queues/mail/cancel", { auth, body: { task: "send" } })
      assert.strictEqual(bulk.status, 200, bulk.text)
      assert.deepStrictEqual(
        bulk.body.results.map((r: any) => [r.id, r.result]),
        [[sent[1]!.id, "cancelled"], [sent[2]!.id, "cancelled"], [later!.id, "cancelled"]]
      )
      const after = yield* store.stats("mail")
      assert.strictEqual(after.ready + after.delayed, 0, "every message of the task cancelled")

      // A consumer row as session liveness writes it, holding one claim.
      yield* store.send("mail", [{ task: "send", payload: {} }])
      yield* store.claim("mail", { lease: "1 minute", limit: 1, consumer: "worker-1" })
      yield* Option.getOrThrow(sql).unsafe(
        `INSERT INTO ${Option.getOrThrow(schema)}.consumers (id, host, pid, lock_key) VALUES ('worker-1', 'box', 42, 7)`
      )
      const consumers = yield* request(base, "GET", "/api/consumers", { auth })
      assert.strictEqual(consumers.status, 200, consumers.text)
      assert.deepInclude(consumers.body[0], { id: "worker-1", host: "box", pid: 42, inFlight: 1, sessionLiveness: true })
      // Registered just above with heartbeat_at = now(): a small age, in milliseconds.
      assert.isAtLeast(consumers.body[0].heartbeatAgeMs, 0)
      assert.isAtMost(consumers.body[0].heartbeatAgeMs, 10_000)
      const flight = yield* request(base, "GET", "/api/in-flight", { auth })
      assert.deepStrictEqual(flight.body.map((m: any) => [m.queue, m.leasedBy, typeof m.leasedAt]), [["mail", "worker-1", "string"]])

      const counters = yield* request(base, "GET", "/api/counters", { auth })
      assert.strictEqual(counters.status, 200)
      for (const key of ["doubleRuns", "reaped", "leasesLost", "wedgedRenewers", "claimed"]) assert.property(counters.body, key)

      const openapi = yield* request(base, "GET", "/openapi.json")
      assert.strictEqual(openapi.status, 200)
      assert.strictEqual(openapi.body.info.title, "leasehold")
      assert.property(openapi.body.paths, "/api/queues/{queue}/pause")
      assert.property(openapi.body.paths, "/api/dead-letters/redrive")
      assert.match(openapi.body.paths["/api/queues/{queue}/pause"].post.summary, /needs the admin token/)
      assert.property(openapi.body.paths["/api/queues/{queue}/pause"].post.responses, "401")
      const docs = yield* request(base, "GET", "/docs")
      assert.strictEqual(docs.status, 200)
      assert.match(docs.contentType ?? "", /text\/html/)
      assert.isFalse(/<script[^>]*\ssrc=/.test(docs.text), "the reference page's script is inline, not loaded from a CDN")
      const page = yield* request(base, "GET", "/")
      assert.strictEqual(page.status, 200)
      assert.match(page.text, /<title>leasehold<\/title>/)
      assert.notMatch(page.text, /<script src=|<link [^>]*href="http/, "no external script or stylesheet")
    })))

  it.live("bad input: 400 naming the field and the rule", () =>
    Effect.scoped(Effect.gen(function*() {
      const { base } = yield* serve(pgStore(), { token })
      const auth = bearer(token)
      const expect400 = (reply: Reply, field: string, rule: RegExp) => {
        assert.strictEqual(reply.status, 400, reply.text)
        assert.strictEqual(reply.body._tag, "BadRequest", reply.text)
        assert.strictEqual(reply.body.field, field, reply.text)
        assert.match(reply.body.rule, rule, reply.text)
        assert.include(reply.body.message, field)
      }
      expect400(yield* request(base, "GET", "/api/queues/bad%20name/messages", { auth }), "queue", new RegExp(nameRule.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")))
      expect400(yield* request(base, "GET", "/api/queues/mail/messages?limit=0", { auth }), "limit", /whole number from 1 to 1000/)
      expect400(yield* request(base, "GET", "/api/queues/mail/messages?limit=abc", { auth }), "limit", /whole number from 1 to 1000/)
      expect400(yield* request(base, "GET", "/api/queues/mail/messages?state=running", { auth }), "state", /ready, delayed, in-flight, dead/)
      expect400(yield* request(base, "GET", "/api/queues/mail/messages?after=-1", { auth }), "after", /message id/)
      expect400(yield* request(base, "GET", "/api/messages/abc", { auth }), "id", /message id/)
      expect400(yield* request(base, "GET", "/api/dead-letters?limit=5000", { auth }), "limit", /1 to 1000/)
      // Ids beyond int8 (the column's type) are refused by the route's schema, not by the database (a 503).
      const int8Rule = /a whole number from 1 to 9223372036854775807/
      expect400(yield* request(base, "GET", "/api/messages/9223372036854775808", { auth }), "id", int8Rule)
      expect400(yield* request(base, "GET", "/api/messages/9999999999999999999", { auth }), "id", int8Rule)
      expect400(yield* request(base, "GET", "/api/queues/mail/messages?after=9223372036854775808", { auth }), "after", int8Rule)
      expect400(yield* request(base, "POST", "/api/messages/cancel", { auth, body: { ids: ["9223372036854775808"] } }), "ids[0]", int8Rule)
      expect400(yield* request(base, "POST", "/api/dead-letters/purge", { auth, body: { ids: ["1", "9223372036854775808"] } }), "ids[1]", int8Rule)
      const largest = yield* request(base, "GET", "/api/messages/9223372036854775807", { auth })
      assert.strictEqual(largest.status, 404, `the largest id is a valid one: ${largest.text}`)
      expect400(yield* request(base, "POST", "/api/queues/-x/pause", { auth }), "queue", /1-128 characters/)
      expect400(yield* request(base, "POST", "/api/messages/cancel", { auth, body: { ids: [] } }), "ids", /1 to 1000 message ids/)
      expect400(yield* request(base, "POST", "/api/messages/cancel", { auth, body: { ids: ["12", "x"] } }), "ids[1]", /message id/)
      expect400(yield* request(base, "POST", "/api/messages/cancel", { auth, body: {} }), "ids", /./)
      expect400(yield* request(base, "POST", "/api/queues/mail/cancel", { auth, body: { task: "" } }), "task", /1-128 characters/)
      expect400(yield* request(base, "POST", "/api/dead-letters/redrive", { auth, body: {} }), "payload", /exactly one of queue, ids or all/)
      expect400(yield* request(base, "POST", "/api/dead-letters/purge", { auth, body: { queue: "a", all: true } }), "payload", /exactly one/)
      const garbled = yield* request(base, "POST", "/api/messages/cancel", { auth, raw: "{not json" })
      assert.strictEqual(garbled.status, 400, garbled.text)
    })))

  it.live("security: 401 without or with a wrong token (changes and reads), 403 with none configured; nothing written on refusal", () =>
    Effect.scoped(Effect.gen(function*() {
      const logs: Array<string> = []
      const { base, store } = yield* serve(pgStore(), { token, logs })
      const [live] = yield* store.send("mail", [{ task: "send", payload: {} }])
      const [dead] = yield* store.send("reports", [{ task: "render", payload: {} }])
      const [claim] = yield* store.claim("reports", { lease: "1 minute", limit: 1, consumer: "c" })
      yield* Finish.deadLetter(store, claim!, { reason: "bad" })
      const changes = [
        ["/api/queues/mail/pause", {}],
        ["/api/queues/mail/resume", {}],
        ["/api/messages/cancel", { ids: [live!.id] }],
        ["/api/queues/mail/cancel", {}],
        ["/api/dead-letters/redrive", { all: true }],
        ["/api/dead-letters/purge", { all: true }]
      ] as const
      const untouched = Effect.gen(function*() {
        assert.isFalse((yield* store.queues()).find((q) => q.queue === "mail")!.paused, "not paused")
        assert.strictEqual(Option.getOrThrow(yield* store.get(live!.id)).state, "ready", "not cancelled")
        assert.strictEqual(Option.getOrThrow(yield* store.get(dead!.id)).state, "dead", "not redriven nor purged")
      })
      for (const [path, body] of changes) {
        const none = yield* request(base, "POST", path, { body })
        assert.strictEqual(none.status, 401, `${path} without a token: ${none.text}`)
        assert.match(none.body.message, /Authorization: Bearer/)
        assert.strictEqual(none.authenticate, 'Bearer realm="leasehold"', "a 401 says how to authenticate")
        const wrong = yield* request(base, "POST", path, { body, auth: bearer(`${token}x`) })
        assert.strictEqual(wrong.status, 401, `${path} with a wrong token: ${wrong.text}`)
        assert.match(wrong.body.message, /wrong admin token/)
        const basic = yield* request(base, "POST", path, { body, auth: `Basic ${Buffer.from(`admin:${token}`).toString("base64")}` })
        assert.strictEqual(basic.status, 401, `${path} with another scheme`)
        // A bad body behind a missing token is refused for the token first.
        const badBody = yield* request(base, "POST", path, { raw: "{" })
        assert.strictEqual(badBody.status, 401)
      }
      yield* untouched
      // Every refusal logged at WARN with the route, never the token; a change at INFO.
      assert.include(logs, "Warn admin: POST /api/queues/mail/pause refused: wrong admin token")
      assert.isFalse(logs.some((line) => line.includes(token)), "the token is never logged")
      assert.strictEqual((yield* request(base, "POST", "/api/queues/mail/resume", { auth: bearer(token) })).status, 200)
      assert.include(logs, "Info admin: POST /api/queues/mail/resume")
      // A token set guards the reading routes too: they show payloads, errors, hosts and pids.
      for (const path of readRoutes(live!.id)) {
        const none = yield* request(base, "GET", path)
        assert.strictEqual(none.status, 401, `${path} without a token: ${none.text}`)
        assert.match(none.body.message, /requires the admin token to read: send Authorization: Bearer <LEASEHOLD_ADMIN_TOKEN>/)
        assert.strictEqual(none.authenticate, 'Bearer realm="leasehold"', "a 401 says how to authenticate")
        assert.notInclude(none.text, "payload")
        const wrong = yield* request(base, "GET", path, { auth: bearer(`${token}x`) })
        assert.strictEqual(wrong.status, 401, `${path} with a wrong token: ${wrong.text}`)
        assert.match(wrong.body.message, /wrong admin token/)
        assert.strictEqual((yield* request(base, "GET", path, { auth: bearer(token) })).status, 200, path)
      }
      // A server bound to this machine answers only requests naming it: a page elsewhere
      // pointing a name of its own at 127.0.0.1 (DNS rebinding) reads nothing.
      const port = new URL(base).port
      const hosts = [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`, "LOCALHOST", `[::ffff:127.0.0.1]:${port}`, "[::ffff:7f00:1]"]
      for (const host of hosts) {
        const ok = yield* getWithHost(base, `/api/messages/${live!.id}`, host, bearer(token))
        assert.strictEqual(ok.status, 200, `Host: ${host}: ${ok.text}`)
      }
      for (const host of [`rebind.example:${port}`, "rebind.example", `127.0.0.1.rebind.example:${port}`, "[::2]", "[::ffff:10.0.0.1]"]) {
        const refused = yield* getWithHost(base, `/api/messages/${live!.id}`, host, bearer(token))
        assert.strictEqual(refused.status, 421, `Host: ${host}: ${refused.text}`)
        assert.notInclude(refused.text, "payload")
        assert.strictEqual((yield* getWithHost(base, "/", host)).status, 421, "the dashboard page too")
      }

      // The same routes on a server with no token configured: 403, saying so.
      const open = yield* serve(pgStore(), {})
      const [other] = yield* open.store.send("mail", [{ task: "send", payload: {} }])
      for (const [path, body] of changes) {
        const refused = yield* request(open.base, "POST", path, { body, auth: bearer(token) })
        assert.strictEqual(refused.status, 403, `${path}: ${refused.text}`)
        assert.match(refused.body.message, /no admin token is set \(set LEASEHOLD_ADMIN_TOKEN/)
      }
      assert.strictEqual(Option.getOrThrow(yield* open.store.get(other!.id)).state, "ready")
      assert.isFalse((yield* open.store.queues()).find((q) => q.queue === "mail")!.paused)
      // Bound to this machine with no token, reading is open (the Host check still applies).
      for (const path of readRoutes(other!.id)) assert.strictEqual((yield* request(open.base, "GET", path)).status, 200, path)

      // The token from the environment works like one given in code.
      const fromEnv = yield* serve(pgStore(), { env: { LEASEHOLD_ADMIN_TOKEN: token } })
      assert.strictEqual((yield* request(fromEnv.base, "POST", "/api/queues/mail/pause", { auth: bearer(token) })).status, 200)
    })))

  it.live("a short token is refused at start (ConfigInvalid naming the variable, not quoting it)", () =>
    Effect.gen(function*() {
      const exit = yield* Effect.scoped(serve(MemoryQueueStore.layer(), { env: { LEASEHOLD_ADMIN_TOKEN: "short-one" } })).pipe(Effect.exit)
      assert.isTrue(Exit.isFailure(exit))
      const text = String(Exit.isFailure(exit) ? exit.cause : "")
      assert.include(text, "LEASEHOLD_ADMIN_TOKEN")
      assert.include(text, "at least 16 characters")
      assert.notInclude(text, "short-one")
    }))

  it.live("counters: leases lost by reason, double runs and claims reaped from this process's metrics", () =>
    Effect.scoped(Effect.gen(function*() {
      const { base } = yield* serve(MemoryQueueStore.layer())
      const before = (yield* request(base, "GET", "/api/counters")).body
      yield* Metric.update(QueueMetrics.leaseLostBy("reclaimed"), 2)
      yield* Metric.update(QueueMetrics.leaseLostBy("local-deadline"), 1)
      // The per-task family is another series: not counted twice.
      yield* Metric.update(QueueMetrics.forTask("q", "t").leaseLost("reclaimed"), 5)
      yield* Metric.update(QueueMetrics.doubleRuns, 3)
      yield* Metric.update(QueueMetrics.reaped, 4)
      const after = (yield* request(base, "GET", "/api/counters")).body
      const lost = (body: any, reason: string) => body.leasesLost[reason] ?? 0
      assert.strictEqual(lost(after, "reclaimed") - lost(before, "reclaimed"), 2)
      assert.strictEqual(lost(after, "local-deadline") - lost(before, "local-deadline"), 1)
      assert.strictEqual(after.doubleRuns - before.doubleRuns, 3)
      assert.strictEqual(after.reaped - before.reaped, 4)
    })))

  it.live("Http.layerWithAdminFromEnv in a worker: health and the admin API on one server; no server without a port", () =>
    Effect.scoped(Effect.gen(function*() {
      const worker = (env: Record<string, string>) =>
        Http.layerWithAdminFromEnv().pipe(
          Layer.provideMerge(Consumer.layer(() => Effect.void, { queues: ["mail"], pollInterval: "50 millis", shutdownGrace: "1 second" })),
          Layer.provideMerge(MemoryQueueStore.layer()),
          Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env })))
        )
      const context = yield* Layer.build(worker({ LEASEHOLD_HTTP_PORT: "0", LEASEHOLD_ADMIN_TOKEN: token }))
      const base = Option.getOrThrow(Context.getOption(context as Context.Context<never>, Http.Listening)).url
      const store = Context.get(context, QueueStore)
      assert.strictEqual((yield* request(base, "GET", "/healthz")).status, 200)
      yield* store.send("mail", [{ task: "send", payload: {} }])
      yield* Effect.promise(() =>
        waitForAsync("the message processed", async () => {
          const reply = await Effect.runPromise(request(base, "GET", "/api/counters", { auth: bearer(token) }))
          return reply.body.acked >= 1 ? true : undefined
        }, 15_000)
      )
      assert.strictEqual((yield* request(base, "POST", "/api/queues/mail/pause", { auth: bearer(token) })).status, 200)
      assert.isTrue((yield* store.queues()).find((q) => q.queue === "mail")!.paused)
      const off = yield* Layer.build(worker({ LEASEHOLD_ADMIN_TOKEN: token }))
      assert.isTrue(Option.isNone(Context.getOption(off as Context.Context<never>, Http.Listening)), "no port: no server")
    })))

  it.live("a database failure is a 503 without the URL's password", () =>
    Effect.scoped(Effect.gen(function*() {
      const failing = Layer.effect(
        QueueStore,
        Effect.map(MemoryQueueStore.make(), (store) =>
          QueueStore.of({
            ...store,
            queues: () =>
              Effect.fail(new QueryFailed({ operation: "queues", message: "connect to postgres://app:hunter2@db:5432/jobs failed" }))
          }))
      )
      const { base } = yield* serve(failing)
      const reply = yield* request(base, "GET", "/api/queues")
      assert.strictEqual(reply.status, 503, reply.text)
      assert.notInclude(reply.text, "hunter2")
      assert.include(reply.text, "postgres://***@db:5432/jobs")
    })))

  it.live("`leasehold serve`: a real process serves the API and the page; Ctrl-C stops it with exit 0", () =>
    Effect.gen(function*() {
      const context = yield* Layer.build(PgTest.storeLayer({ clock: "database" }))
      const store = Context.get(context, QueueStore)
      const schema = Option.getOrThrow(Option.map(Context.getOption(context, StoreSettings), (s) => s.schema))
      yield* store.send("mail", [{ task: "send", payload: {} }])
      const output: Array<string> = []
      const proc = spawn(process.execPath, ["src/bin/leasehold.ts", "serve", "--port", "0"], {
        // The interface from LEASEHOLD_HTTP_HOST while the port comes from --port: 127.0.0.2, still this machine.
        env: { ...process.env, LEASEHOLD_DATABASE_URL: PgTest.databaseUrl(), LEASEHOLD_SCHEMA: schema, LEASEHOLD_ADMIN_TOKEN: token, LEASEHOLD_HTTP_HOST: "127.0.0.2" },
        stdio: ["ignore", "pipe", "pipe"]
      })
      let exit: number | null | undefined
      proc.on("exit", (code) => {
        exit = code
      })
      proc.stdout.on("data", (chunk: Buffer) => output.push(chunk.toString()))
      proc.stderr.on("data", (chunk: Buffer) => output.push(chunk.toString()))
      yield* Effect.addFinalizer(() => Effect.sync(() => exit === undefined && proc.kill("SIGKILL")))
      const base = yield* Effect.promise(() =>
        waitForAsync("serve to print its address", () => /dashboard at (http:\/\/127\.0\.0\.\d:\d+)\//.exec(output.join(""))?.[1], {
          timeoutMs: 30_000,
          describe: () => output.join("")
        })
      )
      assert.match(base, /^http:\/\/127\.0\.0\.2:/, "bound where LEASEHOLD_HTTP_HOST says")
      const queues = yield* request(base, "GET", "/api/queues", { auth: bearer(token) })
      assert.deepInclude((queues.body as Array<any>).find((q) => q.queue === "mail"), { ready: 1, paused: false })
      assert.strictEqual((yield* request(base, "POST", "/api/queues/mail/pause", { auth: bearer(token) })).status, 200)
      assert.isTrue((yield* store.queues()).find((q) => q.queue === "mail")!.paused, "paused in the database")
      assert.strictEqual((yield* request(base, "GET", "/")).status, 200)
      proc.kill("SIGINT")
      const code = yield* Effect.promise(() => waitForAsync("serve to exit", () => exit, { timeoutMs: 15_000, describe: () => output.join("") }))
      assert.strictEqual(code, 0, output.join(""))
    }).pipe(Effect.scoped), { timeout: 60_000 })
})

/** A worker serving health, metrics and the admin API on `host` (every interface: asked on 127.0.0.1). */
const workerOn = (host: string, env: Record<string, string>) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(
      Http.layerWithAdmin({ port: 0, host }).pipe(
        Layer.provideMerge(Consumer.layer(() => Effect.void, { queues: ["mail"], pollInterval: "50 millis", shutdownGrace: "1 second" })),
        Layer.provideMerge(MemoryQueueStore.layer()),
        Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env })))
      )
    )
    const listening = Context.get(context, Http.Listening)
    return { base: `http://127.0.0.1:${listening.port}`, url: listening.url, store: Context.get(context, QueueStore) }
  })

describe("Admin access by bind address", () => {
  it.live("bound to 0.0.0.0 without a token: probes answer, every /api route is 403 naming LEASEHOLD_ADMIN_TOKEN; with one: 401 without it", () =>
    Effect.scoped(Effect.gen(function*() {
      const open = yield* workerOn("0.0.0.0", {})
      const [sent] = yield* open.store.send("mail", [{ task: "send", payload: { secret: "s" } }])
      // The probes need no token (Kubernetes), whatever `Host` they send (the pod's IP).
      assert.strictEqual((yield* getWithHost(open.base, "/healthz", "10.1.2.3:8080")).status, 200)
      assert.strictEqual((yield* getWithHost(open.base, "/readyz", "10.1.2.3:8080")).status, 200)
      assert.strictEqual((yield* getWithHost(open.base, "/metrics", "10.1.2.3:8080")).status, 404, "no Prometheus export: 404, not refused")
      for (const path of readRoutes(sent!.id)) {
        const refused = yield* request(open.base, "GET", path)
        assert.strictEqual(refused.status, 403, `${path}: ${refused.text}`)
        assert.match(refused.body.message, /reads over HTTP are off: .*no admin token is set \(set LEASEHOLD_ADMIN_TOKEN/)
        assert.notInclude(refused.text, "secret")
        // A token nobody configured admits nothing either.
        assert.strictEqual((yield* request(open.base, "GET", path, { auth: bearer(token) })).status, 403, path)
      }
      assert.strictEqual((yield* request(open.base, "POST", "/api/queues/mail/pause", { auth: bearer(token) })).status, 403)
      assert.isFalse((yield* open.store.queues()).find((q) => q.queue === "mail")!.paused)
      // The page holds no data: served, and it shows the 403 itself.
      assert.strictEqual((yield* request(open.base, "GET", "/")).status, 200)

      const guarded = yield* workerOn("0.0.0.0", { LEASEHOLD_ADMIN_TOKEN: token })
      assert.strictEqual((yield* request(guarded.base, "GET", "/healthz")).status, 200, "probes still need no token")
      for (const path of readRoutes(sent!.id)) {
        const none = yield* request(guarded.base, "GET", path)
        assert.strictEqual(none.status, 401, `${path}: ${none.text}`)
        assert.strictEqual(none.authenticate, 'Bearer realm="leasehold"')
        const ok = yield* getWithHost(guarded.base, path, "queues.example.com", bearer(token))
        assert.notStrictEqual(ok.status, 401, `${path} with the token`)
        assert.notStrictEqual(ok.status, 421, `${path}: bound beyond loopback without an allowlist, any Host is answered`)
      }
    })))

  it.live("the Host allowlist (code and LEASEHOLD_HTTP_ALLOWED_HOSTS): listed and loopback names answered, others 421, probes always", () =>
    Effect.scoped(Effect.gen(function*() {
      const check = (base: string) =>
        Effect.gen(function*() {
          const port = new URL(base).port
          for (const host of ["queues.example.com", `QUEUES.example.com:${port}`, `localhost:${port}`, `[::ffff:127.0.0.1]:${port}`, "10.0.0.7"]) {
            const ok = yield* getWithHost(base, "/api/queues", host, bearer(token))
            assert.strictEqual(ok.status, 200, `Host: ${host}: ${ok.text}`)
          }
          for (const host of ["other.example", `queues.example.com.evil:${port}`, "[::2]"]) {
            const refused = yield* getWithHost(base, "/api/queues", host, bearer(token))
            assert.strictEqual(refused.status, 421, `Host: ${host}: ${refused.text}`)
            assert.include(refused.text, "queues.example.com")
            assert.strictEqual((yield* getWithHost(base, "/", host)).status, 421, "the page too")
            assert.strictEqual((yield* getWithHost(base, "/metrics", host)).status, 404, "the probes answer any Host (404: no Prometheus export)")
          }
        })
      const fromCode = yield* serve(MemoryQueueStore.layer(), { token, host: "0.0.0.0", allowedHosts: ["queues.example.com", "10.0.0.7"] })
      yield* check(fromCode.base)
      const fromEnv = yield* serve(MemoryQueueStore.layer(), {
        token,
        host: "0.0.0.0",
        env: { LEASEHOLD_HTTP_ALLOWED_HOSTS: " queues.example.com , 10.0.0.7" }
      })
      yield* check(fromEnv.base)
      for (const bad of ["queues.example.com:8080", "a b", "x,,y", "user@host"]) {
        const exit = yield* Effect.scoped(serve(MemoryQueueStore.layer(), { env: { LEASEHOLD_HTTP_ALLOWED_HOSTS: bad } })).pipe(Effect.exit)
        const text = String(Exit.isFailure(exit) ? exit.cause : "")
        assert.include(text, "LEASEHOLD_HTTP_ALLOWED_HOSTS", bad)
        assert.include(text, "host names or IP addresses without a port", bad)
      }
    })))

  it.live("::ffff:127.0.0.1 is loopback: bound to it, only loopback names are answered; reads open without a token", () =>
    Effect.scoped(Effect.gen(function*() {
      const { base, store } = yield* serve(MemoryQueueStore.layer(), { host: "::ffff:127.0.0.1" })
      const [sent] = yield* store.send("mail", [{ task: "send", payload: {} }])
      const port = new URL(base).port
      for (const host of [`[::ffff:127.0.0.1]:${port}`, `localhost:${port}`, `127.0.0.1:${port}`]) {
        assert.strictEqual((yield* getWithHost(base, `/api/messages/${sent!.id}`, host)).status, 200, host)
      }
      for (const host of [`rebind.example:${port}`, "[::ffff:10.0.0.1]"]) {
        assert.strictEqual((yield* getWithHost(base, `/api/messages/${sent!.id}`, host)).status, 421, host)
      }
    })))

  it.live("security headers on every response: CSP with frame-ancestors 'none', nosniff, Referrer-Policy, X-Frame-Options", () =>
    Effect.scoped(Effect.gen(function*() {
      const { base } = yield* serve(MemoryQueueStore.layer(), { token })
      const expectHeaders = (what: string, headers: Headers) => {
        const policy = headers.get("content-security-policy") ?? ""
        assert.include(policy, "frame-ancestors 'none'", what)
        assert.include(policy, "default-src 'none'", what)
        assert.strictEqual(headers.get("x-content-type-options"), "nosniff", what)
        assert.strictEqual(headers.get("referrer-policy"), "no-referrer", what)
        assert.strictEqual(headers.get("x-frame-options"), "DENY", what)
        return policy
      }
      const replies: Array<readonly [string, Reply]> = [
        ["200 /api", yield* request(base, "GET", "/api/queues", { auth: bearer(token) })],
        ["401 /api", yield* request(base, "GET", "/api/queues")],
        ["400 /api", yield* request(base, "GET", "/api/messages/x", { auth: bearer(token) })],
        ["404 no route", yield* request(base, "GET", "/nothing-here")],
        ["/metrics", yield* request(base, "GET", "/metrics")],
        ["/openapi.json", yield* request(base, "GET", "/openapi.json")]
      ]
      for (const [what, reply] of replies) {
        const policy = expectHeaders(what, reply.headers)
        assert.notInclude(policy, "script-src", `${what}: no script runs in a response that is not a page`)
      }
      for (const [what, reply] of replies.slice(0, 3)) assert.strictEqual(reply.headers.get("cache-control"), "no-store", what)
      // The 421 of a refused Host, sent before any route ran.
      const refused = yield* Effect.promise(() =>
        new Promise<import("node:http").IncomingMessage>((resolve, reject) =>
          httpRequest(`${base}/api/queues`, { headers: { host: "rebind.example" } }, resolve).on("error", reject).end()
        )
      )
      refused.resume()
      assert.strictEqual(refused.statusCode, 421)
      expectHeaders("421", new Headers(refused.headers as Record<string, string>))
      // The pages run only their own inline scripts, by hash; the dashboard's styles by hash too.
      const page = yield* request(base, "GET", "/")
      const pagePolicy = expectHeaders("/", page.headers)
      assert.match(pagePolicy, /script-src 'sha256-[A-Za-z0-9+/]+=*'(;|$)/)
      assert.match(pagePolicy, /style-src 'sha256-[A-Za-z0-9+/]+=*'(;|$)/)
      assert.include(pagePolicy, "connect-src 'self'")
      const docs = yield* request(base, "GET", "/docs")
      const docsPolicy = expectHeaders("/docs", docs.headers)
      assert.match(docsPolicy, /script-src 'sha256-[^;]*;/)
      assert.notMatch(docsPolicy, /script-src[^;]*unsafe/, "no unsafe-inline or unsafe-eval script")
    })))
})
