import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Layer, Redacted } from "effect"
import * as Consumer from "../src/Consumer.ts"
import * as MemoryQueueStore from "../src/MemoryQueueStore.ts"
import * as QueueConfig from "../src/QueueConfig.ts"

const withEnv = (env: Record<string, string>) => Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnvRecord(env)))

const fails = <A>(effect: Effect.Effect<A, { readonly _tag: string }>) =>
  Effect.map(Effect.flip(effect), (e) => e as unknown as { _tag: string; variable: string; rule: string; message: string })

describe("QueueConfig", () => {
  it.effect("defaults when nothing is set", () =>
    Effect.gen(function*() {
      const s = yield* QueueConfig.fromEnv.pipe(withEnv({}))
      assert.deepStrictEqual(s.queues, ["default"])
      assert.strictEqual(s.concurrency, 10)
      assert.strictEqual(s.batchSize, 5)
      assert.strictEqual(s.leaseMs, 30_000)
      assert.strictEqual(s.leaseMarginMs, 5_000)
      assert.strictEqual(s.maxRuntimeMs, 3_600_000)
      assert.strictEqual(s.shutdownGraceMs, 30_000)
      assert.strictEqual(s.renewerStopTimeoutMs, 5_000)
      assert.strictEqual(s.onLeaseLost, "interrupt")
      assert.match(s.consumerId, /^[A-Za-z0-9][A-Za-z0-9_.:/-]*$/)
    }))

  it.effect("reads every variable; durations accept 30s, 30 seconds, 500ms, 2m, 1h", () =>
    Effect.gen(function*() {
      const s = yield* QueueConfig.fromEnv.pipe(withEnv({
        LEASEHOLD_QUEUES: "emails, reports",
        LEASEHOLD_CONSUMER_ID: "worker-7",
        LEASEHOLD_CONCURRENCY: "32",
        LEASEHOLD_BATCH_SIZE: "8",
        LEASEHOLD_LEASE: "30 seconds",
        LEASEHOLD_LEASE_MARGIN: "4s",
        LEASEHOLD_MAX_RUNTIME: "2m",
        LEASEHOLD_POLL_INTERVAL: "500ms",
        LEASEHOLD_BACKOFF_MAX: "1h",
        LEASEHOLD_SHUTDOWN_GRACE: "45s",
        LEASEHOLD_RENEWER_STOP_TIMEOUT: "2 seconds",
        LEASEHOLD_HEALTH_STALE: "90s",
        LEASEHOLD_ON_LEASE_LOST: "continue"
      }))
      assert.deepStrictEqual(s.queues, ["emails", "reports"])
      assert.strictEqual(s.consumerId, "worker-7")
      assert.deepStrictEqual(
        [s.concurrency, s.batchSize, s.leaseMs, s.leaseMarginMs, s.maxRuntimeMs, s.pollIntervalMs, s.backoffMaxMs],
        [32, 8, 30_000, 4_000, 120_000, 500, 3_600_000]
      )
      assert.deepStrictEqual([s.shutdownGraceMs, s.renewerStopTimeoutMs, s.healthStaleMs], [45_000, 2_000, 90_000])
      assert.strictEqual(s.onLeaseLost, "continue")
    }))

  it.effect("an invalid value names the variable and the rule", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<readonly [Record<string, string>, string, RegExp]> = [
        [{ LEASEHOLD_LEASE: "30" }, "LEASEHOLD_LEASE", /duration such as 500ms, 30s/],
        [{ LEASEHOLD_LEASE: "thirty seconds" }, "LEASEHOLD_LEASE", /duration/],
        [{ LEASEHOLD_LEASE: "100ms" }, "LEASEHOLD_LEASE", /from 300 ms/],
        [{ LEASEHOLD_CONCURRENCY: "abc" }, "LEASEHOLD_CONCURRENCY", /whole number/],
        [{ LEASEHOLD_CONCURRENCY: "0" }, "LEASEHOLD_CONCURRENCY", /from 1 to 10000/],
        [{ LEASEHOLD_BATCH_SIZE: "-3" }, "LEASEHOLD_BATCH_SIZE", /whole number/],
        [{ LEASEHOLD_ON_LEASE_LOST: "maybe" }, "LEASEHOLD_ON_LEASE_LOST", /interrupt or continue/],
        [{ LEASEHOLD_QUEUES: "ok,x\"; drop table" }, "LEASEHOLD_QUEUES", /A-Z a-z 0-9/],
        [{ LEASEHOLD_QUEUES: " , " }, "LEASEHOLD_QUEUES", /at least one queue/],
        [{ LEASEHOLD_LEASE: "30s", LEASEHOLD_LEASE_MARGIN: "15s" }, "LEASEHOLD_LEASE_MARGIN", /less than a third of the lease/],
        [{ LEASEHOLD_MAX_RUNTIME: "0s" }, "LEASEHOLD_MAX_RUNTIME", /from 1 ms/],
        [{ LEASEHOLD_CONSUMER_ID: "has space" }, "LEASEHOLD_CONSUMER_ID", /A-Z a-z 0-9/]
      ]
      for (const [env, variable, rule] of cases) {
        const e = yield* fails(QueueConfig.fromEnv.pipe(withEnv(env)))
        assert.strictEqual(e._tag, "ConfigInvalid", JSON.stringify(env))
        assert.strictEqual(e.variable, variable)
        assert.match(e.rule, rule)
        assert.include(e.message, variable)
      }
    }))

  it.effect("options from code are checked by the same rules, naming the option", () =>
    Effect.gen(function*() {
      const s = yield* QueueConfig.resolve({ lease: "2s", maxRuntime: 90_000, queues: ["a"] })
      assert.deepStrictEqual([s.leaseMs, s.leaseMarginMs, s.maxRuntimeMs], [2_000, 333, 90_000])
      const e = yield* fails(QueueConfig.resolve({ batchSize: 1.5 }))
      assert.strictEqual(e.variable, "batchSize")
    }))

  it.effect("a consumer layer with bad config fails at start, before claiming anything", () =>
    Effect.gen(function*() {
      const built = Layer.build(Consumer.layerFromEnv(() => Effect.void).pipe(Layer.provide(MemoryQueueStore.layer())))
      const e = yield* fails(Effect.scoped(built).pipe(withEnv({ LEASEHOLD_SHUTDOWN_GRACE: "soon" })))
      assert.strictEqual(e._tag, "ConfigInvalid")
      assert.strictEqual(e.variable, "LEASEHOLD_SHUTDOWN_GRACE")
    }))

  it.effect("the database URL is required, named when missing, and kept redacted", () =>
    Effect.gen(function*() {
      const e = yield* fails(QueueConfig.databaseUrl.pipe(withEnv({})))
      assert.strictEqual(e.variable, "LEASEHOLD_DATABASE_URL")
      const url = yield* QueueConfig.databaseUrl.pipe(withEnv({ LEASEHOLD_DATABASE_URL: "postgres://u:pw-123@db:5432/x" }))
      assert.notInclude(String(url), "pw-123")
      assert.notInclude(JSON.stringify(url), "pw-123")
      assert.strictEqual(Redacted.value(url), "postgres://u:pw-123@db:5432/x")
    }))
})
