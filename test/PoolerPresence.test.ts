/**
 * Session liveness behind a real PgBouncer (started by each test).
 *
 * - Transaction mode, nothing declared (`auto`, `LEASEHOLD_POOLER` unset, a
 *   pooler that drops the startup parameters it does not know): the presence
 *   session's backend is handed to another client with its lock, which proves
 *   transaction pooling. The WARN names that proof, liveness is unavailable,
 *   and live consumers with claims are never reaped.
 * - The controls: the same code through session mode, and through transaction
 *   mode with the direct URL, keeps liveness active (so the fallback above
 *   comes from the pooler, not from the code path).
 * - `LEASEHOLD_POOLER=transaction` without a direct URL: unavailable at once.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Layer, Option, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import * as ConsumerPresence from "../src/ConsumerPresence.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import type * as Pooler from "../src/Pooler.ts"
import * as QueueConfig from "../src/QueueConfig.ts"
import { QueueStore } from "../src/QueueStore.ts"
import { captureLogs } from "./support/ConsumerHarness.ts"
import * as PgBouncer from "./support/PgBouncer.ts"
import * as PgTest from "./support/PgTest.ts"
import { requireTool } from "./support/RequireTool.ts"
import { waitFor } from "./support/Wait.ts"

/** Fast presence timing: stale after 1.5 s. */
const FAST = { heartbeat: 250, staleAfter: 1_500, reapEvery: 250 } as const
const UNAVAILABLE = "session liveness unavailable (transaction-mode pooler?)"

/** Store and presence in a fresh schema over `url`, as a worker builds them. */
const build = (url: string, options: { readonly pooler: Pooler.Mode; readonly direct?: boolean }) => {
  const schema = PgTest.uniqueSchema("pool")
  return Layer.build(
    ConsumerPresence.layerPg({ mode: "auto", ...FAST }).pipe(
      Layer.provideMerge(PgQueueStore.layer({ schema })),
      Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
      Layer.provideMerge(QueueConfig.pgLayer(Redacted.make(url), {
        pooler: options.pooler,
        maxConnections: 4,
        directUrl: options.direct === true ? Redacted.make(PgTest.databaseUrl()) : undefined
      }))
    )
  ).pipe(Effect.map((context) => ({ context, schema })))
}

const liveness = (registration: ConsumerPresence.Registration, wanted: ConsumerPresence.Status["liveness"]) =>
  waitFor(`liveness ${wanted}`, Effect.map(registration.status, (s) => (s.liveness === wanted ? Option.some(s) : Option.none())), {
    timeoutMs: 10_000
  })

const pgbouncer = requireTool("pgbouncer", "PoolerPresence.test.ts")

