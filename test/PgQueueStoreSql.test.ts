/**
 * The PostgreSQL store's SQL, where the shared conformance suite does not reach:
 * the server's clock, joining the caller's transaction, migrations, hostile names
 * kept out of the SQL text, rows written by raw SQL, and batches split into chunks
 * (large, mixed, atomic, past jsonb's cap).
 *
 * Every test here runs on real time (`excludeTestServices`): the store reads
 * `now()` from the server.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Exit, Layer } from "effect"
import { SqlClient } from "effect/sql"
import type { MessageId, NewMessage } from "../src/Message.ts"
import * as Migrations from "../src/Migrations.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import { InvalidInput, QueryFailed } from "../src/QueueError.ts"
import { QueueStore } from "../src/QueueStore.ts"
import { SEND_CHUNK } from "../src/pg/send.ts"
import * as Finish from "./support/Finish.ts"
import * as PgTest from "./support/PgTest.ts"
import { failureOf } from "./support/Failure.ts"

const schema = PgTest.uniqueSchema("extra")

const StoreLive = PgQueueStore.layer({ schema, clock: "database" }).pipe(
  Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
  Layer.provideMerge(PgTest.clientLayer())
)

let counter = 0
const freshQueue = (label: string) => `${label}-${++counter}-${Math.random().toString(36).slice(2, 6)}`

const msg = (payload: unknown, extra: Partial<NewMessage> = {}): NewMessage => ({ task: "job", payload, ...extra })

const claimAll = (queue: string, limit = 100) =>
  Effect.gen(function*() {
    const store = yield* QueueStore
    return yield* store.claim(queue, { lease: "30 seconds", limit, consumer: "extra" })
  })


const assertInvalid = (error: unknown, field: string) => {
  assert.instanceOf(error, InvalidInput, String(error))
  assert.strictEqual((error as InvalidInput).field, field)
}

/** Whether `schema.table` exists. */
const tableExists = (schemaName: string, table: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const [row] = yield* sql<{ n: number }>`
      SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = ${schemaName} AND tablename = ${table}`
    return row!.n
  })

const dropSchema = (name: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql`DROP SCHEMA IF EXISTS ${sql(name)} CASCADE`.pipe(Effect.ignore)
  })

