/**
 * A full NOTIFY queue must not fail writes (issue 24, item 11). PostgreSQL keeps every
 * notification until each listening backend has read it; one listener that stops reading (here:
 * a session sitting in an open transaction) fills the queue, and then every transaction that
 * notifies fails at its commit ("too many notifications in the NOTIFY queue", 54000). The single
 * send, a batch send of one statement, a schedule's firing, a cancel of a running message and the
 * finishing write (announcing the runs it ends) carry their NOTIFY in their own statement: they failed whole. They now write without the announcement when the queue is full
 * (consumers poll; the wake-up is best effort). On a server of this file's own, with the queue
 * at its smallest (64 pages, `max_notify_queue_pages`, PostgreSQL 17+).
 */
import { PgClient } from "@effect/sql-pg"
import { assert, layer } from "@effect/vitest"
import { Context, Deferred, Effect, Exit, Layer, Option, Redacted } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import { SqlClient } from "effect/sql"
import { startPostgres } from "../dev/EmbeddedPostgres.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import type { Claim } from "../src/Message.ts"
import { QueueStore } from "../src/QueueStore.ts"
import { ackOf } from "./support/Completions.ts"

/** The URL of this file's server, for connections of the test's own. */
class ServerUrl extends Context.Service<ServerUrl, Redacted.Redacted>()("test/ServerUrl") {}

const Server = Layer.unwrap(Effect.gen(function*() {
  const server = yield* Effect.acquireRelease(
    Effect.promise(() => startPostgres({ forTests: true, settings: ["max_notify_queue_pages=64"] })),
    (s) => Effect.promise(() => s.destroy())
  )
  const url = Redacted.make(server.url)
  return PgQueueStore.layer({ schema: "notify_full", clock: "database" }).pipe(
    Layer.provideMerge(PgClient.layer({ url, maxConnections: 4 })),
    Layer.merge(Layer.succeed(ServerUrl, url))
  )
}))

/**
 * A listener that stops reading: LISTEN (committed), then a transaction left open on the same
 * session until the scope closes. Its backend reads no notification meanwhile.
 */
const frozenListener = Effect.gen(function*() {
  const url = yield* ServerUrl
  const client = yield* PgClient.make({ url, maxConnections: 1 }).pipe(Effect.provide(Reactivity.layer))
  yield* client`LISTEN frozen`
  const open = yield* Deferred.make<void>()
  yield* client.withTransaction(Effect.andThen(client`SELECT 1`, Effect.andThen(Deferred.succeed(open, undefined), Effect.never))).pipe(
    Effect.forkScoped
  )
  yield* Deferred.await(open)
})

/** Fill the NOTIFY queue until a notifying commit fails; answers that failure's message. */
const fillQueue = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  for (let round = 0; round < 1000; round++) {
    const exit = yield* Effect.exit(
      sql`SELECT count(pg_notify('filler', ${round}::text || '-' || i::text || repeat('x', 7000))) FROM generate_series(1, 20) AS i`
    )
    if (Exit.isFailure(exit)) return String(exit.cause)
  }
  return assert.fail("the NOTIFY queue never filled")
})

