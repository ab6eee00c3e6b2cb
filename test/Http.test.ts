/**
 * leasehold's HTTP server, for real: a NodeHttpServer on an ephemeral port in
 * front of a real consumer on real PostgreSQL, asked over the network with
 * `fetch`.
 *
 * - `/healthz` is 200, turns 503 (reason `stale`) while every claim hangs in a
 *   store that blocks it, and turns 200 again once claims answer;
 * - `/readyz` is 200 with every check passing (database, migrations, presence),
 *   turns 503 naming the database while the server is stopped, and 200 again
 *   after it starts; no response and no log line carries the URL's password;
 * - `/metrics` is Prometheus text holding leasehold's counters, moved by the
 *   messages processed, and 404 without `Observability.layerPrometheus()`;
 * - `Http.layerFromEnv`: no server without `LEASEHOLD_HTTP_PORT`, `ConfigInvalid`
 *   naming the variable for a bad port or host; the security headers on every
 *   response.
 */
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Context, Deferred, Effect, Exit, Layer, Logger, Option, Redacted, Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as Consumer from "../src/Consumer.ts"
import * as ConsumerPresence from "../src/ConsumerPresence.ts"
import * as Http from "../src/Http.ts"
import * as EmbeddedPostgres from "../dev/EmbeddedPostgres.ts"
import * as Migrations from "../src/Migrations.ts"
import * as Observability from "../src/Observability.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import { StoreSettings } from "../src/StoreSettings.ts"
import * as QueueDepth from "../src/QueueDepth.ts"
import { QueryFailed } from "../src/QueueError.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as Finish from "./support/Finish.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitFor } from "./support/Wait.ts"

interface Reply {
  readonly status: number
  readonly contentType: string | null
  readonly body: string
  readonly headers: Headers
}

/** GET `path` from the server; a refused connection is a failure, not a reply. */
const get = (base: string, path: string) =>
  Effect.tryPromise(async (): Promise<Reply> => {
    const response = await fetch(`${base}${path}`, { signal: AbortSignal.timeout(10_000) })
    return { status: response.status, contentType: response.headers.get("content-type"), body: await response.text(), headers: response.headers }
  })

/** Poll `path` until `accept` takes the reply; the last reply seen is in the failure. */
const waitForReply = (base: string, path: string, what: string, accept: (reply: Reply) => boolean, timeoutMs = 20_000) => {
  let last = "no reply yet"
  return waitFor(
    what,
    get(base, path).pipe(
      Effect.tap((reply) => Effect.sync(() => { last = `${reply.status} ${reply.body}` })),
      Effect.map((reply) => accept(reply) ? Option.some(reply) : Option.none()),
      Effect.catch((error) => Effect.sync(() => { last = String(error) }).pipe(Effect.as(Option.none<Reply>())))
    ),
    { timeoutMs, describe: () => last }
  )
}

/** Build `layer` in a scope of its own, so the test decides when it stops. */
const start = <A, E>(layer: Layer.Layer<A, E>) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const context = yield* Layer.buildWithScope(layer, scope)
    return { context, stop: Scope.close(scope, Exit.void) }
  })

/** The sum of every sample of `name` (with or without attributes) in a Prometheus text body. */
const sampleSum = (body: string, name: string): number =>
  body.split("\n")
    .filter((line) => line.startsWith(`${name} `) || line.startsWith(`${name}{`))
    .reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(" ") + 1)), 0)

const noop: Consumer.Handler = () => Effect.void

