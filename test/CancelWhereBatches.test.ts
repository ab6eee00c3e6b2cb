/**
 * `cancelWhere` on a large queue, on real PostgreSQL with two connections (issue 24, item 11).
 * It cancelled every message of the queue in one transaction, holding each row's lock until the
 * last one was done: a renewal of one of those messages waited for the whole cancel. It now
 * cancels in transactions of 1,000 messages: here a session of the test holds the lock of a
 * message of the second batch, so the cancel stops there, and a renewal of a message of the
 * first batch must still answer (its batch committed) instead of waiting behind the cancel.
 */
import { assert, layer } from "@effect/vitest"
import { Deferred, Effect, Fiber, Option } from "effect"
import { SqlClient } from "effect/sql"
import { StoreSettings } from "../src/StoreSettings.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitFor } from "./support/Wait.ts"

layer(PgTest.storeLayer({ clock: "database" }), { excludeTestServices: true })("cancelWhere on a large queue (PostgreSQL)", (it) => {
  it.effect("cancels in batches: a renewal of a message of a committed batch does not wait for the rest", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      const { schema } = yield* StoreSettings
      const queue = `bulk-${Math.random().toString(36).slice(2, 8)}`
      const sent = yield* store.send(queue, Array.from({ length: 2_500 }, (_, i) => ({ task: "t", payload: i })))
      // The first message (lowest id: the first the cancel locks) is running.
      const [running] = yield* store.claim(queue, { lease: "1 minute", limit: 1, consumer: "holder" })
      assert.strictEqual(running!.id, sent[0]!.id)

      // Another session holds the lock of a message of the second batch.
      const locked = yield* Deferred.make<number>()
      const release = yield* Deferred.make<void>()
      const blocker = yield* sql.withTransaction(Effect.gen(function*() {
        const [me] = yield* sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`
        yield* sql`SELECT id FROM ${sql(`${schema}.messages`)} WHERE id = ${sent[1_500]!.id}::bigint FOR UPDATE`
        yield* Deferred.succeed(locked, me!.pid)
        yield* Deferred.await(release)
      })).pipe(Effect.forkScoped)
      const pid = yield* Deferred.await(locked)

      const cancelling = yield* store.cancelWhere({ queue }).pipe(Effect.forkScoped)
      yield* waitFor(
        "the cancel to wait on the held lock",
        Effect.map(
          sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity WHERE ${pid}::int = ANY(pg_blocking_pids(pid))`,
          (rows) => (rows[0]!.n > 0 ? Option.some(true) : Option.none())
        ),
        15_000
      )
      // The cancel is stuck in its second batch; the first batch (the running message's) committed.
      const renewed = yield* store.renew([running!], "1 minute").pipe(Effect.timeoutOption("5 seconds"))
      assert.isTrue(Option.isSome(renewed), "the renewal answered while the cancel was still at it")
      assert.deepStrictEqual(Option.getOrThrow(renewed), { held: [running!.id], cancelling: [running!.id] })

      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(blocker)
      const results = yield* Fiber.join(cancelling).pipe(Effect.timeout("30 seconds"))
      assert.strictEqual(results.length, 2_500)
      assert.deepStrictEqual(results.map((r) => r.id), sent.map((s) => s.id), "every message once, in id order")
      assert.deepStrictEqual(results.filter((r) => r.result === "cancelling").map((r) => r.id), [running!.id])
      assert.deepStrictEqual((yield* store.messages(queue, { limit: 10_000 })).map((m) => m.id), [running!.id], "the rest deleted")
    }))
})
