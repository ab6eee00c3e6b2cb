/**
 * The pooler settings (LEASEHOLD_POOLER, LEASEHOLD_DIRECT_DATABASE_URL) and
 * what they change, through a real PgBouncer in transaction mode: no LISTEN
 * without the direct URL (consumers poll), LISTEN on the direct URL, and
 * migrations racing through the pooler (their transaction-scoped lock holds
 * there, as one transaction runs on one backend), and the CLI through it.
 */
import { assert, describe, it } from "@effect/vitest"
import { execFile } from "node:child_process"
import { resolve } from "node:path"
import { promisify } from "node:util"
import { PgClient } from "@effect/sql-pg"
import { ConfigProvider, Deferred, Effect, Fiber, Layer, Option, Redacted } from "effect"
import { Reactivity } from "effect/reactivity"
import { SqlClient } from "effect/sql"
import * as Migrations from "../src/Migrations.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import * as Pooler from "../src/Pooler.ts"
import * as QueueConfig from "../src/QueueConfig.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as PgBouncer from "./support/PgBouncer.ts"
import * as PgTest from "./support/PgTest.ts"
import { requireTool } from "./support/RequireTool.ts"

const pgbouncer = requireTool("pgbouncer", "the PgBouncer tests of Pooler.test.ts")

const withEnv = (env: Record<string, string>) => Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnvRecord(env)))

describe("Pooler settings", () => {
  it.effect("LEASEHOLD_POOLER: none by default, session or transaction; anything else refused naming the variable and the rule", () =>
    Effect.gen(function*() {
      assert.strictEqual(yield* QueueConfig.poolerFromEnv.pipe(withEnv({})), "none")
      assert.strictEqual(yield* QueueConfig.poolerFromEnv.pipe(withEnv({ LEASEHOLD_POOLER: " Transaction " })), "transaction")
      assert.strictEqual(yield* QueueConfig.poolerFromEnv.pipe(withEnv({ LEASEHOLD_POOLER: "session" })), "session")
      const e = yield* Effect.flip(QueueConfig.poolerFromEnv.pipe(withEnv({ LEASEHOLD_POOLER: "pgbouncer" })))
      assert.deepStrictEqual([e.variable, e.rule], ["LEASEHOLD_POOLER", "none, session or transaction"])
    }))

  it.effect("LEASEHOLD_DIRECT_DATABASE_URL: optional, kept redacted; not a postgres URL is refused without showing it", () =>
    Effect.gen(function*() {
      assert.isTrue(Option.isNone(yield* QueueConfig.directDatabaseUrl.pipe(withEnv({}))))
      assert.isTrue(Option.isNone(yield* QueueConfig.directDatabaseUrl.pipe(withEnv({ LEASEHOLD_DIRECT_DATABASE_URL: " " }))))
      const url = yield* QueueConfig.directDatabaseUrl.pipe(withEnv({ LEASEHOLD_DIRECT_DATABASE_URL: "postgres://u:s3cret@db:5432/app" }))
      assert.strictEqual(Redacted.value(Option.getOrThrow(url)), "postgres://u:s3cret@db:5432/app")
      assert.notInclude(String(Option.getOrThrow(url)), "s3cret")
      const e = yield* Effect.flip(QueueConfig.directDatabaseUrl.pipe(withEnv({ LEASEHOLD_DIRECT_DATABASE_URL: "mysql://u:s3cret@db/app" })))
      assert.strictEqual(e.variable, "LEASEHOLD_DIRECT_DATABASE_URL")
      assert.match(e.rule, /PostgreSQL URL/)
      assert.notInclude(e.message, "s3cret")
    }))

  it.effect("pgLayerFromEnv provides the pooler setting read from the environment", () =>
    Effect.gen(function*() {
      const [pooler, prepare] = yield* Effect.scoped(Effect.map(
        Layer.build(QueueConfig.pgLayerFromEnv({ maxConnections: 1 })),
        (context) => Layer.succeedContext(context)
      ).pipe(Effect.flatMap((layer) =>
        Effect.all([Pooler.current, Effect.map(PgClient.PgClient, (pg) => pg.config.prepare)]).pipe(Effect.provide(layer))
      ))).pipe(
        withEnv({
          LEASEHOLD_DATABASE_URL: PgTest.databaseUrl(),
          LEASEHOLD_POOLER: "transaction",
          LEASEHOLD_DIRECT_DATABASE_URL: PgTest.databaseUrl()
        })
      )
      assert.strictEqual(pooler.mode, "transaction")
      assert.strictEqual(prepare, false, "no prepared statements through a transaction-mode pooler")
      assert.strictEqual(Redacted.value(Option.getOrThrow(pooler.direct)), PgTest.databaseUrl())
      // Nothing in context: a direct connection is assumed.
      assert.strictEqual((yield* Pooler.current).mode, "none")
    }))
})

/** A store over a transaction-mode PgBouncer, declared, with or without the direct URL. */
const pooledStore = (bouncer: PgBouncer.PgBouncer, direct: boolean) => {
  const schema = PgTest.uniqueSchema("pl")
  return Layer.build(
    PgQueueStore.layer({ schema }).pipe(
      Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
      Layer.provideMerge(QueueConfig.pgLayer(Redacted.make(bouncer.url), {
        pooler: "transaction",
        maxConnections: 4,
        directUrl: direct ? Redacted.make(PgTest.databaseUrl()) : undefined
      }))
    )
  )
}

