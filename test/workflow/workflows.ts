/**
 * The workflows the behaviour suite runs on both engines (effect's memory engine and leasehold's),
 * with counters of how often each activity body really ran, keyed by the execution's payload id.
 */
import { Effect, Layer, Schema } from "effect"
import { Activity, DurableClock, DurableDeferred, Workflow } from "effect/workflow"

/** How often each body ran: `<id>:<name>` → count. Ids are unique per test. */
export const ran = new Map<string, number>()

/** Count one run of `name` for `id`, returning the new count. */
export const bump = (id: string, name: string) =>
  Effect.sync(() => {
    const n = (ran.get(`${id}:${name}`) ?? 0) + 1
    ran.set(`${id}:${name}`, n)
    return n
  })

/** How often `name` ran for `id`. */
export const count = (id: string, name: string): number => ran.get(`${id}:${name}`) ?? 0

/** Ids of executions allowed to go on (the resume test's external condition). */
export const ready = new Set<string>()

const payload = { id: Schema.String }
const idempotencyKey = ({ id }: { readonly id: string }) => id

/** Waits for this before its second activity. */
export const Go = DurableDeferred.make("go")
/** An approval carrying a value. */
export const Approval = DurableDeferred.make("approval", { success: Schema.String })
/** Never completed: a workflow waiting on it stays suspended. */
export const Never = DurableDeferred.make("never")

/** a (1), wait for `Go`, b (2): a + b. */
export const Chain = Workflow.make("Chain", { payload, success: Schema.Number, idempotencyKey })
/** An activity failing until its third attempt, retried: the attempt it succeeded on. */
export const Flaky = Workflow.make("Flaky", { payload, success: Schema.Number, error: Schema.String, idempotencyKey })
/** An activity failing every time, retried once: the workflow fails with its error. */
export const Doomed = Workflow.make("Doomed", { payload, success: Schema.Number, error: Schema.String, idempotencyKey })
/** A durable sleep of a second, then an activity (7). */
export const Nap = Workflow.make("Nap", { payload, success: Schema.Number, idempotencyKey })
/** Waits for `Approval`: its value. */
export const Approve = Workflow.make("Approve", { payload, success: Schema.String, idempotencyKey })
/** Doubles `n` in an activity. */
export const Child = Workflow.make("Child", {
  payload: { id: Schema.String, n: Schema.Number },
  success: Schema.Number,
  idempotencyKey
})
/** Fans out to three children at once (n = 1, 2, 3, each doubled) and sums their results: 12. */
export const Parent = Workflow.make("Parent", { payload, success: Schema.Number, idempotencyKey })
/** Waits on `Never` with a finalizer: what an interrupt ends. */
export const Waits = Workflow.make("Waits", { payload, success: Schema.Number, idempotencyKey })
/** Stuck in an activity that never ends: what an unsafe interrupt stops. */
export const Stuck = Workflow.make("Stuck", { payload, success: Schema.Number, idempotencyKey })
/** Fails until its id is `ready`, suspended on failure: what `resume` brings back. */
export const Fragile = Workflow.make("Fragile", { payload, success: Schema.Number, error: Schema.String, idempotencyKey })
  .annotate(Workflow.SuspendOnFailure, true)

const counted = (id: string, name: string, value: number) =>
  Activity.make({ name, success: Schema.Number, execute: Effect.as(bump(id, name), value) })

const ChainLive = Chain.toLayer(({ id }) =>
  Effect.gen(function*() {
    const a = yield* counted(id, "a", 1)
    yield* DurableDeferred.await(Go)
    const b = yield* counted(id, "b", 2)
    return a + b
  })
)

const failingUntil = (id: string, name: string, succeedOn: number) =>
  Activity.make({
    name,
    success: Schema.Number,
    error: Schema.String,
    execute: Effect.gen(function*() {
      const attempt = yield* Activity.CurrentAttempt
      const n = yield* bump(id, name)
      if (n < succeedOn) return yield* Effect.fail(`attempt ${attempt} failed`)
      return attempt
    })
  })

const FlakyLive = Flaky.toLayer(({ id }) => failingUntil(id, "flaky", 3).pipe(Activity.retry({ times: 5 })))
const DoomedLive = Doomed.toLayer(({ id }) => failingUntil(id, "doomed", 100).pipe(Activity.retry({ times: 1 })))

const NapLive = Nap.toLayer(({ id }) =>
  Effect.gen(function*() {
    yield* DurableClock.sleep({ name: "nap", duration: "1 second", inMemoryThreshold: 0 })
    return yield* counted(id, "after", 7)
  })
)

const ApproveLive = Approve.toLayer(() => DurableDeferred.await(Approval))

const ChildLive = Child.toLayer(({ id, n }) => counted(id, "double", n * 2))

const ParentLive = Parent.toLayer(({ id }) =>
  Effect.gen(function*() {
    const results = yield* Effect.all(
      [1, 2, 3].map((n) => Child.execute({ id: `${id}-child-${n}`, n })),
      { concurrency: "unbounded" }
    )
    return results.reduce((sum, r) => sum + r, 0)
  })
)

const WaitsLive = Waits.toLayer(({ id }) =>
  Effect.gen(function*() {
    yield* Workflow.addFinalizer(() => Effect.asVoid(bump(id, "finalizer")))
    yield* DurableDeferred.await(Never)
    return 1
  })
)

const StuckLive = Stuck.toLayer(({ id }) =>
  Activity.make({ name: "stuck", success: Schema.Number, execute: Effect.andThen(bump(id, "stuck"), Effect.never) })
)

const FragileLive = Fragile.toLayer(({ id }) =>
  Effect.suspend(() => ready.has(id) ? Effect.succeed(5) : Effect.fail("not ready"))
)

/** Every workflow of the suite registered with the engine in context. */
export const WorkflowsLive = Layer.mergeAll(
  ChainLive,
  FlakyLive,
  DoomedLive,
  NapLive,
  ApproveLive,
  ChildLive,
  ParentLive,
  WaitsLive,
  StuckLive,
  FragileLive
)
