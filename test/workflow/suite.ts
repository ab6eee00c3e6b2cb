/**
 * The behaviour suite: the same assertions for any `WorkflowEngine` (run on effect's memory engine
 * and on leasehold's, in Behaviour.test.ts): replay of recorded activities, activity retry and
 * failure, a durable sleep, a deferred completed by token from outside, child workflows (fan-out),
 * interrupt, resume after a suspension on failure, and poll. Real time (short sleeps), with
 * condition waits of generous bounds.
 */
import { assert, type Vitest } from "@effect/vitest"
import { Cause, Effect, Exit, Option } from "effect"
import { DurableDeferred, type Workflow, WorkflowEngine } from "effect/workflow"
import { waitFor } from "../support/Wait.ts"
import * as W from "./workflows.ts"

/** What the suite's `layer(...)` gives (run with `excludeTestServices`: real time). */
type It = Vitest.MethodsNonLive<WorkflowEngine.WorkflowEngine>

let next = 0
/** An id no other test of this run uses. */
const freshId = (what: string) => `${what}-${Date.now().toString(36)}-${next++}`

/** Wait until `poll` shows a result `accept` takes. */
const pollUntil = (
  workflow: Workflow.Any & { readonly poll: (id: string) => Effect.Effect<Option.Option<Workflow.Result<any, any>>, never, any> },
  executionId: string,
  accept: (result: Workflow.Result<any, any>) => boolean
) =>
  waitFor(
    `${workflow._tag} ${executionId} to settle`,
    Effect.map(workflow.poll(executionId), Option.filter(accept)),
    { timeoutMs: 20_000, intervalMs: 50 }
  )

const suspended = (result: Workflow.Result<any, any>) => result._tag === "Suspended"
const complete = (result: Workflow.Result<any, any>) => result._tag === "Complete"

/** Register the suite's tests on `it` (inside a `layer(...)` providing an engine and the workflows). */
export const behaviours = (it: It) => {
  it.effect("poll: nothing for an execution never started, the result once complete", () =>
    Effect.gen(function*() {
      assert.isTrue(Option.isNone(yield* W.Chain.poll("never-started")))
      const id = freshId("poll")
      const executionId = yield* W.Child.execute({ id, n: 4 }, { discard: true })
      const result = yield* pollUntil(W.Child, executionId, complete)
      assert.deepStrictEqual(result._tag === "Complete" && result.exit, Exit.succeed(8))
    }))

  it.effect("replay: an activity recorded before a suspension is not run again", () =>
    Effect.gen(function*() {
      const id = freshId("chain")
      const executionId = yield* W.Chain.execute({ id }, { discard: true })
      yield* pollUntil(W.Chain, executionId, suspended)
      assert.strictEqual(W.count(id, "a"), 1)
      assert.strictEqual(W.count(id, "b"), 0)
      yield* DurableDeferred.done(W.Go, {
        token: DurableDeferred.tokenFromExecutionId(W.Go, { workflow: W.Chain, executionId }),
        exit: Exit.void
      })
      assert.strictEqual(yield* W.Chain.execute({ id }), 3)
      assert.strictEqual(yield* W.Chain.execute({ id }), 3) // an execution id is its idempotency key
      assert.strictEqual(W.count(id, "a"), 1)
      assert.strictEqual(W.count(id, "b"), 1)
    }))

  it.effect("activity retry: attempts until one succeeds; exhausted attempts fail the workflow", () =>
    Effect.gen(function*() {
      const id = freshId("flaky")
      assert.strictEqual(yield* W.Flaky.execute({ id }), 3)
      assert.strictEqual(W.count(id, "flaky"), 3)
      const doomed = freshId("doomed")
      assert.strictEqual(yield* Effect.flip(W.Doomed.execute({ id: doomed })), "attempt 2 failed")
      assert.strictEqual(W.count(doomed, "doomed"), 2)
    }))

  it.effect("sleep: a durable clock wakes the execution after its duration", () =>
    Effect.gen(function*() {
      const id = freshId("nap")
      const started = Date.now()
      assert.strictEqual(yield* W.Nap.execute({ id }), 7)
      assert.isAtLeast(Date.now() - started, 900)
      assert.strictEqual(W.count(id, "after"), 1)
    }))

  it.effect("deferred: completed by token from outside, first completion wins", () =>
    Effect.gen(function*() {
      const id = freshId("approve")
      const executionId = yield* W.Approve.execute({ id }, { discard: true })
      yield* pollUntil(W.Approve, executionId, suspended)
      const token = DurableDeferred.tokenFromExecutionId(W.Approval, { workflow: W.Approve, executionId })
      yield* DurableDeferred.succeed(W.Approval, { token, value: "yes" })
      yield* DurableDeferred.succeed(W.Approval, { token, value: "no" })
      assert.strictEqual(yield* W.Approve.execute({ id }), "yes")
    }))

  it.effect("child workflows: a parent fans out to three children and is woken by their results", () =>
    Effect.gen(function*() {
      const id = freshId("parent")
      assert.strictEqual(yield* W.Parent.execute({ id }), 12)
      for (const n of [1, 2, 3]) assert.strictEqual(W.count(`${id}-child-${n}`, "double"), 1)
    }))

  it.effect("interrupt: a suspended execution completes interrupted, its finalizer run", () =>
    Effect.gen(function*() {
      const id = freshId("waits")
      const executionId = yield* W.Waits.execute({ id }, { discard: true })
      yield* pollUntil(W.Waits, executionId, suspended)
      yield* W.Waits.interrupt(executionId)
      const result = yield* pollUntil(W.Waits, executionId, complete)
      assert.isTrue(result._tag === "Complete" && Exit.isFailure(result.exit) && Cause.hasInterrupts(result.exit.cause))
      assert.isAtLeast(W.count(id, "finalizer"), 1)
    }))

  it.effect("interruptUnsafe: a run inside an activity that never ends is stopped and completes interrupted", () =>
    Effect.gen(function*() {
      const id = freshId("stuck")
      const executionId = yield* W.Stuck.execute({ id }, { discard: true })
      yield* waitFor("the activity to start", Effect.sync(() => W.count(id, "stuck") > 0 ? Option.some(true) : Option.none()))
      const engine = yield* WorkflowEngine.WorkflowEngine
      yield* engine.interruptUnsafe(W.Stuck, executionId)
      const result = yield* pollUntil(W.Stuck, executionId, complete)
      assert.isTrue(result._tag === "Complete" && Exit.isFailure(result.exit) && Cause.hasInterrupts(result.exit.cause))
      assert.strictEqual(W.count(id, "stuck"), 1, "the activity is not started again")
    }))

  it.effect("resume: an execution suspended on failure runs again when resumed", () =>
    Effect.gen(function*() {
      const id = freshId("fragile")
      const executionId = yield* W.Fragile.execute({ id }, { discard: true })
      const first = yield* pollUntil(W.Fragile, executionId, suspended)
      assert.isTrue(first._tag === "Suspended" && first.failed === true)
      W.ready.add(id)
      yield* W.Fragile.resume(executionId)
      const result = yield* pollUntil(W.Fragile, executionId, complete)
      assert.deepStrictEqual(result._tag === "Complete" && result.exit, Exit.succeed(5))
    }))
}
