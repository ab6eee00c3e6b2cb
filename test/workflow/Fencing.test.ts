/**
 * The workflow statements on real PostgreSQL (src/pg/workflow.ts): writes fenced by the lease
 * token (a holder whose lease ran out and was reclaimed records nothing and cannot finish), no
 * lost wake-up (a deferred completed while a run holds the execution makes its suspension
 * runnable at once), clocks (a suspended execution is visible at its earliest unfired clock,
 * fired by the next claim), a finished child waking its parent, and the reaper releasing the
 * executions a dead runner (its presence session gone, its heartbeat stale) holds.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer, Option } from "effect"
import { SqlClient } from "effect/sql"
import * as ConsumerPresence from "../../src/ConsumerPresence.ts"
import * as Migrations from "../../src/Migrations.ts"
import * as PresenceSql from "../../src/pg/presence.ts"
import * as Reap from "../../src/pg/reap.ts"
import * as Sql from "../../src/pg/workflow.ts"
import * as PgTest from "../support/PgTest.ts"
import { waitFor } from "../support/Wait.ts"

const schema = PgTest.uniqueSchema("wff")
const Db = Migrations.layer({ schema }).pipe(
  Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
  Layer.provideMerge(PgTest.clientLayer({ maxConnections: 4 }))
)

const statements = Effect.map(SqlClient.SqlClient, (sql) => Sql.make(sql, schema))
let next = 0
const fresh = (): Sql.Key => ({ workflow: "W", executionId: `e${next++}-${Date.now()}` })
const suspended = { result: { _tag: "Suspended" }, complete: false, failed: false }

/** Claim exactly `key` (other tests' rows may be visible too: claim by a workflow name of its own). */
const claimOne = (w: Sql.WorkflowSql, key: Sql.Key, leaseMs: number) =>
  Effect.map(Sql.claim(w, [key.workflow], 1, leaseMs), (rows) => rows.find((r) => r.executionId === key.executionId))

/** Wait until `key` can be claimed (its lease ran out, its clock came due), and claim it. */
const claimSoon = (w: Sql.WorkflowSql, key: Sql.Key, what: string) =>
  waitFor(what, Effect.map(claimOne(w, key, 30_000), Option.fromNullishOr))

const row = (w: Sql.WorkflowSql, key: Sql.Key) =>
  Effect.map(
    w.sql<{ status: string; visible: boolean | null; wake: number }>`
      SELECT status, visible_at <= now() AS visible, wake FROM ${w.executions}
      WHERE workflow = ${key.workflow} AND execution_id = ${key.executionId}`,
    (rows) => rows[0]!
  )

