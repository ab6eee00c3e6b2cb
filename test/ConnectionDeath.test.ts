/**
 * Real failures on a real server, and how leasehold classifies them: a dead
 * connection or server is `ConnectionDead` (retryable), an error the server
 * answered with is `QueryFailed` (not retryable).
 *
 * This file runs its own PostgreSQL server (it stops and restarts it), never
 * the shared one from globalSetup.
 */
import { createServer } from "node:net"
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Context, Deferred, Effect, Exit, Fiber, Layer, Redacted } from "effect"
import { SqlClient, SqlError } from "effect/sql"
import { afterAll, beforeAll } from "vitest"
import { type PostgresServer, startPostgres } from "../dev/EmbeddedPostgres.ts"
import { redactSecrets } from "../src/internal/redact.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import { classify, classifySqlError, ConnectionDead, QueryFailed } from "../src/QueueError.ts"
import * as Finish from "./support/Finish.ts"
import { failureOf } from "./support/Failure.ts"

let server: PostgresServer

beforeAll(async () => {
  server = await startPostgres({ forTests: true })
})

afterAll(async () => {
  await server?.destroy()
})

let counter = 0
const uniqueName = (label: string) => `${label}_${++counter}_${Math.random().toString(36).slice(2, 8)}`

/** A pool on this file's server, as a value (so a test can hold two clients at once). */
const pgClient = (applicationName: string, maxConnections = 2) =>
  Effect.map(
    Layer.build(PgClient.layer({
      url: Redacted.make(server.url),
      maxConnections,
      applicationName,
      connectTimeout: "2 seconds"
    })),
    (ctx) => Context.get(ctx, PgClient.PgClient)
  )

/** A store on its own pool (tagged with `applicationName`) in a fresh schema, timed by the database. */
const storeOn = (applicationName: string) =>
  Effect.gen(function*() {
    const sql = yield* pgClient(applicationName)
    const schema = uniqueName("cd")
    const store = yield* PgQueueStore.make({ schema, clock: "database" }).pipe(
      Effect.provideService(SqlClient.SqlClient, sql)
    )
    return { sql, store, schema }
  })

/** The admin connection: locks, pg_stat_activity, pg_terminate_backend. */
const adminClient = () => pgClient(uniqueName("leasehold-admin"), 3)

/** Everything worth knowing about a failure, for assertion messages. */
const describeValue = (u: unknown): string => {
  if (SqlError.isSqlError(u)) {
    const cause = u.reason.cause as { readonly code?: unknown; readonly message?: unknown } | undefined
    return `SqlError(reason=${u.reason._tag}, code=${String(cause?.code)}, message=${u.reason.message ?? ""} / ${
      String(cause?.message)
    })`
  }
  if (u instanceof ConnectionDead || u instanceof QueryFailed) {
    return `${u._tag}(code=${String(u.code)}, message=${u.message})`
  }
  return String(u)
}


const assertConnectionDead = (error: unknown, codes: ReadonlyArray<string | undefined>): ConnectionDead => {
  assert.instanceOf(error, ConnectionDead, `expected ConnectionDead, got ${describeValue(error)}`)
  const dead = error as ConnectionDead
  assert.strictEqual(dead._tag, "ConnectionDead")
  assert.isTrue(dead.retryable)
  assert.include(codes, dead.code, `unexpected code: ${describeValue(error)}`)
  return dead
}

const assertQueryFailed = (error: unknown, code: string): QueryFailed => {
  assert.instanceOf(error, QueryFailed, `expected QueryFailed, got ${describeValue(error)}`)
  const failed = error as QueryFailed
  assert.strictEqual(failed._tag, "QueryFailed")
  assert.isFalse(failed.retryable)
  assert.strictEqual(failed.code, code, describeValue(error))
  return failed
}

/** Polls `probe` every 50 ms until it yields a value; dies after `withinMs`. */
const waitFor = <A, E, R>(what: string, probe: Effect.Effect<A | undefined, E, R>, withinMs = 10_000) =>
  Effect.gen(function*() {
    const deadline = Date.now() + withinMs
    while (true) {
      const value = yield* probe
      if (value !== undefined) return value
      if (Date.now() > deadline) return yield* Effect.die(new Error(`waited ${withinMs} ms for ${what}`))
      yield* Effect.sleep("50 millis")
    }
  })

