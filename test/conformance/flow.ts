/**
 * Conformance, flow control (docs/flow-control.md): limits stored per queue and task with who
 * wrote them, the claim kept within concurrency per queue, task and key, sliding rate windows,
 * FIFO heads and fair turns; a slot's lease never renewed once expired; what `flowStatus`,
 * `nextVisibleAt` and `pruneFlow` read. The races only a server with many sessions can run are
 * in FlowClaimPg.test.ts.
 */
import { assert } from "@effect/vitest"
import { Duration, Effect, Fiber, Metric, Option } from "effect"
import { TestClock } from "effect/testing"
import type { Claim, NewMessage } from "../../src/Message.ts"
import * as QueueMetrics from "../../src/QueueMetrics.ts"
import { QueueStore } from "../../src/QueueStore.ts"
import * as Finish from "../support/Finish.ts"
import { claimAll, freshQueue, realSleep, refusal, sendAll, slack, type Suite } from "./support.ts"

/** `n` messages of task `t` with `key`, payloads `${key}${i}`. */
const keyed = (key: string, n: number, extra: Partial<NewMessage> = {}): Array<NewMessage> =>
  Array.from({ length: n }, (_, i) => ({ task: "t", payload: `${key}${i}`, key, ...extra }))

/** How many of `claims` each key (or task) has, sorted by name. */
const tally = (claims: ReadonlyArray<Claim>, by: (c: Claim) => string | null | undefined) => {
  const counts = new Map<string, number>()
  for (const c of claims) counts.set(by(c) ?? "-", (counts.get(by(c) ?? "-") ?? 0) + 1)
  return [...counts.entries()].sort(([a], [b]) => (a < b ? -1 : 1))
}

const ackAll = (claims: ReadonlyArray<Claim>) =>
  Effect.gen(function*() {
    const store = yield* QueueStore
    for (const c of claims) assert.isTrue(yield* Finish.ack(store, c))
  })

