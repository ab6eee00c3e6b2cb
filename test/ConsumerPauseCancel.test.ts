/**
 * Pause, resume and cancel as a consumer lives them, on the memory store with TestClock: a
 * paused queue is not claimed and runs again at once on resume; a running message cancelled
 * by an operator has its handler interrupted (finalizers run) at once when the consumer hears
 * of the cancel, else at the next renewal, and is deleted with a `cancelled` history row,
 * never retried; the other messages run on.
 */
import { assert, describe, it } from "@effect/vitest"
import { Clock, Deferred, Effect, Metric, Option, Ref } from "effect"
import { TestClock } from "effect/testing"
import type * as Consumer from "../src/Consumer.ts"
import type { MessageId } from "../src/Message.ts"
import * as QueueMetrics from "../src/QueueMetrics.ts"
import { captureLogs, makeSpy, type Spy, startConsumer } from "./support/ConsumerHarness.ts"

const queue = "default"
const lease = "30 seconds"

/** Let forked fibers run without moving time. */
const settle = Effect.gen(function*() {
  for (let i = 0; i < 20; i++) yield* Effect.yieldNow
})

const counter = (metric: Metric.Metric<number, any>) =>
  Effect.map(Metric.value(metric), (state: any) => Number(state.count ?? state.value ?? 0))

/** A handler that runs until its message's gate opens, recording starts, finalizers (with Clock time) and ends. */
const gatedHandler = () =>
  Effect.gen(function*() {
    const started = yield* Ref.make<Array<{ readonly id: MessageId; readonly at: number }>>([])
    const finalized = yield* Ref.make<Array<{ readonly id: MessageId; readonly at: number }>>([])
    const gates = new Map<string, Deferred.Deferred<void>>()
    const gate = (id: string) => {
      let g = gates.get(id)
      if (g === undefined) {
        g = Deferred.makeUnsafe<void>()
        gates.set(id, g)
      }
      return g
    }
    const handler: Consumer.Handler = (m) =>
      Effect.gen(function*() {
        const at = yield* Clock.currentTimeMillis
        yield* Ref.update(started, (s) => [...s, { id: m.id, at }])
        yield* Deferred.await(gate(m.id))
      }).pipe(
        Effect.ensuring(Effect.flatMap(Clock.currentTimeMillis, (at) => Ref.update(finalized, (s) => [...s, { id: m.id, at }])))
      )
    return { handler, started, finalized, open: (id: string) => Deferred.succeed(gate(id), undefined) }
  })

