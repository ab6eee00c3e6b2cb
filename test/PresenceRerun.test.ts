/**
 * The way from a dead consumer to the rerun of its message, on real PostgreSQL in real time,
 * the two steps that used to wait on something else than the reaper's own rule:
 *
 * - a presence backend notices its client gone in the middle of a probe (each probe sleeps on
 *   the server) within `client_connection_check_interval`, so the dead consumer's lock is free
 *   at once, not when the probe ends;
 * - the reaper's release announces the message's queue on the send channel, so an idle consumer
 *   of the queue that did not release it (another consumer's reaper did) runs it at once, not
 *   after its poll interval.
 *
 * What keeps a live consumer from being reaped (its server-side sessions hold its lock whatever
 * its event loop or its network does): test/ReaperProcess.test.ts, test/PresenceSafety.test.ts.
 */
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it } from "@effect/vitest"
import { Context, Deferred, Effect, Exit, Layer, Option, Redacted, Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as Consumer from "../src/Consumer.ts"
import * as ConsumerPresence from "../src/ConsumerPresence.ts"
import * as Migrations from "../src/Migrations.ts"
import * as PresenceSql from "../src/pg/presence.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import * as PoolerProof from "../src/presence/poolerProof.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as Session from "../src/presence/session.ts"
import * as PgProxy from "./support/PgProxy.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitFor } from "./support/Wait.ts"

const QUEUE = "rerun"
const rand = () => Math.random().toString(36).slice(2, 8)

/** The test's own client, in a fresh migrated schema dropped afterwards. */
const withSchema = <A, E>(f: (schema: string) => Effect.Effect<A, E, SqlClient.SqlClient | PgClient.PgClient | Scope.Scope>) => {
  const schema = PgTest.uniqueSchema("rerun")
  return Effect.scoped(Effect.gen(function*() {
    yield* Migrations.run({ schema })
    return yield* f(schema)
  })).pipe(
    Effect.provide(PgTest.dropSchemaOnRelease(schema).pipe(Layer.provideMerge(PgTest.clientLayer({ maxConnections: 4 }))))
  )
}

/** Rows of `sql` as an option: some when `f` says so. */
const check = <R extends object>(query: Effect.Effect<ReadonlyArray<R>, unknown>, f: (rows: ReadonlyArray<R>) => boolean) =>
  Effect.map(Effect.orDie(query), (rows) => (f(rows) ? Option.some(rows) : Option.none()))

/**
 * `store` with its `nextVisibleAt` completing `asked` once answered: an idle consumer asks it just
 * before its idle sleep (after a claim that found nothing).
 */
const askingNextVisible = <ROut, E, R>(store: Layer.Layer<ROut | QueueStore, E, R>, asked: Deferred.Deferred<void>) =>
  Layer.effectContext(Effect.gen(function*() {
    const context = yield* Layer.build(store)
    const inner = Context.get(context, QueueStore)
    return Context.add(context, QueueStore, {
      ...inner,
      nextVisibleAt: (queue: string) => Effect.tap(inner.nextVisibleAt(queue), () => Deferred.succeed(asked, undefined))
    })
  }))

describe("the rerun path (real PostgreSQL, real time)", () => {
  it.live("a presence backend notices its client gone mid-probe within the client check, not when the probe ends", () =>
    withSchema((schema) =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const proxy = yield* PgProxy.make(PgTest.databaseUrl())
        const ctx = PresenceSql.makeContext(sql.withoutTransforms(), schema, ConsumerPresence.classKey(schema), 2_000)
        const where = yield* PoolerProof.target({ url: Redacted.make(proxy.url) } as PgClient.PgClientConfig)
        const app = `cut-${rand()}`
        const opened = yield* Session.open({ ctx, where, appName: app, mode: "on" })
        assert.isFalse("_tag" in opened, "a presence session through the proxy")
        const session = opened as Session.Session
        const [setting] = yield* session.sql<{ v: string }>`SELECT current_setting('client_connection_check_interval') AS v`
        assert.strictEqual(setting?.v, `${PresenceSql.CLIENT_CHECK_MS}ms`)
        // A long probe (the keeper's sleeps 100 ms) whose backend is in it: the session's statement_timeout
        // (5 s) ends it, so without the client check the lock would be free about 5 s after the cut.
        yield* Effect.forkChild(Effect.ignore(PresenceSql.probe(session.sql, 20_000)))
        yield* waitFor(
          "the probe to sleep on the server",
          check(sql<{ pid: number }>`SELECT pid FROM pg_stat_activity WHERE pid = ${session.backendPid}::int AND wait_event = 'PgSleep'`, (r) => r.length === 1)
        )
        // The client's socket is closed (as a SIGKILL closes it): the backend must end, and its lock be free,
        // long before its probe would have ended.
        const cutAt = Date.now()
        proxy.cut(app)
        yield* waitFor(
          "the lock to be free",
          check(
            sql<{ pid: number }>`
              SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2
                AND classid::bigint = ${ctx.lockClass}::bigint AND objid::bigint = ${session.lockKey}::bigint`,
            (r) => r.length === 0
          ),
          { timeoutMs: 10_000 }
        )
        const freeMs = Date.now() - cutAt
        yield* Effect.log(`presence lock free ${freeMs} ms after the client's socket closed mid-probe`)
        // 25 ms by the check; the bound leaves a loaded machine room and stays well under the probe's 5 s.
        assert.isBelow(freeMs, 2_000, "freed by the client check, not by the end of the probe")
        yield* Session.close(session)
        proxy.restore()
      })
    ), { timeout: 40_000 })

  it.live("a release announces the queue: an idle consumer that did not release the message runs it at once, not after its poll", () =>
    withSchema((schema) =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const store = yield* PgQueueStore.make({ schema, migrate: false, leasePool: false })
        // A dead consumer's claim: its row advertises a key that no session holds.
        const [key] = yield* sql<{ k: number }>`SELECT nextval(${`${schema}.consumer_lock_keys`}::regclass)::int AS k`
        yield* sql`INSERT INTO ${sql(`${schema}.consumers`)} (id, host, pid, lock_key) VALUES ('dead', 'test-host', 4242, ${key!.k}::int)`
        const [sent] = yield* store.send(QUEUE, [{ task: "job", payload: {} }])
        const [claim] = yield* store.claim(QUEUE, { lease: "30 seconds", limit: 1, consumer: "dead" })
        assert.strictEqual(claim?.id, sent!.id)

        // B: no presence of its own (no reaper to wake it), polling once a minute; its next look
        // at the queue would be the lease's end (30 s): only an announcement wakes it in time.
        const runs: Array<{ readonly id: string; readonly at: number }> = []
        const idle = yield* Deferred.make<void>()
        const scope = yield* Scope.fork(yield* Scope.Scope)
        yield* Layer.buildWithScope(
          Consumer.layer((message) => Effect.sync(() => void runs.push({ id: message.id, at: Date.now() })), {
            queues: [QUEUE],
            consumerId: "idle-b",
            pollInterval: "60 seconds"
          }).pipe(
            Layer.provide(askingNextVisible(PgQueueStore.layer({ schema, clock: "database" }), idle)),
            Layer.provide(PgClient.layer({ url: Redacted.make(PgTest.databaseUrl()), maxConnections: 2, applicationName: `idle-${rand()}` }))
          ),
          scope
        )
        // B is idle: it found the queue empty and asked when the next message becomes visible.
        yield* Deferred.await(idle).pipe(Effect.timeout(15_000))
        const presence = yield* ConsumerPresence.make({ schema, migrate: false })
        const releasedAt = Date.now()
        const reaped = yield* presence.sweep("someone")
        assert.deepStrictEqual(reaped.map((r) => r.messageId), [claim!.id])
        const run = yield* waitFor("B to run the released message", Effect.sync(() => Option.fromNullishOr(runs[0])), { timeoutMs: 10_000 })
        yield* Effect.log(`idle consumer ran the released message ${run.at - releasedAt} ms after the release`)
        assert.strictEqual(run.id, claim!.id)
        assert.isBelow(run.at - releasedAt, 10_000, "woken by the release's announcement, not by its poll or the lease")
        yield* Scope.close(scope, Exit.void)
      })
    ), { timeout: 40_000 })
})
