/**
 * The commit step on real PostgreSQL, in real time, through real consumers: a handler whose lease
 * was reclaimed while it kept running (`onLeaseLost: continue`, its renewals failing) commits
 * after the new holder did: its writes are absent, the new holder's present, the double run
 * counted and logged as prevented. A commit refuses a handler's SqlClient of another pool (its
 * writes would commit on their own); a failing commit rolls its writes back and the attempt is
 * retried; the idempotency key is the same on every run of a message.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Deferred, Effect, Exit, Layer, Metric, Option, Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as Consumer from "../src/Consumer.ts"
import * as MemoryQueueStore from "../src/MemoryQueueStore.ts"
import type { Claim } from "../src/Message.ts"
import { ConnectionDead } from "../src/QueueError.ts"
import * as QueueMetrics from "../src/QueueMetrics.ts"
import { QueueStore, type QueueStoreShape } from "../src/QueueStore.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitFor } from "./support/Wait.ts"

const QUEUE = "commits"

/** The application's table the handlers write to: one per test (message ids repeat across the tests' schemas). */
const effectsTable = (sql: SqlClient.SqlClient) =>
  Effect.gen(function*() {
    const name = `commit_effects_${Math.random().toString(36).slice(2, 10)}`
    yield* sql`CREATE TABLE ${sql(name)} (message_id text NOT NULL, holder text NOT NULL)`
    return name
  })

const holders = (sql: SqlClient.SqlClient, table: string, id: string) =>
  Effect.map(
    sql<{ holder: string }>`SELECT holder FROM ${sql(table)} WHERE message_id = ${id} ORDER BY holder`,
    (rows) => rows.map((r) => r.holder)
  )

/** Start a consumer of `handler` over `store` in a scope of its own; answers its stop. */
const start = <R>(handler: Consumer.Handler<R>, store: QueueStoreShape, options: Partial<Parameters<typeof Consumer.layer>[1]> = {}) =>
  Effect.gen(function*() {
    const scope = yield* Scope.fork(yield* Scope.Scope)
    yield* Layer.buildWithScope(
      Consumer.layer(handler, { queues: [QUEUE], consumerId: "c", lease: "1 second", pollInterval: "100 millis", ...options })
        .pipe(Layer.provide(Layer.succeed(QueueStore, store))),
      scope
    ).pipe(Effect.map((context) => Context.get(context, Consumer.Consumer)))
    return Scope.close(scope, Exit.void)
  })

/** A handler that writes `holder` for its message in its commit step, after `gate` opens (if any). */
const writer = (table: string, holder: string, outcomes: Array<string>, gate?: Deferred.Deferred<void>): Consumer.Handler<SqlClient.SqlClient> => (message, context) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    if (gate !== undefined) yield* Deferred.await(gate)
    yield* context.commit(sql`INSERT INTO ${sql(table)} (message_id, holder) VALUES (${message.id}, ${holder})`)
  }).pipe(
    Effect.tapError((error) => Effect.sync(() => outcomes.push(`${holder}: ${(error as { _tag?: string })._tag ?? String(error)}`))),
    Effect.tap(() => Effect.sync(() => outcomes.push(`${holder}: committed`)))
  )

const prevented = Effect.map(Metric.value(QueueMetrics.doubleRunsPrevented), (state) => state.count)

