import { assert, describe, it } from "@effect/vitest"
import { Cause, Config, ConfigProvider, Context, Duration, Effect, Layer, Option, Redacted, Schema } from "effect"
import * as Consumer from "../src/Consumer.ts"
import * as ConsumerPresence from "../src/ConsumerPresence.ts"
import * as MemoryQueueStore from "../src/MemoryQueueStore.ts"
import * as QueueConfig from "../src/QueueConfig.ts"
import { ConfigInvalid } from "../src/QueueError.ts"
import * as Task from "../src/Task.ts"

const withEnv = (env: Record<string, string>) => Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnvRecord(env)))

const fails = <A>(effect: Effect.Effect<A, { readonly _tag: string }>) =>
  Effect.map(Effect.flip(effect), (e) => e as unknown as { _tag: string; variable: string; rule: string; message: string })

describe("QueueConfig", () => {
  it.effect("defaults when nothing is set", () =>
    Effect.gen(function*() {
      const s = yield* QueueConfig.fromEnv.pipe(withEnv({}))
      assert.deepStrictEqual(s.queues, ["default"])
      assert.strictEqual(s.concurrency, 10)
      assert.strictEqual(s.batchSize, 100)
      assert.strictEqual(s.leaseMs, 30_000)
      assert.strictEqual(s.leaseMarginMs, 5_000)
      assert.strictEqual(s.maxRuntimeMs, 3_600_000)
      assert.strictEqual(s.shutdownGraceMs, 30_000)
      assert.strictEqual(s.renewerStopTimeoutMs, 5_000)
      assert.strictEqual(s.onLeaseLost, "interrupt")
      assert.match(s.consumerId, /^[A-Za-z0-9][A-Za-z0-9_.:/-]*$/)
    }))

  it.effect("reads every variable of QueueConfig.variables; durations accept 30s, 30 seconds, 500ms, 2m, 1h, 3d", () =>
    Effect.gen(function*() {
      interface Read {
        readonly settings: QueueConfig.ConsumerSettings
        readonly url: string | undefined
        readonly schema: string | undefined
      }
      // One entry per variable (the type requires every key of QueueConfig.variables): the text set,
      // where the value read shows up, and what it must be. Every value differs from its default.
      const cases: { readonly [K in keyof typeof QueueConfig.variables]: readonly [string, (r: Read) => unknown, unknown] } = {
        databaseUrl: ["postgres://u:pw-1@db:5432/x", (r) => r.url, "postgres://u:pw-1@db:5432/x"],
        schema: ["myapp", (r) => r.schema, "myapp"],
        queues: ["emails, reports", (r) => r.settings.queues, ["emails", "reports"]],
        consumerId: ["worker-7", (r) => r.settings.consumerId, "worker-7"],
        concurrency: ["32", (r) => r.settings.concurrency, 32],
        batchSize: ["8", (r) => r.settings.batchSize, 8],
        prefetch: ["3", (r) => r.settings.prefetch, 3],
        lease: ["45 seconds", (r) => r.settings.leaseMs, 45_000],
        queueConcurrency: ["reports=2", (r) => r.settings.perQueue["reports"]?.concurrency, 2],
        queueBatchSize: ["emails=5", (r) => r.settings.perQueue["emails"]?.batchSize, 5],
        queueLease: ["reports=90s", (r) => r.settings.perQueue["reports"]?.leaseMs, 90_000],
        leaseMargin: ["4s", (r) => r.settings.leaseMarginMs, 4_000],
        maxRuntime: ["2m", (r) => r.settings.maxRuntimeMs, 120_000],
        pollInterval: ["500ms", (r) => r.settings.pollIntervalMs, 500],
        backoffMax: ["1h", (r) => r.settings.backoffMaxMs, 3_600_000],
        shutdownGrace: ["45s", (r) => r.settings.shutdownGraceMs, 45_000],
        renewerStopTimeout: ["2 seconds", (r) => r.settings.renewerStopTimeoutMs, 2_000],
        healthStale: ["90s", (r) => r.settings.healthStaleMs, 90_000],
        onLeaseLost: ["continue", (r) => r.settings.onLeaseLost, "continue"],
        retryBase: ["2s", (r) => r.settings.retryBaseMs, 2_000],
        retryMax: ["2h", (r) => r.settings.retryMaxMs, 7_200_000],
        quarantineAfter: ["4", (r) => r.settings.quarantineAfter, 4],
        unknownTaskAttempts: ["7", (r) => r.settings.unknownTaskAttempts, 7],
        unknownTaskDelay: ["1m", (r) => r.settings.unknownTaskDelayMs, 60_000],
        attemptRetention: ["3d", (r) => r.settings.attemptRetentionMs, 3 * 86_400_000]
      }
      const keys = Object.keys(QueueConfig.variables) as Array<keyof typeof QueueConfig.variables>
      assert.sameMembers(Object.keys(cases), keys, "a case for every variable")
      const readAll = (env: Record<string, string>) =>
        Effect.gen(function*() {
          const settings = yield* QueueConfig.fromEnv
          const url = yield* Effect.map(Effect.option(QueueConfig.databaseUrl), (o) => o._tag === "Some" ? Redacted.value(o.value) : undefined)
          const schema = yield* QueueConfig.schemaFromEnv
          return { settings, url, schema } satisfies Read
        }).pipe(withEnv(env))
      const all = yield* readAll(Object.fromEntries(keys.map((key) => [QueueConfig.variables[key], cases[key][0]])))
      const none = yield* readAll({})
      for (const key of keys) {
        const [, read, expected] = cases[key]
        assert.deepStrictEqual(read(all), expected, `${QueueConfig.variables[key]} was read`)
        assert.notDeepEqual(read(none), expected, `${QueueConfig.variables[key]}: the value set is not the default, so the check above means something`)
      }
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
        [{ LEASEHOLD_LEASE_MARGIN: "0s" }, "LEASEHOLD_LEASE_MARGIN", /more than 0 and less than a third of the lease/],
        [{ LEASEHOLD_LEASE_MARGIN: "0 millis" }, "LEASEHOLD_LEASE_MARGIN", /more than 0/],
        [{ LEASEHOLD_LEASE: "3s", LEASEHOLD_LEASE_MARGIN: "1s" }, "LEASEHOLD_LEASE_MARGIN", /less than a third of the lease/],
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

  it.effect("durations are effect's Duration: its own forms, the short forms, Duration values from code; the rest refused naming the variable and the rule", () =>
    Effect.gen(function*() {
      const accepted: ReadonlyArray<readonly [QueueConfig.DurationLike, number]> = [
        ["500ms", 500], ["500 millis", 500], ["500 milliseconds", 500], ["30s", 30_000], ["30 seconds", 30_000],
        ["1 second", 1_000], ["2m", 120_000], ["2 minutes", 120_000], ["5 mins", 300_000], ["1h", 3_600_000],
        ["1.5h", 5_400_000], ["2 hours", 7_200_000], ["7d", 7 * 86_400_000], ["1 day", 86_400_000], ["2 weeks", 14 * 86_400_000],
        ["2w", 14 * 86_400_000], [" 45S ", 45_000], ["0s", 0], [250, 250],
        [Duration.seconds(3), 3_000], [Duration.minutes(1), 60_000]
      ]
      for (const [value, ms] of accepted) {
        assert.strictEqual(yield* QueueConfig.parseDuration("LEASEHOLD_X", value), ms, String(value))
      }
      const refused: ReadonlyArray<QueueConfig.DurationLike> = ["30", "-5s", "5 parsecs", "1e3s", "", "s", "30 seconds ago", "Infinity", -1, Number.NaN, Number.POSITIVE_INFINITY]
      for (const value of refused) {
        const e = yield* fails(QueueConfig.parseDuration("LEASEHOLD_X", value))
        assert.strictEqual(e._tag, "ConfigInvalid", String(value))
        assert.strictEqual(e.variable, "LEASEHOLD_X")
        assert.strictEqual(e.rule, 'a duration such as 500ms, 30s, 2m, 1h, 7d or "30 seconds"', String(value))
        assert.match(e.message, /^LEASEHOLD_X: ".*" is invalid; expected a duration such as 500ms/, String(value))
      }
      const e = yield* fails(QueueConfig.parseDuration("LEASEHOLD_X", Duration.days(3661)))
      assert.match(e.rule, /ten years/)
      assert.strictEqual((yield* QueueConfig.resolve({ lease: Duration.seconds(12) })).leaseMs, 12_000)
    }))

  it.effect("a lease margin of 0 is refused from code too (the local deadline would be the lease's end); 1 ms is accepted", () =>
    Effect.gen(function*() {
      const e = yield* fails(QueueConfig.resolve({ leaseMargin: 0 }))
      assert.deepStrictEqual([e._tag, e.variable], ["ConfigInvalid", "leaseMargin"])
      assert.match(e.rule, /more than 0/)
      assert.strictEqual((yield* QueueConfig.resolve({ leaseMargin: 1 })).leaseMarginMs, 1)
      assert.strictEqual((yield* QueueConfig.resolve({ lease: "3s", leaseMargin: "999ms" })).leaseMarginMs, 999)
    }))

  it.effect("options from code are checked by the same rules, naming the option", () =>
    Effect.gen(function*() {
      const s = yield* QueueConfig.resolve({ lease: "2s", maxRuntime: 90_000, queues: ["a"] })
      assert.deepStrictEqual([s.leaseMs, s.leaseMarginMs, s.maxRuntimeMs], [2_000, 333, 90_000])
      const e = yield* fails(QueueConfig.resolve({ batchSize: 1.5 }))
      assert.strictEqual(e.variable, "batchSize")
    }))

  it.effect("health stale may be shorter than the poll interval: idle waiting counts as progress (test/Consumer.test.ts)", () =>
    Effect.gen(function*() {
      const s = yield* QueueConfig.fromEnv.pipe(withEnv({ LEASEHOLD_POLL_INTERVAL: "10s", LEASEHOLD_HEALTH_STALE: "2s" }))
      assert.deepStrictEqual([s.pollIntervalMs, s.healthStaleMs], [10_000, 2_000])
    }))

  it.effect("delays are bounded by the store's longest delay (ten years), from the environment and from code", () =>
    Effect.gen(function*() {
      const tooLong = "3661d" // over ten years: the store would refuse it in the finishing write
      for (const key of ["retryBase", "retryMax", "unknownTaskDelay", "maxRuntime", "attemptRetention"] as const) {
        const variable = QueueConfig.variables[key]
        const e = yield* fails(QueueConfig.fromEnv.pipe(withEnv({ [variable]: tooLong })))
        assert.strictEqual(e.variable, variable)
        assert.match(e.rule, /at most 316224000000 ms \(ten years: the longest delay a store accepts\)/, variable)
      }
      // Digits that overflow to Infinity are refused too, not taken as "forever".
      const huge = yield* fails(QueueConfig.fromEnv.pipe(withEnv({ LEASEHOLD_UNKNOWN_TASK_DELAY: `${"9".repeat(400)}d` })))
      assert.strictEqual(huge.variable, "LEASEHOLD_UNKNOWN_TASK_DELAY")
      for (const options of [{ retryMax: 10 * 366 * 86_400_000 + 1 }, { unknownTaskDelay: "3661 days" }, { retryBase: 1e15, retryMax: 1e15 }]) {
        const e = yield* fails(QueueConfig.resolve(options))
        assert.strictEqual(e._tag, "ConfigInvalid")
        assert.match(e.rule, /ten years: the longest delay a store accepts/, JSON.stringify(options))
      }
      const longest = yield* QueueConfig.resolve({ retryMax: "3660d", unknownTaskDelay: "3660d" })
      assert.deepStrictEqual([longest.retryMaxMs, longest.unknownTaskDelayMs], [3660 * 86_400_000, 3660 * 86_400_000])
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

  it.effect("a database URL that is not a PostgreSQL URL is ConfigInvalid naming the variable, never quoting it", () =>
    Effect.gen(function*() {
      const bad = [
        "not-a-url",
        "host=db user=u password=pw-123 dbname=x", // keyword/value: the driver reads URLs only
        "mysql://u:pw-123@db/x",
        "postgres://u:pw-123@db:99999/x",
        "postgres://u:pw-123@db:0/x",
        "postgres://u:pw-123%zz@db/x"
      ]
      for (const value of bad) {
        const e = yield* fails(QueueConfig.databaseUrl.pipe(withEnv({ LEASEHOLD_DATABASE_URL: value })))
        assert.strictEqual(e._tag, "ConfigInvalid", value)
        assert.strictEqual(e.variable, "LEASEHOLD_DATABASE_URL", value)
        assert.match(e.rule, /PostgreSQL URL such as postgres:\/\/user:password@host:5432\/db/)
        assert.match(e.message, /^LEASEHOLD_DATABASE_URL is not a PostgreSQL URL \(/, value)
        assert.notInclude(e.message, "pw-123", value)
      }
      for (const good of ["postgresql://db/x", "postgres://u:p%40ss@[::1]:5433/x?sslmode=require", "postgres:///x?host=/run/postgresql"]) {
        assert.strictEqual(Redacted.value(yield* QueueConfig.databaseUrl.pipe(withEnv({ LEASEHOLD_DATABASE_URL: good }))), good)
      }
    }))

  it.effect("pgLayerFromEnv and pgLayer fail at build with ConfigInvalid for a URL that is not one (not ConnectionDead on first use)", () =>
    Effect.gen(function*() {
      const fromEnv = yield* fails(Effect.scoped(Layer.build(QueueConfig.pgLayerFromEnv())).pipe(withEnv({ LEASEHOLD_DATABASE_URL: "not-a-url" })))
      assert.deepStrictEqual([fromEnv._tag, fromEnv.variable], ["ConfigInvalid", "LEASEHOLD_DATABASE_URL"])
      const fromCode = yield* fails(Effect.scoped(Layer.build(QueueConfig.pgLayer(Redacted.make("not-a-url")))))
      assert.deepStrictEqual([fromCode._tag, fromCode.variable], ["ConfigInvalid", "url"])
      const direct = yield* fails(Effect.scoped(Layer.build(QueueConfig.pgLayer(Redacted.make("postgres://db/x"), { directUrl: Redacted.make("nope") }))))
      assert.deepStrictEqual([direct._tag, direct.variable], ["ConfigInvalid", "directUrl"])
    }))

  it.effect("LEASEHOLD_LOG_LEVEL: each of effect's levels in any case, none when unset or empty, anything else ConfigInvalid naming it", () =>
    Effect.gen(function*() {
      for (const level of QueueConfig.logLevels) {
        for (const text of [level, level.toLowerCase(), ` ${level.toUpperCase()} `]) {
          assert.deepStrictEqual(yield* QueueConfig.logLevelFromEnv.pipe(withEnv({ LEASEHOLD_LOG_LEVEL: text })), Option.some(level))
        }
      }
      assert.isTrue(Option.isNone(yield* QueueConfig.logLevelFromEnv.pipe(withEnv({}))))
      assert.isTrue(Option.isNone(yield* QueueConfig.logLevelFromEnv.pipe(withEnv({ LEASEHOLD_LOG_LEVEL: " " }))))
      const e = yield* fails(QueueConfig.logLevelFromEnv.pipe(withEnv({ LEASEHOLD_LOG_LEVEL: "verbose" })))
      assert.deepStrictEqual([e._tag, e.variable], ["ConfigInvalid", "LEASEHOLD_LOG_LEVEL"])
      assert.strictEqual(e.message, "LEASEHOLD_LOG_LEVEL: \"verbose\" is invalid; expected one of All, Trace, Debug, Info, Warn, Error, Fatal, None (any case)")
    }))

  it.effect("Consumer.layerFromEnv checks the HTTP server's, the admin token's and the log level's variables before it starts", () =>
    Effect.gen(function*() {
      for (
        const [env, variable] of [
          [{ LEASEHOLD_HTTP_PORT: "http" }, "LEASEHOLD_HTTP_PORT"],
          [{ LEASEHOLD_HTTP_HOST: "not a host" }, "LEASEHOLD_HTTP_HOST"],
          [{ LEASEHOLD_HTTP_ALLOWED_HOSTS: "a b" }, "LEASEHOLD_HTTP_ALLOWED_HOSTS"],
          [{ LEASEHOLD_ADMIN_TOKEN: "short" }, "LEASEHOLD_ADMIN_TOKEN"],
          [{ LEASEHOLD_LOG_LEVEL: "loud" }, "LEASEHOLD_LOG_LEVEL"]
        ] as const
      ) {
        const built = Layer.build(Consumer.layerFromEnv(() => Effect.void).pipe(Layer.provide(MemoryQueueStore.layer())))
        const e = yield* fails(Effect.scoped(built).pipe(withEnv(env)))
        assert.deepStrictEqual([e._tag, e.variable], ["ConfigInvalid", variable])
        const launched = yield* fails(Consumer.launch(Layer.effect(Consumer.Consumer, Effect.die("the layer is not built"))).pipe(withEnv(env)))
        assert.deepStrictEqual([launched._tag, launched.variable], ["ConfigInvalid", variable], "Consumer.launch checks them before it builds the layer")
      }
    }))

  it.effect("a ConfigInvalid prints as its message line: no stack frames", () =>
    Effect.gen(function*() {
      const e = yield* fails(QueueConfig.httpFromEnv.pipe(withEnv({ LEASEHOLD_HTTP_PORT: "http" })))
      assert.instanceOf(e, ConfigInvalid)
      const printed = Cause.pretty(Cause.fail(e))
      assert.strictEqual(printed, "ConfigInvalid: LEASEHOLD_HTTP_PORT: \"http\" is invalid; expected a whole number from 0 to 65535")
    }))

  describe("through a ConfigProvider", () => {
    const withProvider = (root: Record<string, unknown>) => Effect.provide(ConfigProvider.layer(ConfigProvider.fromUnknown(root)))

    it.effect("every description reads the provided source, not the process environment; rules name the variable", () =>
      Effect.gen(function*() {
        const worker = yield* QueueConfig.workerFromEnv.pipe(withProvider({
          LEASEHOLD_QUEUES: "a, b",
          LEASEHOLD_CONCURRENCY: 4,
          LEASEHOLD_LEASE: "10s",
          LEASEHOLD_HTTP_PORT: 0,
          LEASEHOLD_LOG_LEVEL: "warn"
        }))
        assert.deepStrictEqual(worker.consumer.queues, ["a", "b"])
        assert.strictEqual(worker.consumer.concurrency, 4)
        assert.strictEqual(worker.consumer.leaseMs, 10_000)
        assert.deepStrictEqual(worker.process.http, Option.some({ port: 0, host: "127.0.0.1" }))
        assert.deepStrictEqual(worker.process.logLevel, Option.some("Warn"))
        assert.strictEqual(yield* QueueConfig.schemaFromEnv.pipe(withProvider({ LEASEHOLD_SCHEMA: "jobs" })), "jobs")
        assert.strictEqual(yield* QueueConfig.poolerFromEnv.pipe(withProvider({ LEASEHOLD_POOLER: "Transaction" })), "transaction")
        assert.strictEqual(yield* ConsumerPresence.modeFromEnv.pipe(withProvider({ LEASEHOLD_SESSION_LIVENESS: " OFF " })), "off")
        assert.strictEqual(yield* ConsumerPresence.modeFromEnv.pipe(withProvider({})), "auto")
        for (
          const [root, variable, rule] of [
            [{ LEASEHOLD_CONCURRENCY: 0 }, "LEASEHOLD_CONCURRENCY", /from 1 to 10000/],
            [{ LEASEHOLD_BATCH_SIZE: "many" }, "LEASEHOLD_BATCH_SIZE", /a whole number/],
            [{ LEASEHOLD_HTTP_PORT: 70_000 }, "LEASEHOLD_HTTP_PORT", /from 0 to 65535/],
            [{ LEASEHOLD_SESSION_LIVENESS: "sometimes" }, "LEASEHOLD_SESSION_LIVENESS", /on, off or auto/],
            [{ LEASEHOLD_POOLER: "pgcat" }, "LEASEHOLD_POOLER", /none, session or transaction/],
            // A rule between two settings, one of them left at its default: named by the variable to set.
            [{ LEASEHOLD_RETRY_BASE: "2h" }, "LEASEHOLD_RETRY_MAX", /at least the retry base/]
          ] as const
        ) {
          const e = yield* fails(
            Effect.all([QueueConfig.workerFromEnv, QueueConfig.poolerFromEnv, ConsumerPresence.modeFromEnv]).pipe(withProvider(root))
          )
          assert.deepStrictEqual([e._tag, e.variable], ["ConfigInvalid", variable], JSON.stringify(root))
          assert.match(e.rule, rule, JSON.stringify(root))
          assert.include(e.message, variable)
        }
        const presence = yield* fails(ConsumerPresence.modeFromEnv.pipe(withProvider({ LEASEHOLD_SESSION_LIVENESS: "sometimes" })))
        assert.strictEqual(presence.message, 'LEASEHOLD_SESSION_LIVENESS: "sometimes" is invalid; expected on, off or auto')
      }))

    it.effect("the descriptions compose as effect Configs; a broken rule is a ConfigError carrying the ConfigInvalid", () =>
      Effect.gen(function*() {
        const both = Config.all({ consumer: QueueConfig.consumerConfig(), schema: QueueConfig.schemaConfig })
        const read = yield* both.parse(ConfigProvider.fromUnknown({ LEASEHOLD_SCHEMA: "s1", LEASEHOLD_BATCH_SIZE: "7" }))
        assert.deepStrictEqual([read.schema, read.consumer.batchSize], ["s1", 7])
        const error = yield* Effect.flip(both.parse(ConfigProvider.fromUnknown({ LEASEHOLD_LEASE: "soon" })))
        assert.strictEqual(error._tag, "ConfigError")
        assert.instanceOf(error.cause.cause, ConfigInvalid)
        assert.strictEqual((error.cause.cause as ConfigInvalid).variable, "LEASEHOLD_LEASE")
      }))

    it.effect("code options overlay the environment: a value from code wins and its error names the option", () =>
      Effect.gen(function*() {
        const env = { LEASEHOLD_CONCURRENCY: "3", LEASEHOLD_LEASE: "12s", LEASEHOLD_QUEUES: "from-env" }
        const overlaid = QueueConfig.consumerConfig({ overrides: { concurrency: 5 }, fallbacks: { queues: ["fallback"], batchSize: 9 } })
        const settings = yield* overlaid.pipe(withProvider(env))
        assert.deepStrictEqual(
          [settings.concurrency, settings.leaseMs, settings.queues, settings.batchSize],
          [5, 12_000, ["from-env"], 9]
        )
        const under = yield* QueueConfig.workerFromEnvWith({ fallbacks: { queues: ["fallback"] } }).pipe(withProvider({}))
        assert.deepStrictEqual(under.consumer.queues, ["fallback"])
        const fromCode = yield* fails(QueueConfig.workerFromEnvWith({ overrides: { concurrency: 0 } }).pipe(withProvider(env)))
        assert.deepStrictEqual([fromCode.variable, fromCode.rule], ["concurrency", "a whole number from 1 to 10000"])
        const fromEnv = yield* fails(QueueConfig.workerFromEnvWith({ overrides: { lease: "5s" } }).pipe(withProvider({ LEASEHOLD_CONCURRENCY: "0" })))
        assert.strictEqual(fromEnv.variable, "LEASEHOLD_CONCURRENCY")
      }))

    it.effect("Consumer.layerFromEnv reads LEASEHOLD_QUEUES once; unset, its dispatcher's task queues", () =>
      Effect.gen(function*() {
        const task = Task.make({ name: "t", queue: "from-tasks", payload: Schema.Struct({}), handler: () => Effect.void })
        for (const [root, queues] of [[{ LEASEHOLD_QUEUES: "q1,q2" }, ["q1", "q2"]], [{}, ["from-tasks"]]] as const) {
          const source = ConfigProvider.fromUnknown(root)
          let reads = 0
          const counting = ConfigProvider.make((path) => {
            if (path.join(".") === QueueConfig.env.queues) reads++
            return source.load(path)
          })
          const settings = yield* Effect.scoped(Effect.gen(function*() {
            const context = yield* Layer.build(Consumer.layerFromEnv(Task.dispatcher(task)).pipe(Layer.provide(MemoryQueueStore.layer())))
            return Context.get(context, Consumer.Consumer).settings
          })).pipe(Effect.provide(ConfigProvider.layer(counting)))
          assert.deepStrictEqual(settings.queues, queues)
          assert.strictEqual(reads, 1, "LEASEHOLD_QUEUES reads")
        }
      }))

    it("one record names every LEASEHOLD_ variable; the other maps are views of it", () => {
      const names = Object.values(QueueConfig.env)
      assert.strictEqual(new Set(names).size, names.length)
      for (const name of names) assert.match(name, /^LEASEHOLD_[A-Z_]+$/)
      const views = [
        QueueConfig.variables,
        QueueConfig.connectionVariables,
        QueueConfig.httpVariables,
        QueueConfig.adminVariables,
        QueueConfig.logVariables,
        ConsumerPresence.variables,
        QueueConfig.workflowVariables
      ]
      for (const view of views) for (const name of Object.values(view)) assert.include(names, name)
      assert.sameMembers([...new Set(views.flatMap((view) => Object.values(view)))], names)
    })
  })
})
