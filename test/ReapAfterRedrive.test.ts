/**
 * The reaper's history row numbers the attempt as every store write does
 * (migration 0004: attempt = attempt_base + attempts): a message redriven
 * from the dead letters, then claimed by a consumer registered through
 * `ConsumerPresence` whose holder dies, gets a `lease-expired` row whose
 * attempt continues after the redrive, never one that repeats attempt 1.
 *
 * The holder reaches the database through the test's proxy
 * (test/support/PgProxy.ts): cutting it ends the presence session (its lock is
 * free) and stops its heartbeats, as a dead process would.
 */
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer, Option, Redacted, Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as ConsumerPresence from "../src/ConsumerPresence.ts"
import * as Migrations from "../src/Migrations.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import * as Finish from "./support/Finish.ts"
import * as PgProxy from "./support/PgProxy.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitFor } from "./support/Wait.ts"

const QUEUE = "reap-redrive"
const FAST = { heartbeat: 250, staleAfter: 1_500, reapEvery: 250 } as const

describe("the reaper after a redrive (real PostgreSQL, real time)", () => {
  it.live("a reaped claim's history row continues the attempt numbering after the redrive", () => {
    const schema = PgTest.uniqueSchema("rrd")
    return Effect.scoped(Effect.gen(function*() {
      yield* Migrations.run({ schema })
      const sql = yield* SqlClient.SqlClient
      const store = yield* PgQueueStore.make({ schema, migrate: false, leasePool: false })

      // Attempt 1 fails for good: dead, then redriven (attempt_base 1, attempts 0).
      const [sent] = yield* store.send(QUEUE, [{ task: "job", payload: { n: 1 } }])
      const [first] = yield* store.claim(QUEUE, { lease: "30 seconds", limit: 1, consumer: "first" })
      assert.strictEqual(first?.id, sent!.id)
      yield* Finish.deadLetter(store, first!, { reason: "test", error: "boom" })
      assert.deepStrictEqual(yield* store.redrive({ ids: [sent!.id] }), [sent!.id])
      const [base] = yield* sql<{ attempt_base: number; attempts: number }>`
        SELECT attempt_base, attempts FROM ${sql(`${schema}.messages`)} WHERE id = ${sent!.id}::bigint`
      assert.deepStrictEqual(base, { attempt_base: 1, attempts: 0 })

      // The holder: registered through ConsumerPresence, reaching the database through the proxy.
      const proxy = yield* PgProxy.make(PgTest.databaseUrl())
      const app = `rrd-holder-${Math.random().toString(36).slice(2, 8)}`
      const holderScope = yield* Scope.fork(yield* Scope.Scope)
      const holderPresence = yield* ConsumerPresence.make({ schema, ...FAST, migrate: false }).pipe(
        Effect.provide(PgClient.layer({ url: Redacted.make(proxy.url), maxConnections: 2, applicationName: app })),
        Scope.provide(holderScope)
      )
      const registration = yield* holderPresence.register("holder").pipe(Scope.provide(holderScope))
      yield* waitFor(
        "the holder's presence to be active",
        Effect.map(registration.status, (s) => s.liveness === "active" ? Option.some(s) : Option.none()),
        10_000
      )
      const [claim] = yield* store.claim(QUEUE, { lease: "30 seconds", limit: 1, consumer: "holder" })
      assert.strictEqual(claim?.id, sent!.id)

      // The holder dies: its session ends (the lock is free) and its heartbeats stop.
      proxy.cut(app)
      const reaper = yield* ConsumerPresence.make({ schema, ...FAST, migrate: false })
      const reaped = yield* waitFor(
        "the reaper to release the dead holder's claim",
        Effect.map(reaper.sweep("someone"), (r) => r.length > 0 ? Option.some(r) : Option.none()),
        15_000
      )
      assert.deepStrictEqual(reaped.map((r) => [r.consumer, r.messageId]), [["holder", sent!.id]])

      const history = yield* sql<{ attempt: number; consumer: string; outcome: string }>`
        SELECT attempt, consumer, outcome FROM ${sql(`${schema}.attempts`)}
        WHERE message_id = ${sent!.id}::bigint ORDER BY id`
      const reapedRow = history.find((h) => h.consumer === "holder")
      assert.deepStrictEqual(reapedRow, { attempt: 2, consumer: "holder", outcome: "lease-expired" }, JSON.stringify(history))
      const before = history.filter((h) => h !== reapedRow).map((h) => h.attempt)
      assert.isTrue(before.every((a) => a < reapedRow!.attempt), `attempts before the reap: ${before.join(", ")}`)

      proxy.restore()
      yield* Scope.close(holderScope, Exit.void)
    })).pipe(
      Effect.provide(PgTest.dropSchemaOnRelease(schema).pipe(Layer.provideMerge(PgTest.clientLayer({ maxConnections: 4 }))))
    )
  }, { timeout: 40_000 })
})