layer(StoreLive, { excludeTestServices: true })("PgQueueStore on PostgreSQL: beyond the conformance suite", (it) => {
  it.effect("database clock: a delayed message becomes claimable when the server says so", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      const queue = freshQueue("dbclock")
      const [sent] = yield* store.send(queue, [msg("later", { delay: 300 })])
      const sentAt = Date.now()
      assert.strictEqual((yield* claimAll(queue)).length, 0, "not claimable at once")
      assert.strictEqual((yield* store.stats(queue)).delayed, 1)

      // Poll every 50 ms, for at most 10 s.
      let claims = yield* claimAll(queue)
      while (claims.length === 0 && Date.now() - sentAt < 10_000) {
        yield* Effect.sleep("50 millis")
        claims = yield* claimAll(queue)
      }
      assert.strictEqual(claims.length, 1, "the delayed message became claimable within 10 s")
      assert.strictEqual(claims[0]!.id, sent!.id)
      assert.isAtLeast(Date.now() - sentAt, 200, "not long before the delay ended")
      const [row] = yield* sql<{ delay_ms: number }>`
        SELECT (extract(epoch FROM m.leased_at - m.enqueued_at) * 1000)::float8 AS delay_ms
        FROM ${sql(`${schema}.messages`)} AS m WHERE m.id = ${claims[0]!.id}::bigint`
      assert.isAtLeast(row!.delay_ms, 300, "claimed no earlier than enqueued_at + delay by the server's clock")
    }))

  it.effect("database clock: leaseExpiresAt is the server's now() plus the lease", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      const queue = freshQueue("lease")
      yield* store.send(queue, [msg(1)])
      const [claim] = yield* store.claim(queue, { lease: "20 seconds", limit: 1, consumer: "c" })
      const [row] = yield* sql<{ now: Date }>`SELECT now() AS now`
      const expected = row!.now.getTime() + 20_000
      assert.isBelow(Math.abs(claim!.leaseExpiresAt.getTime() - expected), 1_000)
    }))

  it.effect("database clock: times come from the server's now(), frozen inside a transaction", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      const queue = freshQueue("txclock")
      // now() is the transaction's start: a store on the database clock must write exactly that,
      // however much local time has passed (an Effect-clock store would write 400 ms later).
      const { claim, txNow } = yield* sql.withTransaction(Effect.gen(function*() {
        const [row] = yield* sql<{ now: Date }>`SELECT now() AS now`
        yield* Effect.sleep("400 millis")
        yield* store.send(queue, [msg("x")])
        const [claim] = yield* store.claim(queue, { lease: "10 seconds", limit: 1, consumer: "c" })
        return { claim: claim!, txNow: row!.now }
      }))
      assert.strictEqual(claim.enqueuedAt.getTime(), txNow.getTime())
      assert.strictEqual(claim.leaseExpiresAt.getTime(), txNow.getTime() + 10_000)
    }))

  it.effect("send inside the caller's transaction commits and rolls back with it", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      for (const messages of [[msg("one")], [msg("a"), msg("b"), msg("c", { dedupKey: "k" })]]) {
        // Committed: visible.
        const committed = freshQueue("tx-commit")
        const sent = yield* sql.withTransaction(store.send(committed, messages))
        assert.strictEqual(sent.length, messages.length)
        assert.strictEqual((yield* store.stats(committed)).ready, messages.length)
        assert.deepStrictEqual(
          (yield* claimAll(committed)).map((c) => c.payload),
          messages.map((m) => m.payload)
        )

        // The caller's transaction fails after the send: nothing is left.
        const rolledBack = freshQueue("tx-rollback")
        const exit = yield* Effect.exit(sql.withTransaction(Effect.gen(function*() {
          const inside = yield* store.send(rolledBack, messages)
          assert.strictEqual(inside.length, messages.length)
          // Inside the transaction the messages are there...
          assert.strictEqual((yield* store.stats(rolledBack)).ready, messages.length)
          return yield* Effect.fail("caller failed" as const)
        })))
        assert.isTrue(Exit.isFailure(exit))
        // ...and after the rollback they are not.
        assert.strictEqual((yield* store.stats(rolledBack)).ready, 0)
        assert.strictEqual((yield* claimAll(rolledBack)).length, 0)
        const [row] = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM ${sql(`${schema}.messages`)} WHERE queue = ${rolledBack}`
        assert.strictEqual(row!.n, 0)
      }
    }))

  it.effect("migrations: a second run is a no-op; concurrent runs on a fresh schema both succeed", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const sequential = PgTest.uniqueSchema("mig")
      const concurrent = PgTest.uniqueSchema("mig")
      yield* Effect.gen(function*() {
        const first = yield* Migrations.run({ schema: sequential })
        assert.deepStrictEqual(first.map(([id, name]) => [id, name]), Migrations.known.map(([id, name]) => [id, name]))
        assert.deepStrictEqual(first[0], [1, "create_messages"])
        const second = yield* Migrations.run({ schema: sequential })
        assert.deepStrictEqual(second, [])
        assert.strictEqual(yield* tableExists(sequential, "messages"), 1)

        const both = yield* Effect.all([Migrations.run({ schema: concurrent }), Migrations.run({ schema: concurrent })], {
          concurrency: 2
        })
        assert.deepStrictEqual(
          both.map((ran) => ran.length).sort(),
          [0, Migrations.known.length],
          "one run migrated, the other found nothing to do"
        )
        assert.strictEqual(yield* tableExists(concurrent, "messages"), 1)
        const [row] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(`${concurrent}.migrations`)}`
        assert.strictEqual(row!.n, Migrations.known.length)
        // And a store on it works.
        const store = yield* PgQueueStore.make({ schema: concurrent, clock: "database", migrate: false })
        yield* store.send("q", [msg("x")])
        assert.strictEqual((yield* store.claim("q", { lease: "30 seconds", limit: 1, consumer: "c" })).length, 1)
      }).pipe(Effect.ensuring(Effect.andThen(dropSchema(sequential), dropSchema(concurrent))))
    }))

  it.effect("migrations: an invalid schema name is refused and creates nothing", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const namespaces = sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_namespace`.pipe(Effect.map((rows) => rows[0]!.n))
      const before = yield* namespaces
      for (const bad of [`x"; drop table y; --`, "Upper", ""]) {
        assertInvalid(yield* failureOf(Migrations.run({ schema: bad })), "schema")
        assertInvalid(yield* failureOf(PgQueueStore.make({ schema: bad })), "schema")
        const [row] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = ${bad}`
        assert.strictEqual(row!.n, 0, `schema ${JSON.stringify(bad)} was created`)
      }
      assert.strictEqual(yield* namespaces, before)
    }))

  it.effect("hostile queue and task names are refused; hostile values are stored as data", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const hostile = `x"; drop table messages; --`
      assertInvalid(yield* failureOf(store.send(hostile, [msg(1)])), "queue")
      assertInvalid(yield* failureOf(store.send("ok", [msg(1, { task: hostile })])), "task")
      assertInvalid(yield* failureOf(store.claim(hostile, { lease: "30 seconds", limit: 1, consumer: "c" })), "queue")
      assertInvalid(yield* failureOf(store.claim("ok", { lease: "30 seconds", limit: 1, consumer: hostile })), "consumer")
      assertInvalid(yield* failureOf(store.stats(hostile)), "queue")
      assert.strictEqual(yield* tableExists(schema, "messages"), 1)

      // Values that are not names travel as parameters, byte for byte, on both insert paths.
      const queue = freshQueue("hostile")
      const nasty = `'); DROP TABLE ${schema}.messages; -- " \\ $1 ${"\u00e9\u{1F600}"}`
      const payload = { s: nasty, nested: [nasty, { k: nasty }] }
      const headers = { [`h'"; --`]: nasty }
      yield* store.send(queue, [msg(payload, { headers })]) // single statement
      yield* store.send(queue, [msg(payload, { headers }), msg(payload, { headers, dedupKey: nasty })]) // batch + dedup
      const claims = yield* claimAll(queue)
      assert.strictEqual(claims.length, 3)
      for (const claim of claims) {
        assert.deepStrictEqual(claim.payload, payload)
        assert.deepStrictEqual(claim.headers, headers)
      }
      assert.strictEqual(claims[2]!.dedupKey, nasty)
      assert.strictEqual(yield* tableExists(schema, "messages"), 1)
    }))

  it.effect("a row written by raw SQL with odd content is claimed faithfully", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      const queue = freshQueue("raw")
      const table = sql(`${schema}.messages`)
      yield* sql`INSERT INTO ${table} (queue, task, payload, headers) VALUES (${queue}, 'job', 'null'::jsonb, '{}'::jsonb)`
      yield* sql`INSERT INTO ${table} (queue, task, payload, headers, priority)
                 VALUES (${queue}, 'not a valid task name', '"just a string"'::jsonb, '{"h":"v"}'::jsonb, 1)`
      yield* sql`INSERT INTO ${table} (queue, task, payload, priority)
                 VALUES (${queue}, 'job', '[1, 2.5, true, null, {"a": []}]'::jsonb, 2)`
      const claims = yield* claimAll(queue)
      assert.strictEqual(claims.length, 3)
      assert.strictEqual(claims[0]!.payload, null)
      assert.deepStrictEqual(claims[0]!.headers, {})
      assert.strictEqual(claims[0]!.dedupKey, null)
      assert.strictEqual(claims[0]!.lastError, null)
      assert.strictEqual(claims[0]!.attempts, 1)
      assert.strictEqual(claims[1]!.payload, "just a string")
      assert.strictEqual(claims[1]!.task, "not a valid task name")
      assert.deepStrictEqual(claims[1]!.headers, { h: "v" })
      assert.deepStrictEqual(claims[2]!.payload, [1, 2.5, true, null, { a: [] }])
      for (const claim of claims) assert.isTrue(yield* Finish.ack(store, claim))
    }))

  it.effect("migration 15: the indexes ending with the id skip B-tree deduplication; the others keep it", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const rows = yield* sql<{ name: string; options: Array<string> | null }>`
        SELECT c.relname AS name, c.reloptions AS options FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
        WHERE n.nspname = ${schema} AND c.relkind = 'i' AND c.relname LIKE 'messages%'`
      const off = rows.filter((r) => r.options?.includes("deduplicate_items=off")).map((r) => r.name).sort()
      assert.deepStrictEqual(off, ["messages_claim_idx", "messages_dead_idx", "messages_fair_idx", "messages_key_idx"])
      assert.includeMembers(rows.map((r) => r.name), ["messages_leased_by_idx", "messages_held_idx", "messages_pkey"])
    }))

  it.effect("a batch of three INSERT chunks keeps input order, and every message is claimable", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("big")
      const count = 2 * SEND_CHUNK + 200
      const sent = yield* store.send(queue, Array.from({ length: count }, (_, i) => msg({ i })))
      assert.strictEqual(sent.length, count)
      assert.strictEqual(new Set(sent.map((s) => s.id)).size, count)
      assert.isTrue(sent.every((s) => !s.deduplicated))
      const claims = yield* claimAll(queue, count + 100)
      assert.strictEqual(claims.length, count)
      // Same visibility, same priority: claim order is id order, which must be input order.
      assert.deepStrictEqual(claims.map((c) => c.id), sent.map((s) => s.id))
      assert.deepStrictEqual(claims.map((c) => c.payload), sent.map((_, i) => ({ i })))
    }))

  it.effect("a batch whose columns all vary, its ids drawn apart (as when another send draws between), answers every id in input order", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      const queue = freshQueue("apart")
      const sequence = sql(`${schema}.messages_id_seq`)
      // Ids 7 apart: not consecutive, so the statement answers them as a list, not lowest + count.
      const batch = Array.from({ length: 6 }, (_, i) =>
        msg({ i }, {
          task: `t${i % 2}`,
          priority: i % 3,
          headers: i % 2 === 1 ? { h: `v${i}` } : {},
          maxAttempts: 3 + i,
          key: i % 2 === 1 ? `k${i}` : undefined,
          delay: i === 5 ? 60_000 : 0
        }))
      yield* sql`ALTER SEQUENCE ${sequence} INCREMENT BY 7`
      const sent = yield* store.send(queue, batch).pipe(Effect.ensuring(sql`ALTER SEQUENCE ${sequence} INCREMENT BY 1`.pipe(Effect.orDie)))
      assert.strictEqual(sent.length, batch.length)
      const ids = sent.map((s) => BigInt(s.id))
      for (let k = 1; k < ids.length; k++) assert.strictEqual(ids[k]! - ids[k - 1]!, 7n, `ids ${ids.join(", ")}`)
      const claims = yield* claimAll(queue)
      assert.strictEqual(claims.length, 5, "all but the delayed one")
      const byId = new Map(claims.map((c) => [c.id, c]))
      batch.slice(0, 5).forEach((m, i) => {
        const claim = byId.get(sent[i]!.id)!
        assert.deepStrictEqual(claim.payload, { i }, `result ${i}`)
        assert.strictEqual(claim.task, m.task)
        assert.strictEqual(claim.priority, m.priority)
        assert.deepStrictEqual(claim.headers, m.headers)
        assert.strictEqual(claim.maxAttempts, m.maxAttempts)
        assert.strictEqual(claim.key, m.key ?? null)
      })
      assert.strictEqual((yield* store.stats(queue)).delayed, 1)
    }))

  it.effect("a batch mixing dedup keys and plain messages answers one result per message, in order", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("mixed")
      const plain = Array.from({ length: SEND_CHUNK + 1 }, (_, i) => msg(`p${i}`))
      const batch = [
        ...plain, // a full chunk and one more
        msg("k1-first", { dedupKey: "k1" }),
        msg("between"),
        msg("k1-again", { dedupKey: "k1" }),
        msg("k2", { dedupKey: "k2" }),
        msg("last")
      ]
      const sent = yield* store.send(queue, batch)
      assert.strictEqual(sent.length, batch.length)
      const at = (payload: string) => sent[batch.findIndex((m) => m.payload === payload)]!
      assert.isFalse(at("k1-first").deduplicated)
      assert.isTrue(at("k1-again").deduplicated)
      assert.strictEqual(at("k1-again").id, at("k1-first").id)
      assert.isFalse(at("k2").deduplicated)
      const distinct = new Set(sent.map((s) => s.id))
      assert.strictEqual(distinct.size, batch.length - 1)

      // Every result names the message it was sent with.
      const claims = yield* claimAll(queue, batch.length + 100)
      assert.strictEqual(claims.length, batch.length - 1)
      const payloadOf = new Map<MessageId, unknown>(claims.map((c) => [c.id, c.payload]))
      batch.forEach((m, i) => {
        const expected = m.payload === "k1-again" ? "k1-first" : m.payload
        assert.strictEqual(payloadOf.get(sent[i]!.id), expected, `result ${i}`)
      })
    }))

  it.effect("a batch is atomic: a failure in its third chunk leaves nothing of the first two", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      const queue = freshQueue("atomic")
      // A trigger in this file's own schema refuses one marked row.
      yield* sql.unsafe(`CREATE OR REPLACE FUNCTION ${schema}.refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.payload->>'boom' = 'yes' THEN RAISE EXCEPTION 'refused by test trigger'; END IF;
          RETURN NEW;
        END $$`)
      yield* sql.unsafe(`CREATE TRIGGER refuse_boom BEFORE INSERT ON ${schema}.messages
        FOR EACH ROW EXECUTE FUNCTION ${schema}.refuse_boom()`)
      yield* Effect.gen(function*() {
        const batch = Array.from({ length: 2 * SEND_CHUNK + 200 }, (_, i) => msg(i === 2 * SEND_CHUNK + 100 ? { boom: "yes" } : { i }))
        const error = yield* failureOf(store.send(queue, batch))
        assert.instanceOf(error, QueryFailed, String(error))
        assert.strictEqual((error as QueryFailed).code, "P0001")
        // A dedup message failing after a bulk chunk: same outcome.
        const keyed = [...Array.from({ length: 10 }, (_, i) => msg({ i })), msg({ boom: "yes" }, { dedupKey: "d" })]
        assert.instanceOf(yield* failureOf(store.send(queue, keyed)), QueryFailed)

        const stats = yield* store.stats(queue)
        assert.strictEqual(stats.ready + stats.delayed + stats.inFlight, 0)
        assert.strictEqual((yield* claimAll(queue)).length, 0)
      }).pipe(Effect.ensuring(sql.unsafe(`DROP TRIGGER IF EXISTS refuse_boom ON ${schema}.messages`).pipe(Effect.orDie)))
      // Without the marked row the same batch goes through.
      assert.strictEqual((yield* store.send(queue, Array.from({ length: 2 * SEND_CHUNK + 200 }, (_, i) => msg({ i })))).length, 2 * SEND_CHUNK + 200)
    }))
  it.effect("a batch past jsonb's 256 MiB cap is split by size: 45 messages of 1 MiB of numbers (~283 MB as jsonb) land, in order", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("huge")
      // `[1,1,...]` is the JSON that jsonb stores biggest (6 bytes per character of text): 45 MiB
      // of JSON text becomes ~283 MB of jsonb, within one chunk's row count: the chunk is cut by
      // size (32 Mi characters of JSON each). Every message is within the 1 MiB bound.
      const ones = Array.from({ length: 524_000 }, () => 1)
      assert.isAtMost(JSON.stringify(ones).length, 1024 * 1024)
      const batch = Array.from({ length: 45 }, (_, i) => msg({ i, ones }, { headers: { n: String(i) } }))
      const sent = yield* store.send(queue, batch)
      assert.strictEqual(sent.length, 45)
      const stats = yield* store.stats(queue)
      assert.strictEqual(stats.ready, 45)
      // Ids follow input order across the chunks.
      const ids = sent.map((s) => BigInt(s.id))
      assert.deepStrictEqual(ids, [...ids].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)))
      const sql = yield* SqlClient.SqlClient
      const rows = yield* sql<{ i: number; n: number; h: string }>`
        SELECT (payload->>'i')::int AS i, jsonb_array_length(payload->'ones') AS n, headers->>'n' AS h
        FROM ${sql(`${schema}.messages`)} WHERE queue = ${queue} ORDER BY id`
      assert.deepStrictEqual(rows.map((r) => [r.i, r.n, r.h]), batch.map((_, i) => [i, 524_000, String(i)]))
      yield* sql`DELETE FROM ${sql(`${schema}.messages`)} WHERE queue = ${queue}`
    }), { timeout: 120_000 })

  it.effect("queues: a stored queue name that breaks the name rule is listed and counted, not a defect", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      const table = sql(`${schema}.messages`)
      // Written by hand (or by an older version): a name today's rule refuses.
      const odd = `bad name ${Math.random().toString(36).slice(2, 6)}`
      yield* sql`INSERT INTO ${table} (queue, task, payload, headers) VALUES (${odd}, 'job', '1'::jsonb, '{}'::jsonb)`
      const listed = yield* store.queues()
      const row = listed.find((q) => q.queue === odd)
      assert.isDefined(row, "the odd queue is listed")
      assert.strictEqual(row!.ready, 1)
      yield* sql`DELETE FROM ${table} WHERE queue = ${odd}`
    }))
})
