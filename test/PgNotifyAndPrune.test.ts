/**
 * Store behaviours on real PostgreSQL that an in-memory store cannot show:
 * the send notification never endangers the sender's transaction (whatever the
 * schema's name), a cancel notice too big for a payload names no ids, and the
 * attempt history is pruned by one consumer at a time, in bounded batches.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Fiber, Layer } from "effect"
import { SqlClient } from "effect/sql"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as PgTest from "./support/PgTest.ts"

/** A valid schema name of exactly `length` characters, unique to this run. */
const longSchema = (length: number) => {
  const base = PgTest.uniqueSchema("n")
  return (base + "_" + "x".repeat(length)).slice(0, length)
}

const storeIn = (schema: string) =>
  PgQueueStore.layer({ schema, clock: "database" }).pipe(
    Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
    Layer.provideMerge(PgTest.clientLayer())
  )

describe("send notifications (real PostgreSQL)", () => {
  it.live("a 60-character schema: the channel fits, multi-message and transactional sends commit, and consumers hear them", () =>
    Effect.gen(function*() {
      const schema = longSchema(60)
      assert.strictEqual(schema.length, 60)
      const channel = PgQueueStore.notifyChannel(schema)
      assert.isAtMost(Buffer.byteLength(channel), 63)
      assert.notStrictEqual(channel, PgQueueStore.notifyChannel(schema.slice(0, 59) + "y"), "distinct schemas keep distinct channels")
      yield* Effect.gen(function*() {
        const store = yield* QueueStore
        const sql = yield* SqlClient.SqlClient
        const heard = yield* store.sends(["q"])
        const heardOne = yield* Effect.forkChild(heard)
        // Several messages: one transaction of the store's own.
        const many = yield* store.send("q", [{ task: "t", payload: 1 }, { task: "t", payload: 2 }])
        assert.strictEqual(many.length, 2)
        yield* Fiber.join(heardOne).pipe(Effect.timeout("10 seconds"))
        // Inside the caller's transaction: the caller's own write and the send land together.
        yield* sql`CREATE TABLE ${sql(`${schema}.users`)} (name text)`
        yield* sql.withTransaction(Effect.gen(function*() {
          yield* sql`INSERT INTO ${sql(`${schema}.users`)} (name) VALUES ('ada')`
          yield* store.send("q", [{ task: "t", payload: 3 }, { task: "t", payload: 4 }])
        }))
        const [users] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(`${schema}.users`)}`
        assert.strictEqual(users!.n, 1, "the caller's write committed")
        assert.strictEqual((yield* store.stats("q")).ready, 4)
        yield* heard.pipe(Effect.timeout("10 seconds")) // announced once committed
        // A rolled-back transaction takes its sends with it, and announces nothing.
        const heardAgain = yield* Effect.forkChild(heard)
        yield* sql.withTransaction(Effect.gen(function*() {
          yield* store.send("q", [{ task: "t", payload: 5 }])
          return yield* Effect.fail("rolled back" as const)
        })).pipe(Effect.flip)
        assert.strictEqual((yield* store.stats("q")).ready, 4)
        yield* Effect.sleep("300 millis")
        assert.isUndefined(heardAgain.pollUnsafe(), "nothing announced for a rolled-back send")
      }).pipe(Effect.provide(storeIn(schema)), Effect.scoped)
    }), 30_000)
})

describe("cancel notices (real PostgreSQL)", () => {
  it.live("a cancel of more running messages than a notice can list is heard as naming none", () =>
    Effect.gen(function*() {
      const schema = PgTest.uniqueSchema("cnotice")
      yield* Effect.gen(function*() {
        const store = yield* QueueStore
        yield* store.sends(["q"])
        const heard = yield* store.cancels(["q"])
        yield* store.send("q", Array.from({ length: 2_000 }, (_, i) => ({ task: "t", payload: i })))
        const running = yield* store.claim("q", { lease: "1 minute", limit: 2_000, consumer: "c" })
        assert.lengthOf(running, 2_000)
        // 2,000 ids (up to four digits) and their commas: over 7,000 bytes.
        assert.isAbove(running.map((c) => c.id).join(",").length, 7_000)
        const waiter = yield* Effect.forkChild(heard)
        // One cancel of all of them (cancelWhere cancels 1,000 per transaction, each notice naming its batch).
        yield* store.cancel(running.map((c) => c.id))
        assert.isUndefined(yield* Fiber.join(waiter).pipe(Effect.timeout("10 seconds")))
        // A small one names them.
        yield* store.send("q", [{ task: "t", payload: "late" }])
        const [late] = yield* store.claim("q", { lease: "1 minute", limit: 1, consumer: "c" })
        const again = yield* Effect.forkChild(heard)
        yield* store.cancel([late!.id])
        assert.deepStrictEqual(yield* Fiber.join(again).pipe(Effect.timeout("10 seconds")), new Set([late!.id]))
      }).pipe(Effect.provide(storeIn(schema)), Effect.scoped)
    }), 30_000)
})

describe("attempt history pruning (real PostgreSQL)", () => {
  it.live("deletes in bounded batches, only what is past retention, through the history's BRIN index; a second pruner meanwhile prunes nothing", () =>
    Effect.gen(function*() {
      const schema = PgTest.uniqueSchema("prune")
      yield* Effect.gen(function*() {
        const store = yield* QueueStore
        const sql = yield* SqlClient.SqlClient
        const attempts = sql(`${schema}.attempts`)
        // 12,000 records ended 8 days ago (over two full batches), 10 ended an hour ago.
        yield* sql`
          INSERT INTO ${attempts} (message_id, queue, task, attempt, consumer, started_at, ended_at, outcome)
          SELECT g, 'q', 't', 1, 'c', now() - interval '8 days', now() - interval '8 days' + g * interval '1 millisecond', 'acked'
          FROM generate_series(1, 12000) AS g`
        yield* sql`
          INSERT INTO ${attempts} (message_id, queue, task, attempt, consumer, started_at, ended_at, outcome)
          SELECT g, 'q', 't', 1, 'c', now() - interval '1 hour', now() - interval '1 hour', 'acked'
          FROM generate_series(1, 10) AS g`
        // The history's indexes (migration 10): the key a message's history is read by, the queue
        // names, and a BRIN index for retention; nothing else is written per history row.
        const indexes = yield* sql<{ indexdef: string }>`
          SELECT indexdef FROM pg_indexes WHERE schemaname = ${schema} AND tablename = 'attempts' ORDER BY indexname`
        assert.deepStrictEqual(indexes.map((r) => r.indexdef.replace(/^.* USING /, "")), [
          "brin (ended_at)",
          "btree (message_id, id)",
          "btree (queue)"
        ])
        // A batch is never a sort of every expired record: it takes any PRUNE_BATCH of them.
        yield* sql`ANALYZE ${attempts}`
        const plan = yield* sql<{ "QUERY PLAN": string }>`
          EXPLAIN SELECT ctid FROM ${attempts} WHERE ended_at < now() - interval '7 days' LIMIT 5000`
        assert.notMatch(plan.map((r) => r["QUERY PLAN"]).join("\n"), /Sort/)
        // Another consumer is pruning: its transaction holds the pruning lock.
        const other = yield* Layer.build(PgTest.clientLayer({ maxConnections: 1 }))
        const otherSql = Context.get(other, SqlClient.SqlClient)
        const prunedMeanwhile = yield* otherSql.withTransaction(Effect.gen(function*() {
          yield* otherSql`SELECT pg_advisory_xact_lock(${PgQueueStore.pruneLockKey(schema)}::bigint)`
          return yield* store.pruneAttempts("7 days")
        }))
        assert.strictEqual(prunedMeanwhile, 0, "no second pruner while one is at it")
        const pruned = yield* store.pruneAttempts("7 days")
        assert.strictEqual(pruned, 12_000)
        const [left] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${attempts}`
        assert.strictEqual(left!.n, 10, "recent records kept")
      }).pipe(Effect.provide(storeIn(schema)), Effect.scoped)
    }), 60_000)
})
