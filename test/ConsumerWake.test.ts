/**
 * Wake at lease expiry, on the memory store with TestClock: an idle consumer
 * sleeps until the earlier of its poll interval and the earliest future
 * visibility of its queues, so a dead worker's message runs again at lease
 * expiry, not lease + a poll interval.
 */
import { assert, describe, it } from "@effect/vitest"
import { Clock, Effect, Option } from "effect"
import { TestClock } from "effect/testing"
import type * as Consumer from "../src/Consumer.ts"
import { ConnectionDead } from "../src/QueueError.ts"
import { makeSpy, type Spy, startConsumer } from "./support/ConsumerHarness.ts"
import * as Finish from "./support/Finish.ts"

const queue = "default"

/** Let forked fibers run without moving time. */
const settle = Effect.gen(function*() {
  for (let i = 0; i < 20; i++) yield* Effect.yieldNow
})

/** A handler that records when each message started (Clock time) and succeeds at once. */
const recordingHandler = () => {
  const starts: Array<{ readonly id: string; readonly at: number }> = []
  const handler: Consumer.Handler = (m) =>
    Effect.map(Clock.currentTimeMillis, (at) => {
      starts.push({ id: m.id, at })
    })
  return { handler, starts }
}

/** The spy with `nextVisibleAt` replaced. */
const withNextVisibleAt = (spy: Spy, nextVisibleAt: Spy["store"]["nextVisibleAt"]): Spy => ({
  ...spy,
  store: { ...spy.store, nextVisibleAt }
})

