/**
 * Conformance, bad input: refused with a typed error naming the problem, before anything is written.
 */
import { assert } from "@effect/vitest"
import { Effect } from "effect"
import { type MessageId, type NewMessage } from "../../src/Message.ts"
import { QueueStore } from "../../src/QueueStore.ts"
import * as Finish from "../support/Finish.ts"
import { claimAll, freshQueue, msg, refusal, type Suite } from "./support.ts"

/** input tests of the conformance suite (see index.ts). */
export const input = ({ it }: Suite) => {
  it.effect("bad input is refused with a typed error naming the problem, and nothing is written", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("bad")
      const refused = (effect: Effect.Effect<unknown, unknown>) =>
        Effect.map(Effect.flip(effect), (e) => e as { _tag: string; field: string; message: string })
      for (const hostile of ["x\"; drop table messages; --", "", " q", "a b", "ü", "x".repeat(129), "q'or'1'='1"]) {
        const e = yield* refused(store.send(hostile, [msg(1)]))
        assert.strictEqual(e._tag, "InvalidInput")
        assert.strictEqual(e.field, "queue")
        const t = yield* refused(store.send(queue, [{ task: hostile, payload: 1 }]))
        assert.strictEqual(t.field, "task")
        assert.strictEqual((yield* refused(store.claim(hostile, { lease: "1 minute", limit: 1, consumer: "c" }))).field, "queue")
      }
      const cycle: Record<string, unknown> = {}
      cycle["self"] = cycle
      const cases: ReadonlyArray<readonly [NewMessage, string, RegExp]> = [
        [msg({ big: 10n }), "payload", /BigInt/i],
        [msg(cycle), "payload", /circular/i],
        [msg(undefined), "payload", /undefined/],
        [msg(() => 1), "payload", /function/],
        [msg("\u0000"), "payload", /NUL/],
        [msg({ ["k\u0000"]: 1 }), "payload", /NUL/],
        [msg("a\ud800b"), "payload", /lone surrogate/],
        [msg(1, { headers: { h: "\udc00" } }), "headers", /invalid/],
        [msg("x".repeat(1024 * 1024 + 1)), "payload", /bytes/],
        [msg(1, { delay: -1 }), "delay", /not allowed/],
        [msg(1, { delay: Number.NaN }), "delay", /not allowed/],
        [msg(1, { priority: 1.5 }), "priority", /not allowed/],
        [msg(1, { maxAttempts: 0 }), "maxAttempts", /out of range/],
        [msg(1, { dedupKey: "" }), "dedupKey", /not allowed/],
        [msg(1, { headers: { a: 1 as unknown as string } }), "headers", /invalid/]
      ]
      for (const [bad, field, pattern] of cases) {
        // A bad message in the middle of a batch refuses the whole batch.
        const e = yield* refused(store.send(queue, [msg("good"), bad, msg("good too")]))
        assert.strictEqual(e._tag, "InvalidInput")
        assert.strictEqual(e.field, field)
        assert.match(e.message, pattern)
      }
      const e = yield* refused(store.claim(queue, { lease: "1 minute", limit: 0, consumer: "c" }))
      assert.strictEqual(e.field, "limit")
      // Dead-letter filters too.
      assert.strictEqual((yield* refused(store.purge({ queue: "x\"; drop table messages" }))).field, "queue")
      assert.strictEqual((yield* refused(store.redrive({ ids: ["1", "1 OR 1=1"] as Array<MessageId> }))).field, "ids")
      assert.strictEqual((yield* refused(store.deadLetters({ queue, limit: -1 }))).field, "limit")
      const stats = yield* store.stats(queue)
      assert.strictEqual(stats.ready + stats.delayed + stats.inFlight + stats.dead, 0, "nothing was written")
      // Text that merely looks like an escape is fine, and comes back as sent.
      const [literal] = yield* store.send(queue, [msg({ s: "\\u0000 and \\ud800", emoji: "😀" })])
      const [claimed] = yield* store.claim(queue, { lease: "1 minute", limit: 1, consumer: "c" })
      assert.strictEqual(claimed!.id, literal!.id)
      assert.deepStrictEqual(claimed!.payload, { s: "\\u0000 and \\ud800", emoji: "😀" })
      yield* Finish.ack(store, claimed!)
      // Just under the limit is fine.
      const [ok] = yield* store.send(queue, [msg("x".repeat(1024 * 1024 - 2))])
      assert.isFalse(ok!.deduplicated)
    }))

  /** `inner` under `depth` objects `{ a: ... }`. */
  const nested = (depth: number, inner: unknown): unknown => depth === 0 ? inner : { a: nested(depth - 1, inner) }

  it.effect("payload values JSON would drop or change, at any depth, are refused with their path; nothing is written", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("deep")
      const cases: ReadonlyArray<readonly [unknown, string]> = [
        [{ f: () => 1, n: Number.NaN }, "payload.f is a function"],
        [{ n: Number.NaN }, "payload.n is NaN"],
        [{ items: [{ n: 1 }, { n: 2 }, { n: 3 }, { n: Number.POSITIVE_INFINITY }] }, "payload.items[3].n is Infinity"],
        [{ deep: { er: [-Infinity] } }, "payload.deep.er[0] is -Infinity"],
        [{ u: undefined, ok: 1 }, "payload.u is undefined"],
        [[1, undefined], "payload[1] is undefined"],
        // A hole in an array would be stored as null.
        [[, 1], "payload[0] is undefined"],
        [{ "a b": { s: Symbol("x") } }, "payload[\"a b\"].s is a symbol"],
        [{ nested: { fn: function named() {} } }, "payload.nested.fn is a function"],
        // What toJSON returns is what JSON would store: checked too.
        [{ at: { toJSON: () => ({ n: Number.NaN }) } }, "payload.at.n is NaN"],
        // Deeper than the quick check of plain JSON looks: the full check still finds it.
        [nested(70, { n: Number.NaN }), `payload${".a".repeat(70)}.n is NaN`]
      ]
      for (const [payload, text] of cases) {
        const e = yield* Effect.flip(store.send(queue, [msg("good"), msg(payload)]))
        assert.strictEqual(e._tag, "InvalidInput", text)
        if (e._tag !== "InvalidInput") continue
        assert.strictEqual(e.field, "payload")
        assert.include(e.message, text)
        assert.match(e.rule, /no functions, symbols, undefined, NaN or Infinity/)
      }
      const stats = yield* store.stats(queue)
      assert.strictEqual(stats.ready + stats.delayed + stats.inFlight + stats.dead, 0, "nothing was written")
      // JSON data, including dates (stored through toJSON), null, -0 and nested empties, is stored as sent.
      const bare = Object.assign(Object.create(null) as object, { k: "v" })
      const fine = {
        d: new Date(0),
        list: [1, "x", null, true, { y: -0 }, [], {}],
        n: 1.5e300,
        boxed: [new String("s"), new Number(2), new Boolean(false)],
        bare,
        deep: nested(70, [1])
      }
      yield* store.send(queue, [msg(fine)])
      const [claimed] = yield* claimAll(queue)
      assert.deepStrictEqual(claimed!.payload, JSON.parse(JSON.stringify(fine)))
      yield* Finish.ack(store, claimed!)
    }))

  it.effect("headers: bounded as JSON (a bound of their own), names and values storable; refused naming the header, nothing written", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("headers")
      const cases: ReadonlyArray<readonly [Record<string, string>, string, RegExp]> = [
        // Payloads stop at 1 MiB; headers stop at 64 KiB, the 5 MiB header of the issue well past it.
        [{ big: "x".repeat(5 * 1024 * 1024) }, "headers", /are 5242\d{3} bytes as JSON/],
        [{ a: "x".repeat(40_000), b: "y".repeat(40_000) }, "headers", /are 800\d\d bytes as JSON/],
        [{ ["a\u0000b"]: "v" }, "headers[\"a\\u0000b\"]", /name that contains a NUL/],
        [{ ["\ud800"]: "v" }, "headers[\"\\ud800\"]", /name that contains a lone surrogate/],
        [{ h: "a\u0000" }, "headers.h", /value that contains a NUL/],
        [{ ["trace id"]: "\udfff" }, "headers[\"trace id\"]", /value that contains a lone surrogate/],
        [{ [""]: "v" }, "headers[\"\"]", /name of 0 characters/]
      ]
      for (const [headers, path, pattern] of cases) {
        const e = yield* refusal(store.send(queue, [msg("good"), msg(1, { headers })]))
        assert.strictEqual(e._tag, "InvalidInput", path)
        assert.strictEqual(e.field, "headers", path)
        const message = (e as unknown as { readonly message: string }).message
        if (path !== "headers") assert.include(message, `${path} is invalid`)
        assert.match(message, pattern)
      }
      const stats = yield* store.stats(queue)
      assert.strictEqual(stats.ready + stats.delayed + stats.inFlight + stats.dead, 0, "nothing was written")
      // Within the bound, odd but storable names and values come back as sent.
      const fine = { big: "x".repeat(60_000), ["a b/ü"]: "😀", ["\\u0000"]: "\t" }
      yield* store.send(queue, [msg(1, { headers: fine })])
      const [claimed] = yield* claimAll(queue)
      assert.deepInclude(claimed!.headers, fine)
      yield* Finish.ack(store, claimed!)
    }))

  it.effect("payload text with NUL or a lone surrogate is refused naming its path, in values and keys alike", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("text")
      const cases: ReadonlyArray<readonly [unknown, string]> = [
        [{ a: { b: ["ok", "x\u0000y"] } }, "payload.a.b[1] contains a NUL character"],
        [{ ["k\u0000"]: 1 }, "payload[\"k\\u0000\"] has a key that contains a NUL character"],
        [{ s: "\udc00" }, "payload.s contains a lone surrogate"],
        [[{ ["\ud83d"]: true }], "payload[0][\"\\ud83d\"] has a key that contains a lone surrogate"],
        ["\u0000", "payload contains a NUL character"]
      ]
      for (const [payload, text] of cases) {
        const e = yield* Effect.flip(store.send(queue, [msg("good"), msg(payload)]))
        assert.strictEqual(e._tag, "InvalidInput", text)
        if (e._tag !== "InvalidInput") continue
        assert.strictEqual(e.field, "payload")
        assert.include(e.message, text)
      }
      const stats = yield* store.stats(queue)
      assert.strictEqual(stats.ready + stats.delayed + stats.inFlight + stats.dead, 0, "nothing was written")
    }))

  it.effect("payload Maps, Sets and class instances are refused naming their path (JSON would store {} or drop the class)", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("objects")
      class Point {
        readonly x = 1
      }
      const cases: ReadonlyArray<readonly [unknown, string]> = [
        [{ m: new Map([["a", 1]]) }, "payload.m is a Map, which JSON stores as {}"],
        [{ list: [1, new Set([1, 2])] }, "payload.list[1] is a Set, which JSON stores as {}"],
        [{ p: new Point() }, "payload.p is an instance of Point"],
        [{ bytes: new Uint8Array([1, 2]) }, "payload.bytes is an instance of Uint8Array"],
        [new Map(), "payload is a Map"]
      ]
      for (const [payload, text] of cases) {
        const e = yield* Effect.flip(store.send(queue, [msg("good"), msg(payload)]))
        assert.strictEqual(e._tag, "InvalidInput", text)
        if (e._tag !== "InvalidInput") continue
        assert.strictEqual(e.field, "payload")
        assert.include(e.message, text)
        assert.match(e.rule, /no Map, Set or class instances/)
      }
      const stats = yield* store.stats(queue)
      assert.strictEqual(stats.ready + stats.delayed + stats.inFlight + stats.dead, 0, "nothing was written")
      // Plain data is fine: null-prototype objects, boxed primitives (stored as their value), dates through toJSON.
      const bare = Object.assign(Object.create(null) as Record<string, unknown>, { k: 1 })
      yield* store.send(queue, [msg({ bare, boxed: new String("s"), n: new Number(2), at: new Date(0) })])
      const [claimed] = yield* claimAll(queue)
      assert.deepStrictEqual(claimed!.payload, { bare: { k: 1 }, boxed: "s", n: 2, at: "1970-01-01T00:00:00.000Z" })
      yield* Finish.ack(store, claimed!)
    }))
}
