/**
 * Conformance, the lease protocol: claim order and limits, leases, renewal, expiry and the fence after a
 * reclaim, when a claim's message became ready, `nextVisibleAt`, and the wake-ups (`sends`,
 * `cancels`); the exactly-once race.
 */
import { assert } from "@effect/vitest"
import { Effect, Fiber, Option } from "effect"
import { TestClock } from "effect/testing"
import { type Attempt, type Claim, type MessageId } from "../../src/Message.ts"
import { QueueStore } from "../../src/QueueStore.ts"
import * as Finish from "../support/Finish.ts"
import { claimAll, freshQueue, msg, realSleep, sendAll, slack, wallClock, type Suite } from "./support.ts"

/**
 * The history of a message whose first holder's lease expired and was reclaimed, and which
 * that holder then tried to finish: the expiry, then its late finishes, each recorded as a
 * lost run of the same attempt (finishes of one run with the same error are recorded once:
 * a retried complete).
 */
const assertLostRuns = (history: ReadonlyArray<Attempt>) => {
  assert.deepStrictEqual([history[0]!.outcome, history[0]!.attempt, history[0]!.consumer], ["lease-expired", 1, "slow"])
  assert.isNotEmpty(history.slice(1), "the late finishes are recorded")
  for (const a of history.slice(1)) assert.deepStrictEqual([a.outcome, a.attempt, a.consumer], ["lease-lost", 1, "slow"])
}

