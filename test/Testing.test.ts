/**
 * Testing.awaitIdle on the memory store with TestClock: it runs a consumer's work to the end
 * (retries with backoff included), stops at once when nothing is pending, leaves delayed work
 * beyond its horizon alone, and fails with a clear error when the queues never settle.
 */
import { assert, describe, it } from "@effect/vitest"
import { Clock, Effect } from "effect"
import type * as Consumer from "../src/Consumer.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as Testing from "../src/Testing.ts"
import { makeSpy, startConsumer } from "./support/ConsumerHarness.ts"

const queue = "default"

describe("Testing.awaitIdle (memory store, TestClock)", () => {
  it.effect("runs every message to its end, failed attempts retried after their backoff", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const runs = new Map<unknown, number>()
      // Each message fails its first two attempts, then succeeds.
      const handler: Consumer.Handler = (m) =>
        Effect.suspend(() => {
          const n = (runs.get(m.payload) ?? 0) + 1
          runs.set(m.payload, n)
          return n < 3 ? Effect.fail(`attempt ${n} fails`) : Effect.void
        })
      yield* spy.store.send(queue, [1, 2, 3].map((payload) => ({ task: "t", payload })))
      yield* startConsumer(spy, handler, { lease: "30 seconds", retryBase: "2 seconds", retryMax: "10 seconds", concurrency: 2 })
      const report = yield* Testing.awaitIdle({ queues: [queue] }).pipe(Effect.provideService(QueueStore, spy.inner))
      assert.deepStrictEqual([...runs.values()], [3, 3, 3])
      assert.strictEqual(spy.of("ack").length, 3)
      assert.deepStrictEqual(yield* spy.inner.stats(queue), { queue, ready: 0, delayed: 0, inFlight: 0, dead: 0, oldestReadyAgeMs: 0 })
      assert.isAbove(report.advancedMs, 0, "the backoffs needed the clock moved")
      assert.isAtMost(report.advancedMs, 60_000)
    }))

  it.effect("idle at once with nothing pending; a delay beyond the horizon is left alone, one within it is run", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const ran: Array<unknown> = []
      yield* startConsumer(spy, (m) => Effect.sync(() => void ran.push(m.payload)), { lease: "30 seconds" })
      const awaitIdle = (options: Testing.AwaitIdleOptions = {}) =>
        Testing.awaitIdle({ queues: [queue], ...options }).pipe(Effect.provideService(QueueStore, spy.inner))
      assert.deepStrictEqual(yield* awaitIdle(), { steps: 0, advancedMs: 0 })

      yield* spy.store.send(queue, [{ task: "t", payload: "in 5 minutes", delay: 300_000 }])
      assert.strictEqual((yield* awaitIdle()).advancedMs, 0, "5 minutes is beyond the default minute")
      assert.deepStrictEqual(ran, [])

      const before = yield* Clock.currentTimeMillis
      const report = yield* awaitIdle({ horizon: "10 minutes" })
      assert.deepStrictEqual(ran, ["in 5 minutes"])
      assert.isAtLeast(report.advancedMs, 300_000)
      assert.isAtLeast((yield* Clock.currentTimeMillis) - before, 300_000)
      // Jumped to the due time rather than stepping through the 5 minutes 100 ms at a time.
      assert.isAtMost(report.steps, 20)
    }))

  it.effect("fails with AwaitIdleTimeout naming the busy queue when nothing consumes it", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      yield* spy.inner.send("orphan", [{ task: "t", payload: 1 }])
      const error = yield* Effect.flip(
        Testing.awaitIdle({ queues: ["orphan"], maxSteps: 5 }).pipe(Effect.provideService(QueueStore, spy.inner))
      )
      assert.strictEqual(error._tag, "AwaitIdleTimeout")
      if (error._tag !== "AwaitIdleTimeout") return
      assert.strictEqual(error.steps, 5)
      assert.strictEqual(error.advancedMs, 500)
      assert.match(error.message, /not idle after 5 steps \(500 ms of TestClock time\): orphan: 1 ready, 0 in flight, 0 delayed/)
    }))

  it.live("refuses to run without the TestClock", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const error = yield* Effect.flip(Testing.awaitIdle().pipe(Effect.provideService(QueueStore, spy.inner)))
      assert.strictEqual(error._tag, "AwaitIdleTimeout")
      assert.match(error.message, /needs the TestClock/)
    }))
})
