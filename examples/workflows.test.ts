import { assert, it, layer } from "@effect/vitest"
import { Effect, Exit, Fiber, Layer, Option } from "effect"
import { TestClock } from "effect/testing"
import { WorkflowEngine } from "effect/workflow"
import { Consumer, LeaseholdWorkflow, MemoryQueueStore, Migrations, Task, TaskClient } from "leasehold"
import * as PgTest from "../test/support/PgTest.ts"
import { AllWorkflowsLive, WorkflowsLive, decide, Expense, Onboard, Reminder, resize, SumOfSquares, Thumbnail } from "./workflows.ts"

// Leasehold's engine on a fresh schema of the test server; resize's worker on the memory store.
const schema = PgTest.uniqueSchema("ex")
const Engine = LeaseholdWorkflow.layer({ schema, pollInterval: "200 millis" }).pipe(
  Layer.provideMerge(Migrations.layer({ schema })),
  Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
  Layer.provideMerge(PgTest.clientLayer())
)
const Resizer = Layer.merge(Consumer.layer(Task.dispatcher(Task.implement(resize, (image) => Effect.succeed(image.length)))), TaskClient.layer)
  .pipe(Layer.provideMerge(MemoryQueueStore.layer()))

layer(AllWorkflowsLive.pipe(Layer.provideMerge(Engine), Layer.provideMerge(Resizer)), { excludeTestServices: true, timeout: 60_000 })(
  "the workflow examples on leasehold's engine",
  (it) => {
    it.effect("a chain, a fan-out, an approval and a task's result", () =>
      Effect.gen(function*() {
        assert.strictEqual(yield* Onboard.execute({ user: "ada" }), "acct-ada")
        assert.strictEqual(yield* SumOfSquares.execute({ id: "sq-10", n: 10 }), 285)
        const expense = yield* Expense.execute({ id: "exp-1", cents: 1200 }, { discard: true })
        const waiting = yield* Effect.forkChild(Expense.execute({ id: "exp-1", cents: 1200 }))
        yield* decide(expense, true)
        assert.strictEqual(yield* Fiber.join(waiting), "paid 1200")
        assert.strictEqual(yield* Thumbnail.execute({ image: "cat.png" }), 7)
      }))
  }
)

// A day-long sleep, on the TestClock: effect's memory engine keeps its clocks on Effect's Clock.
it.effect("a reminder sleeps a day, then reminds", () =>
  Effect.gen(function*() {
    const reminded = yield* Effect.forkChild(Reminder.execute({ user: "ada" }))
    // The execution starts and schedules its clock on the test clock's "now": wait for its
    // suspension (scheduler turns, no time passing) so the day counts from here.
    const id = yield* Reminder.executionId({ user: "ada" })
    let suspended = false
    for (let turn = 0; turn < 1_000 && !suspended; turn++) {
      const result = yield* Reminder.poll(id)
      suspended = Option.isSome(result) && result.value._tag === "Suspended"
      if (!suspended) yield* Effect.yieldNow
    }
    assert.isTrue(suspended, "the execution suspended on its clock")
    yield* TestClock.adjust("23 hours")
    assert.isUndefined(reminded.pollUnsafe(), "still asleep after 23 hours")
    yield* TestClock.adjust("1 hour")
    // Awaited, not polled: the execution's end is a few scheduler turns after the clock fires
    // (without the day's adjustment the await never ends and the test times out).
    const exit = yield* Fiber.await(reminded)
    assert.deepStrictEqual(exit, Exit.succeed("reminded ada"))
  }).pipe(Effect.provide(WorkflowsLive.pipe(Layer.provideMerge(WorkflowEngine.layerMemory)))))
