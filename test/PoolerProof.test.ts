/**
 * The pooler proof alone (src/presence/poolerProof.ts): what the lock checks
 * say, the age rule, and the shared-backend probe on real PostgreSQL, where a
 * "pool" that is the session's own connection stands for a transaction-mode
 * pooler handing the session's backend to another client (re-entrant: the
 * lock is granted again). The proof behind a real PgBouncer:
 * test/PoolerPresence.test.ts.
 */
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Option, Redacted } from "effect"
import { Reactivity } from "effect/reactivity"
import { SqlClient } from "effect/sql"
import * as ConsumerPresence from "../src/ConsumerPresence.ts"
import * as Migrations from "../src/Migrations.ts"
import * as PresenceSql from "../src/pg/presence.ts"
import * as Pooler from "../src/Pooler.ts"
import * as PoolerProof from "../src/presence/poolerProof.ts"
import * as PgTest from "./support/PgTest.ts"

describe("the pooler proof, alone", () => {
  it("the lock check: agreement, a changed backend, a lock not shown, no answer", () => {
    assert.isUndefined(PoolerProof.checkProblem({ pid: 7 }, { pid: 7, held: true }))
    assert.match(PoolerProof.checkProblem({ pid: 7 }, { pid: 8, held: true })!, /backend changed between two statements \(7 then 8\)/)
    assert.match(PoolerProof.checkProblem({ pid: 7 }, { pid: 7, held: false })!, /does not show the lock/)
    assert.match(PoolerProof.checkProblem({ pid: 7 }, undefined)!, /no answer/)
  })

  it("the age rule holds in auto mode only", () => {
    const old = { pid: 7, key: 1, locked: true, age_ms: PoolerProof.POOLED_BACKEND_AGE_MS + 1 }
    assert.match(PoolerProof.ageProblem("auto", old)!, /backend 7 started .* before this new connection's first statement/)
    assert.isUndefined(PoolerProof.ageProblem("on", old))
    assert.isUndefined(PoolerProof.ageProblem("auto", { ...old, age_ms: 50 }))
    assert.isUndefined(PoolerProof.ageProblem("auto", { ...old, age_ms: null }))
  })

  it.effect("the session target: the direct URL when given, none through a transaction pooler without one", () =>
    Effect.gen(function*() {
      const main = { url: Redacted.make("postgres://main/db") } as PgClient.PgClientConfig
      const direct = yield* PoolerProof.target(main)
      assert.strictEqual(direct.mode, "none")
      assert.strictEqual(direct.base, main)
      const pooled = yield* PoolerProof.target(main).pipe(Effect.provide(Pooler.layer({ mode: "transaction" })))
      assert.isTrue(Option.isNone(pooled.target))
      assert.strictEqual(pooled.mode, "transaction")
      const bypass = yield* PoolerProof.target(main).pipe(
        Effect.provide(Pooler.layer({ mode: "transaction", directUrl: Redacted.make("postgres://direct/db") }))
      )
      assert.strictEqual(bypass.mode, "none")
      assert.strictEqual(Redacted.value(bypass.base.url!), "postgres://direct/db")
    }))

  it.live("shared backend: nothing on a connection of its own; the lock granted again on a shared one", () => {
    const schema = PgTest.uniqueSchema("pp")
    return Effect.scoped(Effect.gen(function*() {
      yield* Migrations.run({ schema })
      const pool = (yield* SqlClient.SqlClient).withoutTransforms()
      const ctx = PresenceSql.makeContext(pool, schema, ConsumerPresence.classKey(schema), 2_000)
      const session = (yield* PgClient.makeClient({ url: Redacted.make(PgTest.databaseUrl()), applicationName: "pooler-proof" }).pipe(
        Effect.provide(Reactivity.layer)
      )).withoutTransforms()
      const lock = yield* PresenceSql.takeLock(ctx, session)
      assert.isTrue(lock?.locked)
      // A direct connection: the lock is this session's alone, and the whole proof passes.
      assert.isUndefined(yield* PoolerProof.sharedBackend(ctx, session, lock!.pid, lock!.key))
      assert.isUndefined(yield* PoolerProof.prove(ctx, session, lock!, "auto"))
      // The "other client" lands on the session's own backend, as through a transaction pooler.
      const shared = { ...ctx, sql: session }
      assert.match(
        (yield* PoolerProof.sharedBackend(shared, session, lock!.pid, lock!.key))!,
        /answered another client connection and granted it the lock too/
      )
      // Another backend answering the probe with the lock: another client took it.
      assert.match((yield* PoolerProof.sharedBackend(shared, session, lock!.pid + 1, lock!.key))!, /another client connection took the lock/)
      // The probe gave back what it took: the session still holds its lock once, and only it.
      const [held] = yield* pool<{ n: number }>`
        SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2
          AND classid::bigint = ${ctx.lockClass}::bigint AND objid::bigint = ${lock!.key}::bigint`
      assert.strictEqual(held?.n, 1)
    })).pipe(
      Effect.provide(PgTest.dropSchemaOnRelease(schema).pipe(Layer.provideMerge(PgTest.clientLayer({ maxConnections: 2 }))))
    )
  }, { timeout: 20_000 })
})
