/**
 * The workflow engine's variables (`LEASEHOLD_WORKFLOW_*`, src/config/workflow.ts) read through
 * effect's `ConfigProvider`: values in every form a duration takes, unset ones left to the code's
 * options, and each bad value failing with a `ConfigInvalid` naming its variable and rule, which
 * also fails `LeaseholdWorkflow.layerFromEnv` before it touches the database; the retention
 * (`off` or at least a minute) refused alike from code, naming the option.
 */
import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import * as LeaseholdWorkflow from "../../src/LeaseholdWorkflow.ts"
import * as QueueConfig from "../../src/QueueConfig.ts"

const withEnv = (root: Record<string, unknown>) => Effect.provide(ConfigProvider.layer(ConfigProvider.fromUnknown(root)))

describe("LEASEHOLD_WORKFLOW_* variables", () => {
  it.effect("read and checked; unset ones are undefined", () =>
    Effect.gen(function*() {
      const read = yield* QueueConfig.workflowFromEnv.pipe(withEnv({
        LEASEHOLD_WORKFLOW_LEASE: "5s",
        LEASEHOLD_WORKFLOW_POLL_INTERVAL: "250ms",
        LEASEHOLD_WORKFLOW_CONCURRENCY: " 8 ",
        LEASEHOLD_WORKFLOW_RETENTION: "3d"
      }))
      assert.deepStrictEqual(read, { leaseMs: 5_000, pollIntervalMs: 250, concurrency: 8, shutdownGraceMs: undefined, retention: 3 * 86_400_000 })
      const none = yield* QueueConfig.workflowFromEnv.pipe(withEnv({}))
      assert.deepStrictEqual(none, {
        leaseMs: undefined,
        pollIntervalMs: undefined,
        concurrency: undefined,
        shutdownGraceMs: undefined,
        retention: undefined
      })
      for (const off of ["off", " OFF "]) {
        const kept = yield* QueueConfig.workflowFromEnv.pipe(withEnv({ LEASEHOLD_WORKFLOW_RETENTION: off }))
        assert.strictEqual(kept.retention, "off")
      }
      const minute = yield* QueueConfig.workflowFromEnv.pipe(withEnv({ LEASEHOLD_WORKFLOW_RETENTION: "1m" }))
      assert.strictEqual(minute.retention, 60_000, "the least retention")
    }))

  it.effect("a bad retention names LEASEHOLD_WORKFLOW_RETENTION and the whole rule", () =>
    Effect.gen(function*() {
      for (const bad of ["59s", "0", "0s", "never", "-1d", "7"]) {
        const error = yield* Effect.flip(QueueConfig.workflowFromEnv.pipe(withEnv({ LEASEHOLD_WORKFLOW_RETENTION: bad })))
        assert.strictEqual(error.variable, "LEASEHOLD_WORKFLOW_RETENTION", bad)
        assert.strictEqual(error.rule, "off, or a duration of at least 60000 ms (1 minute), such as 7d", bad)
        assert.include(error.message, JSON.stringify(bad))
      }
      const tooLong = yield* Effect.flip(QueueConfig.workflowFromEnv.pipe(withEnv({ LEASEHOLD_WORKFLOW_RETENTION: "11000d" })))
      assert.strictEqual(tooLong.variable, "LEASEHOLD_WORKFLOW_RETENTION")
      assert.match(tooLong.rule, /ten years/)
    }))

  it.effect("a bad value names its variable and the rule", () =>
    Effect.gen(function*() {
      const refused = (root: Record<string, unknown>) => Effect.flip(QueueConfig.workflowFromEnv.pipe(withEnv(root)))
      const short = yield* refused({ LEASEHOLD_WORKFLOW_LEASE: "10ms" })
      assert.deepStrictEqual([short.variable, short.rule], ["LEASEHOLD_WORKFLOW_LEASE", "a duration of at least 30 ms"])
      const garbled = yield* refused({ LEASEHOLD_WORKFLOW_POLL_INTERVAL: "soon" })
      assert.strictEqual(garbled.variable, "LEASEHOLD_WORKFLOW_POLL_INTERVAL")
      assert.match(garbled.rule, /a duration such as/)
      const none = yield* refused({ LEASEHOLD_WORKFLOW_CONCURRENCY: "0" })
      assert.deepStrictEqual([none.variable, none.rule], ["LEASEHOLD_WORKFLOW_CONCURRENCY", "a whole number from 1 to 10000"])
      const fraction = yield* refused({ LEASEHOLD_WORKFLOW_CONCURRENCY: "2.5" })
      assert.strictEqual(fraction.variable, "LEASEHOLD_WORKFLOW_CONCURRENCY")
      const grace = yield* refused({ LEASEHOLD_WORKFLOW_SHUTDOWN_GRACE: "-1s" })
      assert.strictEqual(grace.variable, "LEASEHOLD_WORKFLOW_SHUTDOWN_GRACE")
    }))

  it.effect("a retention from code is checked the same way, naming the option", () =>
    Effect.gen(function*() {
      const NoDatabase = Layer.succeed(SqlClient.SqlClient, undefined as never)
      const error = yield* Effect.flip(Effect.scoped(Layer.build(
        LeaseholdWorkflow.layer({ retention: "30 seconds" }).pipe(Layer.provide(NoDatabase))
      )))
      assert.strictEqual(error._tag, "InvalidInput")
      assert.strictEqual(error._tag === "InvalidInput" && error.field, "retention")
      const fromEnv = yield* Effect.flip(Effect.scoped(Layer.build(
        LeaseholdWorkflow.layerFromEnv({ retention: "off" }).pipe(Layer.provide(NoDatabase))
      )).pipe(withEnv({ LEASEHOLD_WORKFLOW_RETENTION: "soon" })))
      assert.strictEqual(fromEnv._tag === "ConfigInvalid" && fromEnv.variable, "LEASEHOLD_WORKFLOW_RETENTION")
    }))

  it.effect("layerFromEnv fails on a bad variable before it needs the database", () =>
    Effect.gen(function*() {
      // Never used: the configuration is refused first.
      const NoDatabase = Layer.succeed(SqlClient.SqlClient, undefined as never)
      const error = yield* Effect.flip(Effect.scoped(Layer.build(
        LeaseholdWorkflow.layerFromEnv({ lease: "5 seconds" }).pipe(Layer.provide(NoDatabase))
      )).pipe(withEnv({ LEASEHOLD_WORKFLOW_CONCURRENCY: "many" })))
      assert.strictEqual(error._tag, "ConfigInvalid")
      assert.strictEqual(error._tag === "ConfigInvalid" && error.variable, "LEASEHOLD_WORKFLOW_CONCURRENCY")
    }))
})