/** Terminates a backend and waits (up to 5 s, server side) until it is gone. */
const terminate = (admin: SqlClient.SqlClient, pid: number) =>
  Effect.gen(function*() {
    const [row] = yield* admin<{ done: boolean }>`SELECT pg_terminate_backend(${pid}::int, 5000) AS done`
    assert.isTrue(row?.done, `backend ${pid} was not terminated`)
  })

/** A port nothing listens on (bound a moment ago, then closed). */
const closedPort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const probe = createServer()
    probe.on("error", reject)
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      probe.close(() => resolve(port))
    })
  })

/** Codes a dead connection may carry: a terminated backend, a closed or refused socket. */
const terminatedCodes = ["57P01", undefined]

describe("ConnectionDead vs QueryFailed on a real server", () => {
  it.live("a store operation whose backend is terminated mid-flight fails with ConnectionDead; the pool recovers", () =>
    Effect.gen(function*() {
      const app = uniqueName("leasehold-claim")
      const { schema, store } = yield* storeOn(app)
      const admin = yield* adminClient()
      const queue = "kill-claim"
      yield* store.send(queue, [{ task: "job", payload: { n: 1 } }])

      // Another session holds an exclusive lock, so the claim blocks on the server.
      const locked = yield* Deferred.make<void>()
      const unlock = yield* Deferred.make<void>()
      const holder = yield* admin.withTransaction(Effect.gen(function*() {
        yield* admin`LOCK TABLE ${admin(`${schema}.messages`)} IN ACCESS EXCLUSIVE MODE`
        yield* Deferred.succeed(locked, undefined)
        yield* Deferred.await(unlock)
      })).pipe(Effect.forkScoped)
      yield* Deferred.await(locked).pipe(Effect.timeout("10 seconds"))

      const claim = yield* store.claim(queue, { lease: "30 seconds", limit: 10, consumer: "c1" }).pipe(Effect.forkScoped)
      const pid = yield* waitFor(
        "the claim to block on the lock",
        Effect.map(
          admin<{ pid: number }>`
            SELECT pid FROM pg_stat_activity
            WHERE application_name = ${app} AND state = 'active' AND wait_event_type = 'Lock'`,
          (rows) => rows[0]?.pid
        )
      )
      yield* terminate(admin, pid)

      const exit = yield* Fiber.await(claim).pipe(Effect.timeout("10 seconds"))
      assert.isTrue(Exit.isFailure(exit), "the claim must fail")
      const error = yield* failureOf(exit)
      assertConnectionDead(error, terminatedCodes)
      assert.strictEqual((error as ConnectionDead).operation, "claim")

      yield* Deferred.succeed(unlock, undefined)
      yield* Fiber.join(holder).pipe(Effect.timeout("10 seconds"))

      // Same store, same pool: the next operations work, and the killed claim left nothing behind.
      const claims = yield* store.claim(queue, { lease: "30 seconds", limit: 10, consumer: "c2" })
      assert.strictEqual(claims.length, 1)
      assert.deepStrictEqual(claims[0]!.payload, { n: 1 })
      assert.strictEqual(claims[0]!.attempts, 1, "the terminated claim was rolled back")
      assert.isTrue(yield* Finish.ack(store, claims[0]!))
    }))

  it.live("a backend terminated inside withTransaction classifies as ConnectionDead, although the driver dies on ROLLBACK", () =>
    Effect.gen(function*() {
      const app = uniqueName("leasehold-tx")
      const { sql, store } = yield* storeOn(app)
      const admin = yield* adminClient()

      /** A transaction on the store's client whose backend is terminated after its first statement. */
      const killedTransaction = (rest: Effect.Effect<unknown, unknown>) =>
        sql.withTransaction(Effect.gen(function*() {
          const [row] = yield* sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`
          yield* terminate(admin, row!.pid)
          return yield* rest
        }))

      // The premise: the next statement fails, the ROLLBACK fails too, and the driver turns that
      // into a defect. classify must read SqlError defects, or this would escape as a crash.
      const raw = yield* Effect.exit(killedTransaction(sql`SELECT 1`)).pipe(Effect.timeout("10 seconds"))
      assert.isTrue(Exit.isFailure(raw), "the transaction must fail")
      if (Exit.isFailure(raw)) {
        const dies = raw.cause.reasons.filter(Cause.isDieReason).filter((r) => SqlError.isSqlError(r.defect))
        assert.isAbove(dies.length, 0, `expected a SqlError defect:\n${Cause.pretty(raw.cause)}`)
      }
      const classified = yield* failureOf(killedTransaction(sql`SELECT 1`).pipe(classify("test"), Effect.timeout("10 seconds")))
      assert.strictEqual(assertConnectionDead(classified, ["57P01"]).operation, "test")

      // Killed after the last statement: the COMMIT fails (the caller cannot know if it landed).
      const atCommit = yield* failureOf(killedTransaction(Effect.void).pipe(classify("test"), Effect.timeout("10 seconds")))
      assertConnectionDead(atCommit, terminatedCodes)

      // store.send joining the caller's transaction, single and batch (a savepoint).
      for (const messages of [[{ task: "job", payload: 1 }], [{ task: "job", payload: 1 }, { task: "job", payload: 2 }]]) {
        const queue = uniqueName("send-tx")
        let sendError: unknown = undefined
        const outer = yield* failureOf(
          killedTransaction(store.send(queue, messages).pipe(Effect.tapError((e) =>
            Effect.sync(() => {
              sendError = e
            })
          ))).pipe(classify("test"), Effect.timeout("10 seconds"))
        )
        assert.strictEqual(assertConnectionDead(sendError, ["57P01"]).operation, "send")
        assertConnectionDead(outer, ["57P01"])
        // The pool recovers and nothing was enqueued.
        assert.strictEqual((yield* store.stats(queue)).ready, 0)
        assert.strictEqual((yield* store.claim(queue, { lease: "30 seconds", limit: 10, consumer: "c" })).length, 0)
      }
    }))

  it.live("a stopped server fails operations promptly with ConnectionDead; after start the same store works again", () =>
    Effect.gen(function*() {
      const app = uniqueName("leasehold-stop")
      const { store } = yield* storeOn(app)
      const queue = "stop-start"
      yield* store.send(queue, [{ task: "job", payload: "before" }])

      yield* Effect.promise(() => server.stop())
      const started = Date.now()
      const error = yield* failureOf(store.stats(queue).pipe(Effect.timeout("10 seconds")))
      const elapsed = Date.now() - started
      yield* Effect.promise(() => server.start())

      assertConnectionDead(error, ["ECONNREFUSED", "ECONNRESET", "57P01", undefined])
      assert.isBelow(elapsed, 3_000, `failing took ${elapsed} ms`)

      // No rebuild: the pool reconnects on its own.
      const stats = yield* waitFor(
        "the store to work again after server.start()",
        store.stats(queue).pipe(Effect.catchTag("ConnectionDead", () => Effect.succeed(undefined)))
      )
      assert.strictEqual(stats.ready, 1)
      const claims = yield* store.claim(queue, { lease: "30 seconds", limit: 10, consumer: "c" })
      assert.deepStrictEqual(claims.map((c) => c.payload), ["before"])
    }).pipe(Effect.ensuring(Effect.promise(() => server.start()))))

  it.live("a restart while a query runs fails that query with ConnectionDead", () =>
    Effect.gen(function*() {
      const app = uniqueName("leasehold-restart")
      const { sql } = yield* storeOn(app)
      const admin = yield* adminClient()

      const sleeper = yield* sql`SELECT pg_sleep(30)`.pipe(classify("test"), Effect.forkScoped)
      yield* waitFor(
        "pg_sleep to run",
        Effect.map(
          admin<{ pid: number }>`
            SELECT pid FROM pg_stat_activity
            WHERE application_name = ${app} AND state = 'active' AND query LIKE '%pg_sleep%'`,
          (rows) => rows[0]?.pid
        )
      )
      const started = Date.now()
      yield* Effect.promise(() => server.restart())
      const exit = yield* Fiber.await(sleeper).pipe(Effect.timeout("15 seconds"))
      const elapsed = Date.now() - started
      assertConnectionDead(yield* failureOf(exit), terminatedCodes)
      assert.isBelow(elapsed, 15_000)

      // And the pool serves again.
      const rows = yield* waitFor(
        "the pool to serve after the restart",
        sql<{ one: number }>`SELECT 1 AS one`.pipe(
          classify("test"),
          Effect.catchTag("ConnectionDead", () => Effect.succeed(undefined))
        )
      )
      assert.strictEqual(rows[0]?.one, 1)
    }).pipe(Effect.ensuring(Effect.promise(() => server.start()))))

  it.live("errors the server answered with stay QueryFailed, with their SQLSTATE", () =>
    Effect.gen(function*() {
      const app = uniqueName("leasehold-qf")
      const { schema, sql } = yield* storeOn(app)
      const table = sql(`${schema}.messages`)

      assertQueryFailed(yield* failureOf(sql`SELEC 1`.pipe(classify("test"))), "42601")
      assertQueryFailed(yield* failureOf(sql`SELECT 1/0`.pipe(classify("test"))), "22012")
      assertQueryFailed(yield* failureOf(sql`SELECT 'abc'::int`.pipe(classify("test"))), "22P02")
      assertQueryFailed(
        yield* failureOf(sql`INSERT INTO ${table} (queue, task, payload, max_attempts) VALUES ('q', 't', '{}', 0)`.pipe(
          classify("test")
        )),
        "23514"
      )
      // Class 57 but not a dead connection: a statement timeout is the query's own fault.
      assertQueryFailed(
        yield* failureOf(
          sql.withTransaction(Effect.gen(function*() {
            yield* sql`SET LOCAL statement_timeout = '50ms'`
            yield* sql`SELECT pg_sleep(5)`
          })).pipe(classify("test"))
        ),
        "57014"
      )
      // A server error whose text happens to read like a dead connection is still the server's answer.
      assertQueryFailed(yield* failureOf(sql`SELECT 'connection closed'::int`.pipe(classify("test"))), "22P02")
      assertQueryFailed(
        yield* failureOf(
          sql`DO $$ BEGIN RAISE EXCEPTION 'upstream connection lost, socket hang up'; END $$`.pipe(classify("test"))
        ),
        "P0001"
      )
      // The connection survived all of that.
      const [row] = yield* sql<{ one: number }>`SELECT 1 AS one`
      assert.strictEqual(row?.one, 1)
    }))

  it.live("a connection the server refuses (53300: the role's connection limit) is ConnectionDead; a statement's 53300 is QueryFailed", () =>
    Effect.gen(function*() {
      const admin = yield* adminClient()
      const role = uniqueName("limited")
      yield* admin.unsafe(`CREATE ROLE ${role} LOGIN CONNECTION LIMIT 0`)
      yield* Effect.addFinalizer(() => admin.unsafe(`DROP ROLE IF EXISTS ${role}`).pipe(Effect.ignore))
      const sql = yield* Effect.map(
        Layer.build(PgClient.layer({
          url: Redacted.make(server.url.replace("postgres@", `${role}@`)),
          maxConnections: 1,
          applicationName: uniqueName("leasehold-refused"),
          connectTimeout: "2 seconds"
        })),
        (ctx) => Context.get(ctx, PgClient.PgClient)
      )
      // What the driver reports: the startup's ErrorResponse, operation "connect" (statements say "query").
      const raw = yield* failureOf(sql`SELECT 1`)
      assert.isTrue(SqlError.isSqlError(raw), describeValue(raw))
      const reason = (raw as SqlError.SqlError).reason
      assert.deepStrictEqual([reason._tag, reason.operation, (reason.cause as { code?: unknown }).code], ["UnknownError", "connect", "53300"])
      const refused = assertConnectionDead(yield* failureOf(sql`SELECT 1`.pipe(classify("claim"))), ["53300"])
      assert.include(refused.message, `too many connections for role "${role}"`)
      // Once the role may connect again, the same pool works: nothing was poisoned.
      yield* admin.unsafe(`ALTER ROLE ${role} CONNECTION LIMIT -1`)
      const [row] = yield* sql<{ one: number }>`SELECT 1 AS one`
      assert.strictEqual(row?.one, 1)
      // The same SQLSTATE raised by a statement is the statement's failure, not a refused connection.
      assertQueryFailed(
        yield* failureOf(sql`DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '53300', MESSAGE = 'raised'; END $$`.pipe(classify("test"))),
        "53300"
      )
    }))

  it.live("a connection failure never quotes the password", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(closedPort)
      const url = `postgres://leasehold:s3cret-pw@127.0.0.1:${port}/db`
      const sqlError = yield* Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`SELECT 1`
      }).pipe(
        Effect.provide(PgClient.layer({
          url: Redacted.make(url),
          maxConnections: 1,
          applicationName: "leasehold-redact",
          connectTimeout: "2 seconds"
        })),
        Effect.flip,
        Effect.timeout("10 seconds")
      )
      assert.isTrue(SqlError.isSqlError(sqlError), String(sqlError))
      const classified = classifySqlError("connect", sqlError)
      assertConnectionDead(classified, ["ECONNREFUSED"])
      for (const text of [classified.message, String(classified), JSON.stringify(classified)]) {
        assert.notInclude(text, "s3cret-pw")
      }

      // A driver message that does quote the URL is redacted too.
      const quoting = new SqlError.SqlError({
        reason: new SqlError.UnknownError({
          cause: Object.assign(new Error(`could not connect to ${url}?password=other-secret`), { code: "ECONNRESET" }),
          message: `connect ${url} failed`
        })
      })
      const redacted = classifySqlError("connect", quoting)
      assertConnectionDead(redacted, ["ECONNRESET"])
      for (const text of [redacted.message, String(redacted), JSON.stringify(redacted)]) {
        assert.notInclude(text, "s3cret-pw")
        assert.notInclude(text, "other-secret")
      }
      assert.include(redacted.message, `postgres://***@127.0.0.1:${port}/db`)
    }))

  it("redactSecrets removes URL credentials and password parameters, and nothing else", () => {
    assert.strictEqual(redactSecrets("postgres://u:pw@h:5432/db"), "postgres://***@h:5432/db")
    assert.strictEqual(redactSecrets("postgresql://only-user@h/db"), "postgresql://***@h/db")
    assert.strictEqual(
      redactSecrets("a postgres://a:1@h1/x and redis://:2@h2 end"),
      "a postgres://***@h1/x and redis://***@h2 end"
    )
    assert.strictEqual(redactSecrets("host=h password=s3cret user=u"), "host=h password=*** user=u")
    assert.strictEqual(redactSecrets("postgres://h/db?sslmode=require&PASSWORD=x&a=b"), "postgres://h/db?sslmode=require&PASSWORD=***&a=b")
    for (const clean of ["postgres://h:5432/db", "user@example.com wrote", "no secrets here", ""]) {
      assert.strictEqual(redactSecrets(clean), clean)
    }
  })

  it.effect("classify turns SqlError defects into typed errors, and leaves other defects alone", () =>
    Effect.gen(function*() {
      const dead = new SqlError.SqlError({
        reason: new SqlError.ConnectionError({ cause: new Error("Connection closed"), message: "closed" })
      })
      assertConnectionDead(yield* failureOf(Effect.die(dead).pipe(classify("x"))), [undefined])
      const terminated = new SqlError.SqlError({
        reason: new SqlError.UnknownError({ cause: { code: "57P01", message: "terminating connection" } })
      })
      assertConnectionDead(yield* failureOf(Effect.fail(terminated).pipe(classify("x"))), ["57P01"])
      const exit = yield* Effect.exit(Effect.die(new Error("boom")).pipe(classify("x")))
      assert.isTrue(Exit.isFailure(exit) && Cause.hasDies(exit.cause))
    }))
})
