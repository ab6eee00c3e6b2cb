/**
 * The dashboard's database reads (`Insights`, issue 31) on real PostgreSQL:
 *
 * - throughput counts the history per minute, queue, task and outcome (completed, retried,
 *   dead-lettered, lease-lost, cancelled), narrowed to one queue on request;
 * - depth samples: one per interval between all callers, none while another process holds the
 *   sampler's lock, old ones deleted past retention, read back by time;
 * - search by queue, task, state, key, id range and a payload field (as JSON and as text),
 *   newest first by keyset; a payload path with SQL in it is refused, a value with SQL in it is
 *   only data;
 * - bulk actions: the count first, then every matching message in batches, idempotent (a second
 *   run touches nothing); retry now makes delayed messages ready and leaves the others.
 */
import { assert, layer } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber } from "effect"
import { SqlClient } from "effect/sql"
import { Insights, parsePayloadMatch, runBulk } from "../src/Insights.ts"
import * as DepthHistory from "../src/maintenance/depthHistory.ts"
import type { MessageId } from "../src/Message.ts"
import { depthLockKey } from "../src/pg/insights.ts"
import { QueueStore } from "../src/QueueStore.ts"
import { StoreSettings } from "../src/StoreSettings.ts"
import * as Finish from "./support/Finish.ts"
import * as PgTest from "./support/PgTest.ts"

const fresh = (prefix: string) => `${prefix}-${Math.random().toString(36).slice(2, 8)}`