describe("Http on a real consumer and PostgreSQL (real time)", () => {
  it.live("/healthz: 200, 503 (stale) while claims hang, 200 again when they answer; /metrics 404 without Prometheus", () =>
    Effect.gen(function*() {
      let gate: Deferred.Deferred<void> | undefined
      // The real store, except that a claim waits for the gate while one is set.
      const blocking = Layer.effect(QueueStore, Effect.map(QueueStore, (store) =>
        QueueStore.of({
          ...store,
          claim: (queue, options) => gate === undefined ? store.claim(queue, options) : Effect.andThen(Deferred.await(gate), store.claim(queue, options))
        })))
      const { context, stop } = yield* start(
        Http.layer({ port: 0 }).pipe(
          Layer.provideMerge(Consumer.layer(noop, { queues: ["http_health"], pollInterval: "50 millis", healthStale: "500 millis" })),
          Layer.provide(blocking),
          Layer.provide(PgTest.storeLayer({ maxConnections: 4 }))
        )
      )
      const base = Context.get(context, Http.Listening).url
      assert.match(base, /^http:\/\/127\.0\.0\.1:\d+$/)
      assert.notStrictEqual(Context.get(context, Http.Listening).port, 0, "an ephemeral port was picked")

      const live = yield* waitForReply(base, "/healthz", "healthz 200", (r) => r.status === 200)
      assert.strictEqual(JSON.parse(live.body).status, "live")

      gate = yield* Deferred.make<void>()
      const stale = yield* waitForReply(base, "/healthz", "healthz 503 while claims hang", (r) => r.status === 503)
      const body = JSON.parse(stale.body)
      assert.strictEqual(body._tag, "Unhealthy")
      assert.strictEqual(body.reason, "stale")
      assert.match(body.message, /^no claim loop progress since \d{4}-\d\d-\d\dT.* \(\d+\.\ds ago; stale after 0\.5s\)$/)
      assert.isTrue(Date.parse(body.lastProgressAt) <= Date.now() - 500, "the last progress is older than the stale bound")

      const released = gate
      gate = undefined
      yield* Deferred.succeed(released, undefined)
      const recovered = yield* waitForReply(base, "/healthz", "healthz 200 again", (r) => r.status === 200)
      assert.strictEqual(JSON.parse(recovered.body).status, "live")

      const metrics = yield* get(base, "/metrics")
      assert.strictEqual(metrics.status, 404)
      assert.include(metrics.body, "Observability.layerPrometheus()")
      yield* stop
      // Stopped with its layer: nothing listens any more.
      const after = yield* Effect.result(get(base, "/healthz"))
      assert.strictEqual(after._tag, "Failure", "the server is closed with its scope")
    }), { timeout: 60_000 })

  it.live("/healthz: 503 (failed) once the claim loop failed, with the error redacted", () =>
    Effect.gen(function*() {
      // A claim that fails with a non-connection error stops the loop; its message quotes a URL.
      const failing = Layer.effect(QueueStore, Effect.map(QueueStore, (store) =>
        QueueStore.of({
          ...store,
          claim: () => Effect.fail(new QueryFailed({ operation: "claim", message: "claim: permission denied on postgres://app:pw-in-error@db/x" }))
        })))
      const { context, stop } = yield* start(
        Http.layer({ port: 0 }).pipe(
          Layer.provideMerge(Consumer.layer(noop, { queues: ["http_failed"], pollInterval: "50 millis", shutdownGrace: "1 second" })),
          Layer.provide(failing),
          Layer.provide(PgTest.storeLayer({ maxConnections: 4 }))
        )
      )
      const base = Context.get(context, Http.Listening).url
      const reply = yield* waitForReply(base, "/healthz", "healthz 503 after the loop failed", (r) => r.status === 503)
      const body = JSON.parse(reply.body)
      assert.strictEqual(body.reason, "failed")
      assert.match(body.message, /^claim loop failed: claim: permission denied on postgres:\/\/\*\*\*@db\/x$/)
      assert.notInclude(reply.body, "pw-in-error")
      yield* stop
    }), { timeout: 60_000 })

  it.live("/readyz: 200, 503 naming the database while it is stopped, 200 after it starts; the password never shows", () =>
    Effect.gen(function*() {
      const server = yield* EmbeddedPostgres.acquire({ forTests: true })
      // Trust auth ignores the password: it is there to be looked for in every reply and log line.
      const secret = "pw-never-shown-7f3a"
      const url = server.url.replace("postgres://postgres@", `postgres://postgres:${secret}@`)
      const logs: Array<string> = []
      const logger = Logger.make<unknown, void>(({ message }) => {
        logs.push(Array.isArray(message) ? message.map(String).join(" ") : String(message))
      })
      const schema = "http_ready"
      const { context, stop } = yield* start(
        Http.layer({ port: 0, databaseTimeout: "1 second" }).pipe(
          Layer.provideMerge(Consumer.layer(noop, { consumerId: "ready-probe", pollInterval: "100 millis" })),
          Layer.provideMerge(ConsumerPresence.layerPg({ mode: "on", heartbeat: 250, staleAfter: 1_500, reapEvery: 250 })),
          Layer.provideMerge(PgQueueStore.layer({ schema })),
          Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), maxConnections: 4, applicationName: "http-ready" })),
          Layer.provide(Logger.layer([logger], { mergeWithExisting: true }))
        )
      )
      const base = Context.get(context, Http.Listening).url
      const replies: Array<string> = []
      const keep = (reply: Reply) => {
        replies.push(reply.body)
        return reply
      }

      const ready = keep(yield* waitForReply(base, "/readyz", "readyz 200", (r) => r.status === 200))
      const body = JSON.parse(ready.body)
      assert.strictEqual(body.status, "ready")
      assert.deepStrictEqual(body.checks.map((c: { name: string; status: string }) => [c.name, c.status]), [
        ["database", "ok"],
        ["migrations", "ok"],
        ["presence", "ok"]
      ])
      assert.match(body.checks[1].detail, /^schema http_ready: all \d+ applied$/)
      assert.match(body.checks[2].detail, /^registered, lock held by backend \d+$/)

      yield* Effect.promise(() => server.stop())
      const down = keep(yield* waitForReply(base, "/readyz", "readyz 503 with the database down", (r) => r.status === 503))
      const failed = JSON.parse(down.body)
      assert.strictEqual(failed._tag, "NotReady")
      assert.include(failed.failed, "database")
      assert.notInclude(failed.failed, "migrations", "not checked without a database, so not blamed")
      assert.deepStrictEqual(failed.checks[1], { name: "migrations", status: "skipped", detail: "not checked: the database is unreachable" })
      assert.match(failed.message, /^not ready: database \(/)
      // Liveness is not readiness: the consumer itself is fine (a dead connection is retried).
      keep(yield* get(base, "/healthz"))

      yield* Effect.promise(() => server.start())
      const back = keep(yield* waitForReply(base, "/readyz", "readyz 200 after the start", (r) => r.status === 200, 30_000))
      assert.strictEqual(JSON.parse(back.body).status, "ready")
      yield* stop

      for (const text of [...replies, ...logs]) assert.notInclude(text, secret, "the database password leaked")
    }).pipe(Effect.scoped), { timeout: 90_000 })

  it.live("/readyz: 503 naming the migrations while one is not applied, 200 again when it is", () =>
    Effect.gen(function*() {
      const { context, stop } = yield* start(
        Http.layer({ port: 0 }).pipe(
          Layer.provideMerge(Consumer.layer(noop, { queues: ["http_migrations"], pollInterval: "100 millis" })),
          Layer.provideMerge(PgTest.storeLayer({ maxConnections: 4 }))
        )
      )
      const base = Context.get(context, Http.Listening).url
      const sql = Context.get(context, SqlClient.SqlClient)
      // PgTest.storeLayer's type leaves the store's settings out; they are there.
      const schema = Context.get(context as unknown as Context.Context<StoreSettings>, StoreSettings).schema
      const table = sql(`${schema}.migrations`)
      const ready = JSON.parse((yield* waitForReply(base, "/readyz", "readyz 200", (r) => r.status === 200)).body)
      assert.deepStrictEqual(ready.checks.map((c: { name: string }) => c.name), ["database", "migrations", "presence"])
      assert.strictEqual(ready.checks[2].detail, "session liveness not configured")

      // The latest migration as if it had never run (its id moved out of the way, put back below).
      const [latest] = Migrations.known.slice(-1)
      yield* sql`UPDATE ${table} SET migration_id = -migration_id WHERE migration_id = ${latest![0]}`
      const reply = yield* waitForReply(base, "/readyz", "readyz 503 naming the migrations", (r) => r.status === 503)
      const body = JSON.parse(reply.body)
      assert.deepStrictEqual(body.failed, ["migrations"])
      assert.strictEqual(body.checks[1].detail, `schema ${schema}: 1 migration(s) not applied (${latest![0]} ${latest![1]})`)

      yield* sql`UPDATE ${table} SET migration_id = -migration_id WHERE migration_id = ${-latest![0]}`
      yield* waitForReply(base, "/readyz", "readyz 200 again", (r) => r.status === 200)
      yield* stop
    }), { timeout: 60_000 })

  it.live("/metrics: Prometheus text with leasehold's counters, moved by the messages processed", () =>
    Effect.gen(function*() {
      const { context, stop } = yield* start(
        Http.layer({ port: 0 }).pipe(
          Layer.provideMerge(Consumer.layer(noop, { queues: ["http_metrics"], pollInterval: "50 millis" })),
          Layer.provideMerge(PgTest.storeLayer({ maxConnections: 4 })),
          Layer.provide(Observability.layerPrometheus())
        )
      )
      const base = Context.get(context, Http.Listening).url
      const before = yield* get(base, "/metrics")
      assert.strictEqual(before.status, 200)
      assert.strictEqual(before.contentType, "text/plain; version=0.0.4; charset=utf-8")
      const ackedBefore = sampleSum(before.body, "leasehold_messages_acked")

      const store = Context.get(context, QueueStore)
      yield* store.send("http_metrics", [1, 2, 3].map((n) => ({ task: "t", payload: n })))
      const after = yield* waitForReply(
        base,
        "/metrics",
        "three more acks in /metrics",
        (r) => r.status === 200 && sampleSum(r.body, "leasehold_messages_acked") - ackedBefore >= 3
      )
      assert.strictEqual(sampleSum(after.body, "leasehold_messages_acked") - ackedBefore, 3)
      assert.match(after.body, /^# TYPE leasehold_messages_acked counter$/m)
      assert.isAtLeast(sampleSum(after.body, "leasehold_messages_claimed"), 3)
      yield* stop
    }), { timeout: 60_000 })
})

