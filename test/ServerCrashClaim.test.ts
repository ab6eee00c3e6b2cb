/**
 * What a database server crash does to a claim, measured on a durable server of its own (fsync
 * and synchronous_commit on; the WAL writer's background flush pushed out to 10 s, so the window
 * it normally closes within 3 x wal_writer_delay, 600 ms by default, stays open for the test).
 * The crash is real: one backend is SIGKILLed, the postmaster ends every other one and recovers
 * from the WAL, as after a handler's statement that crashed a backend.
 *
 * A claim commits without waiting for its WAL flush (test/ClaimCommit.test.ts). A crash before
 * anything flushes it loses the claim: the message is back as it was, its attempt and any
 * lease expiry uncounted. So a handler that crashes the server at once is never counted towards
 * `quarantineAfter` nor towards its attempts (docs/errors.md). Once any synchronous commit
 * followed the claim (its first renewal, an ack, a send), the claim survives the crash and the
 * expired lease is counted as for a dead worker.
 */
import { PgClient } from "@effect/sql-pg"
import { assert, layer } from "@effect/vitest"
import { Context, Effect, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import * as Reactivity from "effect/reactivity/Reactivity"
import { startPostgres } from "../dev/EmbeddedPostgres.ts"
import type { Claim } from "../src/Message.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import { QueueStore } from "../src/QueueStore.ts"

class ServerUrl extends Context.Service<ServerUrl, string>()("test/ServerCrashClaim/ServerUrl") {}

const DurableServer = Layer.unwrap(Effect.gen(function*() {
  const server = yield* Effect.acquireRelease(
    Effect.promise(() => startPostgres({ settings: ["wal_writer_delay=10000", "autovacuum=off"] })),
    (s) => Effect.promise(() => s.destroy())
  )
  return PgQueueStore.layer({ schema: "crash_check", leasePool: false }).pipe(
    Layer.provideMerge(PgClient.layer({ url: Redacted.make(server.url), maxConnections: 2, connectTimeout: "2 seconds" })),
    Layer.provideMerge(Layer.succeed(ServerUrl, server.url))
  )
}))

interface Row {
  readonly attempts: number
  readonly lease_expiries: number
  readonly leased: boolean
}

layer(DurableServer, { excludeTestServices: true, timeout: 120_000 })("a server crash after a claim (durable PostgreSQL)", (it) => {
  /** Crash the server: SIGKILL one backend (a connection of its own), then wait until it answers again. */
  const crashServer = Effect.gen(function*() {
    const url = yield* ServerUrl
    const pid = yield* Effect.scoped(Effect.gen(function*() {
      const victim = yield* PgClient.makeClient({ url: Redacted.make(url) })
      const [row] = yield* victim<{ pid: number }>`SELECT pg_backend_pid() AS pid`
      process.kill(row!.pid, "SIGKILL")
      return row!.pid
    })).pipe(Effect.provide(Reactivity.layer))
    const sql = yield* SqlClient.SqlClient
    const deadline = Date.now() + 60_000
    // The pool's connections were ended by the postmaster, then it refuses new ones while it recovers
    // (57P03): statements fail until it is back and each dead connection has been replaced.
    let answeredInARow = 0
    while (answeredInARow < 5) {
      const answered = yield* Effect.result(sql`SELECT 1`)
      answeredInARow = answered._tag === "Success" ? answeredInARow + 1 : 0
      if (Date.now() > deadline) return yield* Effect.die(new Error("the server did not come back within 60 s of the crash"))
      yield* Effect.sleep(100)
    }
    return pid
  })

  const rowOf = (id: Claim["id"]) =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const [row] = yield* sql<Row>`SELECT attempts, lease_expiries, lease_token IS NOT NULL AS leased
        FROM crash_check.messages WHERE id = ${id}::bigint`
      return row!
    })

  it.effect("a claim that no synchronous commit followed is lost: three crashes in a row count no attempt and no lease expiry", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const [sent] = yield* store.send("crash", [{ task: "t", payload: 1 }])
      for (let crash = 1; crash <= 3; crash++) {
        const [claim] = yield* store.claim("crash", { lease: "30 seconds", limit: 1, consumer: "c" })
        assert.strictEqual(claim?.id, sent!.id)
        // Every claim finds the message as if it had never run: the first attempt, no expiry, no suspect.
        assert.deepStrictEqual([claim!.attempts, claim!.leaseExpiries], [1, 0], `claim before crash ${crash}`)
        yield* crashServer
        assert.deepStrictEqual(yield* rowOf(sent!.id), { attempts: 0, lease_expiries: 0, leased: false }, `after crash ${crash}`)
      }
    }))

  it.effect("a claim followed by a synchronous commit (its renewal) survives the crash; the expired lease is counted", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const [sent] = yield* store.send("crash-renewed", [{ task: "t", payload: 1 }])
      const [claim] = yield* store.claim("crash-renewed", { lease: "1 second", limit: 1, consumer: "c" })
      const renewed = yield* store.renew([{ id: claim!.id, leaseToken: claim!.leaseToken }], "1 second")
      assert.deepStrictEqual(renewed.held, [claim!.id])
      yield* crashServer
      assert.deepStrictEqual(yield* rowOf(sent!.id), { attempts: 1, lease_expiries: 0, leased: true })
      // Once the lease is over, the next claim counts the expiry, as for a worker that died.
      yield* Effect.sleep(1_500)
      const [again] = yield* store.claim("crash-renewed", { lease: "30 seconds", limit: 1, consumer: "c" })
      assert.deepStrictEqual([again!.id, again!.attempts, again!.leaseExpiries], [sent!.id, 2, 1])
    }))
})
