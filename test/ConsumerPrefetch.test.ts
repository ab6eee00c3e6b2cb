/**
 * Claiming ahead of free handler slots (`prefetch`, consumer/flight.ts `ahead`): a message held
 * ahead is leased and renewed with its claim, starts as a slot frees, never counts its wait
 * against its max runtime, is released at shutdown if it never started, and is cancelled
 * without running if an operator cancels it while it waits. `auto` holds ahead only while
 * the lane's handlers are short. Memory store, TestClock.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Ref, Scope } from "effect"
import { TestClock } from "effect/testing"
import { captureLogs, gatedHandler, makeSpy, sendN, startConsumer } from "./support/ConsumerHarness.ts"

const queue = "default"
const lease = "30 seconds"

/** Let forked fibers run without moving time. */
const settle = Effect.gen(function*() {
  for (let i = 0; i < 20; i++) yield* Effect.yieldNow
})

describe("Consumer: claiming ahead of free slots (memory store, TestClock)", () => {
  it.effect("prefetch 2 at concurrency 1: claims 3, runs one at a time, renews the held ones with the claim, claims again once the last held one started", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const h = yield* gatedHandler()
      const ids = yield* sendN(spy, 5)
      yield* startConsumer(spy, h.handler, { lease, concurrency: 1, prefetch: 2 })
      yield* settle
      assert.deepStrictEqual(spy.of("claim").map((c) => c.ids), [ids.slice(0, 3)])
      assert.deepStrictEqual(yield* Ref.get(h.started), [ids[0]])
      // lease/3: the held messages are renewed with the running one, in the claim's one statement.
      yield* TestClock.adjust("10 seconds")
      assert.deepStrictEqual(spy.of("renew").map((c) => c.ids), [ids.slice(0, 3)])
      yield* h.open(ids[0]!)
      yield* settle
      assert.deepStrictEqual(yield* Ref.get(h.started), ids.slice(0, 2))
      assert.strictEqual(spy.of("claim").length, 1, "one message still held: no claim yet")
      yield* h.open(ids[1]!)
      yield* settle
      // The last held message started: the next claim takes what the lane may hold (1 running + 2 ahead).
      assert.deepStrictEqual(yield* Ref.get(h.started), ids.slice(0, 3))
      assert.deepStrictEqual(spy.of("claim").map((c) => c.ids), [ids.slice(0, 3), ids.slice(3, 5)])
      for (const id of ids.slice(2)) {
        yield* h.open(id)
        yield* settle
      }
      assert.deepStrictEqual(spy.of("ack").map((c) => c.ids[0]), ids)
      assert.deepStrictEqual(yield* Ref.get(h.started), ids, "each ran once, in order")
    }))

  it.effect("a shutdown releases the held messages at once (attempt given back) and lets the running one finish", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const h = yield* gatedHandler()
      const ids = yield* sendN(spy, 3)
      const scope = yield* Scope.make()
      const logs = captureLogs()
      yield* startConsumer(spy, h.handler, { lease, concurrency: 1, prefetch: 2, shutdownGrace: "10 seconds" }, logs, true).pipe(
        Scope.provide(scope)
      )
      yield* settle
      assert.deepStrictEqual(yield* Ref.get(h.started), [ids[0]])
      const closing = yield* Effect.forkChild(Scope.close(scope, Exit.void))
      yield* settle
      assert.deepStrictEqual(spy.of("release").map((c) => c.ids[0]), ids.slice(1), "released before the running one ended")
      assert.isTrue(logs.entries.some((e) => /releasing 2 message\(s\) claimed ahead that had not started/.test(e.message)))
      const next = yield* spy.inner.claim(queue, { lease, limit: 10, consumer: "next" })
      assert.deepStrictEqual(next.map((c) => [c.id, c.attempts]), [[ids[1], 1], [ids[2], 1]], "visible at once, attempt given back")
      yield* h.open(ids[0]!)
      yield* Fiber.join(closing)
      assert.deepStrictEqual(spy.of("ack").map((c) => c.ids[0]), [ids[0]])
      assert.deepStrictEqual(yield* Ref.get(h.started), [ids[0]], "no held message ran")
    }))

  it.effect("a held message's max runtime counts from its handler's start, not from the claim", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const h = yield* gatedHandler()
      const ids = yield* sendN(spy, 2)
      yield* startConsumer(spy, h.handler, { lease, concurrency: 1, prefetch: 1, maxRuntime: "1 minute" })
      yield* settle
      yield* TestClock.adjust("50 seconds")
      yield* h.open(ids[0]!)
      yield* settle
      assert.deepStrictEqual(yield* Ref.get(h.started), ids)
      // 80 s after the claim, 30 s into its run: not over its max runtime.
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(yield* Ref.get(h.interrupted), [])
      yield* h.open(ids[1]!)
      yield* settle
      assert.deepStrictEqual(spy.of("ack").map((c) => c.ids[0]), ids)
      // And it still applies from the start: a third message run past it is stopped.
      const [third] = yield* sendN(spy, 1)
      yield* TestClock.adjust("1 second")
      yield* settle
      assert.deepStrictEqual((yield* Ref.get(h.started)).at(-1), third)
      yield* TestClock.adjust("61 seconds")
      yield* settle
      assert.deepStrictEqual(yield* Ref.get(h.interrupted), [third])
      assert.deepStrictEqual(spy.of("retry").map((c) => c.ids[0]), [third])
    }))

  it.effect("a held message an operator cancels is cancelled without running", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const h = yield* gatedHandler()
      const ids = yield* sendN(spy, 2)
      const consumer = yield* startConsumer(spy, h.handler, { lease, concurrency: 1, prefetch: 1 })
      yield* settle
      assert.deepStrictEqual(yield* Ref.get(h.started), [ids[0]])
      const answer = yield* spy.store.cancel([ids[1]!])
      assert.strictEqual(answer[0]?.result, "cancelling", "held: leased, so its holder must stop it")
      yield* settle
      yield* h.open(ids[0]!)
      yield* settle
      assert.deepStrictEqual(yield* Ref.get(h.started), [ids[0]], "the cancelled message's handler never ran")
      assert.deepStrictEqual(spy.of("ack").map((c) => c.ids[0]), [ids[0]])
      assert.deepStrictEqual(spy.of("cancel").map((c) => c.ids[0]), [ids[1]])
      const history = yield* spy.inner.attempts(ids[1]!)
      assert.deepStrictEqual(history.map((a) => a.outcome), ["cancelled"])
      assert.strictEqual((yield* consumer.health).inFlight, 0, "it left the flight")
    }))

  for (const onLeaseLost of ["interrupt", "continue"] as const) {
    it.effect(`a held message whose lease is lost is not run (its claim's renewal did not return it; on a lost lease ${onLeaseLost})`, () =>
      Effect.gen(function*() {
        const spy = yield* makeSpy
        const h = yield* gatedHandler()
        const ids = yield* sendN(spy, 2)
        // The store answers the held message as no longer this consumer's (another holds it).
        spy.renew = (refs, inner) =>
          Effect.map(inner.renew(refs.filter((r) => r.id !== ids[1]), lease), (renewed) => renewed)
        const consumer = yield* startConsumer(spy, h.handler, { lease, concurrency: 1, prefetch: 1, onLeaseLost })
        yield* settle
        yield* TestClock.adjust("10 seconds")
        yield* h.open(ids[0]!)
        yield* settle
        assert.deepStrictEqual(yield* Ref.get(h.started), [ids[0]], "the message whose lease was lost never ran here")
        assert.deepStrictEqual(spy.of("ack").map((c) => c.ids[0]), [ids[0]])
        assert.deepStrictEqual(spy.of("release").length + spy.of("retry").length, 0, "nothing written for it: it is the new holder's")
        assert.deepStrictEqual((yield* spy.inner.attempts(ids[1]!)).map((a) => a.outcome), ["lease-lost"])
        assert.strictEqual((yield* consumer.health).inFlight, 0, "it left the flight")
      }))
  }

  it.effect("auto: messages held when the handlers turn slow are given back after 250 ms, attempt and all", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const h = yield* gatedHandler()
      const [quick] = yield* sendN(spy, 1)
      yield* startConsumer(spy, h.handler, { lease, concurrency: 2 })
      yield* settle
      yield* h.open(quick!)
      yield* settle
      // One quick run: the lane holds 3 ahead. Five slow ones come: 2 run, 3 are held.
      const slow = yield* sendN(spy, 5)
      yield* settle
      assert.deepStrictEqual(spy.of("claim").map((c) => c.ids), [[quick], slow])
      assert.deepStrictEqual((yield* Ref.get(h.started)).slice(1), slow.slice(0, 2))
      yield* TestClock.adjust("249 millis")
      yield* settle
      assert.deepStrictEqual(spy.of("release").map((c) => c.ids[0]), [], "held, not yet given back")
      yield* TestClock.adjust("1 millis")
      yield* settle
      assert.deepStrictEqual(spy.of("release").map((c) => c.ids[0]), slow.slice(2), "given back at the bound")
      const row = yield* spy.inner.get(slow[2]!)
      assert.deepInclude(row._tag === "Some" ? row.value : {}, { state: "ready", attempts: 0 })
      assert.deepStrictEqual((yield* Ref.get(h.started)).slice(1), slow.slice(0, 2), "none of them ran")
    }))

  it.effect("auto claims nothing ahead while its running handlers are slow, however quick the earlier ones were", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const h = yield* gatedHandler()
      const [quick] = yield* sendN(spy, 1)
      yield* startConsumer(spy, h.handler, { lease, concurrency: 3 })
      yield* settle
      yield* h.open(quick!)
      yield* settle
      const slow = yield* sendN(spy, 2)
      yield* settle
      assert.deepStrictEqual(spy.of("claim").map((c) => c.ids), [[quick], slow])
      // A second later the two still run, and none ended since: only the free slot is claimed.
      yield* TestClock.adjust("1 second")
      const more = yield* sendN(spy, 5)
      yield* settle
      assert.deepStrictEqual(spy.of("claim").map((c) => c.ids), [[quick], slow, more.slice(0, 1)])
      assert.deepStrictEqual(yield* spy.inner.claim(queue, { lease, limit: 10, consumer: "other" }).pipe(Effect.map((cs) => cs.map((c) => c.id))), more.slice(1), "the rest is there for other consumers")
    }))

  it.effect("auto holds concurrency + 1 ahead while handlers are short, and none once they take 20 ms or more", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      let runMs = 0
      const ids = yield* sendN(spy, 40)
      yield* startConsumer(spy, () => Effect.sleep(runMs), { lease, concurrency: 2 })
      yield* settle
      // Nothing ended yet: no hold ahead; then the handlers took no time: 2 + 3 per claim.
      const sizes = () => spy.of("claim").map((c) => c.ids.length)
      assert.deepStrictEqual(sizes().slice(0, 3), [2, 5, 5])
      const before = sizes().length
      runMs = 50
      yield* spy.store.send(queue, Array.from({ length: 20 }, (_, i) => ({ task: "t", payload: `slow ${i}` })))
      // Drain the first 40 (moving the clock as the slow ones run), then only free slots are claimed.
      for (let i = 0; i < 200 && spy.of("ack").length < 60; i++) {
        yield* TestClock.adjust("10 millis")
        yield* settle
      }
      assert.strictEqual(spy.of("ack").length, 60)
      assert.lengthOf(ids, 40)
      // Once the mean handler time passed 20 ms, no claim took more than the free slots.
      const later = sizes().slice(before)
      assert.isTrue(later.slice(-5).every((n) => n <= 2), `claims once slow: ${later.join(",")}`)
    }))
})
