/**
 * The one-pool rule of transactional send, on real PostgreSQL: a send inside a
 * transaction of the store's own SqlClient joins it (a failed transaction rolls
 * the message back); a send while a transaction of another SqlClient is open is
 * refused with `InvalidInput` (rule `one-pool`) and commits nothing, in both
 * wirings an application can write.
 */
import { assert, describe, layer } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import type { NewMessage } from "../src/Message.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import * as QueueConfig from "../src/QueueConfig.ts"
import { InvalidInput } from "../src/QueueError.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as PgTest from "./support/PgTest.ts"

let counter = 0
const freshQueue = (label: string) => `${label}-${++counter}-${Math.random().toString(36).slice(2, 6)}`

const batches: ReadonlyArray<ReadonlyArray<NewMessage>> = [
  [{ task: "job", payload: "one" }], // the single-statement path
  [{ task: "job", payload: "a" }, { task: "job", payload: "b", delay: 1000 }, { task: "job", payload: "c", dedupKey: "k" }]
]

/** Rows of `queue` in the store's table, read through `sql` (outside any transaction). */
const rowsOf = (schema: string, queue: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const [row] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(`${schema}.messages`)} WHERE queue = ${queue}`
    return row!.n
  })

/** The failure of a transaction whose body sends and then would go on to succeed. */
const assertRefused = (exit: Exit.Exit<unknown, unknown>) => {
  assert.isTrue(Exit.isFailure(exit), "the send inside another client's transaction must not succeed")
  if (!Exit.isFailure(exit)) return
  const fail = exit.cause.reasons.find(Cause.isFailReason)
  assert.isDefined(fail, Cause.pretty(exit.cause))
  const error = fail!.error
  assert.instanceOf(error, InvalidInput, String(error))
  assert.strictEqual((error as InvalidInput).field, "transaction")
  assert.strictEqual((error as InvalidInput).rule, PgQueueStore.onePoolRule)
  assert.match((error as InvalidInput).message, /another SqlClient/)
  assert.match((error as InvalidInput).message, /same SqlClient layer/)
}

// The README's wiring: one Pg layer under both the store and the application (provideMerge).
const sameSchema = PgTest.uniqueSchema("onepool")
const SameClient = PgQueueStore.layer({ schema: sameSchema }).pipe(
  Layer.provideMerge(PgTest.dropSchemaOnRelease(sameSchema)),
  Layer.provideMerge(QueueConfig.pgLayer(Redacted.make(PgTest.databaseUrl()), { maxConnections: 4 }))
)

describe("one-pool rule", () => {
  layer(SameClient, { excludeTestServices: true })("store and application on the same client", (it) => {
    it.effect("a send inside the application's transaction joins it: committed with it, rolled back with it", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const sql = yield* SqlClient.SqlClient
        for (const messages of batches) {
          const committed = freshQueue("same-commit")
          yield* sql.withTransaction(store.send(committed, messages))
          assert.strictEqual(yield* rowsOf(sameSchema, committed), messages.length)

          const rolledBack = freshQueue("same-rollback")
          const exit = yield* Effect.exit(sql.withTransaction(Effect.gen(function*() {
            yield* store.send(rolledBack, messages)
            assert.strictEqual(yield* rowsOf(sameSchema, rolledBack), messages.length, "visible inside the transaction")
            return yield* Effect.fail("the application's write failed" as const)
          })))
          assert.isTrue(Exit.isFailure(exit))
          assert.strictEqual(yield* rowsOf(sameSchema, rolledBack), 0, "rolled back with the application's transaction")
        }
      }))
  })

  // The wiring of issue 15: the store on a pool of its own, the application on another.
  const ownSchema = PgTest.uniqueSchema("twopool")
  const StoreOnItsOwnPool = PgQueueStore.layer({ schema: ownSchema }).pipe(
    Layer.provide(QueueConfig.pgLayer(Redacted.make(PgTest.databaseUrl()), { maxConnections: 4 }))
  )
  const TwoClients = StoreOnItsOwnPool.pipe(
    Layer.provideMerge(PgTest.dropSchemaOnRelease(ownSchema)),
    Layer.provideMerge(PgTest.clientLayer({ maxConnections: 4 }))
  )

  layer(TwoClients, { excludeTestServices: true })("store on a pool of its own, application on another", (it) => {
    it.effect("a send inside the application's transaction is refused and commits nothing, whatever the transaction does", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const sql = yield* SqlClient.SqlClient
        for (const messages of batches) {
          // The transaction would have failed after the send: before the rule, the send survived it.
          const failing = freshQueue("two-failing")
          const failed = yield* Effect.exit(sql.withTransaction(Effect.gen(function*() {
            yield* store.send(failing, messages)
            return yield* Effect.fail("the application's write failed" as const)
          })))
          assertRefused(failed)
          assert.strictEqual(yield* rowsOf(ownSchema, failing), 0)

          // A transaction that would have committed: the send is refused all the same.
          const succeeding = freshQueue("two-succeeding")
          assertRefused(yield* Effect.exit(sql.withTransaction(store.send(succeeding, messages))))
          assert.strictEqual(yield* rowsOf(ownSchema, succeeding), 0)

          // Outside any transaction the store's own pool serves the send as usual.
          const outside = freshQueue("two-outside")
          yield* store.send(outside, messages)
          assert.strictEqual(yield* rowsOf(ownSchema, outside), messages.length)
        }
      }))

    it.effect("refused also in a nested transaction of the application's client, and after the transaction ends sends work", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const sql = yield* SqlClient.SqlClient
        const queue = freshQueue("two-nested")
        const exit = yield* Effect.exit(sql.withTransaction(sql.withTransaction(store.send(queue, batches[0]!))))
        assertRefused(exit)
        yield* sql.withTransaction(sql`SELECT 1`)
        yield* store.send(queue, batches[0]!)
        assert.strictEqual(yield* rowsOf(ownSchema, queue), 1)
      }))
  })
})
