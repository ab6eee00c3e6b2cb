/**
 * The handler's `AbortSignal` (`context.signal`), on the memory store with TestClock: code outside
 * Effect that was handed the signal sees it aborted, with the reason, when the handler is stopped
 * by its max runtime, a lost lease or a shutdown; never when the handler succeeds or fails. The
 * signal is made on first read (an accessor), so a handler that does not read it pays nothing.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Schema, Scope } from "effect"
import { TestClock } from "effect/testing"
import type * as Consumer from "../src/Consumer.ts"
import { LeaseLost, MaxRuntimeExceeded } from "../src/QueueError.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as Task from "../src/Task.ts"
import { makeSpy, startConsumer } from "./support/ConsumerHarness.ts"

const queue = "default"
const lease = "30 seconds"

const settle = Effect.gen(function*() {
  for (let i = 0; i < 20; i++) yield* Effect.yieldNow
})

/**
 * Non-Effect work the handler hands its signal to: a promise that settles with the abort
 * reason (and never otherwise). The handler awaits it, so only an interruption ends the run.
 */
const foreignWork = () => {
  const seen: { signal?: AbortSignal; aborted?: Promise<unknown> } = {}
  const handler: Consumer.Handler = (_message, context) =>
    Effect.suspend(() => {
      const signal = context.signal
      seen.signal = signal
      seen.aborted = new Promise((resolve) => signal.addEventListener("abort", () => resolve(signal.reason), { once: true }))
      return Effect.promise(() => seen.aborted!)
    })
  /** The reason the foreign code saw: waits for the abort event, up to 5 real seconds (then `"never aborted"`). */
  const reason = Effect.suspend(() => {
    assert.isDefined(seen.aborted, "the handler ran and read its signal")
    return Effect.promise(() => {
      let timer: ReturnType<typeof setTimeout> | undefined
      const timeout = new Promise<unknown>((resolve) => {
        timer = setTimeout(() => resolve("never aborted"), 5_000)
      })
      return Promise.race([seen.aborted!, timeout]).finally(() => clearTimeout(timer))
    })
  })
  return { handler, seen, reason }
}

describe("the handler's AbortSignal (memory store, TestClock)", () => {
  it.effect("max runtime: the signal is aborted with MaxRuntimeExceeded (a task's context carries it too)", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const work = foreignWork()
      const slow = Task.make({
        name: "slow",
        payload: Schema.Number,
        maxRuntime: "1 minute",
        handler: (_n, context) => work.handler(context.message, context)
      })
      yield* Task.send(slow, 1).pipe(Effect.provideService(QueueStore, spy.store))
      yield* startConsumer(spy, Task.dispatcher(slow), { lease })
      yield* settle
      assert.isFalse(work.seen.signal!.aborted, "not aborted while the handler runs")
      yield* TestClock.adjust("1 minute")
      yield* settle
      const reason = yield* work.reason
      assert.instanceOf(reason, MaxRuntimeExceeded)
      assert.strictEqual((reason as MaxRuntimeExceeded).maxRuntimeMs, 60_000)
      assert.isTrue(work.seen.signal!.aborted)
      assert.strictEqual(spy.of("retry").length, 1)
    }))

  it.effect("a lost lease: the signal is aborted with LeaseLost", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const work = foreignWork()
      yield* spy.store.send(queue, [{ task: "t", payload: 1 }])
      // The renewal answers without the message: another consumer took it.
      spy.renew = () => Effect.succeed({ held: [], cancelling: [] })
      yield* startConsumer(spy, work.handler, { lease })
      yield* settle
      assert.isFalse(work.seen.signal!.aborted)
      yield* TestClock.adjust("10 seconds")
      yield* settle
      const reason = yield* work.reason
      assert.instanceOf(reason, LeaseLost)
      assert.strictEqual((reason as LeaseLost).reason, "reclaimed")
    }))

  it.effect("shutdown: a handler still running after the grace has its signal aborted with an AbortError", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const work = foreignWork()
      yield* spy.store.send(queue, [{ task: "t", payload: 1 }])
      const scope = yield* Scope.make()
      yield* startConsumer(spy, work.handler, { lease, shutdownGrace: "5 seconds" }, undefined, true).pipe(Scope.provide(scope))
      yield* settle
      const closing = yield* Effect.forkChild(Scope.close(scope, Exit.void))
      yield* settle
      yield* TestClock.adjust("4 seconds")
      yield* settle
      assert.isFalse(work.seen.signal!.aborted, "not within the grace")
      yield* TestClock.adjust("1 second")
      yield* Fiber.join(closing)
      const reason = yield* work.reason
      assert.instanceOf(reason, DOMException)
      assert.strictEqual((reason as DOMException).name, "AbortError")
      assert.match((reason as DOMException).message, /shutting down/)
      assert.deepStrictEqual(spy.of("release").length, 1)
    }))

  it.effect("a handler that succeeds or fails leaves its signal alone; the signal is an accessor, made on first read", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const signals: Array<AbortSignal> = []
      const accessor: Array<boolean> = []
      yield* spy.store.send(queue, [{ task: "ok", payload: 1 }, { task: "fail", payload: 2, maxAttempts: 1 }])
      yield* startConsumer(spy, (message, context) => {
        // A getter (on the context's prototype): nothing is made until it is read.
        accessor.push(typeof Object.getOwnPropertyDescriptor(Object.getPrototypeOf(context), "signal")?.get === "function")
        signals.push(context.signal)
        accessor.push(context.signal === signals.at(-1))
        return message.task === "ok" ? Effect.void : Effect.fail("boom")
      }, { lease })
      yield* settle
      assert.strictEqual(spy.of("ack").length, 1)
      assert.strictEqual(spy.of("deadLetter").length, 1)
      assert.deepStrictEqual(accessor, [true, true, true, true])
      assert.deepStrictEqual(signals.map((s) => s.aborted), [false, false])
      // Each message gets its own signal (reading it twice gave the same one).
      assert.notStrictEqual(signals[0], signals[1])
    }))
})