describe("the commit step on PostgreSQL (real consumers, real time)", () => {
  it.live("a holder that lost its lease and commits after the new holder changes nothing: its writes are absent, the double run prevented", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      const table = yield* effectsTable(sql)
      const before = yield* prevented
      const outcomes: Array<string> = []
      const gate = yield* Deferred.make<void>()
      // The stale holder's renewals all fail: its lease runs out while its handler, told to continue, waits.
      const cutOff: QueueStoreShape = {
        ...store,
        renew: () => Effect.fail(new ConnectionDead({ operation: "renew", message: "renew: Connection terminated" }))
      }
      // One slot: the stale run keeps it, so this consumer cannot reclaim the message itself.
      const stopStale = yield* start(writer(table, "stale", outcomes, gate), cutOff, { consumerId: "stale", onLeaseLost: "continue", concurrency: 1 })
      const [sent] = yield* store.send(QUEUE, [{ task: "t", payload: 1 }])
      const id = sent!.id
      yield* waitFor("the stale holder to claim", Effect.map(store.get(id), (m) => Option.filter(m, (x) => x.attempts === 1)), 10_000)
      const stopNew = yield* start(writer(table, "new", outcomes), store, { consumerId: "new" })
      yield* waitFor("the new holder to commit", Effect.map(holders(sql, table, id), (h) => h.includes("new") ? Option.some(h) : Option.none()), 15_000)
      yield* Deferred.succeed(gate, undefined)
      yield* waitFor("the stale holder's commit to end", Effect.sync(() => outcomes.some((o) => o.startsWith("stale")) ? Option.some(true) : Option.none()), 10_000)
      yield* stopNew
      yield* stopStale
      assert.deepStrictEqual(yield* holders(sql, table, id), ["new"], "only the new holder's write landed")
      assert.deepStrictEqual(outcomes.sort(), ["new: committed", "stale: CommitFenced"], outcomes.join("; "))
      assert.strictEqual((yield* prevented) - before, 1)
      const history = yield* store.attempts(id)
      // The new holder's claim recorded the stale run's lease as expired; the stale run's end says why nothing landed.
      const stale = history.filter((a) => a.consumer === "stale").map((a) => a.outcome)
      assert.deepStrictEqual(stale, ["lease-expired", "lease-lost"])
      assert.include(history.find((a) => a.outcome === "lease-lost")?.error ?? "", "double run prevented")
      assert.strictEqual(history.find((a) => a.consumer === "new")?.outcome, "acked")
      assert.isTrue(Option.isNone(yield* store.get(id)), "acked in the new holder's commit")
    }).pipe(Effect.provide(PgTest.storeLayer({ clock: "database" }))), 60_000)

  it.live("a commit that fails rolls its writes back with the ack; the attempt is retried and the next run's commit lands once", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      const table = yield* effectsTable(sql)
      const keys: Array<string> = []
      const handler: Consumer.Handler<SqlClient.SqlClient> = (message, context) =>
        Effect.gen(function*() {
          keys.push(context.idempotencyKey)
          yield* context.commit(Effect.gen(function*() {
            yield* sql`INSERT INTO ${sql(table)} (message_id, holder) VALUES (${message.id}, ${`attempt-${context.attempt}`})`
            // The first attempt's commit fails after its write: the write must roll back.
            if (context.attempt === 1) yield* sql`SELECT 1 / 0`
          }))
        })
      const stop = yield* start(handler, store, { retryBase: "50 millis" })
      const [sent] = yield* store.send(QUEUE, [{ task: "t", payload: 1 }])
      const id = sent!.id
      yield* waitFor("the message to be acked", Effect.map(store.get(id), (m) => Option.isNone(m) ? Option.some(true) : Option.none()), 20_000)
      yield* stop
      assert.deepStrictEqual(yield* holders(sql, table, id), ["attempt-2"], "the failed commit's write rolled back")
      const history = yield* store.attempts(id)
      assert.deepStrictEqual(history.map((a) => a.outcome), ["retried", "acked"])
      assert.include(history[0]!.error ?? "", "division by zero")
      assert.strictEqual(keys.length, 2)
      assert.strictEqual(keys[0], keys[1], "the idempotency key is the same on every run")
      assert.include(keys[0]!, id)
    }).pipe(Effect.provide(PgTest.storeLayer({ clock: "database" }))), 60_000)

  it.live("a send inside the commit step commits with it, or rolls back with it", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      yield* store.send(QUEUE, [{ task: "t", payload: 1 }, { task: "t", payload: 2 }])
      const [first, second] = yield* store.claim(QUEUE, { lease: "30 seconds", limit: 2, consumer: "c" })
      const followUp = (n: number) => store.send("follow-ups", [{ task: "next", payload: n }])
      const failed = yield* Effect.flip(store.completeWith(ackOf(first!), Effect.andThen(followUp(1), Effect.fail("after the send" as const))))
      assert.strictEqual(failed, "after the send")
      yield* store.completeWith(ackOf(second!), followUp(2))
      const sent = yield* store.messages("follow-ups")
      assert.deepStrictEqual(sent.map((m) => m.payload), [2], "only the committed step's follow-up exists")
      assert.isTrue(Option.isSome(yield* store.get(first!.id)), "the failed step's message is still there")
      assert.isTrue(Option.isNone(yield* store.get(second!.id)))
    }).pipe(Effect.provide(PgTest.storeLayer({ clock: "database" }))), 30_000)

  it.live("a commit refuses a handler whose SqlClient is another pool's, before anything runs", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      yield* store.send(QUEUE, [{ task: "t", payload: 1 }])
      const [claim] = yield* store.claim(QUEUE, { lease: "30 seconds", limit: 1, consumer: "c" })
      const other = yield* Layer.build(PgTest.clientLayer())
      let ran = false
      const refusal = yield* Effect.flip(
        store.completeWith(ackOf(claim!), Effect.sync(() => (ran = true))).pipe(Effect.provide(other))
      )
      assert.strictEqual(refusal._tag, "InvalidInput")
      assert.strictEqual(refusal._tag === "InvalidInput" ? refusal.rule : "", "one-pool")
      assert.isFalse(ran)
      // The store's own client is accepted.
      assert.isTrue(yield* store.completeWith(ackOf(claim!), Effect.sync(() => true)))
    }).pipe(Effect.provide(PgTest.storeLayer({ clock: "database" }))), 30_000)
})

