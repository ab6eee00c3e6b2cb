/**
 * Conformance, the caller's lifecycle: completion events for each outcome, progress (written,
 * read, fenced, bounded), and awaiting a message's end through `TaskClient` (already ended,
 * ending later and heard, timed out, dead-lettered, cancelled, unknown, a lost notification
 * costing one poll).
 *
 * The awaits run on a store whose `get` is watched: a test knows the await has made its second
 * look (after subscribing) before it ends the message, so the end can only reach it through the
 * completion event (the poll interval is an hour of TestClock time, which no test moves).
 */
import { assert } from "@effect/vitest"
import { Deferred, Effect, Fiber, Option, Schema } from "effect"
import { TestClock } from "effect/testing"
import type { CompletionEvent } from "../../src/Lifecycle.ts"
import * as Lifecycle from "../../src/Lifecycle.ts"
import type { Claim, MessageId } from "../../src/Message.ts"
import { QueueStore, type QueueStoreShape } from "../../src/QueueStore.ts"
import * as Task from "../../src/Task.ts"
import * as TaskClient from "../../src/TaskClient.ts"
import * as Finish from "../support/Finish.ts"
import { claimAll, freshQueue, msg, realSleep, refusal, sendAll, type Suite } from "./support.ts"

const Report = Schema.Struct({ total: Schema.Number })
const reportTask = (queue: string) => Task.define({ name: "job", queue, payload: Schema.Unknown, success: Report })

/** A store whose `looks` completes once `get` of any message has answered `n` times. */
const watched = (store: QueueStoreShape, n: number, options: { readonly deaf?: boolean } = {}) =>
  Effect.map(Deferred.make<void>(), (looks) => {
    let count = 0
    const shape: QueueStoreShape = {
      ...store,
      get: (id) => Effect.tap(store.get(id), () => ++count >= n ? Deferred.succeed(looks, undefined) : Effect.void),
      // A store whose notifications are all lost: only the polls find an end.
      completions: options.deaf === true ? (queues) => Effect.as(store.completions(queues), Effect.never) : store.completions
    }
    return { shape, looks }
  })

/** A client over `shape`. */
const clientOf = (shape: QueueStoreShape) => TaskClient.make.pipe(Effect.provideService(QueueStore, shape))

/** Join `fiber` within a real-time bound (TestClock does not move on its own: a missed wake-up would hang). */
const joinWithin = <A, E>(fiber: Fiber.Fiber<A, E>, ms = 10_000) =>
  Effect.raceFirst(Fiber.join(fiber), Effect.andThen(realSleep(ms), Effect.die(`not done within ${ms} ms of real time`)))

/** Ack `claim` keeping `result` (JSON) with its history record, as a task with a success schema does. */
const ackWith = (store: QueueStoreShape, claim: Claim, result: unknown) =>
  Effect.flatMap(Finish.completion(store, claim, { _tag: "Ack" }, "acked", null), (c) => store.complete([{ ...c, result: JSON.stringify(result) }]))

/** Finish a running message whose cancel was asked for, as its consumer does once the flag reaches it. */
const finishCancelled = (store: QueueStoreShape, claim: Claim) =>
  Effect.flatMap(Finish.completion(store, claim, { _tag: "Cancel" }, "cancelled", null), (c) => store.complete([c]))

const HOUR = { timeout: "2 hours", pollInterval: "1 hour" } as const

