/**
 * Session liveness on real PostgreSQL, in real time: the reaper releases the
 * claims of a consumer whose presence lock it has seen free (every presence
 * session of it gone) for `reapAfter`, whatever its heartbeat says, and never
 * those of a live consumer, even while its presence connections (one at a time,
 * with its heartbeat connection) are being killed.
 *
 * Real consumers run in-process, each on a pool of its own named
 * `<app>`, so its presence session is `<app>-presence` and its heartbeat pool
 * `<app>-presence-pool`. "Dead" consumers are simulated exactly: a consumers
 * row, a claim in their name, and a dedicated connection holding (or not) their
 * lock, which the test terminates.
 */
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Deferred, Effect, Exit, Fiber, Layer, Metric, Option, Redacted, Scope } from "effect"
import { Reactivity } from "effect/reactivity"
import { SqlClient } from "effect/sql"
import * as Consumer from "../src/Consumer.ts"
import * as ConsumerPresence from "../src/ConsumerPresence.ts"
import type { MessageId } from "../src/Message.ts"
import * as Migrations from "../src/Migrations.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import * as QueueMetrics from "../src/QueueMetrics.ts"
import { captureLogs } from "./support/ConsumerHarness.ts"
import * as Finish from "./support/Finish.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitFor } from "./support/Wait.ts"

const QUEUE = "presence"
/** Fast presence timing for tests: stale after 1.5 s. */
const FAST = { heartbeat: 250, staleAfter: 1_500, reapEvery: 250 } as const
const rand = () => Math.random().toString(36).slice(2, 8)

const count = (metric: Metric.Metric<number, Metric.CounterState<number>>) =>
  Effect.map(Metric.value(metric), (state) => Number(state.count))


/** The test's own client, in a fresh migrated schema dropped afterwards. */
const withSchema = <A, E>(f: (schema: string) => Effect.Effect<A, E, SqlClient.SqlClient | PgClient.PgClient | Scope.Scope>) => {
  const schema = PgTest.uniqueSchema("pres")
  return Effect.scoped(Effect.gen(function*() {
    yield* Migrations.run({ schema })
    return yield* f(schema)
  })).pipe(
    Effect.provide(PgTest.dropSchemaOnRelease(schema).pipe(Layer.provideMerge(PgTest.clientLayer({ maxConnections: 4 }))))
  )
}

interface MessageState {
  readonly leased_by: string | null
  readonly lease_token: string | null
  readonly attempts: number
  readonly lease_expiries: number
  readonly visible_in_ms: number
}

const messageState = (schema: string, id: MessageId) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<MessageState>`
        SELECT leased_by, lease_token::text, attempts, lease_expiries,
               (extract(epoch FROM visible_at - now()) * 1000)::float8 AS visible_in_ms
        FROM ${sql(`${schema}.messages`)} WHERE id = ${id}::bigint`,
      (rows) => Option.fromNullishOr(rows[0])
    ))

interface ConsumerRow {
  readonly lock_key: number | null
  readonly backend_pid: number | null
  readonly age_ms: number
}

const consumerRow = (schema: string, id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<ConsumerRow>`
        SELECT lock_key, backend_pid, (extract(epoch FROM now() - heartbeat_at) * 1000)::float8 AS age_ms
        FROM ${sql(`${schema}.consumers`)} WHERE id = ${id}`,
      (rows) => Option.fromNullishOr(rows[0])
    ))

/** Sessions holding presence lock `key` of `schema`, and their backend pids. */
const lockHolders = (schema: string, key: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ pid: number }>`
        SELECT pid FROM pg_locks
        WHERE locktype = 'advisory' AND granted AND objsubid = 2
          AND classid::bigint = ${ConsumerPresence.classKey(schema)}::bigint AND objid::bigint = ${key}::bigint`,
      (rows) => rows.map((r) => r.pid)
    ))

const terminate = (pid: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(sql<{ ok: boolean }>`SELECT pg_terminate_backend(${pid}::int) AS ok`, (rows) => rows[0]?.ok === true))

/** Terminate every backend whose application_name starts with `prefix`; returns how many. */
const terminateApp = (prefix: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ n: number }>`
        SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
        WHERE starts_with(application_name, ${prefix}) AND pid <> pg_backend_pid()`,
      (rows) => rows[0]!.n
    ))

/** Send one message, and claim it in the name of `consumer` (lease 30 s). */
const sendAndClaimAs = (schema: string, consumer: string) =>
  Effect.scoped(Effect.gen(function*() {
    const store = yield* PgQueueStore.make({ schema, migrate: false, leasePool: false })
    const [sent] = yield* store.send(QUEUE, [{ task: "job", payload: { n: 1 } }])
    const [claim] = yield* store.claim(QUEUE, { lease: "30 seconds", limit: 1, consumer })
    assert.strictEqual(claim?.id, sent!.id)
    return claim!
  }))

