/**
 * Limits a task declares (`Task.define({ limits })`): refused at definition with the rule, and
 * written by the consumer (source `code`) before its first claim, so that the first claim already
 * keeps them; an operator's limits win; a write the store refuses fails the consumer loudly, one
 * the database could not take (connection dead) is tried again. Real time, on the memory store and
 * on PostgreSQL.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Option, Schema, Scope } from "effect"
import * as Consumer from "../src/Consumer.ts"
import type * as FlowControl from "../src/FlowControl.ts"
import * as MemoryQueueStore from "../src/MemoryQueueStore.ts"
import { ConnectionDead, InvalidInput, QueryFailed } from "../src/QueueError.ts"
import { QueueStore, type QueueStoreShape } from "../src/QueueStore.ts"
import * as Task from "../src/Task.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitFor } from "./support/Wait.ts"

const QUEUE = "task_limits"
const HANDLER_MS = 100

/** Runs of one task: how many at once at most, how many ended. */
interface Tally {
  running: number
  max: number
  ended: number
}

const tally = (): Tally => ({ running: 0, max: 0, ended: 0 })

const counted = (t: Tally) =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      t.running++
      t.max = Math.max(t.max, t.running)
    }),
    () => Effect.sleep(HANDLER_MS),
    () =>
      Effect.sync(() => {
        t.running--
        t.ended++
      })
  )

const tasks = (limits: FlowControl.TaskLimits, report: Tally, email: Tally) =>
  Task.dispatcher(
    Task.make({ name: "report", queue: QUEUE, payload: Schema.Number, limits, handler: () => counted(report) }),
    Task.make({ name: "email", queue: QUEUE, payload: Schema.Number, handler: () => counted(email) })
  )

/** Start a consumer of `dispatcher` over `store` in a scope of its own; answers the service and its stop. */
const start = (dispatcher: Consumer.Dispatcher, store: QueueStoreShape) =>
  Effect.gen(function*() {
    const scope = yield* Scope.fork(yield* Scope.Scope)
    const context = yield* Layer.buildWithScope(
      Consumer.layer(dispatcher, { consumerId: "task-limits", concurrency: 10, batchSize: 10, pollInterval: "200 millis", lease: "5 seconds" })
        .pipe(Layer.provide(Layer.succeed(QueueStore, store))),
      scope
    )
    return { consumer: Context.get(context, Consumer.Consumer), stop: Scope.close(scope, Exit.void) }
  })

const sendBoth = (store: QueueStoreShape, n: number) =>
  store.send(QUEUE, [
    ...Array.from({ length: n }, (_, i) => ({ task: "report", payload: i })),
    ...Array.from({ length: n }, (_, i) => ({ task: "email", payload: i }))
  ])

const allEnded = (n: number, ...tallies: ReadonlyArray<Tally>) =>
  waitFor(
    `${n} runs of each task to end`,
    Effect.sync(() => tallies.every((t) => t.ended === n) ? Option.some(true) : Option.none()),
    20_000
  )

const storedOf = (store: QueueStoreShape, task: string) =>
  Effect.map(store.limits(QUEUE), (all) => all.find((l) => l.task === task))

const refusedAtDefinition = (limits: unknown): InvalidInput => {
  try {
    Task.define({ name: "bad", queue: QUEUE, payload: Schema.Number, limits: limits as FlowControl.TaskLimits })
  } catch (error) {
    assert.instanceOf(error, InvalidInput)
    return error as InvalidInput
  }
  throw new Error(`limits ${JSON.stringify(limits)} were not refused`)
}

describe("Task limits: checked at definition", () => {
  it("refuses a bad value or a limit of the whole queue, naming the field and the rule", () => {
    const zero = refusedAtDefinition({ concurrency: 0 })
    assert.strictEqual(zero.field, "limits.concurrency")
    assert.include(zero.rule, "an integer from 1 to")
    assert.include(zero.message, "task \"bad\"")
    const period = refusedAtDefinition({ rate: { count: 5, periodMs: 1 } })
    assert.strictEqual(period.field, "limits.rate.periodMs")
    const keyed = refusedAtDefinition({ keyConcurrency: 2 })
    assert.strictEqual(keyed.field, "limits.keyConcurrency")
    assert.strictEqual(keyed.rule, "a limit of the whole queue, not of a task")
  })

  it("a dispatcher carries its tasks' limits, checked, with their queues", () => {
    const dispatcher = tasks({ concurrency: 3, rate: { count: 10, periodMs: 1_000 }, }, tally(), tally())
    assert.deepStrictEqual(dispatcher.limits, [
      { queue: QUEUE, task: "report", limits: { concurrency: 3, rate: { count: 10, periodMs: 1_000 } } }
    ])
  })
})

