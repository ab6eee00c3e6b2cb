/**
 * A lane's second claim loop (consumer/claimLoop.ts `Role`): from 32 handler slots, while the
 * last claim came back full, a second claim statement is in flight beside the first; each
 * reserves its room first, so together they never take more than the lane's room. An idle or
 * small lane claims with one loop only. Memory store behind a gate that holds each claim until
 * the test lets it answer, TestClock.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Metric, Ref } from "effect"
import * as QueueMetrics from "../src/QueueMetrics.ts"
import type { QueueStoreShape } from "../src/QueueStore.ts"
import { gatedHandler, makeSpy, sendN, type Spy, startConsumer } from "./support/ConsumerHarness.ts"

const lease = "30 seconds"

/** Let forked fibers run without moving time. */
const settle = Effect.gen(function*() {
  for (let i = 0; i < 20; i++) yield* Effect.yieldNow
})

/** The messages each claim loop has claimed so far in this process (`leasehold_loop_messages_claimed`). */
const claimedByLoop = Effect.all({
  lead: Effect.map(Metric.value(QueueMetrics.claimedByLead), (s) => Number(s.count)),
  beside: Effect.map(Metric.value(QueueMetrics.claimedBeside), (s) => Number(s.count))
})

/** What each loop claimed since `before`. */
const claimedSince = (before: { readonly lead: number; readonly beside: number }) =>
  Effect.map(claimedByLoop, (now) => ({ lead: now.lead - before.lead, beside: now.beside - before.beside }))

/** A claim the test has not let answer yet: what it asked for, and its gate. */
interface PendingClaim {
  readonly limit: number
  readonly gate: Deferred.Deferred<void>
}

/**
 * The spy's store with every claim held at a gate until {@link answer}: how many are in flight at
 * once can be seen, and what each asked for.
 */
const gatedClaims = (spy: Spy) =>
  Effect.gen(function*() {
    const pending: Array<PendingClaim> = []
    const limits: Array<number> = []
    let inFlight = 0
    let most = 0
    const store: QueueStoreShape = {
      ...spy.store,
      claim: (q, options) =>
        Effect.gen(function*() {
          const gate = yield* Deferred.make<void>()
          limits.push(options.limit)
          pending.push({ limit: options.limit, gate })
          inFlight += 1
          most = Math.max(most, inFlight)
          yield* Deferred.await(gate)
          inFlight -= 1
          return yield* spy.store.claim(q, options)
        })
    }
    /** Let the oldest claim in flight answer. */
    const answer = Effect.suspend(() => {
      const next = pending.shift()
      return next === undefined ? Effect.die("no claim in flight") : Deferred.succeed(next.gate, undefined)
    })
    return { store, answer, limits, pendingCount: () => pending.length, most: () => most }
  })

/**
 * `messages` queued, then a consumer of `concurrency` slots (batches of 10, nothing claimed ahead)
 * on the gated store, its handlers blocking, run until its first claim waits at the gate.
 */
const started = (messages: number, concurrency: number) =>
  Effect.gen(function*() {
    const spy = yield* makeSpy
    const gated = yield* gatedClaims(spy)
    const h = yield* gatedHandler()
    const ids = yield* sendN(spy, messages)
    yield* startConsumer({ ...spy, store: gated.store }, h.handler, { lease, concurrency, batchSize: 10, prefetch: 0 })
    yield* settle
    return { gated, h, ids }
  })

describe("Consumer: a second claim loop beside the first (memory store, TestClock)", () => {
  it.effect("a lane of 40 over a backlog: after a full claim a second claim is in flight beside the next, and together they claim no more than the room", () =>
    Effect.gen(function*() {
      const before = yield* claimedByLoop
      const { gated, h, ids } = yield* started(200, 40)
      assert.strictEqual(gated.pendingCount(), 1, "one claim before any came back full")
      yield* gated.answer
      yield* settle
      // The first claim came back full (10 of 10): the lead claims again, and the loop beside it too.
      assert.strictEqual(gated.pendingCount(), 2, "two claims in flight at once")
      assert.deepStrictEqual(gated.limits, [10, 10, 10])
      while (gated.pendingCount() > 0) {
        yield* gated.answer
        yield* settle
      }
      // Every handler blocks: the lane holds its 40 slots and claims nothing more.
      assert.strictEqual((yield* Ref.get(h.started)).length, 40)
      assert.strictEqual(gated.limits.reduce((a, b) => a + b, 0), 40, "the claims asked for 40 in all: the room")
      assert.strictEqual(gated.most(), 2)
      assert.deepStrictEqual([...(yield* Ref.get(h.started))].sort((a, b) => Number(a) - Number(b)), ids.slice(0, 40))
      // The metric tells the loops apart: the second claimed at least its one full batch.
      const claimed = yield* claimedSince(before)
      assert.strictEqual(claimed.lead + claimed.beside, 40)
      assert.isAtLeast(claimed.beside, 10)
      assert.isAtLeast(claimed.lead, 10)
    }))

  it.effect("a claim that comes back short never starts the second loop: the lead claims alone, then sleeps", () =>
    Effect.gen(function*() {
      const { gated, h } = yield* started(5, 40)
      yield* gated.answer
      yield* settle
      // 5 of 10: the lead goes on alone (its next claim finds nothing and it sleeps until a send).
      assert.strictEqual(gated.pendingCount(), 1)
      yield* gated.answer
      yield* settle
      assert.strictEqual(gated.pendingCount(), 0, "idle: no claim in flight")
      assert.strictEqual(gated.most(), 1)
      assert.strictEqual((yield* Ref.get(h.started)).length, 5)
    }))

  it.effect("a lane under 32 slots claims with one loop, however full its claims come back", () =>
    Effect.gen(function*() {
      const before = yield* claimedByLoop
      const { gated, h } = yield* started(100, 31)
      for (let i = 0; i < 4; i++) {
        assert.strictEqual(gated.pendingCount(), 1, `claim ${i + 1} alone`)
        yield* gated.answer
        yield* settle
      }
      assert.strictEqual(gated.most(), 1)
      assert.deepStrictEqual(gated.limits, [10, 10, 10, 1])
      assert.strictEqual((yield* Ref.get(h.started)).length, 31)
      assert.deepStrictEqual(yield* claimedSince(before), { lead: 31, beside: 0 })
    }))
})
