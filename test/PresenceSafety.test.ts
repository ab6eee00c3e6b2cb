/**
 * Session liveness under the races that can make a message run twice, on real
 * PostgreSQL in real time:
 *
 * - heartbeats do not protect a consumer, and failing ones do not expose it:
 *   with its heartbeats refused, one presence backend killed leaves it safe
 *   (the other session holds its key, a replacement joins the same key, no
 *   heartbeat needed to advertise it); issue 8 item 4a, as the lock probe has it;
 * - a heartbeat that commits while a sweep runs keeps its consumer (item 4b);
 * - a presence probe whose answer is read late, after a long event-loop block,
 *   does not make the consumer give up its own healthy session (item 9);
 * - a consumer really cut off from the database stops its handlers before
 *   another consumer's reaper can release its claims (item 18);
 * - a consumer claims nothing, and advertises no key, until both presence
 *   sessions hold its key (with one, losing it would leave nothing holding it).
 *
 * Consumers that must be cut off or blocked at an exact point connect through
 * a TCP proxy of the test's own (test/support/PgProxy.ts).
 */
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Layer, Metric, Option, Redacted, Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as Consumer from "../src/Consumer.ts"
import * as ConsumerPresence from "../src/ConsumerPresence.ts"
import type { MessageId } from "../src/Message.ts"
import * as Migrations from "../src/Migrations.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import * as QueueMetrics from "../src/QueueMetrics.ts"
import * as PgProxy from "./support/PgProxy.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitFor } from "./support/Wait.ts"

const QUEUE = "safety"
/** Fast presence timing: stale after 1.5 s; a consumer stops its handlers 0.5 s before it could be reaped. */
const FAST = { heartbeat: 250, staleAfter: 1_500, reapEvery: 250 } as const
const rand = () => Math.random().toString(36).slice(2, 8)

const count = (metric: Metric.Metric<number, Metric.CounterState<number>>) =>
  Effect.map(Metric.value(metric), (state) => Number(state.count))

/** The test's own client, in a fresh migrated schema dropped afterwards. */
const withSchema = <A, E>(f: (schema: string) => Effect.Effect<A, E, SqlClient.SqlClient | PgClient.PgClient | Scope.Scope>) => {
  const schema = PgTest.uniqueSchema("safe")
  return Effect.scoped(Effect.gen(function*() {
    yield* Migrations.run({ schema })
    return yield* f(schema)
  })).pipe(
    Effect.provide(PgTest.dropSchemaOnRelease(schema).pipe(Layer.provideMerge(PgTest.clientLayer({ maxConnections: 6 }))))
  )
}

const messageState = (schema: string, id: MessageId) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ leased_by: string | null; lease_token: string | null; lease_expiries: number }>`
        SELECT leased_by, lease_token::text, lease_expiries FROM ${sql(`${schema}.messages`)} WHERE id = ${id}::bigint`,
      (rows) => Option.fromNullishOr(rows[0])
    ))

const consumerRow = (schema: string, id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ lock_key: number | null; backend_pid: number | null; age_ms: number }>`
        SELECT lock_key, backend_pid, (extract(epoch FROM now() - heartbeat_at) * 1000)::float8 AS age_ms
        FROM ${sql(`${schema}.consumers`)} WHERE id = ${id}`,
      (rows) => Option.fromNullishOr(rows[0])
    ))

/** Backends holding presence lock `key` of `schema`. */
const lockHolders = (schema: string, key: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ pid: number }>`
        SELECT pid FROM pg_locks
        WHERE locktype = 'advisory' AND granted AND objsubid = 2
          AND classid::bigint = ${ConsumerPresence.classKey(schema)}::bigint AND objid::bigint = ${key}::bigint`,
      (rows) => rows.map((r) => r.pid)
    ))

/** Backends holding any presence lock of `schema`. */
const presenceLocks = (schema: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ pid: number }>`
        SELECT pid FROM pg_locks
        WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid::bigint = ${ConsumerPresence.classKey(schema)}::bigint`,
      (rows) => rows.map((r) => r.pid)
    ))

