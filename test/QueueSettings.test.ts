/**
 * Settings per queue and per task in one process (issue 27, item 1), on the memory store with
 * TestClock: a task's own lease renews its messages with that lease every lease/3 whatever the
 * consumer's; its max runtime stops the handler as a failed attempt; queues with their own
 * concurrency are each held to it in one consumer; the per-queue variables are read, and bad
 * values refused naming the variable and the rule.
 */
import { assert, describe, it } from "@effect/vitest"
import { Clock, ConfigProvider, Context, Effect, Layer, Schema } from "effect"
import { TestClock } from "effect/testing"
import * as Consumer from "../src/Consumer.ts"
import type { MessageId } from "../src/Message.ts"
import * as QueueConfig from "../src/QueueConfig.ts"
import { ConnectionDead } from "../src/QueueError.ts"
import { QueueStore, type QueueStoreShape } from "../src/QueueStore.ts"
import * as Task from "../src/Task.ts"
import { makeSpy, type Spy, startConsumer } from "./support/ConsumerHarness.ts"

/** Let forked fibers run without moving time. */
const settle = Effect.gen(function*() {
  for (let i = 0; i < 20; i++) yield* Effect.yieldNow
})

/** A spy whose renewals are recorded with the lease they asked for. */
const leaseSpy = Effect.gen(function*() {
  const spy = yield* makeSpy
  const renewals: Array<{ readonly at: number; readonly lease: number; readonly ids: ReadonlyArray<MessageId> }> = []
  const inner = spy.store
  // The same spy (its `renew` override still applies), its store recording each renewal's lease.
  ;(spy as { store: QueueStoreShape }).store = {
    ...inner,
    renew: (refs, lease) =>
      Effect.flatMap(Clock.currentTimeMillis, (at) => {
        renewals.push({ at, lease: Number(lease), ids: refs.map((r) => r.id) })
        return inner.renew(refs, lease)
      })
  }
  return { spy, renewals }
})

const withStore = (spy: Spy) => Effect.provide(Layer.succeed(QueueStore, spy.store))