describe("Http /metrics with the queue-depth collector (real time)", () => {
  /** The value of the sample of `name` whose labels include `labels` (e.g. `queue="q"`), if any. */
  const sampleOf = (body: string, name: string, labels: ReadonlyArray<string>): number | undefined => {
    const line = body.split("\n").find((l) => l.startsWith(`${name}{`) && labels.every((label) => l.includes(label)))
    return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(" ") + 1))
  }

  it.live("a scrape shows each queue's depth gauges and the per-task counters with their attributes", () =>
    Effect.gen(function*() {
      const { context, stop } = yield* start(
        Http.layer({ port: 0 }).pipe(
          Layer.provideMerge(Layer.mergeAll(
            Consumer.layer(noop, { queues: ["http_worked"], pollInterval: "50 millis" }),
            QueueDepth.layer({ queues: ["http_depth", "http_worked"], interval: "100 millis" })
          )),
          Layer.provideMerge(PgTest.storeLayer({ maxConnections: 4 })),
          Layer.provide(Observability.layerPrometheus())
        )
      )
      const base = Context.get(context, Http.Listening).url
      const store = Context.get(context, QueueStore)
      // Nobody consumes http_depth: 1 dead, 3 ready, 1 delayed stay as made here.
      const [dead] = yield* store.send("http_depth", [{ task: "t", payload: 0 }])
      const [claim] = yield* store.claim("http_depth", { lease: "30 seconds", limit: 1, consumer: "test" })
      assert.strictEqual(claim?.id, dead!.id)
      assert.strictEqual(yield* Finish.deadLetter(store, claim!, { reason: "for the test" }), "written")
      yield* store.send("http_depth", [1, 2, 3].map((n) => ({ task: "t", payload: n })))
      yield* store.send("http_depth", [{ task: "t", payload: 4, delay: 3_600_000 }])
      // http_worked is consumed: two messages of task "email" acked.
      yield* store.send("http_worked", [1, 2].map((n) => ({ task: "email", payload: n })))
      const depth = ["queue=\"http_depth\""]
      const scraped = yield* waitForReply(base, "/metrics", "the depth of http_depth and two acks of email in a scrape", (r) =>
        r.status === 200 &&
        sampleOf(r.body, "leasehold_queue_ready", depth) === 3 &&
        sampleOf(r.body, "leasehold_queue_dead", depth) === 1 &&
        // A sample taken between the sends above can be the one scraped: wait for the delayed one too.
        sampleOf(r.body, "leasehold_queue_delayed", depth) === 1 &&
        sampleOf(r.body, "leasehold_task_messages_acked", ["queue=\"http_worked\"", "task=\"email\""]) === 2 &&
        sampleOf(r.body, "leasehold_queue_ready", ["queue=\"http_worked\""]) === 0)
      assert.strictEqual(sampleOf(scraped.body, "leasehold_queue_delayed", depth), 1)
      assert.strictEqual(sampleOf(scraped.body, "leasehold_queue_in_flight", depth), 0)
      assert.isAtLeast(sampleOf(scraped.body, "leasehold_queue_oldest_ready_age_ms", depth)!, 0)
      assert.match(scraped.body, /^# TYPE leasehold_queue_ready gauge$/m)
      // Bounded cardinality: no label carries a message id.
      assert.notMatch(scraped.body, /\b(messageId|message_id|messageIds|id)="/)
      yield* stop
    }), { timeout: 60_000 })
})