/** A consumer's row advertising a lock that its two presence sessions hold (one the row names): registered with session liveness. */
const registered = (schema: string, id: string, except?: number) =>
  waitFor(
    `${id} to be registered with its lock advertised`,
    Effect.gen(function*() {
      const row = yield* consumerRow(schema, id)
      if (Option.isNone(row) || row.value.lock_key === null || row.value.backend_pid === null) return Option.none()
      if (row.value.backend_pid === except) return Option.none()
      const holders = yield* lockHolders(schema, row.value.lock_key)
      return holders.length === 2 && holders.includes(row.value.backend_pid) ? Option.some(row.value) : Option.none()
    }),
    15_000
  )

/** One handler run, with when it started and when (if) it was interrupted. */
interface Run {
  readonly id: string
  readonly consumer: string
  readonly startedAt: number
  interruptedAt: number | undefined
  endedAt: number | undefined
}

/** Records runs; a run on a consumer in `holdOn` waits until interrupted, others end at once. */
const recordingHandler = (runs: Array<Run>, holdOn: ReadonlySet<string>): Consumer.Handler => (message, context) =>
  Effect.suspend(() => {
    const run: Run = { id: message.id, consumer: context.consumerId, startedAt: Date.now(), interruptedAt: undefined, endedAt: undefined }
    runs.push(run)
    return (holdOn.has(context.consumerId) ? Effect.never : Effect.void).pipe(
      Effect.andThen(Effect.sync(() => {
        run.endedAt = Date.now()
      })),
      Effect.onInterrupt(() =>
        Effect.sync(() => {
          run.interruptedAt = Date.now()
        })
      )
    )
  })

/**
 * A real consumer with session liveness on a pool of its own named `app`
 * (presence session `<app>-presence`, heartbeat pool `<app>-presence-pool`),
 * connected to `url` (the test server, or a proxy in front of it).
 */
const startConsumer = (
  schema: string,
  consumerId: string,
  handler: Consumer.Handler,
  url = PgTest.databaseUrl(),
  app = `safe-${consumerId}-${rand()}`
) =>
  Effect.gen(function*() {
    const scope = yield* Scope.fork(yield* Scope.Scope)
    const layer = Consumer.layer(handler, {
      queues: [QUEUE],
      consumerId,
      lease: "30 seconds",
      pollInterval: "100 millis",
      shutdownGrace: "1 second"
    }).pipe(
      Layer.provide(ConsumerPresence.layerPg({ schema, ...FAST })),
      Layer.provide(PgQueueStore.layer({ schema, clock: "database" })),
      Layer.provide(PgClient.layer({ url: Redacted.make(url), maxConnections: 4, applicationName: app }))
    )
    yield* Layer.buildWithScope(layer, scope)
    return { consumerId, app, stop: Scope.close(scope, Exit.void) }
  })

const send = (schema: string) =>
  Effect.scoped(Effect.gen(function*() {
    const store = yield* PgQueueStore.make({ schema, migrate: false, leasePool: false })
    const [sent] = yield* store.send(QUEUE, [{ task: "job", payload: {} }])
    return sent!.id
  }))