describe("a task's own lease and max runtime", () => {
  it.effect("a task with a 30 s lease is renewed with 30 s every 10 s in a consumer whose lease is 5 s; a plain task of the same claim with 5 s", () =>
    Effect.gen(function*() {
      const { spy, renewals } = yield* leaseSpy
      const report = Task.make({ name: "report", payload: Schema.Number, lease: "30 seconds", handler: () => Effect.never })
      const email = Task.make({ name: "email", payload: Schema.Number, handler: () => Effect.never })
      const [r] = yield* Task.send(report, 1).pipe(withStore(spy), Effect.map((x) => [x]))
      const e = yield* Task.send(email, 2).pipe(withStore(spy))
      yield* startConsumer(spy, Task.dispatcher(report, email), { lease: "5 seconds" })
      yield* settle
      // Both came in one claim with the consumer's 5 s lease: the first renewals are due at 5/3 s.
      yield* TestClock.adjust("1666 millis")
      yield* settle
      const at = (id: MessageId) => renewals.filter((x) => x.ids.includes(id)).map((x) => [x.at, x.lease])
      assert.deepStrictEqual(at(r!.id), [[1_666, 30_000]], "the report's lease taken to 30 s within a third of the claim's lease")
      assert.deepStrictEqual(at(e.id), [[1_666, 5_000]])
      assert.isTrue(renewals.every((x) => x.ids.length === 1), "one statement per distinct lease")
      yield* TestClock.adjust("20 seconds")
      yield* settle
      assert.deepStrictEqual(at(r!.id), [[1_666, 30_000], [11_666, 30_000], [21_666, 30_000]], "then every 30/3 s")
      assert.strictEqual(at(e.id).length, 13, "the plain task every 5/3 s")
      assert.isTrue(at(e.id).every(([, lease]) => lease === 5_000))
      // The store holds the report until the last renewal + 30 s.
      const info = yield* spy.inner.get(r!.id)
      assert.strictEqual(info._tag === "Some" ? info.value.visibleAt?.getTime() : undefined, 21_666 + 30_000)
      assert.strictEqual((yield* spy.inner.claim("default", { lease: "5 seconds", limit: 10, consumer: "other" })).length, 0)
    }))

  it.effect("a task whose lease is shorter than the consumer's is renewed with its own, and stopped at its own local deadline", () =>
    Effect.gen(function*() {
      const { spy, renewals } = yield* leaseSpy
      const stoppedAt: Array<number> = []
      const quick = Task.make({
        name: "quick",
        payload: Schema.Number,
        lease: "3 seconds",
        handler: () => Effect.onInterrupt(Effect.never, () => Effect.map(Clock.currentTimeMillis, (at) => stoppedAt.push(at)))
      })
      yield* Task.send(quick, 1).pipe(withStore(spy))
      yield* startConsumer(spy, Task.dispatcher(quick), { lease: "30 seconds" })
      yield* settle
      yield* TestClock.adjust("1 second")
      yield* settle
      assert.deepStrictEqual(renewals.map((x) => [x.at, x.lease]), [[1_000, 3_000]])
      // The renewals fail from now on (connection dead, retried every second): its local deadline is
      // its own (last renewal 1 s + 3 s - a margin of 0.5 s), not the claim's (30 s - 5 s).
      spy.renew = () => Effect.fail(new ConnectionDead({ operation: "renew", message: "renew: Connection terminated" }))
      yield* TestClock.adjust("2499 millis")
      yield* settle
      assert.deepStrictEqual(stoppedAt, [])
      assert.deepStrictEqual(renewals.map((x) => x.at), [1_000, 2_000, 3_000])
      yield* TestClock.adjust("1 milli")
      yield* settle
      assert.deepStrictEqual(stoppedAt, [3_500])
    }))

  it.effect("a task's max runtime stops its handler as a failed attempt, however long its lease", () =>
    Effect.gen(function*() {
      const { spy } = yield* leaseSpy
      const slow = Task.make({
        name: "slow",
        payload: Schema.Number,
        lease: "30 seconds",
        maxRuntime: "45 seconds",
        maxAttempts: 1,
        handler: () => Effect.never
      })
      const sent = yield* Task.send(slow, 1).pipe(withStore(spy))
      yield* startConsumer(spy, Task.dispatcher(slow), { lease: "5 seconds" })
      yield* settle
      yield* TestClock.adjust("44 seconds")
      yield* settle
      assert.strictEqual(spy.of("deadLetter").length, 0)
      yield* TestClock.adjust("1 second")
      yield* settle
      assert.strictEqual(spy.of("deadLetter").length, 1)
      const [dead] = yield* spy.inner.deadLetters({})
      assert.strictEqual(dead?.id, sent.id)
      assert.include(dead?.lastError ?? "", "max runtime of 45.0s")
    }))
})

/**
 * A handler that counts its concurrent runs per group of queues (by default each queue its own),
 * the most at once and the runs done; each run lasts one second of TestClock.
 */
const concurrencyMeter = (groupOf: (queue: string) => string = (queue) => queue) => {
  const running: Record<string, number> = {}
  const most: Record<string, number> = {}
  const done: Record<string, number> = {}
  const handler: Consumer.Handler = (message) => {
    const group = groupOf(message.queue)
    return Effect.acquireUseRelease(
      Effect.sync(() => {
        running[group] = (running[group] ?? 0) + 1
        most[group] = Math.max(most[group] ?? 0, running[group]!)
      }),
      () => Effect.sleep("1 second"),
      () =>
        Effect.sync(() => {
          running[group] -= 1
          done[group] = (done[group] ?? 0) + 1
        })
    )
  }
  return { handler, most, done }
}

/** Move the TestClock `seconds` seconds, one at a time, letting the consumer run after each. */
const runFor = (seconds: number) =>
  Effect.gen(function*() {
    yield* settle
    for (let i = 0; i < seconds; i++) {
      yield* TestClock.adjust("1 second")
      yield* settle
    }
  })