describe("Http.layerFromEnv", () => {
  const withEnv = (env: Record<string, string>) => Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env })))
  const consumer = Layer.succeed(Consumer.Consumer, Consumer.Consumer.of({
    settings: undefined as never,
    health: Effect.die("unused"),
    failure: Effect.never
  }))

  it.live("no LEASEHOLD_HTTP_PORT: no server; set: it listens on 127.0.0.1; a bad port or host: ConfigInvalid naming the variable and the rule", () =>
    Effect.gen(function*() {
      const listening = (env: Record<string, string>) =>
        Layer.build(Http.layerFromEnv().pipe(Layer.provide(consumer))).pipe(
          Effect.map((context) => Context.getOption(context as Context.Context<Http.Listening>, Http.Listening)),
          withEnv(env)
        )
      assert.isTrue(Option.isNone(yield* listening({}).pipe(Effect.scoped)), "no server without LEASEHOLD_HTTP_PORT")
      assert.isTrue(Option.isNone(yield* listening({ LEASEHOLD_HTTP_PORT: " " }).pipe(Effect.scoped)), "nor with it empty")
      yield* Effect.gen(function*() {
        const served = yield* listening({ LEASEHOLD_HTTP_PORT: "0" })
        assert.isTrue(Option.isSome(served))
        const url = Option.getOrThrow(served).url
        assert.match(url, /^http:\/\/127\.0\.0\.1:\d+$/, "bound to 127.0.0.1 by default")
        const reply = yield* get(url, "/metrics")
        assert.strictEqual(reply.status, 404, "no Prometheus export provided")
        // The security headers on every response of the probe server too (here a 404 and the 404 of no route).
        for (const headers of [reply.headers, (yield* get(url, "/nothing")).headers]) {
          assert.strictEqual(headers.get("content-security-policy"), "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
          assert.strictEqual(headers.get("x-content-type-options"), "nosniff")
          assert.strictEqual(headers.get("referrer-policy"), "no-referrer")
          assert.strictEqual(headers.get("x-frame-options"), "DENY")
        }
      }).pipe(Effect.scoped)

      const cases: ReadonlyArray<readonly [Record<string, string>, string, RegExp]> = [
        [{ LEASEHOLD_HTTP_PORT: "http" }, "LEASEHOLD_HTTP_PORT", /a whole number from 0 to 65535/],
        [{ LEASEHOLD_HTTP_PORT: "70000" }, "LEASEHOLD_HTTP_PORT", /a whole number from 0 to 65535/],
        [{ LEASEHOLD_HTTP_PORT: "-1" }, "LEASEHOLD_HTTP_PORT", /a whole number from 0 to 65535/],
        [{ LEASEHOLD_HTTP_PORT: "9464", LEASEHOLD_HTTP_HOST: "local host" }, "LEASEHOLD_HTTP_HOST", /a host name or IP address/]
      ]
      for (const [env, variable, rule] of cases) {
        const exit = yield* listening(env).pipe(Effect.scoped, Effect.exit)
        assert.isTrue(Exit.isFailure(exit), JSON.stringify(env))
        const reason = Exit.isFailure(exit) ? exit.cause.reasons.find((r) => r._tag === "Fail") : undefined
        const failure = reason?._tag === "Fail" ? reason.error as { _tag: string; variable: string; rule: string; message: string } : undefined
        assert.strictEqual(failure?._tag, "ConfigInvalid", JSON.stringify(env))
        assert.strictEqual(failure?.variable, variable)
        assert.match(failure!.rule, rule)
        assert.include(failure!.message, variable)
      }
    }))
})
