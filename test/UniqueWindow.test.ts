/**
 * Uniqueness windows through the typed sender (memory store, TestClock): `TaskClient.send`
 * with `unique: { key, for }` returns the holder's id while the window lasts, after the
 * message was run and acked by a consumer too; a bad window is refused naming the task.
 * The store-level rules (both stores, dead letters, purge, races) are in the conformance suite.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { TestClock } from "effect/testing"
import * as MemoryQueueStore from "../src/MemoryQueueStore.ts"
import { InvalidInput } from "../src/QueueError.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as Task from "../src/Task.ts"
import * as TaskClient from "../src/TaskClient.ts"
import { makeSpy, startConsumer } from "./support/ConsumerHarness.ts"
import * as Finish from "./support/Finish.ts"

const digest = Task.define({ name: "digest", queue: "digests", payload: Schema.Struct({ user: Schema.String }) })

const TestLayer = TaskClient.layer.pipe(Layer.provideMerge(MemoryQueueStore.layer()))

describe("unique windows through TaskClient", () => {
  it.effect("one message per key per window, whatever happened to it; the next window sends again", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      yield* TestClock.setTime(1_000_000)
      const send = (user: string) => TaskClient.send(digest, { user }, { unique: { key: `digest:${user}`, for: "1h" } })
      const first = yield* send("ada")
      assert.isFalse(first.deduplicated)
      // Run and acked: the message is gone, the key still held.
      const [claim] = yield* store.claim("digests", { lease: "30 seconds", limit: 1, consumer: "c" })
      assert.isTrue(yield* Finish.ack(store, claim!))
      yield* TestClock.adjust("59 minutes")
      assert.deepStrictEqual(yield* send("ada"), { id: first.id, deduplicated: true })
      assert.isFalse((yield* send("bob")).deduplicated, "another key")
      yield* TestClock.adjust("1 minute")
      const next = yield* send("ada")
      assert.isFalse(next.deduplicated)
      assert.notStrictEqual(next.id, first.id)
    }).pipe(Effect.provide(TestLayer)))

  it.effect("a bad window is refused naming the task and the rule, nothing sent", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const error = yield* Effect.flip(TaskClient.send(digest, { user: "ada" }, { unique: { key: "k", for: "soon" as never } }))
      assert.instanceOf(error, InvalidInput)
      assert.strictEqual((error as InvalidInput).field, "unique.for")
      assert.match(error.message, /^task "digest": /)
      const both = yield* Effect.flip(TaskClient.send(digest, { user: "ada" }, { unique: { key: "k", for: "1h" }, dedupKey: "d" }))
      assert.match(both.message, /task "digest": unique is given with a dedupKey \(rule: either unique or dedupKey, not both\)/)
      assert.deepStrictEqual(yield* store.messages("digests"), [])
    }).pipe(Effect.provide(TestLayer)))

  it.effect("a running consumer deletes expired reservations every 10 minutes, live ones stay", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      yield* spy.store.send("other", [
        { task: "t", payload: 1, unique: { key: "short", for: "1 second" } },
        { task: "t", payload: 2, unique: { key: "long", for: "1 day" } }
      ])
      yield* startConsumer(spy, () => Effect.void, { queues: ["digests"], lease: "30 seconds" })
      yield* TestClock.adjust("10 minutes")
      for (let i = 0; i < 20; i++) yield* Effect.yieldNow
      assert.strictEqual(yield* spy.inner.pruneUniqueKeys, 0, "already pruned by the consumer")
      const [again] = yield* spy.store.send("other", [{ task: "t", payload: 3, unique: { key: "long", for: "1 day" } }])
      assert.isTrue(again!.deduplicated)
    }).pipe(Effect.scoped))
})
