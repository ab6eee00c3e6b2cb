/**
 * Conformance, sends: ids in order, dedup keys, uniqueness windows.
 */
import { assert } from "@effect/vitest"
import { type Duration, Effect, Option } from "effect"
import { TestClock } from "effect/testing"
import { type NewMessage } from "../../src/Message.ts"
import { QueueStore } from "../../src/QueueStore.ts"
import * as Finish from "../support/Finish.ts"
import { claimAll, freshQueue, msg, sendAll, type Suite } from "./support.ts"

/** send tests of the conformance suite (see index.ts). */
export const send = ({ it, movesTime }: Suite) => {
  it.effect("send many returns ids in input order; claim honours the limit", () =>
    Effect.gen(function*() {
      const queue = freshQueue("many")
      const sent = yield* sendAll(queue, Array.from({ length: 12 }, (_, i) => msg({ i })))
      assert.strictEqual(sent.length, 12)
      assert.strictEqual(new Set(sent.map((s) => s.id)).size, 12)
      const first = yield* claimAll(queue, { limit: 5 })
      assert.deepStrictEqual(first.map((c) => c.payload), [0, 1, 2, 3, 4].map((i) => ({ i })))
      assert.deepStrictEqual(first.map((c) => c.id), sent.slice(0, 5).map((s) => s.id))
      const rest = yield* claimAll(queue, { limit: 100 })
      assert.strictEqual(rest.length, 7)
    }))

  it.effect("one send keeps each message's own task, headers, priority, delay, attempts and key, shared or not", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("columns")
      // The first three share everything but the payload; the rest differ in every field.
      const shared = { headers: { h: "same" }, priority: 4, maxAttempts: 3, key: "tenant-a" }
      const batch = [
        msg(0, shared),
        msg(1, shared),
        msg(2, shared),
        { task: "other", payload: 3, priority: -2, delay: 60_000, maxAttempts: 7 },
        msg(4, { headers: { a: "1", b: "2" }, key: "tenant-b" }),
        msg(5, { priority: 2_000_000_000, delay: 30_000 })
      ]
      const sent = yield* sendAll(queue, batch)
      const seen = yield* Effect.forEach(sent, (s) => Effect.map(store.get(s.id), (o) => Option.getOrThrow(o)))
      const own = (headers: Readonly<Record<string, string>>) => Object.fromEntries(Object.entries(headers).filter(([k]) => k !== "traceparent"))
      assert.deepStrictEqual(
        seen.map((m) => [m.payload, m.task, own(m.headers), m.priority, m.maxAttempts, m.key ?? null, m.state]),
        [
          [0, "job", { h: "same" }, 4, 3, "tenant-a", "ready"],
          [1, "job", { h: "same" }, 4, 3, "tenant-a", "ready"],
          [2, "job", { h: "same" }, 4, 3, "tenant-a", "ready"],
          [3, "other", {}, -2, 7, null, "delayed"],
          [4, "job", { a: "1", b: "2" }, 0, 25, "tenant-b", "ready"],
          [5, "job", {}, 2_000_000_000, 25, null, "delayed"]
        ]
      )
      const delayOf = (m: (typeof seen)[number]) => m.visibleAt!.getTime() - m.enqueuedAt.getTime()
      assert.deepStrictEqual(seen.map(delayOf), [0, 0, 0, 60_000, 0, 30_000])
    }))

  it.effect("dedup: a live message with the key is returned instead of a new one", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("dedup")
      const [a] = yield* sendAll(queue, [msg("first", { dedupKey: "k1" })])
      const [b, c, d] = yield* sendAll(queue, [
        msg("second", { dedupKey: "k1" }),
        msg("other", { dedupKey: "k2" }),
        msg("other-again", { dedupKey: "k2" })
      ])
      assert.deepStrictEqual(b, { id: a!.id, deduplicated: true })
      assert.strictEqual(c!.deduplicated, false)
      assert.deepStrictEqual(d, { id: c!.id, deduplicated: true })
      // Another queue does not share keys.
      const [e] = yield* sendAll(freshQueue("dedup-other"), [msg("x", { dedupKey: "k1" })])
      assert.strictEqual(e!.deduplicated, false)
      // A claimed message still holds its key; once acked the key is free.
      const claims = yield* claimAll(queue)
      assert.strictEqual(claims.length, 2)
      const [again] = yield* sendAll(queue, [msg("third", { dedupKey: "k1" })])
      assert.deepStrictEqual(again, { id: a!.id, deduplicated: true })
      const first = claims.find((x) => x.id === a!.id)!
      assert.isTrue(yield* Finish.ack(store, first))
      const [fresh] = yield* sendAll(queue, [msg("fourth", { dedupKey: "k1" })])
      assert.strictEqual(fresh!.deduplicated, false)
      assert.notStrictEqual(fresh!.id, a!.id)
      // A dead letter does not hold its key.
      const second = claims.find((x) => x.id === c!.id)!
      assert.strictEqual(yield* Finish.deadLetter(store, second, { reason: "test" }), "written")
      const [afterDead] = yield* sendAll(queue, [msg("fifth", { dedupKey: "k2" })])
      assert.strictEqual(afterDead!.deduplicated, false)
    }))

  // Uniqueness windows: the reservation outlives the message.
  it.effect("unique: a key is held for its window after the send, through ack, dead-letter and purge", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("unique")
      const [a] = yield* sendAll(queue, [msg("first", { unique: { key: "u1", for: "1 hour" } })])
      assert.strictEqual(a!.deduplicated, false)
      // In one batch too: the second of the key finds the first.
      const [b, c, d] = yield* sendAll(queue, [
        msg("second", { unique: { key: "u1", for: "1 hour" } }),
        msg("other", { unique: { key: "u2", for: "1 hour" } }),
        msg("other-again", { unique: { key: "u2", for: "1 hour" } })
      ])
      assert.deepStrictEqual(b, { id: a!.id, deduplicated: true })
      assert.strictEqual(c!.deduplicated, false)
      assert.deepStrictEqual(d, { id: c!.id, deduplicated: true })
      assert.strictEqual((yield* store.messages(queue)).length, 2, "duplicates wrote nothing")
      // Another queue does not share keys; a plain dedup key is another namespace.
      assert.isFalse((yield* sendAll(freshQueue("unique-other"), [msg("x", { unique: { key: "u1", for: "1 hour" } })]))[0]!.deduplicated)
      assert.isFalse((yield* sendAll(queue, [msg("x", { dedupKey: "u1" })]))[0]!.deduplicated)
      // Acked: the message is gone, the key is still held by its id.
      const claims = yield* claimAll(queue)
      const first = claims.find((x) => x.id === a!.id)!
      assert.isTrue(yield* Finish.ack(store, first))
      assert.deepStrictEqual((yield* sendAll(queue, [msg("after-ack", { unique: { key: "u1", for: "1 hour" } })]))[0], {
        id: a!.id,
        deduplicated: true
      })
      // Dead-lettered, then purged: still held.
      const second = claims.find((x) => x.id === c!.id)!
      assert.strictEqual(yield* Finish.deadLetter(store, second, { reason: "test" }), "written")
      assert.deepStrictEqual((yield* sendAll(queue, [msg("after-dead", { unique: { key: "u2", for: "1 hour" } })]))[0], {
        id: c!.id,
        deduplicated: true
      })
      assert.deepStrictEqual(yield* store.purge({ ids: [c!.id] }), [c!.id])
      assert.deepStrictEqual((yield* sendAll(queue, [msg("after-purge", { unique: { key: "u2", for: "1 hour" } })]))[0], {
        id: c!.id,
        deduplicated: true
      })
      assert.strictEqual(yield* store.pruneUniqueKeys, 0, "nothing expired yet")
    }))

  movesTime("unique: the window ends after `for`; the next send takes the key over and holds it anew", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("unique-window")
      yield* TestClock.setTime(5_000_000)
      const [a] = yield* sendAll(queue, [msg(1, { unique: { key: "k", for: "10 seconds" } })])
      yield* TestClock.adjust("9999 millis")
      assert.deepStrictEqual((yield* sendAll(queue, [msg(2, { unique: { key: "k", for: "10 seconds" } })]))[0], { id: a!.id, deduplicated: true })
      yield* TestClock.adjust("1 millis")
      const [b] = yield* sendAll(queue, [msg(3, { unique: { key: "k", for: "1 minute" } })])
      assert.strictEqual(b!.deduplicated, false)
      assert.notStrictEqual(b!.id, a!.id)
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual((yield* sendAll(queue, [msg(4, { unique: { key: "k", for: "1 second" } })]))[0], { id: b!.id, deduplicated: true })
      // An expired reservation of another key is pruned; the live one stays.
      yield* sendAll(queue, [msg(5, { unique: { key: "short", for: "1 second" } })])
      yield* TestClock.adjust("2 seconds")
      assert.isAtLeast(yield* store.pruneUniqueKeys, 1)
      assert.deepStrictEqual((yield* sendAll(queue, [msg(6, { unique: { key: "k", for: "1 second" } })]))[0], { id: b!.id, deduplicated: true })
    }))

  it.effect("unique: bad windows are refused naming the rule, and nothing is written", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("unique-bad")
      const cases: ReadonlyArray<readonly [NewMessage, string, RegExp]> = [
        [msg(1, { unique: { key: "", for: "1 hour" } }), "unique.key", /1-512/],
        [msg(1, { unique: { key: "k", for: "soon" as Duration.Input } }), "unique.for", /duration/],
        [msg(1, { unique: { key: "k", for: 0 } }), "unique.for", /between 1 ms/],
        [msg(1, { unique: { key: "k", for: "1 hour" }, dedupKey: "d" }), "unique", /not both/]
      ]
      for (const [m, field, rule] of cases) {
        const e = (yield* Effect.flip(store.send(queue, [msg("fine"), m]))) as { _tag: string; field: string; message: string }
        assert.strictEqual(e._tag, "InvalidInput")
        assert.strictEqual(e.field, field)
        assert.match(e.message, rule)
      }
      assert.strictEqual((yield* store.messages(queue)).length, 0)
    }))

  it.effect("unique: concurrent sends of one key create exactly one message", () =>
    Effect.gen(function*() {
      const queue = freshQueue("unique-race")
      const results = yield* Effect.forEach(
        Array.from({ length: 20 }, (_, i) => i),
        (i) => sendAll(queue, [msg(i, { unique: { key: "once", for: "1 hour" } })]),
        { concurrency: 20 }
      )
      const ids = new Set(results.map((r) => r[0]!.id))
      assert.strictEqual(ids.size, 1)
      assert.strictEqual(results.filter((r) => !r[0]!.deduplicated).length, 1)
      const store = yield* QueueStore
      assert.strictEqual((yield* store.messages(queue)).length, 1)
    }))
}