/** lease tests of the conformance suite (see index.ts). */
export const lease = ({ it, movesTime, databaseClock, exactlyOnceMessages }: Suite) => {
  movesTime("send then claim returns the message with a fresh lease", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("basic")
      yield* TestClock.setTime(1_000_000)
      const [sent] = yield* store.send(queue, [msg({ n: 1, s: "ü" }, { headers: { trace: "abc" }, maxAttempts: 7 })])
      assert.strictEqual(sent!.deduplicated, false)
      const claims = yield* store.claim(queue, { lease: "30 seconds", limit: 10, consumer: "worker-a" })
      assert.strictEqual(claims.length, 1)
      const c = claims[0]!
      assert.strictEqual(c.id, sent!.id)
      assert.deepStrictEqual(c.payload, { n: 1, s: "ü" })
      assert.deepStrictEqual(c.headers, { trace: "abc" })
      assert.strictEqual(c.task, "job")
      assert.strictEqual(c.attempts, 1)
      assert.strictEqual(c.maxAttempts, 7)
      assert.strictEqual(c.consumer, "worker-a")
      assert.strictEqual(c.leaseExpiresAt.getTime(), 1_000_000 + 30_000)
      assert.match(c.leaseToken, /^[0-9a-f-]{36}$/)
      // Every other field of the claim, as sent (a store builds each claim from its row).
      assert.strictEqual(c.queue, queue)
      assert.strictEqual(c.priority, 0)
      assert.strictEqual(c.enqueuedAt.getTime(), 1_000_000)
      assert.strictEqual(c.readyAt?.getTime(), 1_000_000)
      assert.deepStrictEqual([c.dedupKey, c.lastError, c.leaseExpiries, c.key], [null, null, 0, null])
      // Hidden while leased.
      assert.strictEqual((yield* store.claim(queue, { lease: "30 seconds", limit: 10, consumer: "worker-b" })).length, 0)
    }))

  movesTime("claims lowest priority number first, then earliest visibility, then id", () =>
    Effect.gen(function*() {
      const queue = freshQueue("prio")
      yield* sendAll(queue, [msg("p5-a", { priority: 5 })])
      yield* TestClock.adjust("1 second")
      yield* sendAll(queue, [msg("p1-late", { priority: 1 })])
      yield* sendAll(queue, [msg("p-3", { priority: -3 }), msg("p5-b", { priority: 5 })])
      // Delayed messages become visible later: earlier visibility wins within a priority.
      yield* sendAll(queue, [msg("p1-delayed", { priority: 1, delay: 500 })])
      yield* TestClock.adjust("2 seconds")
      const claims = yield* claimAll(queue, { limit: 2 })
      assert.deepStrictEqual(claims.map((c) => c.payload), ["p-3", "p1-late"])
      const more = yield* claimAll(queue)
      assert.deepStrictEqual(more.map((c) => c.payload), ["p1-delayed", "p5-a", "p5-b"])
    }))

  movesTime("a delayed message stays invisible until due", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("delay")
      const start = 5_000_000
      yield* TestClock.setTime(start)
      yield* sendAll(queue, [msg("later", { delay: 60_000 }), msg("now")])
      assert.deepStrictEqual((yield* claimAll(queue)).map((c) => c.payload), ["now"])
      const next = yield* store.nextVisibleAt(queue)
      assert.isTrue(Option.isSome(next))
      // The in-flight "now" message's lease (30 s) expires before the delay ends.
      assert.strictEqual(Option.getOrThrow(next).getTime(), start + 30_000)
      yield* TestClock.adjust("59 seconds")
      const early = yield* claimAll(queue)
      assert.deepStrictEqual(early.map((c) => c.payload), ["now"], "only the expired lease comes back")
      assert.strictEqual((yield* store.stats(queue)).delayed, 1)
      yield* TestClock.adjust("1 second")
      assert.deepStrictEqual((yield* claimAll(queue)).map((c) => c.payload), ["later"])
    }))

  movesTime("renew extends the lease and returns exactly the ids still held", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("renew")
      yield* sendAll(queue, [msg(1), msg(2), msg(3), msg(4)])
      const claims = yield* claimAll(queue, { lease: "10 seconds" })
      const [kept, acked, stolen, forged] = claims as unknown as [Claim, Claim, Claim, Claim]
      assert.isTrue(yield* Finish.ack(store, acked))
      yield* TestClock.adjust("8 seconds")
      // Renew only `kept`, so `stolen` expires and another consumer takes it.
      assert.deepStrictEqual((yield* store.renew([kept], "10 seconds")).held, [kept.id])
      yield* TestClock.adjust("3 seconds")
      // Expired leases make suspects, claimed one at a time.
      const reclaimed = [...yield* claimAll(queue, { consumer: "c2" }), ...yield* claimAll(queue, { consumer: "c2" })]
      assert.deepStrictEqual(reclaimed.map((c) => c.id).sort(), [stolen.id, forged.id].sort())
      const held = yield* store.renew(
        [kept, acked, stolen, { id: forged.id, leaseToken: "00000000-0000-4000-8000-000000000000" as Claim["leaseToken"] }],
        "10 seconds"
      )
      assert.deepStrictEqual(held, { held: [kept.id], cancelling: [] })
      // The renewal really moved the lease: kept is not claimable 9 s later.
      yield* TestClock.adjust("9 seconds")
      const third = yield* claimAll(queue, { consumer: "c3" })
      assert.isFalse(third.some((c) => c.id === kept.id))
      assert.deepStrictEqual((yield* store.renew([], "10 seconds")).held, [])
    }))

  movesTime("after a lease expires and another consumer reclaims, the first holder can change nothing", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("fence")
      const [sent] = yield* sendAll(queue, [msg("m")])
      const [old] = yield* claimAll(queue, { lease: "5 seconds", consumer: "slow" })
      yield* TestClock.adjust("6 seconds")
      const [current] = yield* claimAll(queue, { lease: "30 seconds", consumer: "fast" })
      assert.strictEqual(current!.id, old!.id)
      assert.notStrictEqual(current!.leaseToken, old!.leaseToken)
      assert.strictEqual(current!.attempts, 2)
      assert.deepStrictEqual((yield* store.renew([old!], "5 minutes")).held, [])
      assert.isFalse(yield* Finish.ack(store, old!))
      assert.strictEqual(yield* Finish.retry(store, old!, { delay: 0, error: "stale" }), "lost")
      assert.strictEqual(yield* Finish.deadLetter(store, old!, { reason: "stale" }), "lost")
      assert.strictEqual(yield* Finish.release(store, old!), "lost")
      // Nothing changed: still in flight for "fast", no dead letter; the stale runs are recorded as lost.
      const stats = yield* store.stats(queue)
      assert.deepStrictEqual([stats.inFlight, stats.ready, stats.dead], [1, 0, 0])
      assertLostRuns(yield* store.attempts(sent!.id))
      assert.strictEqual((yield* claimAll(queue, { consumer: "third" })).length, 0)
      yield* TestClock.adjust("29 seconds")
      assert.strictEqual((yield* claimAll(queue, { consumer: "third" })).length, 0, "the stale renew did not extend the lease")
      assert.isTrue(yield* Finish.ack(store, current!))
      assert.strictEqual((yield* store.stats(queue)).inFlight, 0)
    }))

  movesTime("an expired lease that nobody reclaimed can still be renewed and acked by its holder", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("late")
      yield* sendAll(queue, [msg("m")])
      const [c] = yield* claimAll(queue, { lease: "1 second" })
      yield* TestClock.adjust("5 seconds")
      assert.deepStrictEqual((yield* store.renew([c!], "1 second")).held, [c!.id])
      assert.isTrue(yield* Finish.ack(store, c!))
      // The same finish again is a retried complete (its answer lost): answered as the first was.
      assert.isTrue(yield* Finish.ack(store, c!), "the retried ack answers as the first did")
      const later = new Date((yield* store.now).getTime() + 1)
      assert.isFalse(yield* Finish.ack(store, c!, { startedAt: later }), "another run's ack finds nothing")
    }))

  movesTime("a lease that expired is counted, recorded in the history, and its message claimed alone", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("expiry")
      yield* TestClock.setTime(30_000_000)
      const [s1] = yield* sendAll(queue, [msg("suspect", { priority: -1 })])
      const [first] = yield* claimAll(queue, { lease: "1 second", consumer: "doomed" })
      assert.strictEqual(first!.leaseExpiries, 0)
      yield* sendAll(queue, [msg("a"), msg("b")])
      yield* TestClock.adjust("2 seconds")
      // The suspect comes first in claim order: it is claimed alone.
      const alone = yield* claimAll(queue, { consumer: "next" })
      assert.deepStrictEqual(alone.map((c) => c.payload), ["suspect"])
      assert.strictEqual(alone[0]!.leaseExpiries, 1)
      assert.strictEqual(alone[0]!.attempts, 2)
      const history = yield* store.attempts(s1!.id)
      assert.strictEqual(history.length, 1)
      assert.deepStrictEqual(
        [history[0]!.outcome, history[0]!.attempt, history[0]!.consumer, history[0]!.startedAt.getTime(), history[0]!.endedAt.getTime()],
        ["lease-expired", 1, "doomed", 30_000_000, 30_001_000]
      )
      // With a non-suspect first, suspects are left for a claim of their own.
      const rest = yield* claimAll(queue, { consumer: "next" })
      assert.deepStrictEqual(rest.map((c) => c.payload), ["a", "b"])
      yield* TestClock.adjust("1 minute") // all three leases expire
      const order = [
        yield* claimAll(queue, { consumer: "n1" }),
        yield* claimAll(queue, { consumer: "n2" }),
        yield* claimAll(queue, { consumer: "n3" })
      ]
      assert.deepStrictEqual(order.map((cs) => cs.map((c) => c.payload)), [["suspect"], ["a"], ["b"]])
      assert.deepStrictEqual(order.map((cs) => cs[0]!.leaseExpiries), [2, 1, 1])
      // A finished claim clears the lease: no expiry is counted after a release.
      assert.strictEqual(yield* Finish.release(store, order[1]![0]!), "written")
      const [again] = yield* claimAll(queue, { consumer: "n4" })
      assert.strictEqual(again!.payload, "a")
      assert.strictEqual(again!.leaseExpiries, 1)
      // Redrive gives a fresh budget, lease expiries included.
      assert.strictEqual(yield* Finish.deadLetter(store, order[0]![0]!, { reason: "suspected worker-killer" }), "written")
      yield* store.redrive({ ids: [s1!.id] })
      const [redriven] = yield* claimAll(queue, { consumer: "n5" })
      assert.deepStrictEqual([redriven!.payload, redriven!.attempts, redriven!.leaseExpiries], ["suspect", 1, 0])
    }))

  movesTime("a claim says when its message became ready: sent, delay over, retry backoff over, lease expired", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("ready-at")
      yield* TestClock.setTime(2_000_000)
      yield* sendAll(queue, [msg("delayed", { delay: 5_000 })])
      yield* TestClock.adjust("7 seconds")
      const [first] = yield* claimAll(queue, { lease: "10 seconds" })
      assert.strictEqual(first!.readyAt?.getTime(), 2_005_000, "ready when its delay ended")
      yield* Finish.retry(store, first!, { delay: 1_000, error: "boom" })
      yield* TestClock.adjust("4 seconds")
      const [second] = yield* claimAll(queue, { lease: "10 seconds" })
      assert.strictEqual(second!.readyAt?.getTime(), 2_008_000, "ready when its backoff ended")
      yield* TestClock.adjust("15 seconds")
      const [third] = yield* claimAll(queue, { lease: "10 seconds" })
      assert.strictEqual(third!.readyAt?.getTime(), 2_021_000, "ready when the lease expired")
    }))

  movesTime("nextVisibleAt is the earliest future visibility, none when nothing waits", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("next")
      yield* TestClock.setTime(20_000_000)
      assert.isTrue(Option.isNone(yield* store.nextVisibleAt(queue)))
      yield* sendAll(queue, [msg("ready-now")])
      assert.isTrue(Option.isNone(yield* store.nextVisibleAt(queue)), "a ready message is not in the future")
      yield* sendAll(queue, [msg("in-90s", { delay: 90_000 })])
      const [c] = yield* claimAll(queue, { lease: "20 seconds" })
      assert.strictEqual(Option.getOrThrow(yield* store.nextVisibleAt(queue)).getTime(), 20_000_000 + 20_000)
      yield* Finish.ack(store, c!)
      assert.strictEqual(Option.getOrThrow(yield* store.nextVisibleAt(queue)).getTime(), 20_000_000 + 90_000)
      // Across priorities: the earliest of them all, whichever priority holds it.
      yield* sendAll(queue, [
        msg("high-in-60s", { delay: 60_000, priority: -5 }),
        msg("low-in-30s", { delay: 30_000, priority: 9 }),
        msg("low-in-45s", { delay: 45_000, priority: 9 })
      ])
      assert.strictEqual(Option.getOrThrow(yield* store.nextVisibleAt(queue)).getTime(), 20_000_000 + 30_000)
      yield* TestClock.adjust("35 seconds")
      assert.strictEqual(Option.getOrThrow(yield* store.nextVisibleAt(queue)).getTime(), 20_000_000 + 45_000, "a due message is not in the future")
    }))

  it.effect("sends wake a subscriber of the queue once per await, even when sent before the await", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("wake")
      const next = yield* store.sends([queue])
      // Sent before anyone awaits: the signal is kept.
      yield* sendAll(queue, [msg("early")])
      yield* next
      // Awaited first, sent after: the waiter wakes (on PostgreSQL, through LISTEN/NOTIFY).
      const waiter = yield* Effect.forkChild(next)
      yield* sendAll(queue, [msg("late")])
      yield* Fiber.join(waiter)
    }))

  it.effect("cancels: a cancel of running messages wakes a subscriber of its queue, naming them", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("cancels")
      // On PostgreSQL cancels are heard by the listener of a sends subscription (a consumer has one).
      yield* store.sends([queue])
      const next = yield* store.cancels([queue])
      yield* sendAll(queue, [msg(1), msg(2), msg(3)])
      const [first, second] = yield* claimAll(queue, { limit: 2 })
      const waiter = yield* Effect.forkChild(next)
      yield* store.cancel([first!.id])
      assert.deepStrictEqual(yield* Fiber.join(waiter), new Set([first!.id]))
      // Heard before anyone awaits: kept, and gathered until taken (the ready one is deleted, not
      // announced). On PostgreSQL the notices arrive one by one, so take until both are named.
      yield* store.cancel([second!.id])
      yield* store.cancelWhere({ queue })
      const gathered = new Set<MessageId>()
      while (!gathered.has(first!.id) || !gathered.has(second!.id)) {
        const taken = yield* next
        assert.isDefined(taken, "every notice names its messages")
        for (const id of taken!) gathered.add(id)
      }
      assert.deepStrictEqual([...gathered].sort(), [first!.id, second!.id].sort(), "only the running ones")
    }))

  movesTime("cancel of a running message whose holder stops before finishing it: the next claim deletes it, never runs it", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("cancel-orphan")
      const [doomed, other] = yield* sendAll(queue, [msg("doomed"), msg("other")])
      const [held] = yield* claimAll(queue, { lease: "10 seconds", limit: 1 })
      assert.strictEqual(held!.id, doomed!.id)
      assert.deepStrictEqual(yield* store.cancel([doomed!.id]), [{ id: doomed!.id, result: "cancelling" }])
      // Its holder dies: no renewal, no finish. Once the lease has run out the message is ready again...
      yield* TestClock.adjust("11 seconds")
      // ...and the next claim takes the other message only (a suspect would be claimed alone: it is not one).
      const next = yield* claimAll(queue)
      assert.deepStrictEqual(next.map((c) => c.id), [other!.id])
      assert.isTrue(Option.isNone(yield* store.get(doomed!.id)), "deleted")
      const history = yield* store.attempts(doomed!.id)
      assert.deepStrictEqual(history.map((a) => a.outcome), ["cancelled"])
      assert.match(history[0]!.error!, /cancelled while it ran/)
      // The dead holder's late finish finds nothing to write.
      assert.isFalse(yield* Finish.ack(store, held!))
    }))

  movesTime("a claim whose picked messages were all cancelled (their holders died) goes on to the ready ones behind them", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("cancel-all-picked")
      const doomed = yield* sendAll(queue, [msg("a"), msg("b")])
      assert.lengthOf(yield* claimAll(queue, { lease: "10 seconds", limit: 2 }), 2)
      assert.deepStrictEqual((yield* store.cancel(doomed.map((d) => d.id))).map((r) => r.result), ["cancelling", "cancelling"])
      // Both holders die; once their leases ran out the two are the first ready rows, ahead of a later send.
      yield* TestClock.adjust("11 seconds")
      const [waiting] = yield* sendAll(queue, [msg("c")])
      const claimed = yield* claimAll(queue, { limit: 2 })
      assert.deepStrictEqual(claimed.map((c) => c.id), [waiting!.id], "not nothing while a message waits")
      for (const d of doomed) {
        assert.isTrue(Option.isNone(yield* store.get(d.id)), "deleted")
        assert.deepStrictEqual((yield* store.attempts(d.id)).map((a) => a.outcome), ["cancelled"])
      }
    }))

  it.effect(`concurrent claimers over ${exactlyOnceMessages} messages deliver each exactly once`, () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("race")
      const total = exactlyOnceMessages
      const sent = yield* store.send(queue, Array.from({ length: total }, (_, i) => msg({ i })))
      const seen: Array<MessageId> = []
      // Eight claimers, each claiming small batches and acking each batch in one complete, until the queue is empty.
      const startedAt = yield* store.now
      const claimer = (name: string) =>
        Effect.gen(function*() {
          while (true) {
            const claims = yield* store.claim(queue, { lease: "5 minutes", limit: 7, consumer: name })
            if (claims.length === 0) return
            for (const c of claims) seen.push(c.id)
            const acks = yield* Effect.forEach(claims, (c) => Finish.completion(store, c, { _tag: "Ack" }, "acked", null, { startedAt }))
            const { held } = yield* store.complete(acks)
            if (held.length !== claims.length) return yield* Effect.die(`lost ${claims.filter((c) => !held.includes(c.id)).map((c) => c.id)}`)
          }
        })
      yield* Effect.forEach(Array.from({ length: 8 }, (_, i) => `claimer-${i}`), claimer, { concurrency: 8, discard: true })
      assert.strictEqual(seen.length, total, "no message delivered twice")
      assert.strictEqual(new Set(seen).size, total)
      assert.deepStrictEqual([...seen].sort(), sent.map((s) => s.id).sort())
      const stats = yield* store.stats(queue)
      assert.strictEqual(stats.ready + stats.inFlight, 0)
    }), 120_000)

  if (databaseClock) {
    it.effect("database clock: a claim's lease runs from the server's now; hidden while leased", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("db-basic")
        const [sent] = yield* sendAll(queue, [msg({ n: 1 })])
        const before = yield* wallClock
        const [c] = yield* store.claim(queue, { lease: "30 seconds", limit: 10, consumer: "worker-a" })
        const after = yield* wallClock
        assert.strictEqual(c!.id, sent!.id)
        assert.strictEqual(c!.attempts, 1)
        assert.isAtLeast(c!.leaseExpiresAt.getTime(), before + 30_000 - slack)
        assert.isAtMost(c!.leaseExpiresAt.getTime(), after + 30_000 + slack)
        assert.strictEqual((yield* claimAll(queue, { consumer: "worker-b" })).length, 0)
        assert.isTrue(yield* Finish.ack(store, c!))
      }))

    it.effect("database clock: a delayed message is hidden until due, and nextVisibleAt says when", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("db-delay")
        const before = yield* wallClock
        yield* sendAll(queue, [msg("later", { delay: 1_000 }), msg("now")])
        assert.deepStrictEqual((yield* claimAll(queue, { lease: "1 minute" })).map((c) => c.payload), ["now"])
        const next = Option.getOrThrow(yield* store.nextVisibleAt(queue)).getTime()
        assert.isAtLeast(next, before + 1_000 - slack)
        assert.isAtMost(next, (yield* wallClock) + 1_000 + slack)
        assert.strictEqual((yield* store.stats(queue)).delayed, 1)
        yield* realSleep(Math.max(0, next - (yield* wallClock)) + 300)
        assert.deepStrictEqual((yield* claimAll(queue)).map((c) => c.payload), ["later"])
      }))

    it.effect("database clock: an expired lease is reclaimed, counted and recorded; the first holder can change nothing", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("db-fence")
        const [sent] = yield* sendAll(queue, [msg("m")])
        const [old] = yield* claimAll(queue, { lease: "1 second", consumer: "slow" })
        assert.strictEqual((yield* claimAll(queue, { consumer: "fast" })).length, 0, "hidden while the lease holds")
        yield* realSleep(1_300)
        const [current] = yield* claimAll(queue, { lease: "30 seconds", consumer: "fast" })
        assert.strictEqual(current!.id, old!.id)
        assert.notStrictEqual(current!.leaseToken, old!.leaseToken)
        assert.deepStrictEqual([current!.attempts, current!.leaseExpiries], [2, 1])
        assert.deepStrictEqual((yield* store.renew([old!], "5 minutes")).held, [])
        assert.isFalse(yield* Finish.ack(store, old!))
        assert.strictEqual(yield* Finish.retry(store, old!, { delay: 0, error: "stale" }), "lost")
        assert.strictEqual(yield* Finish.deadLetter(store, old!, { reason: "stale" }), "lost")
        assert.strictEqual(yield* Finish.release(store, old!), "lost")
        const stats = yield* store.stats(queue)
        assert.deepStrictEqual([stats.inFlight, stats.ready, stats.dead], [1, 0, 0])
        assertLostRuns(yield* store.attempts(sent!.id))
        assert.isTrue(yield* Finish.ack(store, current!))
      }))

    it.effect("database clock: renew moves the lease from the server's now; an unreclaimed expired lease is still its holder's", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("db-renew")
        yield* sendAll(queue, [msg(1), msg(2)])
        const [kept, lapsed] = yield* claimAll(queue, { lease: "1 second" })
        yield* realSleep(600)
        assert.deepStrictEqual((yield* store.renew([kept!], "3 seconds")).held, [kept!.id])
        yield* realSleep(800) // past the first lease: `lapsed` expired, `kept` was moved on
        // Nobody reclaimed `lapsed` yet: its holder may still renew it.
        assert.deepStrictEqual((yield* store.renew([lapsed!], "3 seconds")).held, [lapsed!.id])
        assert.strictEqual((yield* claimAll(queue, { consumer: "other" })).length, 0, "both leases hold")
        assert.isTrue(yield* Finish.ack(store, kept!))
        assert.isTrue(yield* Finish.ack(store, lapsed!))
      }))
  }
}