const consumerSuite = (name: string, storeLayer: () => Layer.Layer<QueueStore, unknown>) =>
  describe(`Task limits: a consumer writes them before its first claim (${name}, real time)`, () => {
    it.live("the first claim keeps a task's concurrency of 1 while the queue's other task runs beside it", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const report = tally()
        const email = tally()
        // Sent before the consumer starts: without the declaration its first claim would take all six.
        yield* sendBoth(store, 3)
        const { stop } = yield* start(tasks({ concurrency: 1 }, report, email), store)
        yield* allEnded(3, report, email)
        yield* stop
        assert.strictEqual(report.max, 1, "reports ran one at a time")
        assert.isAtLeast(email.max, 2, "emails were not held back by the report's limit")
        const stored = yield* storedOf(store, "report")
        assert.deepStrictEqual(stored?.limits, { concurrency: 1 })
        assert.strictEqual(stored?.source, "code")
      }).pipe(Effect.provide(storeLayer())), 30_000)

    it.live("an operator's limits for the task are kept, and they are the ones the claim holds", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        yield* store.setLimits({ queue: QUEUE, task: "report" }, { concurrency: 2 })
        const report = tally()
        const email = tally()
        yield* sendBoth(store, 4)
        const { stop } = yield* start(tasks({ concurrency: 1 }, report, email), store)
        yield* allEnded(4, report, email)
        yield* stop
        assert.strictEqual(report.max, 2)
        const stored = yield* storedOf(store, "report")
        assert.deepStrictEqual(stored?.limits, { concurrency: 2 })
        assert.strictEqual(stored?.source, "operator")
      }).pipe(Effect.provide(storeLayer())), 30_000)
  })

consumerSuite("memory store", () => MemoryQueueStore.layer())
consumerSuite("PostgreSQL", () => PgTest.storeLayer({ clock: "database" }))

describe("Task limits: a declaration the store does not take (memory store, real time)", () => {
  const failingOnce = (inner: QueueStoreShape, error: ConnectionDead | QueryFailed, times: number) => {
    let calls = 0
    let claims = 0
    const store: QueueStoreShape = {
      ...inner,
      setLimits: (target, limits, options) => ++calls <= times ? Effect.fail(error) : inner.setLimits(target, limits, options),
      claim: (queue, options) => Effect.suspend(() => {
        claims++
        return inner.claim(queue, options)
      })
    }
    return { store, calls: () => calls, claims: () => claims }
  }

  it.live("a refused write fails the consumer before any claim", () =>
    Effect.gen(function*() {
      const inner = yield* MemoryQueueStore.make()
      const refused = new QueryFailed({ operation: "setLimits", message: "permission denied for table flow_limits", code: "42501" })
      const probe = failingOnce(inner, refused, Infinity)
      const { consumer, stop } = yield* start(tasks({ concurrency: 1 }, tally(), tally()), probe.store)
      const error = yield* Effect.flip(consumer.failure).pipe(Effect.timeout("10 seconds"))
      yield* stop
      assert.strictEqual(error._tag, "QueryFailed")
      assert.strictEqual(probe.calls(), 1, "not retried")
      assert.strictEqual(probe.claims(), 0, "nothing claimed without the limits")
      assert.isFalse((yield* consumer.health).healthy)
    }), 20_000)

  it.live("a dead connection is tried again, and the claims begin once the limits are written", () =>
    Effect.gen(function*() {
      const inner = yield* MemoryQueueStore.make()
      const dead = new ConnectionDead({ operation: "setLimits", message: "Connection terminated" })
      const probe = failingOnce(inner, dead, 2)
      const report = tally()
      const email = tally()
      yield* sendBoth(probe.store, 2)
      const { stop } = yield* start(tasks({ concurrency: 1 }, report, email), probe.store)
      yield* allEnded(2, report, email)
      yield* stop
      assert.strictEqual(probe.calls(), 3)
      assert.strictEqual(report.max, 1)
      assert.strictEqual((yield* storedOf(inner, "report"))?.source, "code")
    }), 20_000)
})