describe("several queues in one consumer, each with its own settings", () => {
  it.effect("two queues with their own concurrency: each is held to it, and the slow one never takes the quick one's slots", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      yield* spy.store.send("emails", Array.from({ length: 40 }, (_, i) => ({ task: "email", payload: i })))
      yield* spy.store.send("reports", Array.from({ length: 10 }, (_, i) => ({ task: "report", payload: i })))
      const meter = concurrencyMeter()
      const consumer = yield* startConsumer(spy, meter.handler, {
        concurrency: 50,
        queues: { emails: { concurrency: 4, lease: "5 seconds" }, reports: { concurrency: 2, lease: "30 seconds", batchSize: 1 } }
      })
      assert.deepStrictEqual(consumer.settings.queues, ["emails", "reports"])
      yield* runFor(5)
      // 10 reports at 2 a second are done in 5 s, while 20 of the 40 emails (4 a second) ran beside them.
      assert.deepStrictEqual(meter.done, { emails: 20, reports: 10 })
      yield* runFor(5)
      assert.deepStrictEqual(meter.most, { emails: 4, reports: 2 })
      assert.deepStrictEqual(meter.done, { emails: 40, reports: 10 })
    }))

  it.effect("a send wakes the idle lane of its queue at once, whichever lane it is (one subscription, heard by every lane)", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const handled: Array<string> = []
      yield* startConsumer(spy, (m) => Effect.sync(() => handled.push(m.queue)), {
        pollInterval: "1 minute",
        queues: { misc: {}, emails: { concurrency: 2 }, reports: { concurrency: 1 } }
      })
      yield* settle
      for (const queue of ["reports", "emails", "misc", "reports"]) {
        yield* spy.store.send(queue, [{ task: "t", payload: 1 }])
        yield* settle
      }
      // No time passed: each lane was woken by the send, not by its poll interval.
      assert.deepStrictEqual(handled, ["reports", "emails", "misc", "reports"])
    }))

  it.effect("each queue's claims take its own lease and batch size", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const claims: Array<{ readonly queue: string; readonly lease: unknown; readonly limit: number }> = []
      const store = { ...spy.store, claim: (queue: string, options: Parameters<Spy["store"]["claim"]>[1]) => {
        claims.push({ queue, lease: options.lease, limit: options.limit })
        return spy.store.claim(queue, options)
      } }
      yield* spy.store.send("emails", [{ task: "email", payload: 1 }])
      yield* spy.store.send("reports", [{ task: "report", payload: 1 }])
      yield* startConsumer({ ...spy, store } as Spy, () => Effect.void, {
        lease: "5 seconds",
        queues: { emails: {}, reports: { lease: "30 seconds", batchSize: 3 } }
      })
      yield* settle
      assert.deepStrictEqual(claims.find((c) => c.queue === "emails"), { queue: "emails", lease: 5_000, limit: 10 })
      assert.deepStrictEqual(claims.find((c) => c.queue === "reports"), { queue: "reports", lease: 30_000, limit: 3 })
    }))

  it.effect("queues without a concurrency of their own share the consumer's slots", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      for (const q of ["a", "b", "slow"]) yield* spy.store.send(q, Array.from({ length: 6 }, (_, i) => ({ task: "t", payload: i })))
      const meter = concurrencyMeter((queue) => queue === "slow" ? "slow" : "shared")
      yield* startConsumer(spy, meter.handler, { concurrency: 3, queues: { a: {}, b: { lease: "10 seconds" }, slow: { concurrency: 1 } } })
      yield* runFor(4)
      assert.deepStrictEqual(meter.done, { shared: 12, slow: 4 })
      yield* runFor(2)
      assert.deepStrictEqual(meter.most, { shared: 3, slow: 1 })
      assert.deepStrictEqual(meter.done, { shared: 12, slow: 6 })
    }))

  it.effect("from the environment: LEASEHOLD_QUEUE_CONCURRENCY, LEASEHOLD_QUEUE_BATCH_SIZE and LEASEHOLD_QUEUE_LEASE per queue", () =>
    Effect.gen(function*() {
      const env = {
        LEASEHOLD_QUEUES: "emails,reports,misc",
        LEASEHOLD_LEASE: "5s",
        LEASEHOLD_QUEUE_CONCURRENCY: "emails=20, reports=2",
        LEASEHOLD_QUEUE_BATCH_SIZE: "reports=1",
        LEASEHOLD_QUEUE_LEASE: "reports=30s"
      }
      const s = yield* QueueConfig.fromEnv.pipe(Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnvRecord(env))))
      assert.deepStrictEqual(s.perQueue, {
        emails: { concurrency: 20, batchSize: 100, leaseMs: 5_000, leaseMarginMs: 833 },
        reports: { concurrency: 2, batchSize: 1, leaseMs: 30_000, leaseMarginMs: 5_000 }
      })
      assert.deepStrictEqual(QueueConfig.forQueue(s, "misc"), { concurrency: undefined, batchSize: 100, leaseMs: 5_000, leaseMarginMs: 833 })
      assert.deepStrictEqual(QueueConfig.lanes(s), [
        { queues: ["misc"], concurrency: 10 },
        { queues: ["emails"], concurrency: 20 },
        { queues: ["reports"], concurrency: 2 }
      ])
      // A consumer from the environment runs with them.
      const spy = yield* makeSpy
      const context = yield* Layer.build(Consumer.layerFromEnv(() => Effect.void).pipe(
        Layer.provide(Layer.succeed(QueueStore, spy.store)),
        Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnvRecord(env)))
      ))
      const settings = Context.get(context, Consumer.Consumer).settings
      assert.deepStrictEqual(settings.perQueue["reports"]?.leaseMs, 30_000)
      assert.include(Consumer.startupLine(settings, { presence: false }), "queue reports: concurrency 2, batch 1, lease 30.0s")
    }))

  it.effect("bad per-queue values are refused naming the variable (or the option), the queue and the rule", () =>
    Effect.gen(function*() {
      const base = { LEASEHOLD_QUEUES: "emails,reports" }
      const cases: ReadonlyArray<readonly [Record<string, string>, string, RegExp, string]> = [
        [{ LEASEHOLD_QUEUE_CONCURRENCY: "reports=0" }, "LEASEHOLD_QUEUE_CONCURRENCY", /from 1 to 10000/, "reports=0"],
        [{ LEASEHOLD_QUEUE_CONCURRENCY: "reports=abc" }, "LEASEHOLD_QUEUE_CONCURRENCY", /whole number/, "reports=abc"],
        [{ LEASEHOLD_QUEUE_CONCURRENCY: "reports" }, "LEASEHOLD_QUEUE_CONCURRENCY", /queue=value pairs/, "reports"],
        [{ LEASEHOLD_QUEUE_CONCURRENCY: "reports=2,reports=3" }, "LEASEHOLD_QUEUE_CONCURRENCY", /each queue once/, "reports=3"],
        [{ LEASEHOLD_QUEUE_CONCURRENCY: "reportz=2" }, "LEASEHOLD_QUEUE_CONCURRENCY", /a queue this consumer consumes \(emails, reports\)/, "reportz"],
        [{ LEASEHOLD_QUEUE_CONCURRENCY: "bad name=2" }, "LEASEHOLD_QUEUE_CONCURRENCY", /A-Z a-z 0-9/, "bad name"],
        [{ LEASEHOLD_QUEUE_BATCH_SIZE: "emails=5000" }, "LEASEHOLD_QUEUE_BATCH_SIZE", /from 1 to 1000/, "emails=5000"],
        [{ LEASEHOLD_QUEUE_LEASE: "reports=100ms" }, "LEASEHOLD_QUEUE_LEASE", /from 300 ms/, "reports=100ms"],
        [{ LEASEHOLD_QUEUE_LEASE: "reports=soon" }, "LEASEHOLD_QUEUE_LEASE", /duration such as/, "reports=soon"]
      ]
      for (const [env, variable, rule, quoted] of cases) {
        const e = yield* Effect.flip(QueueConfig.fromEnv.pipe(Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnvRecord({ ...base, ...env })))))
        assert.strictEqual(e._tag, "ConfigInvalid", JSON.stringify(env))
        assert.strictEqual(e.variable, variable, JSON.stringify(env))
        assert.match(e.rule, rule, JSON.stringify(env))
        assert.include(e.message, quoted)
      }
      const fromCode: ReadonlyArray<readonly [QueueConfig.ConsumerOptions, string, RegExp]> = [
        [{ queues: { reports: { concurrency: 0 } } }, "queues.reports.concurrency", /from 1 to 10000/],
        [{ queues: { reports: { lease: "100ms" } } }, "queues.reports.lease", /from 300 ms/],
        [{ queues: { reports: { concurency: 2 } as QueueConfig.QueueOptions } }, "queues.reports.concurency", /one of concurrency, batchSize, lease/],
        [{ queues: {} }, "queues", /at least one queue/],
        [{ queues: ["a"], queueConcurrency: { b: 2 } }, "queueConcurrency.b", /a queue this consumer consumes/]
      ]
      for (const [options, variable, rule] of fromCode) {
        const e = yield* Effect.flip(QueueConfig.resolve(options))
        assert.strictEqual(e.variable, variable, JSON.stringify(options))
        assert.match(e.rule, rule)
      }
    }))
})
