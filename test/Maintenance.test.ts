/**
 * The maintenance family's one shape (src/maintenance/Maintenance.ts): a named
 * task run every interval, a failed round logged and the next one coming, a
 * defect restarting the loop; and the registry of consumed queues as a service
 * (`QueueDepth.ConsumedQueues`), which a runtime can hold for itself.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import * as Maintenance from "../src/maintenance/Maintenance.ts"
import { QueryFailed } from "../src/QueueError.ts"
import * as QueueDepth from "../src/QueueDepth.ts"
import { captureLogs } from "./support/ConsumerHarness.ts"

describe("Maintenance", () => {
  it.effect("a task runs every interval; a failed round is logged and the next one comes; a defect restarts the loop", () =>
    Effect.gen(function*() {
      const logs = captureLogs()
      let rounds = 0
      const task: Maintenance.Task<QueryFailed> = {
        name: "test task",
        every: 1_000,
        failed: (e) => `nothing done: ${e.message}`,
        run: Effect.suspend(() => {
          rounds += 1
          return rounds === 2
            ? Effect.fail(new QueryFailed({ operation: "test", message: "boom" }))
            : rounds === 3
            ? Effect.die("a bug")
            : Effect.void
        })
      }
      const fiber = yield* Effect.forkChild(Maintenance.loop(task).pipe(Effect.provide(logs.layer)))
      yield* TestClock.adjust(999)
      assert.strictEqual(rounds, 0, "the first round after the interval")
      yield* TestClock.adjust(1)
      assert.strictEqual(rounds, 1)
      yield* TestClock.adjust(1_000)
      assert.strictEqual(rounds, 2)
      assert.isTrue(logs.entries.some((e) => e.level === "Warn" && e.message === "nothing done: boom"))
      yield* TestClock.adjust(1_000)
      assert.strictEqual(rounds, 3)
      assert.isTrue(logs.entries.some((e) => e.level === "Error" && e.message.startsWith("test task failed, restarting in 1s")))
      yield* TestClock.adjust(2_000) // the 1 s pause, then the interval
      assert.strictEqual(rounds, 4)
      yield* Fiber.interrupt(fiber)
    }))

  it.effect("firstAtOnce: the first round at once", () =>
    Effect.gen(function*() {
      let rounds = 0
      const fiber = yield* Effect.forkChild(Maintenance.loop({
        name: "at once",
        every: 1_000,
        firstAtOnce: true,
        run: Effect.sync(() => void (rounds += 1))
      }))
      // A round runs on a fiber of its own (detached): a few scheduler turns, no time passing.
      const turns = (wanted: number) =>
        Effect.gen(function*() {
          for (let turn = 0; turn < 10 && rounds < wanted; turn++) yield* Effect.yieldNow
        })
      yield* turns(1)
      assert.strictEqual(rounds, 1)
      yield* TestClock.adjust(999)
      yield* turns(2)
      assert.strictEqual(rounds, 1, "the second round waits its interval")
      yield* TestClock.adjust(1)
      yield* turns(2)
      assert.strictEqual(rounds, 2)
      yield* Fiber.interrupt(fiber)
    }))

  it.effect("consumed queues: a runtime with a registry of its own does not see another's consumers", () =>
    Effect.gen(function*() {
      const own = yield* Effect.scoped(Effect.gen(function*() {
        yield* QueueDepth.track(["mine"])
        return yield* QueueDepth.consumedQueues
      })).pipe(Effect.provide(QueueDepth.layerConsumedQueues))
      assert.deepStrictEqual(own, ["mine"])
      const other = yield* QueueDepth.consumedQueues.pipe(Effect.provide(QueueDepth.layerConsumedQueues))
      assert.deepStrictEqual(other, [])
      // Released with the scope.
      assert.notInclude(yield* QueueDepth.consumedQueues, "mine")
    }))
})
