/**
 * The caller's lifecycle on real PostgreSQL, in real time, with real consumers (issue 31, part 5):
 *
 * - `TaskClient.awaitResult` is woken by the completion event the consumer's finishing write
 *   announces (its poll is an hour, so nothing else could wake it), with the typed result;
 * - a commit step that rolls back announces nothing; one that commits announces its end;
 * - a handler's progress reaches the message (`get`, `TaskClient.progress`) while it runs (the
 *   throttle is counted on the memory store, test/TaskClient.test.ts);
 * - `TaskClient.events` streams a queue's completion events;
 * - awaits share the store's one listening connection.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import { assert, describe, it } from "@effect/vitest"
import { Context, Deferred, Effect, Exit, Fiber, Layer, Option, Queue, Redacted, Schema, Scope, Stream } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import { SqlClient } from "effect/sql"
import * as Consumer from "../src/Consumer.ts"
import type { Claim } from "../src/Message.ts"
import { endedChannel } from "../src/pg/channel.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import type * as QueueConfig from "../src/QueueConfig.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as Task from "../src/Task.ts"
import * as TaskClient from "../src/TaskClient.ts"
import { ackOf } from "./support/Completions.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitFor } from "./support/Wait.ts"

const BASE: QueueConfig.ConsumerOptions = { lease: "2 seconds", pollInterval: "200 millis", shutdownGrace: "2 seconds" }

/** Run `body` against a fresh schema on the database's clock. */
const inFreshSchema = <A, E>(body: (schema: string) => Effect.Effect<A, E, QueueStore | SqlClient.SqlClient | Scope.Scope>) => {
  const schema = PgTest.uniqueSchema("life")
  return Effect.scoped(body(schema)).pipe(
    Effect.provide(
      PgQueueStore.layer({ clock: "database", schema }).pipe(
        Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
        Layer.provideMerge(PgTest.clientLayer({ maxConnections: 8 }))
      )
    )
  )
}

/** A consumer in a child scope of the test's. */
const startConsumer = <R>(dispatcher: Consumer.Dispatcher<R>, queue: string) =>
  Effect.gen(function*() {
    const scope = yield* Scope.fork(yield* Scope.Scope)
    const context = yield* Layer.buildWithScope(Consumer.layer(dispatcher, { ...BASE, queues: [queue], consumerId: `c-${queue}` }), scope)
    Context.get(context, Consumer.Consumer)
    return { stop: Scope.close(scope, Exit.void) }
  })

const Total = Schema.Struct({ total: Schema.NumberFromString })
const AN_HOUR = { timeout: "30 seconds", pollInterval: "1 hour" } as const