describe("Consumer wakes at the earliest visibility (TestClock)", () => {
  it.effect("a dead worker's message runs again when its lease expires, not a poll interval later", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const h = recordingHandler()
      const [sent] = yield* spy.store.send(queue, [{ task: "t", payload: 1 }])
      // A worker claims it for 5 s and dies: nobody renews.
      const [dead] = yield* spy.inner.claim(queue, { lease: "5 seconds", limit: 1, consumer: "dead-worker" })
      assert.strictEqual(dead!.id, sent!.id)

      yield* startConsumer(spy, h.handler, { lease: "30 seconds", pollInterval: "1 minute" })
      yield* settle
      assert.deepStrictEqual(h.starts, [], "the lease still hides it")
      yield* TestClock.adjust("4999 millis")
      yield* settle
      assert.deepStrictEqual(h.starts, [], "not before the lease ends")
      yield* TestClock.adjust("1 millis")
      yield* settle
      assert.deepStrictEqual(h.starts, [{ id: sent!.id, at: 5_000 }], "re-run at lease expiry (5 s), not at the 60 s poll")
      assert.strictEqual(spy.of("ack").length, 1)
    }))

  it.effect("a delayed message runs when its delay ends; the earliest of several queues wins", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const h = recordingHandler()
      const [late] = yield* spy.store.send("other", [{ task: "t", payload: 1, delay: 40_000 }])
      const [soon] = yield* spy.store.send(queue, [{ task: "t", payload: 2, delay: 7_000 }])
      yield* startConsumer(spy, h.handler, { queues: [queue, "other"], pollInterval: "1 minute" })
      yield* settle
      yield* TestClock.adjust("6999 millis")
      yield* settle
      assert.deepStrictEqual(h.starts, [])
      yield* TestClock.adjust("1 millis")
      yield* settle
      assert.deepStrictEqual(h.starts, [{ id: soon!.id, at: 7_000 }])
      yield* TestClock.adjust("33 seconds")
      yield* settle
      assert.deepStrictEqual(h.starts.map((s) => s.at), [7_000, 40_000])
      assert.strictEqual(h.starts[1]!.id, late!.id)
    }))

  it.effect("a send wakes a sleeping consumer at once, whatever its poll interval", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const h = recordingHandler()
      yield* startConsumer(spy, h.handler, { pollInterval: "1 minute" })
      yield* settle
      // Sent while the consumer sleeps its minute (no visibility was known when it went to sleep).
      yield* TestClock.adjust("10 seconds")
      const [sent] = yield* spy.store.send(queue, [{ task: "t", payload: 1 }])
      yield* settle
      assert.deepStrictEqual(h.starts, [{ id: sent!.id, at: 10_000 }])
    }))

  it.effect("a visibility beyond the poll interval does not stretch the sleep", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const h = recordingHandler()
      // Held by another consumer for 5 minutes: the only visibility known is 300 s away.
      const [held] = yield* spy.store.send(queue, [{ task: "t", payload: 1 }])
      const [claim] = yield* spy.inner.claim(queue, { lease: "5 minutes", limit: 1, consumer: "other" })
      yield* startConsumer(spy, h.handler, { pollInterval: "1 minute" })
      yield* settle
      // Handed back at 30 s by a retry without delay (it notifies nobody): found by the next poll,
      // at 60 s, not at 300 s.
      yield* TestClock.adjust("30 seconds")
      assert.strictEqual(yield* Finish.retry(spy.inner, claim!, { delay: 0, error: "handed back" }), "written")
      yield* TestClock.adjust("29 seconds")
      yield* settle
      assert.deepStrictEqual(h.starts, [])
      yield* TestClock.adjust("1 second")
      yield* settle
      assert.deepStrictEqual(h.starts, [{ id: held!.id, at: 60_000 }])
    }))

  it.effect("a release (a peer shutting down) wakes a sleeping consumer at once, as a send does", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const h = recordingHandler()
      const [held] = yield* spy.store.send(queue, [{ task: "t", payload: 1 }])
      const [claim] = yield* spy.inner.claim(queue, { lease: "5 minutes", limit: 1, consumer: "peer" })
      yield* startConsumer(spy, h.handler, { pollInterval: "1 minute" })
      yield* settle
      yield* TestClock.adjust("30 seconds")
      assert.strictEqual(yield* Finish.release(spy.inner, claim!), "written")
      yield* settle
      assert.deepStrictEqual(h.starts, [{ id: held!.id, at: 30_000 }], "claimed at the release, not at the next poll (60 s)")
    }))

  it.effect("when nextVisibleAt fails, the consumer sleeps the poll interval", () =>
    Effect.gen(function*() {
      const base = yield* makeSpy
      let asked = 0
      const spy = withNextVisibleAt(base, () =>
        Effect.suspend(() => {
          asked += 1
          return Effect.fail(new ConnectionDead({ operation: "nextVisibleAt", message: "nextVisibleAt: Connection terminated" }))
        }))
      const h = recordingHandler()
      const [sent] = yield* spy.store.send(queue, [{ task: "t", payload: 1, delay: 5_000 }])
      yield* startConsumer(spy, h.handler, { pollInterval: "20 seconds" })
      yield* settle
      yield* TestClock.adjust("19 seconds")
      yield* settle
      assert.deepStrictEqual(h.starts, [], "no wake at 5 s without a known visibility")
      yield* TestClock.adjust("1 second")
      yield* settle
      assert.deepStrictEqual(h.starts, [{ id: sent!.id, at: 20_000 }])
      assert.isAtLeast(asked, 1)
    }))

  it.effect("a visibility that never comes true (database clock ahead) backs off instead of spinning", () =>
    Effect.gen(function*() {
      const base = yield* makeSpy
      let asked = 0
      // The store keeps saying "visible at 1 s", but nothing is ever claimable.
      const spy = withNextVisibleAt(base, () =>
        Effect.sync(() => {
          asked += 1
          return Option.some(new Date(1_000))
        }))
      const h = recordingHandler()
      yield* startConsumer(spy, h.handler, { pollInterval: "1 minute" })
      yield* settle
      for (let i = 0; i < 120; i++) {
        yield* TestClock.adjust("1 second")
        yield* settle
      }
      // 1, 2, 4, ... ms up to the poll interval, then one per minute: a couple of dozen, not thousands.
      assert.isAtMost(asked, 25, `nextVisibleAt asked ${asked} times in 2 minutes`)
      assert.isAtLeast(asked, 3)
    }))
})
