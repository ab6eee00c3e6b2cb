/**
 * Settings per queue and per task on real PostgreSQL, in real time: one consumer with two queues
 * of their own concurrency (two claim loops, one LISTEN subscription heard by both) holds each to
 * its concurrency and runs what is sent after it went idle; a task with a lease of its own keeps
 * its message past the consumer's lease, renewed on the database with its own lease.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Option, Schema } from "effect"
import * as Consumer from "../src/Consumer.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as Task from "../src/Task.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitFor } from "./support/Wait.ts"

describe("settings per queue and per task on PostgreSQL (real time)", () => {
  it.live("two queues with their own concurrency in one consumer: each held to it; sends after idling wake both lanes", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const running: Record<string, number> = {}
      const most: Record<string, number> = {}
      const done: Record<string, number> = {}
      const handler: Consumer.Handler = (m) =>
        Effect.acquireUseRelease(
          Effect.sync(() => {
            running[m.queue] = (running[m.queue] ?? 0) + 1
            most[m.queue] = Math.max(most[m.queue] ?? 0, running[m.queue]!)
          }),
          () => Effect.sleep(m.queue === "pg_reports" ? 150 : 30),
          () => Effect.sync(() => {
            running[m.queue] -= 1
            done[m.queue] = (done[m.queue] ?? 0) + 1
          })
        )
      yield* Layer.build(Consumer.layer(handler, {
        consumerId: "lanes",
        pollInterval: "1 minute",
        queues: { pg_emails: { concurrency: 3, lease: "2 seconds" }, pg_reports: { concurrency: 1, lease: "5 seconds", batchSize: 1 } }
      }))
      // Idle (the poll interval is a minute): only the sends' notifications can start these.
      yield* Effect.sleep(200)
      yield* store.send("pg_emails", Array.from({ length: 30 }, (_, i) => ({ task: "email", payload: i })))
      yield* store.send("pg_reports", Array.from({ length: 4 }, (_, i) => ({ task: "report", payload: i })))
      yield* waitFor(
        "every message to be handled",
        Effect.sync(() => (done["pg_emails"] === 30 && done["pg_reports"] === 4 ? Option.some(true) : Option.none())),
        { timeoutMs: 20_000 }
      )
      assert.deepStrictEqual(most, { pg_emails: 3, pg_reports: 1 })
    }).pipe(Effect.scoped, Effect.provide(PgTest.storeLayer({ clock: "database" }))), { timeout: 40_000 })

  it.live("a task's own 6 s lease keeps its message held past the consumer's 1 s lease, its lease end on the database moving by 6 s", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const report = Task.make({ name: "report", queue: "pg_lease", payload: Schema.Number, lease: "6 seconds", handler: () => Effect.sleep("2500 millis") })
      const sent = yield* Task.send(report, 1)
      yield* Layer.build(Consumer.layer(Task.dispatcher(report), { consumerId: "task-lease", lease: "1 second", pollInterval: "50ms" }))
      yield* waitFor("the claim", Effect.map(store.get(sent.id), (o) => Option.filter(o, (m) => m.state === "in-flight")))
      yield* Effect.sleep(1_200)
      // The first renewal (within a third of the claim's 1 s) asked for 6 s: the lease ends ~6 s from it, not ~1 s.
      const info = yield* store.get(sent.id)
      const endsIn = Option.getOrThrow(info).visibleAt!.getTime() - Date.now()
      assert.isAbove(endsIn, 3_500, `lease ends in ${endsIn} ms`)
      assert.strictEqual((yield* store.claim("pg_lease", { lease: "1 second", limit: 1, consumer: "other" })).length, 0)
      yield* waitFor("the ack", Effect.map(store.get(sent.id), (o) => Option.isNone(o) ? Option.some(true) : Option.none()), { timeoutMs: 10_000 })
    }).pipe(Effect.scoped, Effect.provide(PgTest.storeLayer({ clock: "database" }))), { timeout: 30_000 })
})