layer(Db, { excludeTestServices: true })("workflow statements on PostgreSQL", (it) => {
  it.effect("a holder whose lease was reclaimed records nothing and cannot finish", () =>
    Effect.gen(function*() {
      const w = yield* statements
      const key = { ...fresh(), workflow: "Fenced" }
      assert.isTrue(yield* Sql.start(w, key, {}, undefined))
      assert.isFalse(yield* Sql.start(w, key, {}, undefined), "an execution id starts once")
      const stale = (yield* claimOne(w, key, 30))!
      const fresh2 = yield* claimSoon(w, key, "the lease to run out and be reclaimed")
      assert.notStrictEqual(stale.token, fresh2.token)
      assert.isFalse(yield* Sql.recordActivity(w, stale, "a", 1, { _tag: "Complete" }))
      assert.isUndefined(yield* Sql.activityResult(w, key, "a", 1), "the stale holder wrote nothing")
      assert.isUndefined(yield* Sql.renew(w, stale, 30_000))
      assert.isFalse(yield* Sql.finish(w, stale, suspended))
      assert.isTrue(yield* Sql.recordActivity(w, fresh2, "a", 1, { _tag: "Complete", n: 1 }))
      assert.deepStrictEqual(yield* Sql.activityResult(w, key, "a", 1), { _tag: "Complete", n: 1 })
      assert.isTrue(yield* Sql.finish(w, fresh2, suspended))
    }))

  it.effect("a runner never claims again an execution it is still running, even once its lease ran out", () =>
    Effect.gen(function*() {
      const w = yield* statements
      const key = { ...fresh(), workflow: "Mine" }
      yield* Sql.start(w, key, {}, undefined)
      const first = (yield* claimOne(w, key, 30))!
      yield* waitFor("the lease to run out", Effect.map(row(w, key), (r) => Option.some(r).pipe(Option.filter(() => r.visible === true))))
      const again = yield* Sql.claim(w, ["Mine"], 5, 30_000, { holder: null, running: [key] })
      assert.deepStrictEqual(again, [], "skipped: its run goes on here")
      assert.isDefined(yield* Sql.renew(w, first, 30_000), "so its late renewal still holds it")
    }))

  it.effect("a deferred completed while a run holds the execution is not lost", () =>
    Effect.gen(function*() {
      const w = yield* statements
      const key = { ...fresh(), workflow: "Wake" }
      yield* Sql.start(w, key, {}, undefined)
      const held = (yield* claimOne(w, key, 30_000))!
      yield* Sql.deferredDone(w, key, "go", { _tag: "Success", value: null })
      assert.deepStrictEqual(yield* row(w, key), { status: "running", visible: false, wake: 1 })
      assert.isTrue(yield* Sql.finish(w, held, suspended))
      assert.deepStrictEqual(yield* row(w, key), { status: "runnable", visible: true, wake: 1 })
      // Without a wake while held, the suspension parks the row: invisible, holding nothing.
      const again = (yield* claimOne(w, key, 30_000))!
      assert.isTrue(yield* Sql.finish(w, again, suspended))
      assert.deepStrictEqual(yield* row(w, key), { status: "suspended", visible: null, wake: 0 })
      // A completion after that wakes it at once; a second completion of the same name does nothing.
      yield* Sql.deferredDone(w, key, "other", { _tag: "Success", value: 1 })
      assert.deepStrictEqual(yield* row(w, key), { status: "runnable", visible: true, wake: 1 })
      yield* Sql.deferredDone(w, key, "other", { _tag: "Success", value: 2 })
      assert.deepStrictEqual(yield* Sql.deferredResult(w, key, "other"), { _tag: "Success", value: 1 })
    }))

  it.effect("a suspended execution is visible at its clock, which the next claim fires", () =>
    Effect.gen(function*() {
      const w = yield* statements
      const key = { ...fresh(), workflow: "Clock" }
      yield* Sql.start(w, key, {}, undefined)
      const held = (yield* claimOne(w, key, 30_000))!
      yield* Sql.scheduleClock(w, held, "DurableClock/nap", 300)
      yield* Sql.finish(w, held, suspended)
      assert.deepStrictEqual(yield* row(w, key), { status: "suspended", visible: false, wake: 0 })
      const woken = yield* claimSoon(w, key, "the clock to make it claimable")
      yield* Sql.fireClocks(w, woken, { _tag: "Success", value: null })
      assert.deepStrictEqual(yield* Sql.deferredResult(w, key, "DurableClock/nap"), { _tag: "Success", value: null })
      yield* Sql.finish(w, woken, suspended)
      assert.deepStrictEqual(yield* row(w, key), { status: "suspended", visible: null, wake: 0 }, "a fired clock no longer counts")
    }))

  it.effect("the reaper releases a dead runner's executions at once, fenced: its token can write nothing more", () =>
    Effect.gen(function*() {
      const w = yield* statements
      const sql = yield* SqlClient.SqlClient
      // A dead runner: its row advertises a lock nobody holds, its heartbeat an hour old.
      yield* sql`
        INSERT INTO ${sql(`${schema}.consumers`)} (id, host, pid, lock_key, backend_pid, heartbeat_at)
        VALUES ('dead-runner', 'test-host', 4242, nextval(${`${schema}.consumer_lock_keys`}::regclass)::int, 0, now() - interval '1 hour')`
      const mine = { ...fresh(), workflow: "Reaped" }
      const other = { ...fresh(), workflow: "Reaped" }
      yield* Sql.start(w, mine, {}, undefined)
      yield* Sql.start(w, other, {}, undefined)
      const claimed = yield* Sql.claim(w, ["Reaped"], 1, 30_000, { holder: "dead-runner", running: [] })
      const held = claimed[0]!
      const byLive = (yield* Sql.claim(w, ["Reaped"], 1, 30_000, { holder: null, running: [] }))[0]!
      assert.notStrictEqual(held.executionId, byLive.executionId)

      const ctx = PresenceSql.makeContext(sql.withoutTransforms(), schema, ConsumerPresence.classKey(schema), 100)
      const reaped = yield* Reap.sweep(ctx, "someone")
      assert.deepStrictEqual(reaped.map((r) => [r.consumer, r.messageId, r.execution]), [
        ["dead-runner", null, `Reaped/${held.executionId}`],
        ["dead-runner", null, null] // the consumer's row: it held no message
      ])
      const released = { workflow: "Reaped", executionId: held.executionId }
      assert.deepStrictEqual(yield* row(w, released), { status: "runnable", visible: true, wake: 0 })
      assert.isFalse(yield* Sql.recordActivity(w, held, "a", 1, { _tag: "Complete" }), "the dead run's token matches nothing")
      assert.isUndefined(yield* Sql.renew(w, held, 30_000))
      const untouched = { workflow: "Reaped", executionId: byLive.executionId }
      assert.deepStrictEqual(yield* row(w, untouched), { status: "running", visible: false, wake: 0 }, "a claim without a dead holder stays")
      assert.deepStrictEqual(yield* Reap.sweep(ctx, "someone"), [], "the dead runner is handled once")
    }))

  it.effect("a child that completes wakes its parent; a detached one (no parent recorded) does not", () =>
    Effect.gen(function*() {
      const w = yield* statements
      const parent = { ...fresh(), workflow: "Parent" }
      const child = { ...fresh(), workflow: "Child" }
      yield* Sql.start(w, parent, {}, undefined)
      yield* Sql.finish(w, (yield* claimOne(w, parent, 30_000))!, suspended)
      yield* Sql.start(w, child, {}, parent)
      const running = (yield* claimOne(w, child, 30_000))!
      assert.deepStrictEqual(yield* row(w, parent), { status: "suspended", visible: null, wake: 0 })
      yield* Sql.finish(w, running, { result: { _tag: "Complete" }, complete: true, failed: false })
      assert.deepStrictEqual(yield* row(w, parent), { status: "runnable", visible: true, wake: 1 })
      assert.deepStrictEqual(yield* row(w, child), { status: "complete", visible: null, wake: 0 })
    }))
})