/** Lifecycle tests of the conformance suite (see index.ts). */
export const lifecycle = ({ it }: Suite) => {
  it.effect("completions: each outcome is heard once by a subscriber of its queue; a release and other queues are not", () =>
    Effect.scoped(Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("events")
      const other = freshQueue("events-other")
      const next = yield* store.completions([queue])
      const [ackM, retryM, deadM, releaseM, runningM] = yield* sendAll(queue, ["a", "r", "d", "l", "c"].map((p) => msg(p)))
      const claims = yield* claimAll(queue)
      const [waiting] = yield* sendAll(queue, [msg("w")])
      const [elsewhere] = yield* sendAll(other, [msg("o")])
      const byId = new Map(claims.map((c) => [c.id, c]))
      assert.isTrue(yield* Finish.ack(store, byId.get(ackM!.id)!))
      assert.strictEqual(yield* Finish.retry(store, byId.get(retryM!.id)!, { delay: "1 hour", error: "boom" }), "written")
      assert.strictEqual(yield* Finish.deadLetter(store, byId.get(deadM!.id)!, { reason: "bad" }), "written")
      assert.strictEqual(yield* Finish.release(store, byId.get(releaseM!.id)!), "written")
      // A running message cancelled ends when its holder finishes it; a waiting one at once.
      yield* store.cancel([runningM!.id, waiting!.id, elsewhere!.id])
      assert.deepStrictEqual((yield* finishCancelled(store, byId.get(runningM!.id)!)).cancelled, [runningM!.id])
      const heard: Array<CompletionEvent> = []
      for (let k = 0; k < 5; k++) heard.push(yield* joinWithin(yield* Effect.forkChild(next)))
      assert.deepStrictEqual(
        heard.map((e) => [e.messageId, e.queue, e.task, e.outcome]).sort(),
        [
          [ackM!.id, queue, "job", "completed"],
          [retryM!.id, queue, "job", "retried"],
          [deadM!.id, queue, "job", "dead-lettered"],
          [waiting!.id, queue, "job", "cancelled"],
          [runningM!.id, queue, "job", "cancelled"]
        ].sort()
      )
      for (const e of heard) assert.instanceOf(e.at, Date)
      // Nothing more (the release, the other queue's cancel): a take waits.
      const more = yield* Effect.forkChild(next)
      yield* realSleep(300)
      assert.isUndefined(more.pollUnsafe())
      yield* Fiber.interrupt(more)
    })))

  it.effect("progress: written on the held message and read with it; refused from a stale claim; bounded", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("progress")
      const [sent] = yield* sendAll(queue, [msg("p")])
      assert.deepStrictEqual(Option.map(yield* store.get(sent!.id), (m) => [m.progress, m.progressAt]), Option.some([null, null]))
      const [claim] = yield* claimAll(queue)
      assert.isTrue(yield* store.setProgress(claim!, { done: 3, of: 10 }))
      const read = Option.getOrThrow(yield* store.get(sent!.id))
      assert.deepStrictEqual(read.progress, { done: 3, of: 10 })
      assert.instanceOf(read.progressAt, Date)
      assert.deepStrictEqual(yield* (yield* clientOf(store)).progress(sent!.id), Option.some({ done: 3, of: 10 }))
      // A token that is not the holder's writes nothing.
      const stale = { id: claim!.id, leaseToken: "00000000-0000-4000-8000-000000000000" as Claim["leaseToken"] }
      assert.isFalse(yield* store.setProgress(stale, { done: 9 }))
      // Neither does the claim once it handed the message back (its retry cleared the token); the progress stays.
      assert.strictEqual(yield* Finish.retry(store, claim!, { delay: 0, error: "again" }), "written")
      assert.isFalse(yield* store.setProgress(claim!, { done: 10 }))
      assert.deepStrictEqual(Option.map(yield* store.get(sent!.id), (m) => m.progress), Option.some({ done: 3, of: 10 }))
      // Too large, or not JSON: refused before anything is written.
      const [next] = yield* claimAll(queue)
      const tooLarge = yield* refusal(store.setProgress(next!, { text: "x".repeat(Lifecycle.limits.maxProgressBytes) }))
      assert.deepStrictEqual([tooLarge._tag, tooLarge.field], ["InvalidInput", "progress"])
      const notJson = yield* refusal(store.setProgress(next!, { n: Number.NaN }))
      assert.deepStrictEqual([notJson._tag, notJson.field], ["InvalidInput", "progress"])
      assert.deepStrictEqual(Option.map(yield* store.get(sent!.id), (m) => m.progress), Option.some({ done: 3, of: 10 }))
    }))

  it.effect("awaitResult: a message that already ended answers at once (acked: its result; unknown id: MessageNotFound)", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("await-done")
      const client = yield* clientOf(store)
      const [sent] = yield* sendAll(queue, [msg("x")])
      const [claim] = yield* claimAll(queue)
      yield* ackWith(store, claim!, { total: 7 })
      assert.deepStrictEqual(yield* client.awaitResult(reportTask(queue), sent!.id, HOUR), Option.some({ total: 7 }))
      assert.deepStrictEqual(yield* client.awaitResultJson(sent!.id, HOUR), Option.some({ total: 7 }))
      const unknown = yield* Effect.flip(client.awaitResultJson("987654321987" as MessageId, HOUR))
      assert.strictEqual(unknown._tag, "MessageNotFound")
      assert.strictEqual((yield* Effect.flip(client.awaitResultJson("nope" as MessageId, HOUR)))._tag, "MessageNotFound")
    }))

  it.effect("awaitResult: a message that ends later wakes the await through its completion event, through a retry", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("await-later")
      const [sent] = yield* sendAll(queue, [msg("x")])
      const { looks, shape } = yield* watched(store, 2)
      const waiting = yield* Effect.forkChild((yield* clientOf(shape)).awaitResult(reportTask(queue), sent!.id, HOUR))
      yield* Deferred.await(looks)
      // A retry is not an end: the await goes on (woken, it looks, and waits again).
      const [first] = yield* claimAll(queue)
      assert.strictEqual(yield* Finish.retry(store, first!, { delay: 0, error: "once" }), "written")
      const [second] = yield* claimAll(queue)
      yield* ackWith(store, second!, { total: 2 })
      assert.deepStrictEqual(yield* joinWithin(waiting), Option.some({ total: 2 }))
    }))

  it.effect("awaitResult: dead-lettered fails with MessageDeadLettered (its reason), cancelled with MessageCancelled", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("await-failed")
      const [dead, cancelled, waitingCancelled] = yield* sendAll(queue, [msg("d"), msg("c"), msg("w")])
      const { looks, shape } = yield* watched(store, 4)
      const client = yield* clientOf(shape)
      const onDead = yield* Effect.forkChild(Effect.flip(client.awaitResultJson(dead!.id, HOUR)))
      const onCancel = yield* Effect.forkChild(Effect.flip(client.awaitResultJson(cancelled!.id, HOUR)))
      yield* Deferred.await(looks)
      const claims = yield* claimAll(queue, { limit: 2 })
      const byId = new Map(claims.map((c) => [c.id, c]))
      assert.strictEqual(yield* Finish.deadLetter(store, byId.get(dead!.id)!, { reason: "payload rejected", error: "boom" }), "written")
      yield* store.cancel([cancelled!.id])
      yield* finishCancelled(store, byId.get(cancelled!.id)!)
      const deadError = yield* joinWithin(onDead)
      assert.strictEqual(deadError._tag, "MessageDeadLettered")
      assert.deepStrictEqual(deadError._tag === "MessageDeadLettered" ? [deadError.reason, deadError.lastError] : [], ["payload rejected", "boom"])
      assert.strictEqual((yield* joinWithin(onCancel))._tag, "MessageCancelled")
      // Already ended: the same answers at once; a waiting message cancelled too.
      assert.strictEqual((yield* Effect.flip(client.awaitResultJson(dead!.id, HOUR)))._tag, "MessageDeadLettered")
      yield* store.cancel([waitingCancelled!.id])
      assert.strictEqual((yield* Effect.flip(client.awaitResultJson(waitingCancelled!.id, HOUR)))._tag, "MessageCancelled")
    }))

  it.effect("awaitResult: times out with AwaitTimedOut naming the state; a lost notification costs one poll interval", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("await-timeout")
      const [pending, later] = yield* sendAll(queue, [msg("p"), msg("l")])
      const slow = yield* watched(store, 2)
      const timingOut = yield* Effect.forkChild(Effect.flip((yield* clientOf(slow.shape)).awaitResultJson(pending!.id, { timeout: "10 seconds", pollInterval: "1 hour" })))
      yield* Deferred.await(slow.looks)
      yield* TestClock.adjust("10 seconds")
      const timedOut = yield* joinWithin(timingOut)
      assert.deepStrictEqual(timedOut._tag === "AwaitTimedOut" ? [timedOut.state, timedOut.waitedMs] : [timedOut._tag], ["ready", 10_000])
      // Deaf: no notification ever arrives; the poll after the end finds it.
      const deaf = yield* watched(store, 2, { deaf: true })
      const polling = yield* Effect.forkChild((yield* clientOf(deaf.shape)).awaitResultJson(later!.id, { timeout: "1 hour", pollInterval: "1 second" }))
      yield* Deferred.await(deaf.looks)
      const claims = yield* claimAll(queue)
      yield* ackWith(store, claims.find((c) => c.id === later!.id)!, { total: 1 })
      for (let k = 0; k < 50 && polling.pollUnsafe() === undefined; k++) {
        yield* TestClock.adjust("1 second")
        yield* realSleep(20)
      }
      assert.deepStrictEqual(yield* joinWithin(polling), Option.some({ total: 1 }))
    }))
}
