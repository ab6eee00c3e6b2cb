/**
 * Finishing writes on real PostgreSQL, real time, with what used to fail a whole finishing batch:
 * NUL characters and lone surrogates in handler errors, unrecoverable reasons and kept results
 * (PostgreSQL refuses them in text and jsonb), and a statement timeout on one locked row. One
 * bad entry must never fail the others of its batch: no good message runs twice, each bad one
 * follows its retry policy to its dead letter with a readable reason (or, for a result that
 * cannot be kept, is acked with the unstorable marker).
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Deferred, Effect, Fiber, Layer, Metric, Option } from "effect"
import { SqlClient } from "effect/sql"
import * as Consumer from "../src/Consumer.ts"
import { Encoded } from "../src/internal/attemptResult.ts"
import { isResultUnstorable, type MessageId } from "../src/Message.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import { Unrecoverable } from "../src/QueueError.ts"
import * as QueueMetrics from "../src/QueueMetrics.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitFor } from "./support/Wait.ts"

const count = (metric: Metric.Metric<number, Metric.CounterState<number>>) =>
  Effect.map(Metric.value(metric), (state) => Number(state.count))

const counters = Effect.all({
  doubleRuns: count(QueueMetrics.doubleRuns),
  finishFailures: count(QueueMetrics.finishFailures)
})

/** A store on the shared test server in a fresh schema (dropped afterwards), timed by the database. */
const pgStore = (options: Omit<PgQueueStore.PgQueueStoreOptions, "schema"> = {}) =>
  Effect.gen(function*() {
    const schema = PgTest.uniqueSchema("text")
    const context = yield* Layer.build(
      PgQueueStore.layer({ clock: "database", ...options, schema }).pipe(
        Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
        Layer.provideMerge(PgTest.clientLayer({ maxConnections: 6 }))
      )
    )
    return { context, store: Context.get(context, QueueStore), sql: Context.get(context, SqlClient.SqlClient), schema }
  })

/** What V8's own JSON.parse says about a NUL: it quotes the character. */
const v8ParseError = (() => {
  try {
    JSON.parse("\u0000")
    return new Error("parsed")
  } catch (e) {
    return e as Error
  }
})()

/** Every 20 messages: two fail with a NUL in their error, one is unrecoverable with a lone surrogate, two return unstorable results. */
const kindOf = (n: number) =>
  ({ 3: "nul-error", 7: "v8-error", 11: "unrecoverable", 13: "nul-result", 17: "surrogate-result" } as Record<number, string>)[n % 20] ?? "good"

