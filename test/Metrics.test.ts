/**
 * The metrics an operator scrapes, on real PostgreSQL in real time: after a
 * consumer processed messages of three tasks (one acked, one retried then
 * acked, one dead-lettered), the per-(queue, task) counters and histograms
 * hold exactly what happened, with `queue` and `task` attributes and never a
 * message id; the queue-depth gauges sampled by `QueueDepth` show ready,
 * delayed, in flight, dead and the oldest ready age after sends and claims.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Metric, Option, Schema, Scope } from "effect"
import * as Consumer from "../src/Consumer.ts"
import * as MemoryQueueStore from "../src/MemoryQueueStore.ts"
import * as QueueDepth from "../src/QueueDepth.ts"
import * as QueueMetrics from "../src/QueueMetrics.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as Task from "../src/Task.ts"
import * as Finish from "./support/Finish.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitFor } from "./support/Wait.ts"

const count = (metric: Metric.Metric<number, Metric.CounterState<number>>) =>
  Effect.map(Metric.value(metric), (state) => Number(state.count))
const samples = (metric: Metric.Metric<number, Metric.HistogramState>) => Effect.map(Metric.value(metric), (state) => state.count)
const gauge = (metric: Metric.Metric<number, Metric.GaugeState<number>>) => Effect.map(Metric.value(metric), (state) => Number(state.value))

/** A queue name of its own per test (metrics live in one registry for the whole file). */
const freshQueue = (label: string) => `${label}-${Math.random().toString(36).slice(2, 8)}`

/** Every counter of one (queue, task). */
const countersOf = (queue: string, task: string) => {
  const m = QueueMetrics.forTask(queue, task)
  return Effect.all({
    claimed: count(m.claimed),
    acked: count(m.acked),
    retried: count(m.retried),
    deadLettered: count(m.deadLettered),
    released: count(m.released)
  })
}

describe("metrics before anything happened", () => {
  it.live("a consumer's start registers the counters of its tasks' queues at zero (an exporter lists them)", () =>
    Effect.scoped(Effect.gen(function*() {
      const queue = freshQueue("zero")
      const other = freshQueue("unconsumed")
      const tasks = Task.dispatcher(
        Task.make({ name: "quiet", queue, payload: Schema.Number, handler: () => Effect.void }),
        Task.make({ name: "elsewhere", queue: other, payload: Schema.Number, handler: () => Effect.void })
      )
      const seriesOf = (q: string) =>
        Effect.map(Metric.snapshot, (all) =>
          all.filter((m) => m.attributes?.["queue"] === q && m.type === "Counter").map((m) => [m.id, m.attributes?.["task"], Number((m.state as Metric.CounterState<number>).count)]))
      assert.deepStrictEqual(yield* seriesOf(queue), [], "nothing registered before the consumer")
      yield* Layer.build(Consumer.layer(tasks, { queues: [queue], consumerId: "zero-1", pollInterval: "1 minute" })).pipe(
        Effect.provide(MemoryQueueStore.layer())
      )
      const registered = (yield* seriesOf(queue)).sort()
      assert.deepStrictEqual(registered, [
        "leasehold_task_messages_acked",
        "leasehold_task_messages_cancelled",
        "leasehold_task_messages_claimed",
        "leasehold_task_messages_dead_lettered",
        "leasehold_task_messages_released",
        "leasehold_task_messages_retried"
      ].map((id) => [id, "quiet", 0]))
      assert.deepStrictEqual(yield* seriesOf(other), [], "a queue this consumer does not consume gets no series")
      const totals = (yield* Metric.snapshot).map((m) => m.id)
      for (const id of ["leasehold_messages_claimed", "leasehold_messages_dead_lettered", "leasehold_leases_lost"]) assert.include(totals, id)
    })))
})