const ackOf = (claim: Claim) => ({
  ref: claim,
  finish: { _tag: "Ack" as const },
  queue: claim.queue,
  task: claim.task,
  attempt: claim.attempts,
  consumer: "c",
  startedAt: new Date(),
  outcome: "acked" as const,
  error: null
})

describe("the commit step on the memory store (real consumers, real time)", () => {
  it.live("as on PostgreSQL: the stale holder's commit is fenced before its effect runs, the new holder's lands", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const before = yield* prevented
      const written: Array<string> = []
      const outcomes: Array<string> = []
      const gate = yield* Deferred.make<void>()
      const commitAs = (holder: string, wait?: Deferred.Deferred<void>): Consumer.Handler => (_message, context) =>
        Effect.gen(function*() {
          if (wait !== undefined) yield* Deferred.await(wait)
          yield* context.commit(Effect.sync(() => written.push(holder)))
        }).pipe(
          Effect.tapError((error) => Effect.sync(() => outcomes.push(`${holder}: ${(error as { _tag?: string })._tag}`))),
          Effect.tap(() => Effect.sync(() => outcomes.push(`${holder}: committed`)))
        )
      const cutOff: QueueStoreShape = {
        ...store,
        renew: () => Effect.fail(new ConnectionDead({ operation: "renew", message: "renew: Connection terminated" }))
      }
      const stopStale = yield* start(commitAs("stale", gate), cutOff, { consumerId: "stale", onLeaseLost: "continue", concurrency: 1 })
      const [sent] = yield* store.send(QUEUE, [{ task: "t", payload: 1 }])
      yield* waitFor("the stale holder to claim", Effect.map(store.get(sent!.id), (m) => Option.filter(m, (x) => x.attempts === 1)), 10_000)
      const stopNew = yield* start(commitAs("new"), store, { consumerId: "new" })
      yield* waitFor("the new holder to commit", Effect.sync(() => written.includes("new") ? Option.some(true) : Option.none()), 15_000)
      yield* Deferred.succeed(gate, undefined)
      yield* waitFor("the stale holder's commit to end", Effect.sync(() => outcomes.some((o) => o.startsWith("stale")) ? Option.some(true) : Option.none()), 10_000)
      yield* stopNew
      yield* stopStale
      assert.deepStrictEqual(written, ["new"])
      assert.deepStrictEqual(outcomes.sort(), ["new: committed", "stale: CommitFenced"])
      assert.strictEqual((yield* prevented) - before, 1)
      assert.isTrue(Option.isNone(yield* store.get(sent!.id)))
    }).pipe(Effect.provide(MemoryQueueStore.layer())), 40_000)
})

describe("the commit step's rules in a consumer (memory store, real time)", () => {
  const runOnce = (handler: Consumer.Handler) =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const stop = yield* start(handler, store, { consumerId: "rules" })
      const [sent] = yield* store.send(QUEUE, [{ task: "t", payload: 1 }])
      yield* waitFor("the message to be finished", Effect.map(store.get(sent!.id), (m) => Option.isNone(m) ? Option.some(true) : Option.none()), 10_000)
      yield* stop
      return (yield* store.attempts(sent!.id)).map((a) => a.outcome)
    }).pipe(Effect.provide(MemoryQueueStore.layer()))

  it.live("a run commits once: a second commit fails with already-committed, and the first stands", () =>
    Effect.gen(function*() {
      const reasons: Array<string> = []
      const history = yield* runOnce((_message, context) =>
        Effect.gen(function*() {
          yield* context.commit(Effect.void)
          const again = yield* Effect.flip(context.commit(Effect.void))
          reasons.push(again._tag === "CommitFenced" ? again.reason : again._tag)
        }))
      assert.deepStrictEqual(reasons, ["already-committed"])
      assert.deepStrictEqual(history, ["acked"])
    }), 20_000)

  it.live("a handler that fails after its commit committed is not retried: the commit stands", () =>
    Effect.gen(function*() {
      const history = yield* runOnce((_message, context) => Effect.andThen(context.commit(Effect.void), Effect.fail("after the commit")))
      assert.deepStrictEqual(history, ["acked"])
    }), 20_000)
})