describe("the caller's lifecycle on PostgreSQL (real time)", () => {
  it.live("awaitResult is woken by the finishing write's event with the typed result; events stream the queue's ends", () =>
    inFreshSchema(() =>
      Effect.gen(function*() {
        const queue = "await-pg"
        const sum = Task.define({ name: "sum", queue, payload: Schema.Array(Schema.Number), success: Total })
        const failing = Task.define({ name: "fails", queue, payload: Schema.Number, maxAttempts: 1 })
        const client = yield* TaskClient.make
        const gate = yield* Deferred.make<void>()
        const events = yield* Effect.forkChild(Stream.runCollect(Stream.take(client.events([queue]), 2)))
        const [sent] = yield* client.sendMany(sum, [[1, 2, 3]])
        const [bad] = yield* client.sendMany(failing, [1])
        const awaiting = yield* Effect.forkChild(client.awaitResult(sum, sent!.id, AN_HOUR))
        const awaitingBad = yield* Effect.forkChild(Effect.flip(client.awaitResult(failing, bad!.id, AN_HOUR)))
        yield* startConsumer(Task.dispatcher(
          Task.implement(sum, (ns) => Effect.andThen(Deferred.await(gate), Effect.succeed({ total: ns.reduce((a, b) => a + b, 0) }))),
          Task.implement(failing, () => Effect.andThen(Deferred.await(gate), Effect.fail("no good")))
        ), queue)
        // Both awaits are waiting (no poll will come for an hour); the handlers run now.
        yield* waitFor("the messages to be in flight", Effect.map(QueueStore.pipe(Effect.flatMap((s) => s.stats(queue))), (st) => st.inFlight === 2 ? Option.some(true) : Option.none()))
        yield* Deferred.succeed(gate, undefined)
        const result = yield* Fiber.join(awaiting).pipe(Effect.timeout("10 seconds"))
        assert.deepStrictEqual(result, Option.some({ total: 6 }))
        const failure = yield* Fiber.join(awaitingBad).pipe(Effect.timeout("10 seconds"))
        assert.strictEqual(failure._tag, "MessageDeadLettered")
        const heard = yield* Fiber.join(events).pipe(Effect.timeout("10 seconds"))
        assert.deepStrictEqual(
          [...heard].map((e) => [e.messageId, e.task, e.outcome]).sort(),
          [[sent!.id, "sum", "completed"], [bad!.id, "fails", "dead-lettered"]].sort()
        )
      })))

  it.live("a handler's progress is on its message while it runs; a too-large one is refused", () =>
    inFreshSchema(() =>
      Effect.gen(function*() {
        const queue = "progress-pg"
        const long = Task.define({ name: "long", queue, payload: Schema.Number })
        const client = yield* TaskClient.make
        const release = yield* Deferred.make<void>()
        const refused = yield* Deferred.make<string>()
        const [sent] = yield* client.sendMany(long, [100])
        yield* startConsumer(Task.dispatcher(
          Task.implement(long, (n, context) =>
            Effect.gen(function*() {
              for (let k = 1; k <= n; k++) yield* context.progress({ done: k, of: n })
              const error = yield* Effect.flip(context.progress({ blob: "x".repeat(10_000) }))
              yield* Deferred.succeed(refused, `${error._tag} ${error.field}`)
              yield* Deferred.await(release)
            }))
        ), queue)
        assert.strictEqual(yield* Deferred.await(refused).pipe(Effect.timeout("10 seconds")), "InvalidInput progress")
        const last = yield* waitFor("the last progress", Effect.map(client.progress(sent!.id), Option.filter((p) => (p as { done: number }).done === 100)))
        assert.deepStrictEqual(last, { done: 100, of: 100 })
        const message = Option.getOrThrow(yield* (yield* QueueStore).get(sent!.id))
        assert.deepStrictEqual([message.state, message.progress], ["in-flight", { done: 100, of: 100 }])
        yield* Deferred.succeed(release, undefined)
        assert.deepStrictEqual(yield* client.awaitResultJson(sent!.id, { timeout: "10 seconds" }), Option.none())
        // Gone with its message.
        assert.deepStrictEqual(yield* client.progress(sent!.id), Option.none())
      })))

  it.live("a commit step that rolls back announces nothing; many awaits share one listening connection", () =>
    inFreshSchema(() =>
      Effect.gen(function*() {
        const queue = "commit-pg"
        const job = Task.define({ name: "job", queue, payload: Schema.Number, maxAttempts: 2 })
        const client = yield* TaskClient.make
        const sql = yield* SqlClient.SqlClient
        const heard = yield* Effect.forkChild(Stream.runCollect(Stream.take(client.events([queue]), 4)))
        const sent = yield* client.sendMany(job, [1, 2, 3])
        const awaits = yield* Effect.forkChild(Effect.forEach(sent, (s) => client.awaitResultJson(s.id, AN_HOUR), { concurrency: "unbounded" }))
        let runs = 0
        yield* startConsumer(Task.dispatcher(
          Task.implement(job, (n, context) =>
            // The first run of message 1 fails inside its commit step: rolled back, retried (no event for it).
            context.commit(Effect.suspend(() => n === 1 && runs++ === 0 ? Effect.fail("rolled back") : Effect.void)))
        ), queue)
        const results = yield* Fiber.join(awaits).pipe(Effect.timeout("20 seconds"))
        assert.deepStrictEqual(results, [Option.none(), Option.none(), Option.none()])
        const events = [...(yield* Fiber.join(heard).pipe(Effect.timeout("10 seconds")))]
        // The rolled-back commit said nothing (else message 1 would be completed twice); its retry (a
        // finishing write of the consumer) and the three commits that landed did.
        const [one, two, three] = sent.map((s) => s.id)
        assert.deepStrictEqual(
          events.map((e) => `${e.messageId} ${e.outcome}`).sort(),
          [`${one} retried`, `${one} completed`, `${two} completed`, `${three} completed`].sort()
        )
        const [listeners] = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name LIKE '%-events'`
        assert.strictEqual(listeners!.n, 1)
      })))

  it.live("one finishing write of 700 runs announces each run once, in notices of at most 300 ids of one outcome and task", () =>
    inFreshSchema((schema) =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = "many-ends"
        // What the ended channel carries, heard on a connection of the test's own.
        const own = yield* PgClient.make({ url: Redacted.make(PgTest.databaseUrl()), maxConnections: 1 }).pipe(Effect.provide(Reactivity.layer))
        const notices = yield* own.listen(endedChannel(schema))
        const events = yield* store.completions([queue])
        yield* store.send(queue, Array.from({ length: 650 }, (_, k) => ({ task: "a", payload: k })))
        yield* store.send(queue, Array.from({ length: 50 }, (_, k) => ({ task: "b", payload: k })))
        const claimed: Array<Claim> = [...(yield* store.claim(queue, { lease: "1 minute", limit: 1_000, consumer: "c" }))]
        assert.lengthOf(claimed, 700)
        // Task b: 20 retried, 30 acked; task a: all acked.
        const retried = new Set(claimed.filter((c) => c.task === "b").slice(0, 20).map((c) => c.id))
        const completed = yield* store.complete(claimed.map((c) =>
          retried.has(c.id)
            ? { ...ackOf(c), finish: { _tag: "Retry", delayMs: 60_000, error: "again" }, outcome: "retried", error: "again" }
            : ackOf(c)
        ))
        assert.lengthOf(completed.held, 700)

        const heard = new Map<string, string>()
        for (let k = 0; k < 700; k++) {
          const event = yield* events.pipe(Effect.timeout("10 seconds"))
          assert.isFalse(heard.has(event.messageId), `${event.messageId} announced once`)
          heard.set(event.messageId, `${event.task} ${event.outcome}`)
        }
        assert.deepStrictEqual(
          [...heard].sort(),
          claimed.map((c) => [c.id, `${c.task} ${retried.has(c.id) ? "retried" : "completed"}`]).sort()
        )
        // Task a's 650 acks in three notices (300, 300, 50), task b's 30 acks and 20 retries in one each.
        const shapes: Array<string> = []
        for (let k = 0; k < 5; k++) {
          const [outcome, , task, , ids] = (yield* Queue.take(notices).pipe(Effect.timeout("10 seconds"))).payload.split(" ")
          shapes.push(`${task} ${outcome} ${ids!.split(",").length}`)
        }
        assert.deepStrictEqual(shapes.sort(), ["a completed 300", "a completed 300", "a completed 50", "b completed 30", "b retried 20"].sort())
        assert.isTrue(Option.isNone(yield* Queue.poll(notices)), "nothing else was announced")
      })))
})