describe("metrics on PostgreSQL (real time)", () => {
  it.live("counters and histograms per queue and task hold what was processed, with bounded attributes", () =>
    Effect.scoped(Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("metrics")
      const flakyRuns: Array<number> = []
      const handler: Consumer.Handler = (message, context) => {
        switch (message.task) {
          case "flaky":
            flakyRuns.push(context.attempt)
            return context.attempt === 1 ? Effect.fail("first attempt fails") : Effect.void
          case "doomed":
            return Effect.fail("always fails")
          default:
            return Effect.void
        }
      }
      const totalsBefore = yield* Effect.all([count(QueueMetrics.claimed), count(QueueMetrics.acked)])
      const scope = yield* Scope.fork(yield* Scope.Scope)
      const consumer = yield* Layer.buildWithScope(
        Consumer.layer(handler, { queues: [queue], consumerId: "metrics-1", lease: "5 seconds", pollInterval: "50 millis", retryBase: "10 millis", retryMax: "20 millis", concurrency: 4 }),
        scope
      ).pipe(Effect.map((context) => Context.get(context, Consumer.Consumer)))
      yield* store.send(queue, [
        { task: "ok", payload: 1 },
        { task: "ok", payload: 2 },
        { task: "ok", payload: 3 },
        { task: "flaky", payload: 4, maxAttempts: 3 },
        { task: "doomed", payload: 5, maxAttempts: 1 }
      ])
      const done = Effect.all([countersOf(queue, "ok"), countersOf(queue, "flaky"), countersOf(queue, "doomed")])
      const [ok, flaky, doomed] = yield* waitFor(
        "every message to reach its outcome",
        Effect.map(done, ([ok, flaky, doomed]) =>
          ok.acked === 3 && flaky.acked === 1 && doomed.deadLettered === 1 ? Option.some([ok, flaky, doomed] as const) : Option.none()),
        { timeoutMs: 15_000, describe: () => `flaky runs ${JSON.stringify(flakyRuns)}` }
      )
      assert.isTrue((yield* consumer.health).healthy)
      yield* Scope.close(scope, Exit.void)

      assert.deepStrictEqual(ok, { claimed: 3, acked: 3, retried: 0, deadLettered: 0, released: 0 })
      assert.deepStrictEqual(flaky, { claimed: 2, acked: 1, retried: 1, deadLettered: 0, released: 0 })
      assert.deepStrictEqual(doomed, { claimed: 1, acked: 0, retried: 0, deadLettered: 1, released: 0 })
      // One handler duration and one wait time per run, per task.
      for (const [task, runs] of [["ok", 3], ["flaky", 2], ["doomed", 1]] as const) {
        const m = QueueMetrics.forTask(queue, task)
        assert.strictEqual(yield* samples(m.handlerDuration), runs, `handler durations of ${task}`)
        assert.strictEqual(yield* samples(m.waitTime), runs, `wait times of ${task}`)
      }
      // The process totals count the same, all tasks together.
      const totalsAfter = yield* Effect.all([count(QueueMetrics.claimed), count(QueueMetrics.acked)])
      assert.deepStrictEqual([totalsAfter[0] - totalsBefore[0], totalsAfter[1] - totalsBefore[1]], [6, 4])

      // What an exporter sees: the series of this queue carry exactly queue and task, no message id.
      const series = (yield* Metric.snapshot).filter((s) => s.attributes?.["queue"] === queue)
      const acked = series.filter((s) => s.id === "leasehold_task_messages_acked")
      // (Reading a series registers it: the doomed task's reads above made its zero.)
      assert.deepStrictEqual(
        acked
          .map((s) => ({ attributes: s.attributes, count: Number((s.state as Metric.CounterState<number>).count) }))
          .sort((a, b) => String(a.attributes?.["task"]).localeCompare(String(b.attributes?.["task"]))),
        [
          { attributes: { queue, task: "doomed" }, count: 0 },
          { attributes: { queue, task: "flaky" }, count: 1 },
          { attributes: { queue, task: "ok" }, count: 3 }
        ]
      )
      for (const s of series) {
        assert.includeMembers(["queue", "task", "reason"], Object.keys(s.attributes ?? {}), `${s.id} carries only bounded attributes`)
      }
    })).pipe(Effect.provide(PgTest.storeLayer({ clock: "database" }))), { timeout: 30_000 })

  it.live("queue-depth gauges: ready, delayed, in flight, dead and the oldest ready age, sampled in one call", () =>
    Effect.scoped(Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("depth")
      const quiet = freshQueue("depth-quiet")
      yield* store.send(queue, [{ task: "t", payload: "flight" }, { task: "t", payload: "dead" }])
      const [, dead] = yield* store.claim(queue, { lease: "1 minute", limit: 2, consumer: "depth-test" })
      yield* Finish.deadLetter(store, dead!, { reason: "for the test" })
      yield* store.send(queue, [{ task: "t", payload: "r1" }, { task: "t", payload: "r2" }, { task: "t", payload: "later", delay: 60_000 }])

      const depths = yield* QueueDepth.sample([queue, quiet])
      assert.deepStrictEqual(depths.map((d) => [d.queue, d.ready, d.delayed, d.inFlight, d.dead]), [
        [queue, 2, 1, 1, 1],
        [quiet, 0, 0, 0, 0]
      ])
      const gauges = QueueMetrics.forQueue(queue)
      assert.deepStrictEqual(
        yield* Effect.all([gauge(gauges.ready), gauge(gauges.delayed), gauge(gauges.inFlight), gauge(gauges.dead)]),
        [2, 1, 1, 1]
      )
      assert.strictEqual(yield* gauge(gauges.oldestReadyAgeMs), depths[0]!.oldestReadyAgeMs)
      assert.isAtLeast(depths[0]!.oldestReadyAgeMs, 0)
      assert.strictEqual(yield* gauge(QueueMetrics.forQueue(quiet).ready), 0)
    })).pipe(Effect.provide(PgTest.storeLayer({ clock: "database" }))), { timeout: 30_000 })

  it.live("QueueDepth.layer samples the queues consumed in the process every interval", () =>
    Effect.scoped(Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("depth-layer")
      // A consumer of `queue` in this process (what `Consumer.make` registers).
      yield* QueueDepth.track([queue])
      assert.include(yield* QueueDepth.consumedQueues, queue)
      yield* Layer.build(QueueDepth.layer({ interval: "50ms" }))
      const ready = QueueMetrics.forQueue(queue).ready
      yield* store.send(queue, [{ task: "t", payload: 1 }, { task: "t", payload: 2 }, { task: "t", payload: 3 }])
      yield* waitFor("the collector to see 3 ready", Effect.map(gauge(ready), (n) => n === 3 ? Option.some(n) : Option.none()), 10_000)
      yield* store.claim(queue, { lease: "1 minute", limit: 2, consumer: "depth-test" })
      yield* waitFor("the collector to see 1 ready", Effect.map(gauge(ready), (n) => n === 1 ? Option.some(n) : Option.none()), 10_000)
      assert.strictEqual(yield* gauge(QueueMetrics.forQueue(queue).inFlight), 2)
    })).pipe(Effect.provide(PgTest.storeLayer({ clock: "database" }))), { timeout: 30_000 })
})