/**
 * A simulated consumer: its row, and (if `lock`) its presence lock held on a
 * dedicated connection the test can terminate. `heartbeat: "fresh"` keeps the
 * row's heartbeat current until `stopHeartbeat`.
 */
const fakeConsumer = (schema: string, id: string, options: { readonly lock: boolean; readonly heartbeat: "fresh" | "stale" }) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const consumers = sql(`${schema}.consumers`)
    const scope = yield* Scope.fork(yield* Scope.Scope)
    const session = (yield* PgClient.makeClient({ url: Redacted.make(PgTest.databaseUrl()), applicationName: `fake-${id}` }).pipe(
      Effect.provide(Reactivity.layer),
      Scope.provide(scope)
    )).withoutTransforms()
    const [s] = yield* session<{ key: number; pid: number }>`
      SELECT nextval(${`${schema}.consumer_lock_keys`}::regclass)::int AS key, pg_backend_pid() AS pid`
    if (options.lock) yield* session`SELECT pg_advisory_lock(${ConsumerPresence.classKey(schema)}::int, ${s!.key}::int)`
    const age = options.heartbeat === "fresh" ? 0 : 3_600_000
    yield* sql`
      INSERT INTO ${consumers} (id, host, pid, lock_key, backend_pid, heartbeat_at)
      VALUES (${id}, 'test-host', 4242, ${s!.key}::int, ${s!.pid}::int, now() - ${age}::bigint * interval '1 millisecond')`
    const beating = options.heartbeat === "fresh"
      ? yield* Effect.forkChild(Effect.forever(Effect.andThen(
        sql`UPDATE ${consumers} SET heartbeat_at = now() WHERE id = ${id}`,
        Effect.sleep(200)
      )))
      : undefined
    return {
      key: s!.key,
      backendPid: s!.pid,
      stopHeartbeat: beating === undefined ? Effect.void : Fiber.interrupt(beating),
      close: Scope.close(scope, Exit.void)
    }
  })

/** One handler run. */
interface Run {
  readonly id: string
  readonly consumer: string
  readonly startedAt: number
  ended: boolean
}

/** A handler that records runs and waits for `gate` (if given) before succeeding. */
const recordingHandler = (runs: Array<Run>, gate?: Deferred.Deferred<void>): Consumer.Handler => (message, context) =>
  Effect.gen(function*() {
    const run: Run = { id: message.id, consumer: context.consumerId, startedAt: Date.now(), ended: false }
    runs.push(run)
    if (gate !== undefined) yield* Deferred.await(gate)
    run.ended = true
  })

/**
 * A real consumer with session liveness, on a pool of its own named `app`
 * (presence session `<app>-presence`, heartbeat pool `<app>-presence-pool`), in
 * a scope the test can close.
 */
const startConsumer = (
  schema: string,
  consumerId: string,
  handler: Consumer.Handler,
  presence: ConsumerPresence.PresenceOptions = {}
) =>
  Effect.gen(function*() {
    const app = `pres-${consumerId}-${rand()}`
    const scope = yield* Scope.fork(yield* Scope.Scope)
    const layer = Consumer.layer(handler, {
      queues: [QUEUE],
      consumerId,
      lease: "30 seconds",
      pollInterval: "100ms",
      shutdownGrace: "1 second"
    }).pipe(
      Layer.provide(ConsumerPresence.layerPg({ schema, ...FAST, ...presence })),
      Layer.provide(PgQueueStore.layer({ schema, clock: "database" })),
      Layer.provide(PgClient.layer({ url: Redacted.make(PgTest.databaseUrl()), maxConnections: 4, applicationName: app }))
    )
    yield* Layer.buildWithScope(layer, scope)
    return { consumerId, app, stop: Scope.close(scope, Exit.void) }
  })