layer(Server, { excludeTestServices: true, timeout: 120_000 })("a full NOTIFY queue (PostgreSQL)", (it) => {
  it.effect("single sends, schedule firings and cancels of running messages still write", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      // A running message to cancel later, claimed before the queue fills.
      const [running] = yield* store.send("q", [{ task: "t", payload: "running" }])
      assert.lengthOf(yield* store.claim("q", { lease: "1 minute", limit: 1, consumer: "c" }), 1)
      yield* store.upsertSchedules(
        [{ key: "s", cron: "* * * * *", tz: "UTC", queue: "q", task: "tick", payload: {}, nextSlot: null }],
        { seenBy: "w", now: new Date(Date.now() - 120_000) }
      )

      // Before the queue fills, a single send and a firing are announced (heard by a subscriber).
      const heard = yield* store.sends(["q"])
      const ended = yield* store.completions(["q"])
      const claimed: Array<Claim> = []
      // Eight times: past the five custom plans of a prepared statement, onto its generic plan.
      for (let k = 0; k < 8; k++) {
        yield* store.send("q", [{ task: "t", payload: "announced" }])
        assert.isTrue(Option.isSome(yield* heard.pipe(Effect.timeoutOption("5 seconds"))), `single send ${k + 1} was announced`)
        claimed.push(...(yield* store.claim("q", { lease: "1 minute", limit: 1, consumer: "c" })))
      }
      // The finishing write announces its end in its own statement (past its trial plans too).
      for (const claim of claimed.slice(0, 6)) {
        assert.deepStrictEqual((yield* store.complete([ackOf(claim)])).held, [claim.id])
        const event = yield* ended.pipe(Effect.timeoutOption("5 seconds"))
        assert.deepStrictEqual(Option.map(event, (e) => [e.messageId, e.outcome]), Option.some([claim.id, "completed"]), "the ack was announced")
      }
      yield* store.upsertSchedules(
        [{ key: "early", cron: "* * * * *", tz: "UTC", queue: "q", task: "tick", payload: {}, nextSlot: null }],
        { seenBy: "w", now: new Date(Date.now() - 120_000) }
      )
      const earlySlot = new Date(Math.floor((Date.now() - 60_000) / 60_000) * 60_000)
      assert.isTrue(Option.isSome(yield* store.fireSchedule("early", { slot: earlySlot, nextSlot: null, cron: "* * * * *", tz: "UTC" })))
      assert.isTrue(Option.isSome(yield* heard.pipe(Effect.timeoutOption("5 seconds"))), "the firing was announced")
      // A batch in one statement announces itself in that statement.
      yield* store.send("q", [{ task: "t", payload: "batch-announced" }, { task: "t", payload: "batch-announced" }])
      assert.isTrue(Option.isSome(yield* heard.pipe(Effect.timeoutOption("5 seconds"))), "the batch was announced")

      yield* frozenListener
      const refusal = yield* fillQueue
      assert.match(refusal, /too many notifications in the NOTIFY queue/, "the premise: a notifying commit now fails")
      const [usage] = yield* sql<{ u: number }>`SELECT pg_notification_queue_usage()::float8 AS u`
      assert.isAbove(usage!.u, 0.9)

      const [sent] = yield* store.send("q", [{ task: "t", payload: "single" }])
      assert.isTrue(Option.isSome(yield* store.get(sent!.id)), "the single send landed")
      const batch = yield* store.send("q", [{ task: "t", payload: "batch" }, { task: "t", payload: "batch" }])
      for (const b of batch) assert.isTrue(Option.isSome(yield* store.get(b.id)), "the batch landed")
      const slot = new Date(Math.floor((Date.now() - 60_000) / 60_000) * 60_000)
      const fired = yield* store.fireSchedule("s", { slot, nextSlot: null, cron: "* * * * *", tz: "UTC" })
      assert.isTrue(Option.isSome(fired), "the schedule fired")
      assert.deepStrictEqual(yield* store.cancel([running!.id]), [{ id: running!.id, result: "cancelling" }], "the cancel flagged it")
      // Finishing writes land too (without their announcement).
      assert.deepStrictEqual((yield* store.complete(claimed.slice(6).map((c) => ackOf(c)))).held, claimed.slice(6).map((c) => c.id), "the acks landed")
      assert.deepStrictEqual(
        (yield* store.messages("q")).map((m) => [m.payload, m.cancelRequestedAt !== null]),
        [
          ["running", true],

          [{}, false],
          ["batch-announced", false],
          ["batch-announced", false],
          ["single", false],
          ["batch", false],
          ["batch", false],
          [{}, false]
        ]
      )
    }))
})
