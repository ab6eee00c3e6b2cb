/**
 * One source of truth for the schema (issue 8, item 10): the README's worker,
 * run as documented with `LEASEHOLD_SCHEMA=myapp`, keeps its messages and its
 * consumers row in `myapp`, and creates nothing in `leasehold`. Each run works
 * in a database of its own, so "nothing in `leasehold`" is checked whole.
 */
import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Exit, Layer, Option, Scope } from "effect"
import { SqlClient } from "effect/sql"
import { sendWelcomeEmail } from "../examples/tasks.ts"
import { Consumer, ConsumerPresence, PgQueueStore, QueueConfig, Task } from "../src/index.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitFor } from "./support/Wait.ts"

/** A fresh database on the test server for the life of the scope; its URL. */
const freshDatabase = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const name = PgTest.uniqueSchema("schemadb")
  yield* Effect.acquireRelease(
    sql.unsafe(`CREATE DATABASE ${name}`),
    () => sql.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).pipe(Effect.ignore)
  )
  const url = new URL(PgTest.databaseUrl())
  url.pathname = `/${name}`
  return url.toString()
})

/** The worker of the README (examples/worker.ts), layer for layer. */
const ReadmeWorker = Consumer.layerFromEnv(Task.dispatcher(Task.implement(sendWelcomeEmail, () => Effect.void))).pipe(
  Layer.provide(ConsumerPresence.layerFromEnv()),
  Layer.provide(PgQueueStore.layer()),
  Layer.provide(QueueConfig.pgLayerFromEnv())
)

/** Schemas of the database at `url` that hold a table, with their tables. */
const tablesByUrl = (url: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ schema: string; table: string }>`
      SELECT table_schema AS schema, table_name AS table FROM information_schema.tables
      WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2`
  ).pipe(Effect.provide(PgTest.clientLayer({ url, maxConnections: 1 })))

describe("LEASEHOLD_SCHEMA: one setting for the store and session liveness", () => {
  it.live("the README's worker with LEASEHOLD_SCHEMA=myapp keeps messages and its consumer in myapp, nothing in leasehold", () =>
    Effect.gen(function*() {
      const url = yield* freshDatabase
      const env = ConfigProvider.layer(ConfigProvider.fromEnv({
        env: {
          LEASEHOLD_DATABASE_URL: url,
          LEASEHOLD_SCHEMA: "myapp",
          LEASEHOLD_QUEUES: sendWelcomeEmail.queue,
          LEASEHOLD_CONSUMER_ID: "readme-worker",
          LEASEHOLD_POLL_INTERVAL: "100ms",
          LEASEHOLD_SESSION_LIVENESS: "on"
        }
      }))
      // Stopped before the database is dropped (a scope added later closes first).
      const scope = yield* Scope.fork(yield* Scope.Scope)
      yield* Layer.buildWithScope(ReadmeWorker.pipe(Layer.provide(env)), scope)

      // A producer configured the same way (examples/producer.ts) sends one email.
      const sent = yield* Task.send(sendWelcomeEmail, { to: "ada@example.com", name: "Ada" }).pipe(
        Effect.provide(PgQueueStore.layer().pipe(Layer.provideMerge(QueueConfig.pgLayerFromEnv()), Layer.provide(env)))
      )

      yield* Effect.scoped(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        // The worker registered in myapp, with its lock advertised, and ran the email there.
        const [registered] = yield* sql<{ id: string; lock_key: number | null }>`SELECT id, lock_key FROM myapp.consumers`
        assert.strictEqual(registered?.id, "readme-worker")
        assert.isNotNull(registered?.lock_key ?? null, "session liveness is on, in the store's schema")
        const outcome = yield* waitFor(
          "the email to be handled in myapp",
          Effect.map(
            sql<{ outcome: string }>`SELECT outcome FROM myapp.attempts WHERE message_id = ${sent.id}::bigint`,
            (rows) => Option.fromNullishOr(rows[0]?.outcome)
          )
        )
        assert.strictEqual(outcome, "acked")
      }).pipe(Effect.provide(PgTest.clientLayer({ url, maxConnections: 1 }))))

      const tables = yield* tablesByUrl(url)
      assert.deepStrictEqual([...new Set(tables.map((t) => t.schema))], ["myapp"], "every table is in myapp")
      yield* Scope.close(scope, Exit.void)
    }).pipe(Effect.scoped, Effect.provide(PgTest.clientLayer({ maxConnections: 1 }))), { timeout: 30_000 })

  it.live("an explicit presence schema that is not the store's is refused, naming both", () =>
    Effect.gen(function*() {
      const schema = PgTest.uniqueSchema("mismatch")
      const built = yield* Layer.build(
        ConsumerPresence.layerPg({ schema: "elsewhere" }).pipe(
          Layer.provideMerge(PgQueueStore.layer({ schema })),
          Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
          Layer.provideMerge(PgTest.clientLayer({ maxConnections: 2 }))
        )
      ).pipe(Effect.scoped, Effect.exit)
      assert.isTrue(Exit.isFailure(built))
      const error = Exit.isFailure(built) ? Option.getOrUndefined(Exit.findErrorOption(built)) : undefined
      assert.strictEqual((error as { _tag?: string } | undefined)?._tag, "InvalidInput")
      assert.include(String((error as { message?: string }).message), `"elsewhere" is not the store's "${schema}"`)

      // The same schema, or none, is the store's.
      const builds = (presence: ConsumerPresence.PresenceOptions) =>
        Effect.gen(function*() {
          const context = yield* Layer.build(
            ConsumerPresence.layerPg({ ...presence, mode: "on" }).pipe(
              Layer.provideMerge(PgQueueStore.layer({ schema })),
              Layer.provideMerge(PgTest.clientLayer({ maxConnections: 2 }))
            )
          )
          return context
        }).pipe(Effect.scoped, Effect.exit)
      assert.isTrue(Exit.isSuccess(yield* builds({ schema })))
      assert.isTrue(Exit.isSuccess(yield* builds({})))
      yield* Effect.scoped(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`DROP SCHEMA IF EXISTS ${sql(schema)} CASCADE`
      })).pipe(Effect.provide(PgTest.clientLayer({ maxConnections: 1 })))
    }), { timeout: 30_000 })
})