describe("ConsumerPresence (real PostgreSQL, real time)", () => {
  it.live("a dead consumer's claim is released by another consumer's reaper, as a lease expiry; not while its lock is held", () =>
    withSchema((schema) =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const reapedBefore = yield* count(QueueMetrics.reaped)
        // "dead-1" holds its lock, but its heartbeat is an hour old: a hung process, not a dead one.
        const dead = yield* fakeConsumer(schema, "dead-1", { lock: true, heartbeat: "stale" })
        const claim = yield* sendAndClaimAs(schema, "dead-1")
        const runs: Array<Run> = []
        const b = yield* startConsumer(schema, "live-b", recordingHandler(runs))

        // Several stale bounds and reaper rounds pass: both signals must agree, so nothing moves.
        yield* Effect.sleep(3 * FAST.staleAfter)
        const held = yield* messageState(schema, claim.id)
        assert.isTrue(Option.isSome(held))
        assert.strictEqual(Option.getOrThrow(held).leased_by, "dead-1", "a stale heartbeat alone must not release a claim")
        assert.strictEqual(Option.getOrThrow(held).lease_token, claim.leaseToken)
        assert.deepStrictEqual(runs, [])

        // Its session ends (the process died): the lock is free, and B's reaper releases the claim.
        const killedAt = Date.now()
        assert.isTrue(yield* terminate(dead.backendPid))
        const run = yield* waitFor("B to run the released message", Effect.sync(() => Option.fromNullishOr(runs[0])), 10_000)
        const redeliveryMs = run.startedAt - killedAt
        yield* Effect.log(`dead consumer's claim re-run ${redeliveryMs} ms after its session was terminated (lease 30 s)`)
        assert.strictEqual(run.id, claim.id)
        assert.strictEqual(run.consumer, "live-b")
        assert.isAtMost(redeliveryMs, 3_000, "re-run within a few seconds of the death, not after the 30 s lease")
        yield* waitFor("the message to be acked", Effect.map(messageState(schema, claim.id), (s) => Option.isNone(s) ? Option.some(true) : Option.none()))

        // Counted as a lease expiry: history row, metric, and the dead consumer is forgotten.
        const history = yield* sql<{ attempt: number; consumer: string; outcome: string }>`
          SELECT attempt, consumer, outcome FROM ${sql(`${schema}.attempts`)} WHERE message_id = ${claim.id}::bigint ORDER BY id`
        assert.deepStrictEqual(history[0], { attempt: 1, consumer: "dead-1", outcome: "lease-expired" })
        assert.strictEqual((yield* count(QueueMetrics.reaped)) - reapedBefore, 1)
        assert.isTrue(Option.isNone(yield* consumerRow(schema, "dead-1")), "a reaped consumer's row is deleted")
        yield* b.stop
        yield* dead.close
      })
    ), { timeout: 30_000 })

  it.live("released claims keep their attempt and count a lease expiry (checked before anyone re-claims)", () =>
    withSchema((schema) =>
      Effect.gen(function*() {
        const dead = yield* fakeConsumer(schema, "dead-2", { lock: true, heartbeat: "stale" })
        const claim = yield* sendAndClaimAs(schema, "dead-2")
        yield* dead.close // the session ends with its scope
        // A bare sweep (as "someone"), so no consumer claims the message before we look at it.
        const presence = yield* ConsumerPresence.make({ schema, ...FAST, migrate: false })
        const reaped = yield* waitFor(
          "the sweep to release the claim",
          Effect.map(presence.sweep("someone"), (r) => r.length > 0 ? Option.some(r) : Option.none())
        )
        assert.deepStrictEqual(reaped.map((r) => [r.consumer, r.messageId, r.queue, r.host, r.pid]), [
          ["dead-2", claim.id, QUEUE, "test-host", 4242]
        ])
        const state = Option.getOrThrow(yield* messageState(schema, claim.id))
        assert.strictEqual(state.leased_by, null)
        assert.strictEqual(state.lease_token, null)
        assert.strictEqual(state.attempts, 1, "the worker died mid-attempt: the attempt stays counted, as at lease expiry")
        assert.strictEqual(state.lease_expiries, 1)
        assert.isAtMost(state.visible_in_ms, 0, "visible at once")
        // The stale dead token can write nothing any more.
        const store = yield* PgQueueStore.make({ schema, migrate: false, leasePool: false })
        assert.isFalse(yield* Finish.ack(store, claim))
        assert.deepStrictEqual(yield* store.renew([claim], "30 seconds"), { held: [], cancelling: [] })
        // Nothing more to do.
        assert.deepStrictEqual(yield* presence.sweep("someone"), [])
      })
    ), { timeout: 30_000 })

  it.live("THE KEY TEST: a live consumer whose presence connection is killed keeps its claim, re-registers, and acks once", () =>
    withSchema((schema) =>
      Effect.gen(function*() {
        const reapedBefore = yield* count(QueueMetrics.reaped)
        const ackedBefore = yield* count(QueueMetrics.acked)
        const gate = yield* Deferred.make<void>()
        const runs: Array<Run> = []
        const handler = recordingHandler(runs, gate)
        const a = yield* startConsumer(schema, "live-a", handler)
        const registered = Option.getOrThrow(yield* consumerRow(schema, "live-a"))
        assert.isNotNull(registered.lock_key, "A registered with session liveness")
        const holders0 = yield* waitFor("A's two presence sessions to hold its key", Effect.map(lockHolders(schema, registered.lock_key!), (pids) => pids.length === 2 ? Option.some(pids) : Option.none()))
        assert.include(holders0, registered.backend_pid)

        const store = yield* PgQueueStore.make({ schema, migrate: false, leasePool: false })
        const [sent] = yield* store.send(QUEUE, [{ task: "job", payload: {} }])
        const first = yield* waitFor("A to start the message", Effect.sync(() => Option.fromNullishOr(runs[0])))
        assert.strictEqual(first.consumer, "live-a")
        // B is idle, its reaper sweeping every 250 ms; it would take the message the moment it was released.
        const b = yield* startConsumer(schema, "live-b", handler)
        const token = Option.getOrThrow(yield* messageState(schema, sent!.id)).lease_token

        // A watcher: every 25 ms the claim must still be A's, same token, no expiry counted.
        const violations: Array<string> = []
        const watcher = yield* Effect.forkChild(Effect.forever(Effect.gen(function*() {
          const state = yield* messageState(schema, sent!.id)
          if (Option.isNone(state)) return yield* Effect.never
          const s = state.value
          if (s.leased_by !== "live-a" || s.lease_token !== token || s.lease_expiries !== 0) violations.push(JSON.stringify(s))
          yield* Effect.sleep(25)
        })))

        const key = registered.lock_key!
        /** Wait until two backends hold A's key again, none of them `killed`. */
        const replaced = (killed: ReadonlyArray<number>) =>
          waitFor(
            "A to replace its presence session",
            Effect.map(lockHolders(schema, key), (pids) =>
              pids.length === 2 && !pids.some((p) => killed.includes(p)) ? Option.some(pids) : Option.none()),
            10_000
          )

        // 1. Kill one of A's presence sessions, three times; the other holds the key meanwhile,
        // and a new one joins it. Stay well past B's reapAfter (300 ms) with B's reaper looking.
        let holders = holders0
        const reRegisterMs: Array<number> = []
        for (let i = 0; i < 3; i++) {
          const killedAt = Date.now()
          assert.isTrue(yield* terminate(holders[i % 2]!))
          holders = yield* replaced([holders[i % 2]!])
          reRegisterMs.push(Date.now() - killedAt)
          yield* Effect.sleep(1_000)
        }
        // 2. Kill one presence session and the heartbeat pool's connection at once.
        const pool = yield* terminateApp(`${a.app}-presence-pool`)
        assert.isTrue(yield* terminate(holders[0]!))
        assert.strictEqual(pool, 1, "the heartbeat pool's connection")
        const killedAt = Date.now()
        holders = yield* replaced([holders[0]!])
        reRegisterMs.push(Date.now() - killedAt)
        // 3. Several more reaper rounds of B's and A's.
        yield* Effect.sleep(2_000)
        assert.strictEqual(Option.getOrThrow(yield* consumerRow(schema, "live-a")).lock_key, key, "A keeps its key")
        yield* Effect.log(`A re-registered after ${reRegisterMs.join(", ")} ms`)

        assert.deepStrictEqual(violations, [], "the reaper must never release a live consumer's claim")
        assert.strictEqual(runs.length, 1, "B never ran it")
        assert.strictEqual((yield* count(QueueMetrics.reaped)) - reapedBefore, 0)

        // The handler completes; A acks once.
        yield* Deferred.succeed(gate, undefined)
        yield* waitFor("the message to be acked", Effect.map(messageState(schema, sent!.id), (s) => Option.isNone(s) ? Option.some(true) : Option.none()))
        yield* Fiber.interrupt(watcher)
        yield* Effect.sleep(500)
        assert.deepStrictEqual(runs.map((r) => [r.consumer, r.ended]), [["live-a", true]])
        assert.strictEqual((yield* count(QueueMetrics.acked)) - ackedBefore, 1)
        assert.deepStrictEqual(violations, [])
        yield* b.stop
        yield* a.stop
        assert.isTrue(Option.isNone(yield* consumerRow(schema, "live-a")), "a stopped consumer leaves the table")
      })
    ), { timeout: 60_000 })

  it.live("a free lock is enough: a consumer with a fresh heartbeat but no session holding its lock is reaped by the lock probe", () =>
    withSchema((schema) =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const ghost = yield* fakeConsumer(schema, "no-lock", { lock: false, heartbeat: "fresh" })
        const claim = yield* sendAndClaimAs(schema, "no-lock")
        const runs: Array<Run> = []
        const startedAt = Date.now()
        const b = yield* startConsumer(schema, "live-b", recordingHandler(runs))
        const run = yield* waitFor("B to run the released message", Effect.sync(() => Option.fromNullishOr(runs[0])), 10_000)
        yield* Effect.log(`released ${run.startedAt - startedAt} ms after B started, its heartbeat fresh all along`)
        assert.strictEqual(run.id, claim.id)
        const [history] = yield* sql<{ outcome: string; detail: string }>`
          SELECT outcome, error AS detail FROM ${sql(`${schema}.attempts`)} WHERE message_id = ${claim.id}::bigint ORDER BY id LIMIT 1`
        assert.strictEqual(history?.outcome, "lease-expired")
        assert.include(history?.detail, "its presence sessions ended; released by the reaper")
        yield* b.stop
        yield* ghost.close
      })
    ), { timeout: 30_000 })

  it.live("a consumer id already registered by a live consumer is warned about, naming it; a dead one's or a free id is not", () =>
    withSchema((schema) =>
      Effect.gen(function*() {
        // Alive: fresh heartbeat, lock held. Crashed and restarted: fresh heartbeat, its lock freed with its session.
        const alive = yield* fakeConsumer(schema, "twin", { lock: true, heartbeat: "fresh" })
        const crashed = yield* fakeConsumer(schema, "restarted", { lock: false, heartbeat: "fresh" })
        const warningsOf = (id: string) =>
          Effect.gen(function*() {
            const logs = captureLogs()
            const c = yield* startConsumer(schema, id, recordingHandler([])).pipe(Effect.provide(logs.layer))
            yield* c.stop
            return logs.entries.filter((e) => e.level === "Warn" && /already registered/.test(e.message)).map((e) => e.message)
          })
        const twin = yield* warningsOf("twin")
        assert.strictEqual(twin.length, 1, twin.join("\n"))
        assert.match(twin[0]!, /consumer id "twin" is already registered by a consumer that looks alive: host test-host, pid 4242, heartbeat [\d.]+s ago, presence lock held by backend \d+/)
        assert.match(twin[0]!, /LEASEHOLD_CONSUMER_ID/)
        assert.deepStrictEqual(yield* warningsOf("restarted"), [])
        assert.deepStrictEqual(yield* warningsOf("fresh-id"), [])
        yield* alive.close
        yield* crashed.close
      })
    ), { timeout: 30_000 })

  it.live("mode off: no row, no lock, no reaper", () =>
    withSchema((schema) =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        // Dead by both signals: stale heartbeat, no lock.
        const dead = yield* fakeConsumer(schema, "dead-3", { lock: false, heartbeat: "stale" })
        const claim = yield* sendAndClaimAs(schema, "dead-3")
        const runs: Array<Run> = []
        const c = yield* startConsumer(schema, "off-c", recordingHandler(runs), { mode: "off" })
        yield* Effect.sleep(3 * FAST.staleAfter)
        assert.isTrue(Option.isNone(yield* consumerRow(schema, "off-c")), "no consumers row in mode off")
        const presence = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM pg_stat_activity WHERE starts_with(application_name, ${`${c.app}-presence`})`
        assert.strictEqual(presence[0]!.n, 0, "no presence connections in mode off")
        assert.strictEqual(Option.getOrThrow(yield* messageState(schema, claim.id)).leased_by, "dead-3", "nothing reaped")
        assert.deepStrictEqual(runs, [])
        yield* c.stop
        yield* dead.close
      })
    ), { timeout: 30_000 })

  it.live("mode from LEASEHOLD_SESSION_LIVENESS: on, off, auto (default), anything else is refused naming the variable", () =>
    Effect.gen(function*() {
      const read = (env: Record<string, string>) =>
        ConsumerPresence.modeFromEnv.pipe(Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env }))), Effect.result)
      const unset = yield* read({})
      assert.strictEqual(unset._tag === "Success" ? unset.success : "failed", "auto")
      for (const mode of ["on", "off", "auto", " OFF "]) {
        const r = yield* read({ LEASEHOLD_SESSION_LIVENESS: mode })
        assert.strictEqual(r._tag, "Success")
        if (r._tag === "Success") assert.strictEqual(r.success, mode.trim().toLowerCase())
      }
      const bad = yield* read({ LEASEHOLD_SESSION_LIVENESS: "yes" })
      assert.strictEqual(bad._tag, "Failure")
      if (bad._tag === "Failure") {
        assert.strictEqual(bad.failure.variable, "LEASEHOLD_SESSION_LIVENESS")
        assert.include(bad.failure.message, "on, off or auto")
      }
    }))
})
