/**
 * Conformance, the operator's reads and writes: `get`, `messages`, `stats`, `depths`, `queues`, `pause` and
 * `resume`, `cancel` and `cancelWhere`.
 */
import { assert } from "@effect/vitest"
import { Effect, Fiber, Option } from "effect"
import { TestClock } from "effect/testing"
import { type MessageId, type MessageState } from "../../src/Message.ts"
import { QueueStore } from "../../src/QueueStore.ts"
import * as Finish from "../support/Finish.ts"
import { claimAll, freshQueue, msg, realSleep, refusal, sendAll, slack, wallClock, type Suite } from "./support.ts"

/** operator tests of the conformance suite (see index.ts). */
export const operator = ({ it, movesTime, databaseClock }: Suite) => {
  it.effect("get: one message by id, live or dead, with its state; none for an unknown id", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("get")
      const [flight] = yield* sendAll(queue, [msg("flight", { headers: { h: "1" }, maxAttempts: 5 })])
      const [claimed] = yield* claimAll(queue, { limit: 1, consumer: "getter", lease: "1 minute" })
      assert.strictEqual(claimed!.id, flight!.id)
      const [dead] = yield* sendAll(queue, [msg("dead")])
      const [deadClaim] = yield* claimAll(queue, { limit: 1 })
      assert.strictEqual(yield* Finish.deadLetter(store, deadClaim!, { reason: "bad payload", error: "boom" }), "written")
      const [ready] = yield* sendAll(queue, [msg("ready", { priority: 3, dedupKey: "k" })])
      const [delayed] = yield* sendAll(queue, [msg("delayed", { delay: 3_600_000 })])

      const got = (id: MessageId) => Effect.map(store.get(id), Option.getOrThrow)
      const f = yield* got(flight!.id)
      assert.deepStrictEqual(
        [f.id, f.queue, f.task, f.payload, f.headers, f.state, f.attempts, f.maxAttempts, f.leasedBy, f.deadReason, f.deadAt],
        [flight!.id, queue, "job", "flight", { h: "1" }, "in-flight", 1, 5, "getter", null, null]
      )
      assert.strictEqual(f.visibleAt!.getTime(), claimed!.leaseExpiresAt.getTime(), "in flight: visible when the lease expires")
      assert.strictEqual(f.visibleAt!.getTime() - f.leasedAt!.getTime(), 60_000, "in flight: leased a lease ago")
      const d = yield* got(dead!.id)
      assert.deepStrictEqual([d.state, d.payload, d.deadReason, d.lastError, d.visibleAt, d.leasedBy, d.leasedAt], ["dead", "dead", "bad payload", "boom", null, null, null])
      assert.instanceOf(d.deadAt, Date)
      const r = yield* got(ready!.id)
      assert.deepStrictEqual([r.state, r.payload, r.priority, r.dedupKey, r.attempts, r.leasedBy, r.leasedAt], ["ready", "ready", 3, "k", 0, null, null])
      assert.isAtMost(r.visibleAt!.getTime(), r.enqueuedAt.getTime())
      const w = yield* got(delayed!.id)
      assert.strictEqual(w.state, "delayed")
      assert.strictEqual(w.visibleAt!.getTime() - w.enqueuedAt.getTime(), 3_600_000)

      // Unknown: never sent, finished (acked, so deleted), or no message id at all.
      assert.isTrue(Option.isNone(yield* store.get("999999999999" as MessageId)))
      assert.isTrue(yield* Finish.ack(store, claimed!))
      assert.isTrue(Option.isNone(yield* store.get(flight!.id)))
      for (const notAnId of ["", "abc", "0", "-1", "1.5", "99999999999999999999", "1; drop table x"]) {
        assert.isTrue(Option.isNone(yield* store.get(notAnId as MessageId)), notAnId)
      }
    }))

  it.effect("messages: a queue's messages in id order, by state, paged with after; options checked", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("list")
      const other = freshQueue("list-other")
      const [flight] = yield* sendAll(queue, [msg(0)])
      yield* claimAll(queue, { limit: 1 })
      const [dead] = yield* sendAll(queue, [msg(1)])
      const [deadClaim] = yield* claimAll(queue, { limit: 1 })
      assert.strictEqual(deadClaim!.id, dead!.id)
      assert.strictEqual(yield* Finish.deadLetter(store, deadClaim!, { reason: "r" }), "written")
      // Priorities and delays do not change the order: it is the order of sending.
      const rest = yield* sendAll(queue, [msg(2, { priority: 9 }), msg(3, { delay: 60_000 }), msg(4, { priority: -1 }), msg(5)])
      yield* sendAll(other, [msg("elsewhere")])
      const ids = [flight!.id, dead!.id, ...rest.map((s) => s.id)]

      const all = yield* store.messages(queue)
      assert.deepStrictEqual(all.map((m) => m.id), ids)
      assert.deepStrictEqual(all.map((m) => m.payload), [0, 1, 2, 3, 4, 5])
      assert.deepStrictEqual(all.map((m) => m.state), ["in-flight", "dead", "ready", "delayed", "ready", "ready"])
      const byState = (state: MessageState) => Effect.map(store.messages(queue, { state }), (ms) => ms.map((m) => m.payload))
      assert.deepStrictEqual(yield* byState("ready"), [2, 4, 5])
      assert.deepStrictEqual(yield* byState("delayed"), [3])
      assert.deepStrictEqual(yield* byState("in-flight"), [0])
      assert.deepStrictEqual(yield* byState("dead"), [1])
      assert.deepStrictEqual(yield* store.messages(freshQueue("empty")), [])

      // Pages of two, each after the last id of the previous one.
      const pages: Array<Array<unknown>> = []
      let after: MessageId | undefined
      while (true) {
        const page = yield* store.messages(queue, { limit: 2, after })
        if (page.length === 0) break
        pages.push(page.map((m) => m.payload))
        after = page[page.length - 1]!.id
      }
      assert.deepStrictEqual(pages, [[0, 1], [2, 3], [4, 5]])
      assert.deepStrictEqual((yield* store.messages(queue, { state: "ready", limit: 1, after: rest[0]!.id })).map((m) => m.payload), [4])

      const refused = (effect: Effect.Effect<unknown, unknown>) =>
        Effect.map(Effect.flip(effect), (e) => e as { _tag: string; field: string })
      for (
        const [options, field] of [
          [{ limit: 0 }, "limit"],
          [{ limit: 10_001 }, "limit"],
          [{ limit: 1.5 }, "limit"],
          [{ state: "stuck" }, "state"],
          [{ after: "x'; --" }, "after"],
          [{ after: "-3" }, "after"]
        ] as const
      ) {
        const e = yield* refused(store.messages(queue, options as never))
        assert.deepStrictEqual([e._tag, e.field], ["InvalidInput", field], JSON.stringify(options))
      }
      const q = yield* refused(store.messages("not a queue!"))
      assert.deepStrictEqual([q._tag, q.field], ["InvalidInput", "queue"])
    }))

  movesTime("get and messages: an expired lease reads ready, a delay that ran out ready", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("state-time")
      yield* TestClock.setTime(5_000_000)
      const [leased] = yield* sendAll(queue, [msg("leased")])
      yield* claimAll(queue, { lease: "10 seconds" })
      const [later] = yield* sendAll(queue, [msg("later", { delay: 20_000 })])
      assert.deepStrictEqual((yield* store.messages(queue)).map((m) => m.state), ["in-flight", "delayed"])
      yield* TestClock.adjust("11 seconds")
      const expired = Option.getOrThrow(yield* store.get(leased!.id))
      assert.deepStrictEqual([expired.state, expired.leasedBy, expired.visibleAt!.getTime()], ["ready", null, 5_010_000])
      yield* TestClock.adjust("10 seconds")
      assert.strictEqual(Option.getOrThrow(yield* store.get(later!.id)).state, "ready")
      assert.deepStrictEqual((yield* store.messages(queue, { state: "ready" })).map((m) => m.payload), ["leased", "later"])
    }))

  movesTime("stats counts ready, delayed, in flight and dead, and the oldest ready age", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("stats")
      const empty = yield* store.stats(queue)
      assert.deepStrictEqual(empty, { queue, ready: 0, delayed: 0, inFlight: 0, dead: 0, oldestReadyAgeMs: 0 })
      yield* sendAll(queue, [msg("flight"), msg("dead")])
      const [flight, dead] = yield* claimAll(queue, { limit: 2 })
      yield* Finish.deadLetter(store, dead!, { reason: "x" })
      yield* sendAll(queue, [msg("r1"), msg("r2"), msg("later", { delay: 60_000 })])
      yield* TestClock.adjust("4 seconds")
      const stats = yield* store.stats(queue)
      assert.deepStrictEqual(stats, { queue, ready: 2, delayed: 1, inFlight: 1, dead: 1, oldestReadyAgeMs: 4000 })
      assert.isTrue(yield* Finish.ack(store, flight!))
    }))

  movesTime("depths counts several queues in one call, as stats does each; an empty queue counts zeros", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const [a, b, empty] = [freshQueue("depth-a"), freshQueue("depth-b"), freshQueue("depth-empty")]
      yield* sendAll(a, [msg("flight"), msg("dead")])
      const [flight, dead] = yield* claimAll(a, { limit: 2 })
      yield* Finish.deadLetter(store, dead!, { reason: "x" })
      yield* sendAll(a, [msg("r1"), msg("later", { delay: 60_000 })])
      yield* sendAll(b, [msg("b1"), msg("b2"), msg("b3")])
      yield* TestClock.adjust("3 seconds")
      // Duplicates are answered once, in the order first given.
      const depths = yield* store.depths([b, empty, a, b])
      assert.deepStrictEqual(depths, [
        { queue: b, ready: 3, delayed: 0, inFlight: 0, dead: 0, oldestReadyAgeMs: 3000 },
        { queue: empty, ready: 0, delayed: 0, inFlight: 0, dead: 0, oldestReadyAgeMs: 0 },
        { queue: a, ready: 1, delayed: 1, inFlight: 1, dead: 1, oldestReadyAgeMs: 3000 }
      ])
      assert.deepStrictEqual(depths[2], yield* store.stats(a))
      assert.deepStrictEqual(yield* store.depths([]), [])
      const refused = yield* Effect.flip(store.depths([a, "not a queue!"]))
      assert.strictEqual(refused._tag, "InvalidInput")
      assert.isTrue(yield* Finish.ack(store, flight!))
    }))

  it.effect("pause: a paused queue is claimed by nobody, still takes sends, and is listed paused; resume wakes subscribers", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("pause")
      const other = freshQueue("pause-other")
      yield* sendAll(queue, [msg(1), msg(2)])
      yield* sendAll(other, [msg("o")])
      const [running] = yield* claimAll(queue, { limit: 1 })
      yield* store.pause(queue)
      const [info] = (yield* store.queues()).filter((q) => q.queue === queue)
      assert.isTrue(info!.paused)
      assert.instanceOf(info!.pausedAt, Date)
      yield* store.pause(queue) // pausing again changes nothing, not even the time
      const [again] = (yield* store.queues()).filter((q) => q.queue === queue)
      assert.strictEqual(again!.pausedAt!.getTime(), info!.pausedAt!.getTime())
      assert.deepStrictEqual([info!.ready, info!.inFlight], [1, 1])
      // Sends are accepted; nothing is claimed; the other queue is unaffected.
      yield* sendAll(queue, [msg(3)])
      assert.deepStrictEqual(yield* claimAll(queue), [])
      assert.strictEqual((yield* claimAll(other)).length, 1)
      // The message in flight finishes normally.
      assert.isTrue(yield* Finish.ack(store, running!))
      // Resume wakes an idle subscriber (on PostgreSQL, through the send notification).
      const next = yield* store.sends([queue])
      const waiter = yield* Effect.forkChild(next)
      yield* store.resume(queue)
      yield* Fiber.join(waiter)
      const [resumed] = (yield* store.queues()).filter((q) => q.queue === queue)
      assert.deepStrictEqual([resumed!.paused, resumed!.pausedAt], [false, null])
      assert.strictEqual((yield* claimAll(queue)).length, 2)
      yield* store.resume(queue) // resuming a queue that is not paused changes nothing
      yield* store.resume(freshQueue("never-paused"))
      for (const refused of [yield* refusal(store.pause("bad name")), yield* refusal(store.resume(""))]) {
        assert.deepStrictEqual([refused._tag, refused.field], ["InvalidInput", "queue"])
      }
    }))

  it.effect("queues: every queue with messages, history or a pause row, by name, with its counts", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const live = freshQueue("q-live")
      const dead = freshQueue("q-dead")
      const historic = freshQueue("q-history")
      const paused = freshQueue("q-paused")
      yield* sendAll(live, [msg(1), msg(2, { delay: 60_000 })])
      yield* sendAll(dead, [msg(1)])
      const [d] = yield* claimAll(dead)
      assert.strictEqual(yield* Finish.deadLetter(store, d!, { reason: "r" }), "written")
      yield* sendAll(historic, [msg(1)])
      const [h] = yield* claimAll(historic)
      yield* store.complete([{
        ref: h!,
        finish: { _tag: "Ack" },
        queue: historic,
        task: "job",
        attempt: 1,
        consumer: "c1",
        startedAt: new Date(0),
        outcome: "acked",
        error: null
      }])
      yield* store.pause(paused)
      const all = yield* store.queues()
      const names = all.map((q) => q.queue)
      assert.deepStrictEqual(names, [...names].sort(), "by name")
      const find = (name: string) => all.find((q) => q.queue === name)
      assert.deepInclude(find(live)!, { ready: 1, delayed: 1, inFlight: 0, dead: 0, paused: false, pausedAt: null })
      assert.deepInclude(find(dead)!, { ready: 0, dead: 1, paused: false })
      assert.deepInclude(find(historic)!, { ready: 0, delayed: 0, inFlight: 0, dead: 0, paused: false })
      assert.deepInclude(find(paused)!, { ready: 0, dead: 0, paused: true })
      assert.isUndefined(find(freshQueue("q-none")))
    }))

  it.effect("cancel: ready, delayed and dead messages go at once with a cancelled history row; a running one is flagged", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("cancel")
      const [running, dead] = yield* sendAll(queue, [msg("running"), msg("dead")])
      const [claimedRunning, claimedDead] = yield* claimAll(queue)
      assert.strictEqual(claimedRunning!.id, running!.id)
      assert.strictEqual(yield* Finish.deadLetter(store, claimedDead!, { reason: "r" }), "written")
      const [ready, delayed, kept] = yield* sendAll(queue, [msg("ready"), msg("delayed", { delay: 60_000 }), msg("kept")])
      const answer = yield* store.cancel([
        delayed!.id,
        running!.id,
        "999999999999" as MessageId,
        "not-an-id" as MessageId,
        dead!.id,
        ready!.id,
        ready!.id
      ])
      // In id order; unknown and malformed ids are absent; a repeated id answers once.
      assert.deepStrictEqual(answer, [
        { id: running!.id, result: "cancelling" },
        { id: dead!.id, result: "cancelled" },
        { id: ready!.id, result: "cancelled" },
        { id: delayed!.id, result: "cancelled" }
      ])
      for (const id of [dead!.id, ready!.id, delayed!.id]) {
        assert.isTrue(Option.isNone(yield* store.get(id)), `${id} is gone`)
        const history = yield* store.attempts(id)
        assert.deepStrictEqual(history.at(-1)!.outcome, "cancelled")
      }
      assert.deepStrictEqual((yield* store.attempts(ready!.id)).map((a) => [a.attempt, a.outcome]), [[0, "cancelled"]])
      // The dead one's history: the run that dead-lettered it, then its cancel.
      assert.deepStrictEqual((yield* store.attempts(dead!.id)).map((a) => [a.attempt, a.outcome]), [[1, "dead-lettered"], [1, "cancelled"]])
      // The running one is still there, in flight, until its holder finishes it; its renewal says so,
      // and so do get and messages (a message merely in flight says nothing of the kind).
      const flagged = Option.getOrThrow(yield* store.get(running!.id))
      assert.strictEqual(flagged.state, "in-flight")
      assert.instanceOf(flagged.cancelRequestedAt, Date)
      assert.deepStrictEqual((yield* store.messages(queue, { state: "in-flight", limit: 10 })).map((m) => [m.id, m.cancelRequestedAt !== null]), [[running!.id, true]])
      const [other] = yield* sendAll(freshQueue("cancel-other"), [msg("other")])
      yield* store.claim(Option.getOrThrow(yield* store.get(other!.id)).queue, { lease: "30 seconds", limit: 1, consumer: "c" })
      const unflagged = Option.getOrThrow(yield* store.get(other!.id))
      assert.strictEqual(unflagged.state, "in-flight")
      assert.isNull(unflagged.cancelRequestedAt)
      assert.deepStrictEqual(yield* store.renew([claimedRunning!], "30 seconds"), { held: [running!.id], cancelling: [running!.id] })
      assert.deepStrictEqual(yield* store.cancel([running!.id]), [{ id: running!.id, result: "cancelling" }], "asked again")
      const held = yield* store.complete([{
        ref: claimedRunning!,
        finish: { _tag: "Cancel" },
        queue,
        task: "job",
        attempt: 1,
        consumer: "c1",
        startedAt: new Date(0),
        outcome: "cancelled",
        error: "cancelled while running"
      }])
      assert.deepStrictEqual(held, { held: [running!.id], cancelled: [running!.id] })
      assert.isTrue(Option.isNone(yield* store.get(running!.id)))
      assert.deepStrictEqual((yield* store.attempts(running!.id)).map((a) => [a.attempt, a.outcome]), [[1, "cancelled"]])
      // Untouched: the message nobody cancelled; nothing of it recorded.
      assert.strictEqual(Option.getOrThrow(yield* store.get(kept!.id)).state, "ready")
      assert.deepStrictEqual(yield* store.attempts(kept!.id), [])
      assert.deepStrictEqual(yield* store.cancel([]), [])
      assert.deepStrictEqual(yield* store.cancel([running!.id]), [], "finished: unknown now")
    }))

  it.effect("cancelWhere: every message of a queue, or of one task in it; other queues untouched", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("cancel-where")
      const other = freshQueue("cancel-where-other")
      const [a1, b1, a2] = yield* sendAll(queue, [msg(1, { task: "a" }), msg(2, { task: "b" }), msg(3, { task: "a" })])
      const [o] = yield* sendAll(other, [msg(1, { task: "a" })])
      const [running] = yield* claimAll(queue, { limit: 1 })
      assert.strictEqual(running!.id, a1!.id)
      assert.deepStrictEqual(yield* store.cancelWhere({ queue, task: "a" }), [
        { id: a1!.id, result: "cancelling" },
        { id: a2!.id, result: "cancelled" }
      ])
      assert.deepStrictEqual(yield* store.cancelWhere({ queue }), [
        { id: a1!.id, result: "cancelling" },
        { id: b1!.id, result: "cancelled" }
      ])
      assert.strictEqual(Option.getOrThrow(yield* store.get(o!.id)).state, "ready")
      assert.deepStrictEqual(yield* store.cancelWhere({ queue: freshQueue("empty") }), [])
      const bad = yield* refusal(store.cancelWhere({ queue, task: "bad task" }))
      assert.deepStrictEqual([bad._tag, bad.field], ["InvalidInput", "task"])
      assert.strictEqual((yield* refusal(store.cancelWhere({ queue: "" }))).field, "queue")
    }))

  if (databaseClock) {
    it.effect("database clock: dead-letter time and the oldest ready age come from the server", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const queue = freshQueue("db-stats")
        yield* sendAll(queue, [msg("dead")])
        const [c] = yield* claimAll(queue)
        const before = yield* wallClock
        assert.strictEqual(yield* Finish.deadLetter(store, c!, { reason: "x" }), "written")
        const [dead] = yield* store.deadLetters({ queue })
        assert.isAtLeast(dead!.deadAt.getTime(), before - slack)
        assert.isAtMost(dead!.deadAt.getTime(), (yield* wallClock) + slack)
        yield* sendAll(queue, [msg("r1")])
        const sentAt = yield* wallClock
        yield* realSleep(500)
        const stats = yield* store.stats(queue)
        const elapsed = (yield* wallClock) - sentAt
        assert.deepStrictEqual([stats.ready, stats.dead], [1, 1])
        assert.isAtLeast(stats.oldestReadyAgeMs, 500 - 50)
        assert.isAtMost(stats.oldestReadyAgeMs, elapsed + slack)
      }))
  }
}