describe("session liveness races (real PostgreSQL, real time)", () => {
  it.live(
    "item 4a: with its heartbeats refused, a consumer whose presence backend is killed keeps its claim: the other session holds its key, the replacement joins it",
    () =>
      withSchema((schema) =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const runs: Array<Run> = []
          const handler = recordingHandler(runs, new Set(["live-a"]))
          const a = yield* startConsumer(schema, "live-a", handler)
          const first = yield* registered(schema, "live-a")
          const id = yield* send(schema)
          yield* waitFor("A to start the message", Effect.sync(() => Option.fromNullishOr(runs.find((r) => r.consumer === "live-a"))))
          const b = yield* startConsumer(schema, "live-b", handler)
          yield* registered(schema, "live-b")
          const token = Option.getOrThrow(yield* messageState(schema, id)).lease_token

          // A's heartbeats are refused from now on (its presence sessions can still be reopened).
          yield* sql.unsafe(`
            CREATE FUNCTION ${schema}.refuse_heartbeat() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF NEW.id = 'live-a' THEN RAISE EXCEPTION 'heartbeat refused by the test'; END IF;
              RETURN NEW;
            END $$`)
          yield* sql.unsafe(`
            CREATE TRIGGER refuse_heartbeat BEFORE INSERT OR UPDATE ON ${schema}.consumers
            FOR EACH ROW EXECUTE FUNCTION ${schema}.refuse_heartbeat()`)
          // ...and one presence session ends, then the other once the first is replaced.
          const key = first.lock_key!
          const before = yield* lockHolders(schema, key)
          for (const pid of before) {
            yield* sql`SELECT pg_terminate_backend(${pid}::int)`
            yield* waitFor(
              "A to replace the session, on its key",
              Effect.map(lockHolders(schema, key), (pids) => pids.length === 2 && !pids.includes(pid) ? Option.some(pids) : Option.none()),
              10_000
            )
          }
          // Several reapAfter bounds with B's reaper looking, A's heartbeat going stale meanwhile.
          yield* Effect.sleep(2 * FAST.staleAfter)
          assert.isAbove(Option.getOrThrow(yield* consumerRow(schema, "live-a")).age_ms, FAST.staleAfter, "A's heartbeat is stale")
          const state = Option.getOrThrow(yield* messageState(schema, id))
          assert.strictEqual(state.leased_by, "live-a", "the claim stays A's")
          assert.strictEqual(state.lease_token, token)
          assert.strictEqual(state.lease_expiries, 0)
          assert.deepStrictEqual(runs.map((r) => [r.consumer, r.interruptedAt]), [["live-a", undefined]], "B never ran it; A's handler runs on")
          yield* sql.unsafe(`DROP TRIGGER refuse_heartbeat ON ${schema}.consumers`)
          yield* b.stop
          yield* a.stop
        })
      ),
    { timeout: 45_000 }
  )

  it.live("item 4b: a heartbeat committing while a sweep runs keeps its consumer and its claims", () =>
    withSchema((schema) =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const consumers = sql(`${schema}.consumers`)
        // "slow-1": no lock held (its session is being replaced), heartbeat stale, a claim under lease.
        const [key] = yield* sql<{ key: number }>`SELECT nextval(${`${schema}.consumer_lock_keys`}::regclass)::int AS key`
        yield* sql`
          INSERT INTO ${consumers} (id, host, pid, lock_key, backend_pid, heartbeat_at)
          VALUES ('slow-1', 'test-host', 4242, ${key!.key}::int, 1, now() - interval '1 hour')`
        const claim = yield* Effect.scoped(Effect.gen(function*() {
          const store = yield* PgQueueStore.make({ schema, migrate: false, leasePool: false })
          yield* store.send(QUEUE, [{ task: "job", payload: {} }])
          const [claim] = yield* store.claim(QUEUE, { lease: "30 seconds", limit: 1, consumer: "slow-1" })
          return claim!
        }))

        // Its heartbeat is under way: the row is updated, not yet committed.
        const commit = yield* Deferred.make<void>()
        const updated = yield* Deferred.make<void>()
        const heartbeat = yield* Effect.forkChild(sql.withTransaction(Effect.gen(function*() {
          yield* sql`UPDATE ${consumers} SET heartbeat_at = now() WHERE id = 'slow-1'`
          yield* Deferred.succeed(updated, undefined)
          yield* Deferred.await(commit)
        })))
        yield* Deferred.await(updated)

        // A sweep starts meanwhile: it reads the stale row version.
        const presence = yield* ConsumerPresence.make({ schema, ...FAST, migrate: false })
        const sweep = yield* Effect.forkChild(presence.sweep("someone"))
        // Either it finished (it skipped the row being written), or it waits for that row: then the
        // heartbeat commits under it.
        yield* waitFor(
          "the sweep to finish or to wait for the heartbeat's row lock",
          Effect.gen(function*() {
            if (sweep.pollUnsafe() !== undefined) return Option.some("done")
            const [waiting] = yield* sql<{ n: number }>`
              SELECT count(*)::int AS n FROM pg_stat_activity
              WHERE wait_event_type = 'Lock' AND position(${schema} IN query) > 0 AND position('consumers' IN query) > 0`
            return (waiting?.n ?? 0) > 0 ? Option.some("waiting") : Option.none()
          })
        )
        yield* Deferred.succeed(commit, undefined)
        yield* Fiber.join(heartbeat)
        const reaped = yield* Fiber.join(sweep)

        assert.deepStrictEqual(reaped, [], "a consumer whose heartbeat committed during the sweep is alive")
        const row = yield* consumerRow(schema, "slow-1")
        assert.isTrue(Option.isSome(row), "its row is kept")
        assert.isBelow(Option.getOrThrow(row).age_ms, 5_000)
        const state = Option.getOrThrow(yield* messageState(schema, claim.id))
        assert.strictEqual(state.leased_by, "slow-1", "its claim stays its own")
        assert.strictEqual(state.lease_token, claim.leaseToken)
        assert.strictEqual(state.lease_expiries, 0)
      })
    ), { timeout: 30_000 })

  it.live("item 9: a probe answered late after a long event-loop block does not make a consumer give up its own session", () =>
    withSchema((schema) =>
      Effect.gen(function*() {
        const proxy = yield* PgProxy.make(PgTest.databaseUrl())
        const runs: Array<Run> = []
        const a = yield* startConsumer(schema, "blocked-a", recordingHandler(runs, new Set()), proxy.url)
        const before = yield* registered(schema, "blocked-a")
        const holdersBefore = [...(yield* lockHolders(schema, before.lock_key!))].sort()
        const sessionsBefore = proxy.connections().filter((c) => c.applicationName === `${a.app}-presence`).length
        assert.strictEqual(sessionsBefore, 2)

        // The next statement on the presence session (a probe) is sent, then the whole process
        // blocks for 3 s (longer than the probe's 2 s timeout) while the answer waits to be read.
        let blocked: PgProxy.ProxiedConnection | undefined
        let probesAfter = 0
        proxy.onClientChunk = (connection) => {
          if (connection.applicationName !== `${a.app}-presence`) return
          if (blocked === undefined) {
            blocked = connection
            const until = Date.now() + 3_000
            while (Date.now() < until) {
              // a CPU-bound handler holding the event loop
            }
          } else if (connection === blocked) {
            probesAfter += 1
          }
        }
        // The session either goes on answering probes, or is given up (closed).
        yield* waitFor(
          "three more probes on the same session, or that session closed",
          Effect.sync(() => blocked !== undefined && (blocked.closed || probesAfter >= 3) ? Option.some(true) : Option.none()),
          15_000
        )
        proxy.onClientChunk = undefined
        assert.isFalse(blocked!.closed, "the consumer closed its own healthy presence session")
        assert.deepStrictEqual([...(yield* lockHolders(schema, before.lock_key!))].sort(), holdersBefore, "the same backends hold the same lock")
        const after = Option.getOrThrow(yield* consumerRow(schema, "blocked-a"))
        assert.strictEqual(after.lock_key, before.lock_key)
        assert.strictEqual(after.backend_pid, before.backend_pid)
        yield* a.stop
      })
    ), { timeout: 30_000 })

  it.live("item 18: a consumer cut off from the database stops its handlers before another consumer's reaper releases its claims", () =>
    withSchema((schema) =>
      Effect.gen(function*() {
        const proxy = yield* PgProxy.make(PgTest.databaseUrl())
        const stopsBefore = yield* count(QueueMetrics.leaseLostBy("presence-lost"))
        const reapedBefore = yield* count(QueueMetrics.reaped)
        const runs: Array<Run> = []
        const handler = recordingHandler(runs, new Set(["cut-a"]))
        const a = yield* startConsumer(schema, "cut-a", handler, proxy.url)
        yield* registered(schema, "cut-a")
        const id = yield* send(schema)
        yield* waitFor("A to start the message", Effect.sync(() => Option.fromNullishOr(runs.find((r) => r.consumer === "cut-a"))))
        const b = yield* startConsumer(schema, "live-b", handler)
        yield* registered(schema, "live-b")

        // Every connection of A is dropped (the server ends its sessions, so its lock is free) and
        // none can be made again; the server runs on for everyone else.
        const cutAt = Date.now()
        proxy.cut(a.app)
        const rerun = yield* waitFor(
          "B to run the message released by its reaper",
          Effect.sync(() => Option.fromNullishOr(runs.find((r) => r.consumer === "live-b"))),
          15_000
        )
        const original = runs.find((r) => r.consumer === "cut-a")!
        yield* Effect.log(
          `cut-off consumer stopped its handler ${original.interruptedAt! - cutAt} ms after the cut; ` +
            `the other consumer ran the message ${rerun.startedAt - cutAt} ms after it`
        )
        assert.isDefined(original.interruptedAt, "A's handler ran on while B ran the same message")
        assert.isBelow(original.interruptedAt!, rerun.startedAt, "A stopped before B started")
        assert.strictEqual(rerun.id, id)
        assert.strictEqual((yield* count(QueueMetrics.leaseLostBy("presence-lost"))) - stopsBefore, 1)
        assert.strictEqual((yield* count(QueueMetrics.reaped)) - reapedBefore, 1)
        yield* waitFor("B to ack the message", Effect.map(messageState(schema, id), (s) => Option.isNone(s) ? Option.some(true) : Option.none()))

        proxy.restore()
        yield* b.stop
        yield* a.stop
      })
    ), { timeout: 45_000 })

  it.live("a consumer whose second presence session cannot come up claims nothing and advertises no key until it does", () =>
    withSchema((schema) =>
      Effect.gen(function*() {
        const proxy = yield* PgProxy.make(PgTest.databaseUrl())
        const app = `safe-one-${rand()}`
        // One presence session gets through; the next is accepted and never answered, until restored.
        proxy.limit(`${app}-presence`, 1)
        const id = yield* send(schema)
        const runs: Array<Run> = []
        const starting = yield* Effect.forkChild(startConsumer(schema, "one-a", recordingHandler(runs, new Set()), proxy.url, app))
        yield* waitFor(
          "one presence session to hold a lock, and the row to be written after it",
          Effect.gen(function*() {
            const holders = yield* presenceLocks(schema)
            const row = yield* consumerRow(schema, "one-a")
            return holders.length === 1 && Option.isSome(row) ? Option.some(true) : Option.none()
          }),
          15_000
        )
        // A few heartbeats (every 250 ms) with one session: none advertises its key, nothing is claimed.
        yield* Effect.sleep(1_000)
        assert.isNull(Option.getOrThrow(yield* consumerRow(schema, "one-a")).lock_key, "a key held by one session is not advertised")
        assert.isUndefined(starting.pollUnsafe(), "the consumer started with one presence session")
        assert.deepStrictEqual(runs, [])
        assert.strictEqual(Option.getOrThrow(yield* messageState(schema, id)).leased_by, null, "nothing claimed")

        proxy.restore()
        const a = yield* Fiber.join(starting)
        const row = yield* registered(schema, "one-a")
        assert.isNotNull(row.lock_key)
        yield* waitFor("A to run the message", Effect.sync(() => Option.fromNullishOr(runs.find((r) => r.id === id))))
        yield* a.stop
      })
    ), { timeout: 45_000 })
})