describe.skipIf(!pgbouncer.runs)(`session liveness behind PgBouncer${pgbouncer.skipNote}`, () => {
  it.live("transaction mode, nothing declared: auto proves the pooler (a shared backend), WARNs, falls back; live consumers are never reaped", () => {
    const logs = captureLogs()
    return Effect.scoped(Effect.gen(function*() {
      const bouncer = yield* PgBouncer.acquire({
        mode: "transaction",
        serverUrl: PgTest.databaseUrl(),
        ignoreStartupParameters: ["statement_timeout"]
      })
      const { context, schema } = yield* build(bouncer.url, { pooler: "none" })
      const presence = Layer.succeedContext(context)
      yield* Effect.gen(function*() {
        const service = yield* ConsumerPresence.ConsumerPresence
        // Detected while registering, before any lock is advertised (register waits for the first
        // attempt): the proof, not the backend-age heuristic, nor a later probe that happened to
        // see another backend: the lock went with the backend to another client.
        const a = yield* service.register("alive-a")
        const first = yield* a.status
        const logged = () => logs.entries.map((e) => `${e.level} ${e.message}`).join("\n")
        assert.deepStrictEqual([first.liveness, first.sessions, first.lockKey], ["unavailable", 0, null], logged())
        const warnA = logs.entries.find((e) => e.level === "Warn" && e.message.includes(UNAVAILABLE))
        // The probe's proof; or, should another client have taken the backend between the session's two
        // statements, that change (also a proof, at registration): never the backend-age guess.
        assert.match(
          warnA?.message ?? "",
          /backends are shared between clients \(transaction pooling\)|the backend changed between two statements/,
          logged()
        )
        // The second registers while the first heartbeats: any proof will do, at once or at a later probe.
        const b = yield* service.register("alive-b")
        yield* liveness(b, "unavailable")
        // Both hold claims, and stay registered without a lock: the reaper must never release them.
        // The claims are made over a direct connection: repeated statements of this undeclared
        // setup (prepared, as on a direct connection) may reach a backend that never saw them.
        const direct = yield* Layer.build(
          PgQueueStore.layer({ schema, migrate: false }).pipe(Layer.provideMerge(PgTest.clientLayer({ maxConnections: 2 })))
        )
        const store = Context.get(direct, QueueStore)
        const sql = Context.get(direct, SqlClient.SqlClient)
        yield* store.send("pooled", [{ task: "t", payload: 1 }, { task: "t", payload: 2 }])
        const [ca] = yield* store.claim("pooled", { lease: "60 seconds", limit: 1, consumer: "alive-a" })
        const [cb] = yield* store.claim("pooled", { lease: "60 seconds", limit: 1, consumer: "alive-b" })
        assert.isDefined(ca)
        assert.isDefined(cb)
        const rows = yield* sql<{ id: string; lock_key: number | null }>`
          SELECT id, lock_key FROM ${sql(`${schema}.consumers`)} ORDER BY id`
        assert.deepStrictEqual(rows.map((r) => [r.id, r.lock_key]), [["alive-a", null], ["alive-b", null]])
        // Past the stale bound (a window in which nothing may happen), sweeps release nothing.
        yield* Effect.sleep(FAST.staleAfter + 1_000)
        assert.deepStrictEqual(yield* service.sweep("someone-else"), [])
        const held = yield* sql<{ leased_by: string | null }>`
          SELECT leased_by FROM ${sql(`${schema}.messages`)} WHERE queue = 'pooled' ORDER BY id`
        assert.deepStrictEqual(held.map((r) => r.leased_by), ["alive-a", "alive-b"])
        assert.isFalse(logs.entries.some((e) => e.message.includes("is gone: its session ended")), "nobody reaped")
      }).pipe(Effect.provide(presence))
    })).pipe(Effect.provide(logs.layer))
  }, 60_000)

  it.live("controls: through session mode, and through transaction mode with the direct URL, liveness is active", () => {
    const logs = captureLogs()
    return Effect.scoped(Effect.gen(function*() {
      for (const [mode, declared, direct] of [["session", "session", false], ["transaction", "transaction", true]] as const) {
        yield* Effect.scoped(Effect.gen(function*() {
          const bouncer = yield* PgBouncer.acquire({ mode, serverUrl: PgTest.databaseUrl(), poolSize: 10 })
          const { context } = yield* build(bouncer.url, { pooler: declared, direct })
          yield* Effect.gen(function*() {
            const service = yield* ConsumerPresence.ConsumerPresence
            const registration = yield* service.register(`ctl-${mode}`)
            const status = yield* liveness(registration, "active")
            assert.isNotNull(status.lockKey, `${mode}: a lock advertised`)
          }).pipe(Effect.provide(Layer.succeedContext(context)))
        }))
      }
      assert.isFalse(logs.entries.some((e) => e.message.includes(UNAVAILABLE)), "no fallback WARN")
    })).pipe(Effect.provide(logs.layer))
  }, 60_000)

  it.live("LEASEHOLD_POOLER=transaction without a direct URL: unavailable at once, the WARN names both settings", () => {
    const logs = captureLogs()
    return Effect.scoped(Effect.gen(function*() {
      const bouncer = yield* PgBouncer.acquire({ mode: "transaction", serverUrl: PgTest.databaseUrl() })
      const { context } = yield* build(bouncer.url, { pooler: "transaction" })
      yield* Effect.gen(function*() {
        const service = yield* ConsumerPresence.ConsumerPresence
        const registration = yield* service.register("declared")
        yield* liveness(registration, "unavailable")
      }).pipe(Effect.provide(Layer.succeedContext(context)))
      const warn = logs.entries.find((e) => e.level === "Warn" && e.message.includes(UNAVAILABLE))
      assert.include(warn?.message, "LEASEHOLD_POOLER=transaction and no LEASEHOLD_DIRECT_DATABASE_URL")
    })).pipe(Effect.provide(logs.layer))
  }, 60_000)
})