layer(PgTest.storeLayer({ clock: "database", maxConnections: 6 }), { excludeTestServices: true })("Insights (PostgreSQL)", (it) => {
  it.effect("throughput: the history counted per minute, queue, task and outcome", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const insights = yield* Insights
      const queue = fresh("tp")
      yield* store.send(queue, [
        ...Array.from({ length: 3 }, () => ({ task: "ok", payload: {} })),
        { task: "flaky", payload: {}, maxAttempts: 5 },
        { task: "doomed", payload: {}, maxAttempts: 1 },
        { task: "lost", payload: {} },
        { task: "waiting", payload: {} }
      ])
      const claims = yield* store.claim(queue, { lease: "1 minute", limit: 6, consumer: "c1" })
      const byTask = (task: string) => claims.filter((c) => c.task === task)
      for (const c of byTask("ok")) yield* Finish.ack(store, c)
      yield* Finish.retry(store, byTask("flaky")[0]!, { delay: 3_600_000, error: "try later" })
      yield* Finish.deadLetter(store, byTask("doomed")[0]!, { reason: "max attempts", error: "no" })
      yield* store.complete([yield* Finish.completion(store, byTask("lost")[0]!, { _tag: "Forget" }, "lease-lost", "lease lost")])
      // The message never claimed is cancelled while waiting: its history says cancelled.
      const waiting = (yield* store.messages(queue, { state: "ready" })).map((m) => m.id)
      yield* store.cancel(waiting)
      // Another queue's history is left out when one queue is asked for.
      const other = fresh("tp-other")
      yield* store.send(other, [{ task: "ok", payload: {} }])
      yield* Finish.ack(store, (yield* store.claim(other, { lease: "1 minute", limit: 1, consumer: "c1" }))[0]!)

      const { now, rows } = yield* insights.throughput({ minutes: 60, queue })
      const sum = (task: string, key: "completed" | "retried" | "deadLettered" | "leaseLost" | "cancelled") =>
        rows.filter((r) => r.task === task).reduce((n, r) => n + r[key], 0)
      assert.isTrue(rows.every((r) => r.queue === queue), "one queue only")
      assert.strictEqual(sum("ok", "completed"), 3)
      assert.strictEqual(sum("flaky", "retried"), 1)
      assert.strictEqual(sum("doomed", "deadLettered"), 1)
      assert.strictEqual(sum("lost", "leaseLost"), 1)
      assert.strictEqual(sum("waiting", "cancelled"), 1)
      assert.isTrue(rows.every((r) => r.minute.getTime() % 60_000 === 0 && r.minute.getTime() <= now.getTime()), "whole minutes, none later than now")
      const all = yield* insights.throughput({ minutes: 1 })
      assert.isTrue(all.rows.some((r) => r.queue === other), "all queues without a queue")
    }))

  it.effect("depth samples: one per interval, none under another's lock, expired ones deleted", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const insights = yield* Insights
      const sql = yield* SqlClient.SqlClient
      const { schema } = yield* StoreSettings
      const queue = fresh("depth")
      yield* store.send(queue, Array.from({ length: 4 }, () => ({ task: "t", payload: {} })))
      yield* store.claim(queue, { lease: "1 minute", limit: 1, consumer: "c1" })
      const table = sql(`${schema}.depth_samples`)
      // A sample far past retention, as a long-stopped sampler left it.
      yield* sql`INSERT INTO ${table} (at, queue, ready, delayed, in_flight, dead, oldest_ready_age_ms)
        VALUES (now() - interval '3 days', ${queue}, 9, 0, 0, 0, 0)`

      // Another process holds the sampler's lock: nothing stored.
      const locked = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const holder = yield* sql.withTransaction(Effect.gen(function*() {
        yield* sql`SELECT pg_advisory_xact_lock(${depthLockKey(schema)}::bigint)`
        yield* Deferred.succeed(locked, undefined)
        yield* Deferred.await(release)
      })).pipe(Effect.forkScoped)
      yield* Deferred.await(locked)
      assert.isFalse(yield* insights.recordDepths(yield* store.queues(), 60_000, DepthHistory.retentionMs))
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(holder)

      // Three samplers at once: one sample between them.
      const stored = yield* Effect.all(
        Array.from({ length: 3 }, () => Effect.flatMap(store.queues(), (q) => insights.recordDepths(q, 60_000, DepthHistory.retentionMs))),
        { concurrency: "unbounded" }
      )
      assert.strictEqual(stored.filter(Boolean).length, 1, "one of three stored")
      assert.isFalse(yield* insights.recordDepths(yield* store.queues(), 60_000, DepthHistory.retentionMs), "not due again within the interval")
      const { samples } = yield* insights.depthHistory({ minutes: 60, queue })
      assert.strictEqual(samples.length, 1, "the expired sample deleted, one new")
      assert.deepInclude(samples[0]!, { queue, ready: 3, inFlight: 1, delayed: 0, dead: 0 })
      assert.isBelow((yield* insights.depthSampleAge)!, 10_000)
    }))

  it.effect("the sampler task: a sample when due, then none until the interval passed", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const insights = yield* Insights
      const sql = yield* SqlClient.SqlClient
      const { schema } = yield* StoreSettings
      yield* sql`DELETE FROM ${sql(`${schema}.depth_samples`)}`
      yield* store.send(fresh("sampled"), [{ task: "t", payload: {} }])
      const task = DepthHistory.make(store, insights, 60_000)
      yield* task.run
      yield* task.run
      const [row] = yield* sql<{ n: number }>`SELECT count(DISTINCT at)::int AS n FROM ${sql(`${schema}.depth_samples`)}`
      assert.strictEqual(row!.n, 1)
    }))

  it.effect("search: queue, task, state, key, id range and a payload field, newest first by keyset", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const insights = yield* Insights
      const queue = fresh("search")
      const sent = yield* store.send(queue, [
        { task: "invoice", payload: { customer: { id: 42 }, note: "'; DROP TABLE x; --" }, key: "acme" },
        { task: "invoice", payload: { customer: { id: "42" } } },
        { task: "invoice", payload: { customer: { id: 7 } }, key: "acme" },
        { task: "refund", payload: { customer: { id: 42 } }, delay: 3_600_000 },
        { task: "refund", payload: { items: [{ sku: "a-1" }] } }
      ])
      const ids = sent.map((s) => s.id)
      const find = (filter: Parameters<typeof insights.search>[0], limit = 50, before?: MessageId) =>
        Effect.map(insights.search({ queue, ...filter }, { limit, before }), (ms) => ms.map((m) => m.id))
      const match = (text: string) => Effect.runSync(parsePayloadMatch(text))

      assert.deepStrictEqual(yield* find({}), [...ids].reverse(), "newest first")
      assert.deepStrictEqual(yield* find({ task: "refund" }), [ids[4], ids[3]])
      assert.deepStrictEqual(yield* find({ state: "delayed" }), [ids[3]])
      assert.deepStrictEqual(yield* find({ key: "acme" }), [ids[2], ids[0]])
      assert.deepStrictEqual(yield* find({ fromId: ids[1], toId: ids[3] }), [ids[3], ids[2], ids[1]])
      assert.deepStrictEqual(yield* find({ payload: match("customer.id = 42") }), [ids[3], ids[1], ids[0]], "the number and the text 42")
      assert.deepStrictEqual(yield* find({ payload: match(`customer.id = "42"`) }), [ids[3], ids[1], ids[0]])
      assert.deepStrictEqual(yield* find({ payload: match("customer.id = 7"), task: "invoice" }), [ids[2]])
      assert.deepStrictEqual(yield* find({ payload: match("items.0.sku = a-1") }), [ids[4]], "an array index in the path")
      assert.deepStrictEqual(yield* find({ payload: match("note = '; DROP TABLE x; --") }), [ids[0]], "SQL in a value is only data")
      // Keyset pages: two, then the rest below the last id seen.
      const first = yield* find({}, 2)
      assert.deepStrictEqual(first, [ids[4], ids[3]])
      assert.deepStrictEqual(yield* find({}, 2, first[1]), [ids[2], ids[1]])

      for (const bad of ["customer.id", "customer id = 1", "a;b = 1", "x'y = 1", "a.b.c.d.e.f.g.h.i = 1", ". = 1"]) {
        const refused = yield* Effect.exit(parsePayloadMatch(bad))
        assert.isTrue(Exit.isFailure(refused), `refused: ${bad}`)
      }
    }))

  it.effect("bulk: the count first, then every match in batches of 500, idempotent; retry now moves only the delayed", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const insights = yield* Insights
      const queue = fresh("bulk")
      // 1,200 dead letters (dead-lettered through a claim each batch), 3 ready, 2 delayed.
      yield* store.send(queue, Array.from({ length: 1_200 }, (_, n) => ({ task: "t", payload: { n }, maxAttempts: 1 })))
      for (let left = 1_200; left > 0; left -= 500) {
        const claims = yield* store.claim(queue, { lease: "1 minute", limit: 500, consumer: "c1" })
        yield* store.complete(yield* Effect.forEach(claims, (c) =>
          Finish.completion(store, c, { _tag: "DeadLetter", reason: "max attempts", error: "boom" }, "dead-lettered", "boom")))
      }
      yield* store.send(queue, [...Array.from({ length: 3 }, () => ({ task: "live", payload: {} })), { task: "later", payload: {}, delay: 3_600_000 }, { task: "later", payload: {}, delay: 3_600_000 }])

      const filter = { queue }
      assert.strictEqual(yield* insights.count("redrive", filter), 1_200)
      assert.strictEqual(yield* insights.count("retry", filter), 2)
      assert.strictEqual(yield* insights.count("cancel", filter), 1_205)
      assert.strictEqual(yield* insights.count("redrive", { queue, payload: Effect.runSync(parsePayloadMatch("n = 7")) }), 1)

      const outcome = yield* runBulk(store, insights, "redrive", filter)
      assert.deepStrictEqual(outcome, { action: "redrive", touched: 1_200, batches: 3, more: false })
      assert.strictEqual((yield* store.stats(queue)).dead, 0)
      assert.strictEqual((yield* runBulk(store, insights, "redrive", filter)).touched, 0, "a second run touches nothing")

      const delayed = (yield* store.messages(queue, { state: "delayed" })).map((m) => m.id)
      const ready = (yield* store.messages(queue, { state: "ready", limit: 1 })).map((m) => m.id)
      assert.deepStrictEqual(yield* insights.retryNow([...delayed, ...ready]), delayed, "only the delayed moved")
      assert.strictEqual((yield* store.stats(queue)).delayed, 0)

      const cancelled = yield* runBulk(store, insights, "cancel", { queue, task: "live" })
      assert.strictEqual(cancelled.touched, 3)
      assert.strictEqual(yield* insights.count("cancel", { queue, task: "live" }), 0)
    }))
})