describe.skipIf(!pgbouncer.runs)(`through PgBouncer in transaction mode${pgbouncer.skipNote}`, () => {
  it.live("wake-ups: none without the direct URL (consumers poll), at once with it", () =>
    Effect.scoped(Effect.gen(function*() {
      const bouncer = yield* PgBouncer.acquire({ mode: "transaction", serverUrl: PgTest.databaseUrl() })
      for (const direct of [false, true]) {
        yield* Effect.scoped(Effect.gen(function*() {
          const context = yield* pooledStore(bouncer, direct)
          const store = Layer.succeedContext(context)
          yield* Effect.gen(function*() {
            const s = yield* QueueStore
            const wake = yield* s.sends(["w"])
            const woken = yield* Effect.forkChild(wake)
            yield* s.send("w", [{ task: "t", payload: 1 }])
            const exit = yield* Fiber.await(woken).pipe(Effect.timeoutOption(direct ? 10_000 : 1_500))
            assert.strictEqual(Option.isSome(exit), direct, direct ? "woken through the direct URL" : "no wake-up through the pooler")
          }).pipe(Effect.provide(store))
        }))
      }
    })), 60_000)

  it.live("prepared statements: one prepared on a backend fails in a transaction that runs on another; unprepared, it runs", () =>
    Effect.scoped(Effect.gen(function*() {
      const bouncer = yield* PgBouncer.acquire({ mode: "transaction", serverUrl: PgTest.databaseUrl() })
      const attempt = (prepare: boolean) =>
        Effect.scoped(Effect.gen(function*() {
          const connect = PgClient.makeClient({ url: Redacted.make(bouncer.url), prepare }).pipe(Effect.provide(Reactivity.layer))
          const a = (yield* connect).withoutTransforms()
          const c = (yield* connect).withoutTransforms()
          const [first] = yield* a<{ pid: number }>`SELECT pg_backend_pid() AS pid, ${1}::int AS v`
          // C takes A's backend (PgBouncer hands out the last used first) and holds it in a transaction,
          // so A's transaction runs on another backend, where A's statement was never prepared.
          const held = yield* Deferred.make<number>()
          const hold = yield* Effect.forkChild(c.withTransaction(Effect.gen(function*() {
            const [row] = yield* c<{ pid: number }>`SELECT pg_backend_pid() AS pid`
            yield* Deferred.succeed(held, row!.pid)
            yield* c`SELECT pg_sleep(0.5)`
          })))
          assert.strictEqual(yield* Deferred.await(held), first!.pid, "C holds the backend A used")
          const result = yield* Effect.result(a.withTransaction(a<{ pid: number }>`SELECT pg_backend_pid() AS pid, ${2}::int AS v`))
          yield* Fiber.await(hold)
          return result
        }))
      const prepared = yield* attempt(true)
      assert.strictEqual(prepared._tag, "Failure", "a named statement missing on the transaction's backend aborts it")
      const unprepared = yield* attempt(false)
      assert.strictEqual(unprepared._tag, "Success", "parsed where it runs")
    })), 60_000)

  it.live("migrations racing through the pooler: one migrates, the others find nothing to do", () =>
    Effect.scoped(Effect.gen(function*() {
      const bouncer = yield* PgBouncer.acquire({ mode: "transaction", serverUrl: PgTest.databaseUrl() })
      const schema = PgTest.uniqueSchema("plm")
      const layer = PgTest.dropSchemaOnRelease(schema).pipe(
        Layer.provideMerge(QueueConfig.pgLayer(Redacted.make(bouncer.url), { pooler: "transaction", maxConnections: 6 }))
      )
      yield* Effect.gen(function*() {
        const runs = yield* Effect.all(Array.from({ length: 5 }, () => Migrations.run({ schema })), { concurrency: "unbounded" })
        // Each migration ran exactly once, whichever run it was.
        assert.strictEqual(runs.reduce((n, ran) => n + ran.length, 0), Migrations.known.length)
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(`${schema}.migrations`)}`
        assert.strictEqual(rows[0]?.n, Migrations.known.length)
      }).pipe(Effect.provide(layer))
    })), 60_000)
})

describe.skipIf(!pgbouncer.runs)(`the CLI through PgBouncer in transaction mode${pgbouncer.skipNote}`, () => {
  it.live("migrate, send and stats with LEASEHOLD_POOLER=transaction", () =>
    Effect.scoped(Effect.gen(function*() {
      const bouncer = yield* PgBouncer.acquire({ mode: "transaction", serverUrl: PgTest.databaseUrl() })
      const schema = PgTest.uniqueSchema("plc")
      const env: NodeJS.ProcessEnv = {
        PATH: process.env["PATH"],
        LEASEHOLD_DATABASE_URL: bouncer.url,
        LEASEHOLD_POOLER: "transaction",
        LEASEHOLD_SCHEMA: schema
      }
      const cli = (...args: Array<string>) =>
        Effect.promise(() => promisify(execFile)(process.execPath, [resolve("src/bin/leasehold.ts"), ...args], { env, timeout: 30_000 }))
      yield* Effect.addFinalizer(() =>
        Effect.flatMap(SqlClient.SqlClient, (sql) => sql`DROP SCHEMA IF EXISTS ${sql(schema)} CASCADE`).pipe(
          Effect.provide(PgTest.clientLayer({ maxConnections: 1 })),
          Effect.ignore
        )
      )
      assert.include((yield* cli("migrate")).stdout, `schema ${schema} is up to date`)
      const sent = JSON.parse((yield* cli("send", "cli-pooled", "greet", "{\"to\":\"ada\"}")).stdout) as { id: string }
      assert.isString(sent.id)
      const stats = JSON.parse((yield* cli("stats", "cli-pooled", "--json")).stdout) as Array<{ queue: string; ready: number }>
      assert.deepInclude(stats[0], { queue: "cli-pooled", ready: 1 })
    })), 60_000)
})