describe("finishing writes with unstorable text (real PostgreSQL, real time)", () => {
  it.live("1 in 20 handlers fail with a NUL, 1 in 20 return a NUL or a lone surrogate: nothing lost, no good message runs twice, each bad one follows its policy", () =>
    Effect.gen(function*() {
      const { context, store } = yield* pgStore()
      const queue = "poison"
      const total = 100
      const sent = yield* store.send(queue, Array.from({ length: total }, (_, n) => ({ task: kindOf(n), payload: n, maxAttempts: 3 })))
      const runs = new Map<number, number>()
      const handler: Consumer.Handler = (message) =>
        Effect.suspend(() => {
          const n = message.payload as number
          runs.set(n, (runs.get(n) ?? 0) + 1)
          switch (kindOf(n)) {
            case "nul-error":
              return Effect.fail(new Error(`upstream said \u0000 (message ${n})`))
            case "v8-error":
              return Effect.fail(v8ParseError)
            case "unrecoverable":
              return Effect.fail(new Unrecoverable({ message: `bad input \ud800 in ${n}` }))
            case "nul-result":
              return Effect.succeed(new Encoded(JSON.stringify({ n, s: "a\u0000b" })))
            case "surrogate-result":
              return Effect.succeed(new Encoded(JSON.stringify({ n, list: ["ok", "\udfff"] })))
            default:
              return Effect.succeed(new Encoded(JSON.stringify({ n })))
          }
        })
      const before = yield* counters
      // The issue's setting: a 2 s lease, batches shared by good and bad messages.
      yield* Layer.build(
        Consumer.layer(handler, {
          queues: [queue],
          consumerId: "poison-consumer",
          lease: "2 seconds",
          concurrency: 25,
          batchSize: 25,
          pollInterval: "50 millis",
          retryBase: "50 millis",
          retryMax: "100 millis"
        }).pipe(Layer.provide(Layer.succeedContext(context)))
      )
      yield* waitFor(
        "every message to be finished",
        Effect.map(store.stats(queue), (s) => s.ready + s.delayed + s.inFlight === 0 && s.dead === 15 ? Option.some(s) : Option.none()),
        { timeoutMs: 30_000, intervalMs: 100 }
      )
      const after = yield* counters
      assert.deepStrictEqual([after.doubleRuns - before.doubleRuns, after.finishFailures - before.finishFailures], [0, 0])
      const dead = new Map((yield* store.deadLetters({ queue, limit: 1000 })).map((d) => [d.id, d]))
      for (let n = 0; n < total; n++) {
        const id = sent[n]!.id as MessageId
        const kind = kindOf(n)
        const history = yield* store.attempts(id)
        const outcomes = history.map((a) => a.outcome)
        if (kind === "nul-error" || kind === "v8-error") {
          assert.strictEqual(runs.get(n), 3, `${kind} ${n} ran its three attempts`)
          assert.deepStrictEqual(outcomes, ["retried", "retried", "dead-lettered"], `${kind} ${n}`)
          const d = dead.get(id)!
          assert.strictEqual(d.reason, "attempts exhausted: 3 of 3")
          if (kind === "nul-error") assert.include(d.lastError, `upstream said \\u0000 (message ${n})`)
          else assert.include(d.lastError, v8ParseError.message.replaceAll("\u0000", "\\u0000"))
        } else if (kind === "unrecoverable") {
          assert.strictEqual(runs.get(n), 1)
          assert.deepStrictEqual(outcomes, ["dead-lettered"])
          assert.strictEqual(dead.get(id)!.reason, `unrecoverable: bad input \ufffd in ${n}`)
        } else {
          assert.strictEqual(runs.get(n), 1, `${kind} ${n} ran once`)
          assert.deepStrictEqual(outcomes, ["acked"], `${kind} ${n}`)
          const result = history[0]!.result
          if (kind === "good") assert.deepStrictEqual(result, { n })
          else {
            assert.isTrue(isResultUnstorable(result), `${kind} ${n}: ${JSON.stringify(result)}`)
            assert.strictEqual((result as { path: string }).path, kind === "nul-result" ? "result.s" : "result.list[1]")
          }
        }
      }
    }), 60_000)

  it.live("a batch that hits a statement timeout on one locked row degrades per entry: the others land at once, the locked one when the lock goes; nothing runs twice", () =>
    Effect.gen(function*() {
      const { context, store, sql, schema } = yield* pgStore({ leasePool: { statementTimeout: "300 millis" } })
      const queue = "locked"
      const sent = yield* store.send(queue, [0, 1, 2, 3].map((n) => ({ task: "t", payload: n })))
      const gate = yield* Deferred.make<void>()
      const started = yield* Deferred.make<void>()
      const runs = new Map<number, number>()
      const handler: Consumer.Handler = (message) =>
        Effect.gen(function*() {
          const n = message.payload as number
          runs.set(n, (runs.get(n) ?? 0) + 1)
          if (runs.size === 4) yield* Deferred.succeed(started, undefined)
          yield* Deferred.await(gate)
        })
      const before = yield* counters
      yield* Layer.build(
        Consumer.layer(handler, { queues: [queue], consumerId: "locked-consumer", lease: "9 seconds", concurrency: 4, batchSize: 4 })
          .pipe(Layer.provide(Layer.succeedContext(context)))
      )
      yield* Deferred.await(started).pipe(Effect.timeout("10 seconds"))
      // An operator's transaction holds one claimed row (as a cancel in flight would) for 1.5 s.
      const locked = sent[2]!.id
      const holding = yield* Deferred.make<void>()
      const lock = yield* Effect.forkChild(
        sql.withTransaction(Effect.gen(function*() {
          yield* sql`SELECT id FROM ${sql(`${schema}.messages`)} WHERE id = ${locked}::bigint FOR UPDATE`
          yield* Deferred.succeed(holding, undefined)
          yield* Effect.sleep("1500 millis")
        }))
      )
      yield* Deferred.await(holding)
      const releasedAt = Date.now() + 1_500
      yield* Deferred.succeed(gate, undefined)
      const others = [0, 1, 3].map((n) => sent[n]!.id)
      yield* waitFor(
        "the three unlocked messages to be acked",
        Effect.map(Effect.forEach(others, (id) => store.attempts(id)), (hs) => hs.every((h) => h.length === 1) ? Option.some(hs) : Option.none()),
        { timeoutMs: 10_000, intervalMs: 50 }
      )
      assert.isBelow(Date.now(), releasedAt, "the others did not wait for the lock")
      yield* Fiber.join(lock)
      yield* waitFor(
        "the locked message to be acked",
        Effect.map(store.attempts(locked), (h) => h.length === 1 ? Option.some(h) : Option.none()),
        { timeoutMs: 10_000, intervalMs: 50 }
      )
      const histories = yield* Effect.forEach(sent, (m) => store.attempts(m.id))
      assert.deepStrictEqual(histories.map((h) => h.map((a) => a.outcome)), [["acked"], ["acked"], ["acked"], ["acked"]])
      assert.deepStrictEqual([...runs.values()], [1, 1, 1, 1], "nothing ran twice")
      const after = yield* counters
      assert.deepStrictEqual([after.doubleRuns - before.doubleRuns, after.finishFailures - before.finishFailures], [0, 0])
    }), 60_000)
})