/** flow tests of the conformance suite (see index.ts). */
export const flow = ({ it, movesTime }: Suite) => {
  it.effect("limits: stored per queue and task, an operator's kept over code's, cleared with null", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("limits")
      assert.isTrue(yield* store.setLimits({ queue, task: "slow" }, { concurrency: 2 }, { source: "code" }))
      assert.isTrue(yield* store.setLimits({ queue }, { concurrency: 20, keyConcurrency: 2, rate: { count: 100, periodMs: 60_000 } }))
      const rows = yield* store.limits(queue)
      assert.deepStrictEqual(rows.map((r) => [r.queue, r.task, r.source, r.limits]), [
        [queue, null, "operator", { concurrency: 20, rate: { count: 100, periodMs: 60_000 }, keyConcurrency: 2 }],
        [queue, "slow", "code", { concurrency: 2 }]
      ])
      assert.instanceOf(rows[0]!.updatedAt, Date)
      assert.isTrue((yield* store.limits()).some((r) => r.queue === queue), "every queue's limits list it")
      // A declaration does not overwrite an operator's limits; an operator overwrites code's.
      assert.isFalse(yield* store.setLimits({ queue }, { concurrency: 1 }, { source: "code" }))
      assert.isTrue(yield* store.setLimits({ queue, task: "slow" }, { concurrency: 3 }))
      assert.deepStrictEqual((yield* store.limits(queue)).map((r) => [r.source, r.limits.concurrency]), [["operator", 20], ["operator", 3]])
      // Cleared (null, or an empty record): the queue is unlimited again.
      assert.isTrue(yield* store.setLimits({ queue }, null))
      assert.isTrue(yield* store.setLimits({ queue, task: "slow" }, {}))
      assert.lengthOf(yield* store.limits(queue), 0)
      yield* sendAll(queue, keyed("a", 5))
      assert.lengthOf(yield* claimAll(queue), 5, "no limits left")
    }))

  it.effect("bad limits, keys and weights are refused with the rule, and nothing is written", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("badlimits")
      const cases: ReadonlyArray<[unknown, string]> = [
        [{ concurrency: 0 }, "concurrency"],
        [{ concurrency: 1.5 }, "concurrency"],
        [{ rate: { count: 5, periodMs: 5 } }, "rate.periodMs"],
        [{ keyRate: { count: 0, periodMs: 1_000 } }, "keyRate.count"],
        [{ fifo: true, keyConcurrency: 2 }, "keyConcurrency"],
        [{ burst: 3 }, "burst"]
      ]
      for (const [limits, field] of cases) {
        const e = yield* refusal(store.setLimits({ queue }, limits as never))
        assert.deepStrictEqual([e._tag, e.field], ["InvalidInput", field])
      }
      const e = yield* refusal(store.setLimits({ queue, task: "t" }, { keyConcurrency: 2 }))
      assert.deepStrictEqual([e._tag, e.field], ["InvalidInput", "keyConcurrency"], "a key limit is the queue's alone")
      assert.deepStrictEqual((yield* refusal(store.setLimits({ queue: "bad queue" }, { concurrency: 1 }))).field, "queue")
      assert.lengthOf(yield* store.limits(queue), 0, "nothing written")
      assert.deepStrictEqual((yield* refusal(store.setKeyWeight(queue, "k", 0))).field, "weight")
      assert.deepStrictEqual((yield* refusal(store.setKeyWeight(queue, "x".repeat(201), 2))).field, "key")
      assert.deepStrictEqual((yield* refusal(store.send(queue, [{ task: "t", payload: 1, key: "" }]))).field, "key")
      assert.deepStrictEqual((yield* store.stats(queue)).ready, 0, "a refused send stores nothing")
    }))

  it.effect("key concurrency: a key at its limit is passed over and blocks no other; an ack frees one slot", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("keyconc")
      yield* store.setLimits({ queue }, { keyConcurrency: 2 })
      // Key a's backlog first: a claim that stopped at a full key would take nothing else.
      yield* sendAll(queue, [...keyed("a", 10), ...keyed("b", 3), { task: "t", payload: "free" }, { task: "t", payload: "free2" }])
      const first = yield* claimAll(queue, { limit: 10 })
      assert.deepStrictEqual(tally(first, (c) => c.key), [["-", 2], ["a", 2], ["b", 2]], "unkeyed messages have no key limit")
      assert.strictEqual(first.find((c) => c.key === "a")!.key, "a", "a claim carries its key")
      assert.lengthOf(yield* claimAll(queue, { limit: 10 }), 0, "every key is at its limit")
      const status = yield* store.flowStatus(queue)
      assert.deepStrictEqual(status.keysAtLimit.map((k) => [k.key, k.inFlight]), [["a", 2], ["b", 2]])
      assert.strictEqual(status.inFlight, 6)
      yield* ackAll(first.filter((c) => c.key === "a").slice(0, 1))
      assert.deepStrictEqual((yield* claimAll(queue, { limit: 10 })).map((c) => c.payload), ["a2"], "one slot back, in send order")
    }))

  it.effect("a queue's concurrency and a task's hold together; the claim fills the room the limits leave", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("qconc")
      yield* store.setLimits({ queue }, { concurrency: 5 })
      yield* store.setLimits({ queue, task: "slow" }, { concurrency: 2 })
      yield* sendAll(queue, [
        ...Array.from({ length: 6 }, (_, i) => ({ task: "slow", payload: i })),
        ...Array.from({ length: 6 }, (_, i) => ({ task: "fast", payload: i }))
      ])
      const first = yield* claimAll(queue, { limit: 3 })
      assert.lengthOf(first, 3, "the claim's own limit")
      const second = yield* claimAll(queue, { limit: 10 })
      const all = [...first, ...second]
      assert.deepStrictEqual(tally(all, (c) => c.task), [["fast", 3], ["slow", 2]])
      assert.lengthOf(yield* claimAll(queue, { limit: 10 }), 0, "the queue is at its limit")
      yield* ackAll(all.filter((c) => c.task === "fast"))
      assert.deepStrictEqual(tally(yield* claimAll(queue, { limit: 10 }), (c) => c.task), [["fast", 3]], "slow still at its own limit")
    }))

  it.effect("a claim's `ahead` (messages a consumer would hold for a slot) is not taken from a queue with limits; a plain queue gives all", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const limited = freshQueue("ahead")
      const plain = freshQueue("aheadplain")
      yield* store.setLimits({ queue: limited }, { concurrency: 10 })
      yield* sendAll(limited, Array.from({ length: 8 }, (_, i) => ({ task: "t", payload: i })))
      yield* sendAll(plain, Array.from({ length: 8 }, (_, i) => ({ task: "t", payload: i })))
      const claim = (queue: string, limit: number, ahead: number) =>
        store.claim(queue, { lease: "30 seconds", limit, ahead, consumer: "c1" })
      assert.lengthOf(yield* claim(limited, 5, 5), 0, "all of it ahead: nothing from a limited queue")
      assert.deepStrictEqual((yield* claim(limited, 5, 3)).map((c) => c.payload), [0, 1], "the limit less what would be held")
      assert.deepStrictEqual((yield* claim(plain, 5, 3)).map((c) => c.payload), [0, 1, 2, 3, 4], "a plain queue: the whole limit")
      const e = yield* refusal(claim(plain, 5, 6))
      assert.strictEqual(e.field, "ahead")
      assert.strictEqual((yield* refusal(claim(plain, 5, 1.5))).field, "ahead")
      assert.lengthOf(yield* claimAll(plain, { limit: 10 }), 3, "a refused claim took nothing")
    }))

  movesTime("a rate window: starts counted across claims, a full window sleeps idle consumers until it frees", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("rate")
      yield* store.setLimits({ queue }, { rate: { count: 3, periodMs: 60_000 }, keyRate: { count: 1, periodMs: 10_000 } })
      const start = yield* store.now
      yield* sendAll(queue, [...keyed("a", 4), { task: "t", payload: "u1" }, { task: "t", payload: "u2" }, { task: "t", payload: "u3" }])
      const first = yield* claimAll(queue, { limit: 2 })
      assert.deepStrictEqual(first.map((c) => c.payload), ["a0", "u1"], "one start of key a per 10 s")
      yield* ackAll(first)
      yield* TestClock.adjust(Duration.seconds(10))
      const second = yield* claimAll(queue)
      assert.deepStrictEqual(second.map((c) => c.payload), ["a1"], "the queue's window holds 3 starts")
      yield* ackAll(second)
      const status = yield* store.flowStatus(queue)
      assert.deepStrictEqual(status.throttles.map((t) => [t.task, t.key, t.nextAt.getTime() - start.getTime()]), [
        [null, "a", 20_000],
        [null, null, 60_000]
      ])
      // Nothing in flight or delayed: idle consumers wait for the first window to free.
      assert.strictEqual(Option.getOrThrow(yield* store.nextVisibleAt(queue)).getTime() - start.getTime(), 20_000)
      yield* TestClock.adjust(Duration.seconds(39))
      assert.lengthOf(yield* claimAll(queue), 0, "still inside the queue's window")
      yield* TestClock.adjust(Duration.seconds(11))
      assert.deepStrictEqual((yield* claimAll(queue)).map((c) => c.payload), ["a2", "u2"], "the window slid past the first two starts")
    }))

  it.effect("a task's rate window counts that task's starts only", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("taskrate")
      yield* store.setLimits({ queue, task: "api" }, { rate: { count: 2, periodMs: 3_600_000 } })
      yield* sendAll(queue, [...Array.from({ length: 4 }, (_, i) => ({ task: "api", payload: i })), { task: "other", payload: "o" }])
      const claimed = yield* claimAll(queue)
      assert.deepStrictEqual(tally(claimed, (c) => c.task), [["api", 2], ["other", 1]])
      yield* ackAll(claimed)
      assert.lengthOf(yield* claimAll(queue), 0)
      assert.deepStrictEqual((yield* store.flowStatus(queue)).throttles.map((t) => [t.task, t.key]), [["api", null]])
    }))

  movesTime("FIFO: one at a time per key in send order; a failing head blocks its key only", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("fifo")
      yield* store.setLimits({ queue }, { fifo: true })
      yield* sendAll(queue, [...keyed("a", 3, { maxAttempts: 2 }), ...keyed("b", 2), { task: "t", payload: "free" }])
      const first = yield* claimAll(queue)
      assert.deepStrictEqual(first.map((c) => c.payload).sort(), ["a0", "b0", "free"])
      const a0 = first.find((c) => c.payload === "a0")!
      assert.strictEqual(yield* Finish.retry(store, a0, { delay: "10 seconds", error: "boom" }), "written")
      yield* ackAll(first.filter((c) => c !== a0))
      assert.deepStrictEqual((yield* claimAll(queue)).map((c) => c.payload), ["b1"], "a1 waits behind its failed head")
      const status = yield* store.flowStatus(queue)
      assert.deepStrictEqual(status.blockedKeys.map((b) => [b.key, b.headId, b.attempts, b.lastError]), [["a", a0.id, 1, "boom"]])
      yield* TestClock.adjust(Duration.seconds(10))
      const [again] = yield* claimAll(queue)
      assert.strictEqual(again!.payload, "a0", "the head comes back first")
      assert.strictEqual(yield* Finish.deadLetter(store, again!, { reason: "gave up" }), "written")
      assert.deepStrictEqual((yield* claimAll(queue)).map((c) => c.payload), ["a1"], "a dead head lets its key go on")
      assert.lengthOf((yield* store.flowStatus(queue)).blockedKeys, 0)
    }))

  it.effect("fair: round-robin across keys within a priority, work-conserving, weighted per key", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("fair")
      yield* store.setLimits({ queue }, { fair: true })
      yield* store.setKeyWeight(queue, "heavy", 2)
      yield* sendAll(queue, keyed("big", 20))
      yield* sendAll(queue, [...keyed("s", 2), ...keyed("heavy", 6)])
      yield* sendAll(queue, [{ task: "t", payload: "urgent", key: "big", priority: -1 }])
      const order: Array<string> = []
      for (let n = 0; n < 12; n++) {
        const claimed = yield* claimAll(queue, { limit: 1 })
        assert.lengthOf(claimed, 1, "work-conserving: a claim always takes something")
        order.push(claimed[0]!.payload as string)
        yield* ackAll(claimed)
      }
      assert.strictEqual(order[0], "urgent", "priority before turns")
      // Turn by turn (send order within a turn): big, s and heavy once per turn, heavy (weight 2)
      // twice; s runs out after two turns and its share goes to the others.
      assert.deepStrictEqual(order.slice(1), ["big0", "s0", "heavy0", "heavy1", "big1", "s1", "heavy2", "heavy3", "big2", "heavy4", "heavy5"])
    }))

  it.effect("racing claimers: many claims at once never exceed a key's, a task's or the queue's limit", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("race")
      yield* store.setLimits({ queue }, { concurrency: 12, keyConcurrency: 3 })
      yield* store.setLimits({ queue, task: "slow" }, { concurrency: 4 })
      yield* sendAll(queue, [
        ...keyed("a", 30),
        ...keyed("b", 30, { task: "slow" }),
        ...Array.from({ length: 10 }, (_, i) => ({ task: "slow", payload: `s${i}` })),
        ...keyed("c", 2),
        ...keyed("d", 30)
      ])
      const claimOnce = (i: number) => store.claim(queue, { lease: "30 seconds", limit: 4, consumer: `c${i}` })
      const claimed = (yield* Effect.all(Array.from({ length: 16 }, (_, i) => claimOnce(i)), { concurrency: "unbounded" })).flat()
      assert.lengthOf(claimed, 12, "the queue's concurrency, filled")
      for (const [key, n] of tally(claimed, (c) => c.key)) if (key !== "-") assert.isAtMost(n, 3, `key ${key}`)
      assert.isAtMost(tally(claimed, (c) => c.task).find(([t]) => t === "slow")?.[1] ?? 0, 4, "task slow")
      assert.lengthOf((yield* Effect.all(Array.from({ length: 8 }, (_, i) => claimOnce(i)), { concurrency: "unbounded" })).flat(), 0)
    }))

  it.effect("fair: ten 10-message keys all finish within the first ~110 claimed behind a 10,000-message key", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("fair10k")
      yield* store.setLimits({ queue }, { fair: true })
      yield* sendAll(queue, keyed("big", 10_000))
      for (let k = 0; k < 10; k++) yield* sendAll(queue, keyed(`small${k}-`, 10))
      let last = 0
      let smallLeft = 100
      for (let n = 1; smallLeft > 0 && n <= 200; n++) {
        const [claim] = yield* claimAll(queue, { limit: 1 })
        assert.isDefined(claim)
        if (claim!.key !== "big") {
          smallLeft--
          last = n
        }
        assert.isTrue(yield* Finish.ack(store, claim!))
      }
      assert.strictEqual(smallLeft, 0)
      assert.isAtMost(last, 110, "the small keys' last message")
    }), { timeout: 60_000 })

  it.effect("a claim cut short by a limit is counted by queue and stage (key, task, queue), a full claim not", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("limitedmetric")
      const counted = (limit: QueueMetrics.FlowLimitStage) =>
        Effect.map(Metric.value(Metric.withAttributes(QueueMetrics.claimsLimited, { queue, limit })), (s) => Number(s.count))
      const counts = Effect.all([counted("key"), counted("task"), counted("queue")])
      yield* store.setLimits({ queue }, { concurrency: 4, keyConcurrency: 1 })
      yield* store.setLimits({ queue, task: "slow" }, { concurrency: 1 })
      yield* sendAll(queue, [...keyed("a", 3), ...Array.from({ length: 3 }, (_, i) => ({ task: "slow", payload: `s${i}` }))])
      assert.lengthOf(yield* claimAll(queue, { limit: 2 }), 2, "a full claim")
      assert.deepStrictEqual(yield* counts, [0, 0, 0], "a claim that took all it asked for is not counted")
      assert.lengthOf(yield* claimAll(queue, { limit: 10 }), 0, "key a and task slow are full")
      assert.deepStrictEqual(yield* counts, [1, 1, 0], "full key and task left visible messages behind")
      yield* sendAll(queue, [...keyed("b", 1), ...keyed("c", 1), ...keyed("d", 1)])
      assert.lengthOf(yield* claimAll(queue, { limit: 10 }), 2, "the queue's concurrency of 4 cuts the claim")
      assert.deepStrictEqual((yield* counts)[2], 1)
    }))

  movesTime("a slot's lease is never renewed once expired: the slot went back to the claim", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("slot")
      yield* store.setLimits({ queue }, { concurrency: 1 })
      yield* sendAll(queue, [{ task: "t", payload: 1 }, { task: "t", payload: 2 }])
      const [held] = yield* claimAll(queue, { lease: "1 second" })
      assert.lengthOf((yield* store.renew([held!], "1 second")).held, 1, "a live lease renews")
      yield* TestClock.adjust(Duration.millis(1_500))
      const [next] = yield* claimAll(queue, { consumer: "c2" })
      assert.strictEqual(next?.payload, 2, "the expired slot came back")
      assert.lengthOf((yield* store.renew([held!], "1 second")).held, 0, "the late renewal is refused")
    }))

  it.effect("a finished message of a limited queue wakes its idle consumers", () =>
    TestClock.withLive(Effect.scoped(Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("wake")
      yield* store.setLimits({ queue }, { concurrency: 1 })
      yield* sendAll(queue, [{ task: "t", payload: 1 }, { task: "t", payload: 2 }])
      const [held] = yield* claimAll(queue)
      assert.lengthOf(yield* claimAll(queue), 0, "at its limit")
      const heard = yield* store.sends([queue])
      const woken = yield* Effect.forkChild(heard)
      yield* Effect.sleep("200 millis")
      assert.isUndefined(woken.pollUnsafe(), "nothing woke it before the slot came back")
      assert.isTrue(yield* Finish.ack(store, held!))
      yield* Fiber.join(woken).pipe(Effect.timeout("10 seconds"))
      assert.lengthOf(yield* claimAll(queue), 1)
    }))))

  it.effect("limits set while a consumer runs hold from the next claim on", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("live")
      yield* sendAll(queue, keyed("a", 6))
      const first = yield* claimAll(queue, { limit: 1 })
      assert.lengthOf(first, 1, "unlimited")
      yield* store.setLimits({ queue }, { keyConcurrency: 2 })
      assert.lengthOf(yield* claimAll(queue), 2, "the new limit counts slots claimed under it")
      assert.lengthOf(yield* claimAll(queue), 0)
      yield* store.setLimits({ queue }, null)
      assert.lengthOf(yield* claimAll(queue), 3, "cleared: the rest at once")
    }))

  movesTime("pruneFlow forgets day-old windows and idle keys, and nothing a claim still reads", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("pruneflow")
      yield* store.setLimits({ queue }, { keyRate: { count: 1, periodMs: 3_600_000 } })
      yield* sendAll(queue, [...keyed("a", 2)])
      yield* ackAll(yield* claimAll(queue))
      yield* store.pruneFlow
      assert.lengthOf(yield* claimAll(queue), 0, "a fresh window is kept")
      yield* TestClock.adjust(Duration.hours(25))
      yield* store.pruneFlow
      assert.lengthOf(yield* claimAll(queue), 1, "the day-old window went, the key's message is claimed")
    }))

  // On every store and clock, in real time: the live clock under TestClock.withLive.
  it.effect("real time: a rate window holds within its period and frees after it", () =>
    TestClock.withLive(Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("rtrate")
      yield* store.setLimits({ queue }, { rate: { count: 2, periodMs: 1_000 } })
      yield* sendAll(queue, keyed("a", 5))
      const startedAt = yield* store.now
      yield* ackAll(yield* claimAll(queue))
      assert.lengthOf(yield* claimAll(queue), 0, "inside the window")
      const next = Option.getOrThrow(yield* store.nextVisibleAt(queue))
      assert.isAtMost(Math.abs(next.getTime() - startedAt.getTime() - 1_000), slack)
      const wait = next.getTime() - (yield* store.now).getTime()
      yield* realSleep(Math.max(0, wait) + 100)
      assert.lengthOf(yield* claimAll(queue), 2, "the window slid past both starts")
      assert.lengthOf(yield* claimAll(queue), 0, "and is full again")
    })))
}
