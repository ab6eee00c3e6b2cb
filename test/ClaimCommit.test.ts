/**
 * A claim commits without waiting for its WAL flush (synchronous_commit off for the claim's own
 * transaction only), on a durable server of its own (fsync on, synchronous_commit on, the WAL
 * writer's background flush pushed out to 10 s): right after a synchronous statement the
 * server's flushed WAL has caught up with what was written; right after a claim it has not, until
 * the next synchronous commit (an ack) flushes it. A claim inside a caller's transaction leaves
 * that transaction synchronous, and no session keeps the setting.
 */
import { PgClient } from "@effect/sql-pg"
import { assert, layer } from "@effect/vitest"
import { Effect, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { startPostgres } from "../dev/EmbeddedPostgres.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import { QueueStore } from "../src/QueueStore.ts"
import { ackOf } from "./support/Completions.ts"

/** A durable server for this file alone: the shared test server runs without fsync or synchronous commits. */
const DurableServer = Layer.unwrap(Effect.gen(function*() {
  const server = yield* Effect.acquireRelease(
    Effect.promise(() => startPostgres({ settings: ["wal_writer_delay=10000", "autovacuum=off"] })),
    (s) => Effect.promise(() => s.destroy())
  )
  // One connection, no lease pool: every statement runs on the session the checks read.
  return PgQueueStore.layer({ schema: "commit_check", leasePool: false }).pipe(
    Layer.provideMerge(PgClient.layer({ url: Redacted.make(server.url), maxConnections: 1 }))
  )
}))


/**
 * WAL a background process may write after a flush (the bgwriter's snapshot of running
 * transactions, ~50 bytes), and the least a claim of two messages writes (two new row versions
 * with their index entries and a commit record: over 1 KB measured).
 */
const STRAY = 128
const CLAIM_WAL = 512

layer(DurableServer, { excludeTestServices: true, timeout: 60_000 })("claim commit (durable PostgreSQL)", (it) => {
  /** Bytes of WAL written but not yet flushed to disk. */
  const unflushed = Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const [row] = yield* sql<{ lag: string }>`
      SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), pg_current_wal_flush_lsn())::text AS lag`
    return Number(row!.lag)
  })

  it.effect("a claim does not wait for its WAL flush; the ack after it flushes both", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      yield* store.send("durable", [{ task: "t", payload: 1 }, { task: "t", payload: 2 }])
      assert.isAtMost(yield* unflushed, STRAY, "a send commits synchronously: its WAL is flushed")
      const claims = yield* store.claim("durable", { lease: "30 seconds", limit: 2, consumer: "c" })
      assert.lengthOf(claims, 2)
      assert.isAtLeast(yield* unflushed, CLAIM_WAL, "the claim's row versions and commit record are written, not yet flushed")
      const { held } = yield* store.complete(claims.map((c) => ackOf(c)))
      assert.lengthOf(held, 2)
      assert.isAtMost(yield* unflushed, STRAY, "the ack's synchronous commit flushed the claim's WAL too")
    }))

  it.effect("inside a caller's transaction the claim leaves it synchronous; no session keeps the setting", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      yield* store.send("durable-tx", [{ task: "t", payload: 1 }])
      const setting = yield* sql.withTransaction(Effect.gen(function*() {
        const claims = yield* store.claim("durable-tx", { lease: "30 seconds", limit: 1, consumer: "c" })
        assert.lengthOf(claims, 1)
        const [row] = yield* sql<{ s: string }>`SELECT current_setting('synchronous_commit') AS s`
        return row!.s
      }))
      assert.strictEqual(setting, "on", "the caller's transaction keeps synchronous_commit")
      assert.isAtMost(yield* unflushed, STRAY, "the caller's commit waited for its flush")
      yield* store.send("durable-tx", [{ task: "t", payload: 2 }])
      yield* store.claim("durable-tx", { lease: "30 seconds", limit: 1, consumer: "c" })
      const [after] = yield* sql<{ s: string }>`SELECT current_setting('synchronous_commit') AS s`
      assert.strictEqual(after!.s, "on", "the claim's setting ended with its own transaction")
    }))
})