describe("Consumer: pause, resume and cancel (memory store, TestClock)", () => {
  it.effect("a paused queue is not claimed; resume runs its messages at once, without waiting for a poll", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const h = yield* gatedHandler()
      yield* spy.store.pause(queue)
      const [sent] = yield* spy.store.send(queue, [{ task: "t", payload: 1 }])
      yield* startConsumer(spy, h.handler, { lease, pollInterval: "1 minute" })
      yield* settle
      yield* TestClock.adjust("5 minutes")
      assert.deepStrictEqual(yield* Ref.get(h.started), [], "nothing claimed while paused")
      assert.strictEqual(spy.of("claim").length, 0)
      // Resumed in the middle of a one-minute sleep: the consumer wakes at once.
      yield* TestClock.adjust("10 seconds")
      yield* spy.store.resume(queue)
      yield* settle
      assert.deepStrictEqual(yield* Ref.get(h.started), [{ id: sent!.id, at: 310_000 }])
      yield* h.open(sent!.id)
      yield* settle
      assert.deepStrictEqual(spy.of("ack").map((c) => c.ids), [[sent!.id]])
    }))

  it.effect("pausing does not stop messages in flight: they finish and are acked", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const h = yield* gatedHandler()
      const [first, second] = yield* spy.store.send(queue, [{ task: "t", payload: 1 }, { task: "t", payload: 2 }])
      yield* startConsumer(spy, h.handler, { lease, concurrency: 1 })
      yield* settle
      yield* spy.store.pause(queue)
      yield* TestClock.adjust("20 seconds")
      yield* h.open(first!.id)
      yield* settle
      yield* TestClock.adjust("1 minute")
      assert.deepStrictEqual(spy.of("ack").map((c) => c.ids), [[first!.id]])
      assert.deepStrictEqual((yield* Ref.get(h.started)).map((s) => s.id), [first!.id], "the second waits for the resume")
      yield* spy.store.resume(queue)
      yield* settle
      assert.deepStrictEqual((yield* Ref.get(h.started)).map((s) => s.id), [first!.id, second!.id])
    }))

  it.effect("cancel of a running message wakes the renewer: its handler is interrupted at once; deleted as cancelled; the others run on", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const logs = captureLogs()
      const h = yield* gatedHandler()
      const cancelledBefore = yield* counter(QueueMetrics.cancelled)
      const taskCancelledBefore = yield* counter(QueueMetrics.forTask(queue, "t").cancelled)
      const [doomed, other] = yield* spy.store.send(queue, [{ task: "t", payload: 1 }, { task: "t", payload: 2 }])
      yield* startConsumer(spy, h.handler, { lease }, logs)
      yield* settle
      assert.deepStrictEqual((yield* Ref.get(h.started)).map((s) => s.id), [doomed!.id, other!.id])
      yield* TestClock.adjust("3 seconds")
      assert.deepStrictEqual(yield* spy.store.cancel([doomed!.id]), [{ id: doomed!.id, result: "cancelling" }])
      // No time passes: the cancel's notification makes the claim renew now, and the answer carries the flag.
      yield* settle
      assert.deepStrictEqual(yield* Ref.get(h.finalized), [{ id: doomed!.id, at: 3_000 }], "interrupted, its finalizer ran")
      assert.deepStrictEqual(spy.of("renew").map((c) => c.at), [3_000])
      assert.deepStrictEqual(spy.of("cancel").map((c) => c.ids), [[doomed!.id]])
      assert.isTrue(Option.isNone(yield* spy.inner.get(doomed!.id)), "deleted")
      const history = yield* spy.inner.attempts(doomed!.id)
      assert.deepStrictEqual(history.map((a) => [a.attempt, a.outcome, a.consumer]), [[1, "cancelled", "test-consumer"]])
      assert.match(history[0]!.error ?? "", /cancelled by an operator/)
      assert.strictEqual((yield* counter(QueueMetrics.cancelled)) - cancelledBefore, 1)
      assert.strictEqual((yield* counter(QueueMetrics.forTask(queue, "t").cancelled)) - taskCancelledBefore, 1)
      assert.isTrue(logs.entries.some((e) => e.level === "Warn" && e.message.startsWith("cancelled while running")))
      // The renewals go on every lease/3 from the early one.
      yield* TestClock.adjust("10 seconds")
      assert.deepStrictEqual(spy.of("renew").map((c) => c.at), [3_000, 13_000])
      // Not retried, not dead-lettered: nothing of it left anywhere, a long time later.
      yield* TestClock.adjust("10 minutes")
      assert.strictEqual(spy.of("retry").length + spy.of("deadLetter").length + spy.of("release").length, 0)
      assert.deepStrictEqual((yield* Ref.get(h.started)).map((s) => s.id), [doomed!.id, other!.id], "never run again")
      // The other message ran on, renewed all along, and is acked.
      assert.strictEqual(Option.getOrThrow(yield* spy.inner.get(other!.id)).state, "in-flight")
      yield* h.open(other!.id)
      yield* settle
      assert.deepStrictEqual(spy.of("ack").map((c) => c.ids), [[other!.id]])
      const stats = yield* spy.inner.stats(queue)
      assert.deepStrictEqual([stats.ready, stats.delayed, stats.inFlight, stats.dead], [0, 0, 0, 0])
    }))

  it.effect("a cancel wakes only the claim holding the message: the other claims renew on their own schedule", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const h = yield* gatedHandler()
      // One message per claim: two claims, two renewers.
      const [doomed, other] = yield* spy.store.send(queue, [{ task: "t", payload: 1 }, { task: "t", payload: 2 }])
      yield* startConsumer(spy, h.handler, { lease, batchSize: 1 })
      yield* settle
      assert.deepStrictEqual((yield* Ref.get(h.started)).map((s) => s.id), [doomed!.id, other!.id])
      assert.deepStrictEqual(spy.of("claim").length, 2, "two claims")
      yield* TestClock.adjust("3 seconds")
      yield* spy.store.cancel([doomed!.id])
      yield* settle
      assert.deepStrictEqual(spy.of("renew").map((c) => [c.at, c.ids]), [[3_000, [doomed!.id]]], "only the doomed one's claim renewed early")
      assert.deepStrictEqual(yield* Ref.get(h.finalized), [{ id: doomed!.id, at: 3_000 }])
      yield* TestClock.adjust("7 seconds")
      assert.deepStrictEqual(spy.of("renew").map((c) => [c.at, c.ids]), [[3_000, [doomed!.id]], [10_000, [other!.id]]], "the other at lease/3")
      yield* h.open(other!.id)
      yield* settle
    }))

  it.effect("without the cancel notification, the next renewal carries the flag: interrupted within the renew interval", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const h = yield* gatedHandler()
      const deaf: Spy = { ...spy, store: { ...spy.store, cancels: () => Effect.succeed(Effect.never) } }
      const [doomed] = yield* spy.store.send(queue, [{ task: "t", payload: 1 }])
      yield* startConsumer(deaf, h.handler, { lease })
      yield* settle
      yield* TestClock.adjust("3 seconds")
      yield* spy.store.cancel([doomed!.id])
      // Renewals run every lease/3 = 10 s: the first after the cancel, at 10 s, carries the flag.
      yield* TestClock.adjust("6 seconds")
      assert.deepStrictEqual(yield* Ref.get(h.finalized), [], "not before the renewal")
      yield* TestClock.adjust("1 second")
      yield* settle
      assert.deepStrictEqual(yield* Ref.get(h.finalized), [{ id: doomed!.id, at: 10_000 }])
      assert.deepStrictEqual((yield* spy.inner.attempts(doomed!.id)).map((a) => a.outcome), ["cancelled"])
    }))

  it.effect("a message cancelled while its holder died is deleted by the next claim: never run again", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const h = yield* gatedHandler()
      const [sent] = yield* spy.store.send(queue, [{ task: "t", payload: 1 }])
      // Claimed by a consumer that then dies: flagged while its lease still runs, never finished.
      yield* spy.inner.claim(queue, { lease: "5 seconds", limit: 1, consumer: "dead" })
      assert.deepStrictEqual(yield* spy.store.cancel([sent!.id]), [{ id: sent!.id, result: "cancelling" }])
      yield* TestClock.adjust("6 seconds")
      yield* startConsumer(spy, h.handler, { lease })
      yield* settle
      // The claim finds it flagged and deletes it instead of handing it out.
      assert.deepStrictEqual(yield* Ref.get(h.started), [])
      assert.isTrue(Option.isNone(yield* spy.inner.get(sent!.id)))
      assert.deepStrictEqual((yield* spy.inner.attempts(sent!.id)).map((a) => [a.outcome, a.consumer]), [["cancelled", "dead"]])
    }))

  it.effect("a handler that fails just as it is cancelled is not retried: its retry becomes the cancel", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const failing: Consumer.Handler = (m) =>
        Effect.andThen(
          // The cancel arrives while the handler runs, before any renewal could carry it.
          Effect.andThen(spy.store.cancel([m.id]), Effect.sleep("1 second")),
          Effect.fail(new Error("boom"))
        )
      const [sent] = yield* spy.store.send(queue, [{ task: "t", payload: 1, maxAttempts: 5 }])
      yield* startConsumer(spy, failing, { lease })
      yield* settle
      yield* TestClock.adjust("1 second")
      yield* settle
      assert.isTrue(Option.isNone(yield* spy.inner.get(sent!.id)))
      assert.deepStrictEqual((yield* spy.inner.attempts(sent!.id)).map((a) => a.outcome), ["cancelled"])
    }))

  it.effect("a retry the store turns into a cancel (cancelled after the handler ended) is reported as cancelled, not retried", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const logs = captureLogs()
      const retriedBefore = yield* counter(QueueMetrics.retried)
      const cancelledBefore = yield* counter(QueueMetrics.cancelled)
      const taskCancelledBefore = yield* counter(QueueMetrics.forTask(queue, "t").cancelled)
      // Cancelled and failed in one step: no renewal can carry the flag to the renewer first, so
      // the consumer hands a retry to the completer and the store deletes the message instead.
      const failing: Consumer.Handler = (m) => Effect.andThen(spy.store.cancel([m.id]), Effect.fail(new Error("boom")))
      const [sent] = yield* spy.store.send(queue, [{ task: "t", payload: 1, maxAttempts: 5 }])
      yield* startConsumer(spy, failing, { lease }, logs)
      yield* settle
      assert.isTrue(Option.isNone(yield* spy.inner.get(sent!.id)))
      assert.deepStrictEqual((yield* spy.inner.attempts(sent!.id)).map((a) => a.outcome), ["cancelled"])
      assert.strictEqual((yield* counter(QueueMetrics.cancelled)) - cancelledBefore, 1)
      assert.strictEqual((yield* counter(QueueMetrics.forTask(queue, "t").cancelled)) - taskCancelledBefore, 1)
      assert.strictEqual((yield* counter(QueueMetrics.retried)) - retriedBefore, 0, "not counted as retried")
      assert.isTrue(logs.entries.some((e) => e.level === "Warn" && /cancelled while running: cancelled by an operator after the handler ended; its retry was not written/.test(e.message)))
      assert.isFalse(logs.entries.some((e) => /retry in/.test(e.message)), "no retry announced")
    }))
})
