/**
 * Task contracts apart from their handlers, and the sender service (issue 15, items 1 and 2), on
 * the memory store:
 *
 * - `Task.define` declares a task without a handler; `Task.implement` gives it one where the worker
 *   is built, and `Task.dispatcher` runs it; `Task.make` stays the one-step form;
 * - `TaskClient.send` needs `TaskClient` only (no `QueueStore`), fails with one union
 *   (`Task.SendError`), stores the payload encoded by the schema, and refuses a bad payload with
 *   the task's name in the error;
 * - an `effect/http-api` handler sends with `TaskClient.send`, with `TaskClient.layer` provided once:
 *   checked at the type level (the group's layer requires exactly `TaskClient`, the app exactly
 *   `QueueStore`) and run through a served API and its typed client;
 * - the README's examples: examples/tasks.ts exports declarations only, examples/producer.ts imports
 *   them and `TaskClient`, no worker code.
 */
import { readFileSync } from "node:fs"
import { NodeHttpServer } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Option, Schema } from "effect"
import { TestClock } from "effect/testing"
import * as Lifecycle from "../src/Lifecycle.ts"
import { HttpApi, HttpApiBuilder, HttpApiClient, HttpApiEndpoint, HttpApiGroup } from "effect/http-api"
import { HttpRouter } from "effect/http"
import * as MemoryQueueStore from "../src/MemoryQueueStore.ts"
import type { MessageId, SendResult } from "../src/Message.ts"
import { InvalidInput, ResultUnreadable } from "../src/QueueError.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as Task from "../src/Task.ts"
import * as TaskClient from "../src/TaskClient.ts"
import * as Testing from "../src/Testing.ts"
import { makeSpy, type Spy, startConsumer } from "./support/ConsumerHarness.ts"

/** Exactly the same type (not merely assignable either way). */
type Equals<X, Y> = (<T>() => T extends X ? 1 : 2) extends (<T>() => T extends Y ? 1 : 2) ? true : false
const assertType = <_T extends true>() => {}

// What a producer imports: declarations only, no handler, no handler services.
const Welcome = Schema.Struct({ to: Schema.String, visits: Schema.NumberFromString })
const welcome = Task.define({ name: "user.welcome", queue: "emails", payload: Welcome, maxAttempts: 3 })

/** Let the consumer run every message of `queues` to the end, moving the TestClock as needed (bounded). */
const idle = (spy: Spy, queues: ReadonlyArray<string>) =>
  Testing.awaitIdle({ queues }).pipe(Effect.provideService(QueueStore, spy.inner))

/** Whether a progress value read back says all 100 are done. */
const isDone = (progress: unknown) => (progress as { readonly done?: unknown } | undefined)?.done === 100

// --- An HTTP API whose handler sends a task (the type test) ---

class SignUpFailed extends Schema.TaggedError<SignUpFailed>()("SignUpFailed", { reason: Schema.String }) {}

const Api = HttpApi.make("app").add(
  HttpApiGroup.make("users").add(
    HttpApiEndpoint.post("signUp", "/users", {
      payload: Schema.Struct({ email: Schema.String }),
      success: Schema.Struct({ messageId: Schema.String }),
      error: SignUpFailed
    })
  )
)

/** The handler sends through `TaskClient.send`: no store, no captured context. */
const UsersLive = HttpApiBuilder.group(Api, "users", (handlers) =>
  handlers.handle("signUp", ({ payload }) =>
    TaskClient.send(welcome, { to: payload.email, visits: 1 }, { dedupKey: `welcome:${payload.email}` }).pipe(
      Effect.map((sent) => ({ messageId: sent.id })),
      // One union to catch: every way a send can fail, each a tagged error.
      Effect.mapError((error: Task.SendError) => new SignUpFailed({ reason: `${error._tag}: ${error.message}` }))
    )))

// The send's own type: TaskClient is its only requirement, Task.SendError its only error.
const sendOnce = TaskClient.send(welcome, { to: "ada@example.com", visits: 2 })
assertType<Equals<typeof sendOnce, Effect.Effect<SendResult, Task.SendError, TaskClient.TaskClient>>>()
assertType<Equals<Task.SendError, InvalidInput | import("../src/QueueError.ts").StoreError>>()
// Task.send keeps needing the store; the declaration is enough to send (no handler).
const sendWithStore = Task.send(welcome, { to: "ada@example.com", visits: 2 })
assertType<Equals<typeof sendWithStore, Effect.Effect<SendResult, Task.SendError, QueueStore>>>()
// @ts-expect-error: the payload is checked against the declaration's schema
TaskClient.send(welcome, { to: "ada@example.com", visits: "2" })

// The app: the API served with TaskClient.layer provided once. The handler's TaskClient is a
// request-level requirement of the routes; HttpRouter.serve makes it the server's, which the one
// layer meets. What is left to provide is the server and the store, never TaskClient or a context.
type RequirementsOf<L> = L extends Layer.Layer<infer _ROut, infer _E, infer RIn> ? RIn : never
const AppLive = HttpRouter.serve(HttpApiBuilder.layer(Api).pipe(Layer.provide(UsersLive)), { disableLogger: true }).pipe(
  Layer.provide(TaskClient.layer)
)
assertType<Equals<Extract<RequirementsOf<typeof AppLive>, TaskClient.TaskClient>, never>>()
assertType<QueueStore extends RequirementsOf<typeof AppLive> ? true : false>()
const ServedLive = AppLive.pipe(Layer.provide(MemoryQueueStore.layer()), Layer.provideMerge(NodeHttpServer.layerTest))
assertType<Equals<RequirementsOf<typeof ServedLive>, never>>()

describe("Task.define / Task.implement", () => {
  it.effect("a declared task, implemented where the worker is built, is run by the dispatcher", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const seen: Array<{ to: string; visits: number; attempt: number }> = []
      // The worker's side: the declaration plus its handler.
      const welcomeImpl = Task.implement(welcome, (email, context) =>
        Effect.sync(() => {
          seen.push({ ...email, attempt: context.attempt })
        }))
      assert.strictEqual(welcomeImpl.name, "user.welcome")
      assert.strictEqual(welcomeImpl.queue, "emails")
      assert.strictEqual(welcomeImpl.maxAttempts, 3)

      const sent = yield* Task.send(welcome, { to: "ada@example.com", visits: 4 }).pipe(
        Effect.provide(Layer.succeed(QueueStore, spy.store))
      )
      const dispatcher = Task.dispatcher(welcomeImpl)
      assert.deepStrictEqual(dispatcher.queues, ["emails"])
      yield* startConsumer(spy, dispatcher, {})
      yield* idle(spy, ["emails"])
      assert.deepStrictEqual(seen, [{ to: "ada@example.com", visits: 4, attempt: 1 }])
      assert.deepStrictEqual(spy.of("ack").map((c) => c.ids[0]), [sent.id])
    }))

  it("a declaration is checked when it is declared; Task.make still declares and implements in one step", () => {
    assert.throws(() => Task.define({ name: "bad name!", payload: Schema.String }), InvalidInput)
    assert.throws(() => Task.define({ name: "t", payload: Schema.String, maxAttempts: 0 }), /maxAttempts/)
    assert.throws(() => Task.define({ name: "t", payload: Schema.String, retry: { base: "2s", max: "1s" } }), /retry\.max/)
    const declared = Task.define({ name: "plain", payload: Schema.String })
    assert.strictEqual(declared.queue, "default")
    assert.isFalse("handler" in declared)
    const made = Task.make({ name: "plain", payload: Schema.String, handler: () => Effect.void })
    assert.deepStrictEqual({ ...made, handler: undefined }, { ...declared, handler: undefined })
    // @ts-expect-error: a declaration has no handler, so the dispatcher refuses it
    assert.throws(() => Task.dispatcher(declared), /"plain" is declared but has no handler: give it one with Task.implement/)
  })
})

describe("the examples the README shows", () => {
  it("tasks.ts holds declarations only, and the producer imports them and the sender, no worker code", async () => {
    const tasks: Record<string, unknown> = await import("../examples/tasks.ts")
    const exported = Object.entries(tasks)
    assert.isNotEmpty(exported)
    for (const [name, value] of exported) {
      assert.isFalse(typeof value === "object" && value !== null && "handler" in value, `examples/tasks.ts exports ${name} with a handler`)
    }
    const producer = readFileSync("examples/producer.ts", "utf8")
    const imports = [...producer.matchAll(/^import .* from "([^"]+)"/gm)].map((m) => m[1])
    assert.sameMembers(imports, ["@effect/platform-node/NodeRuntime", "effect", "effect/sql", "leasehold", "./tasks.ts"])
    assert.include(producer, "TaskClient.send(")
    assert.include(producer, "TaskClient.layer")
    assert.notInclude(producer, "Task.send(")
  })
})

describe("TaskClient", () => {
  it.effect("a handler's result is kept, encoded, with its acked attempt, and read back decoded by id; nothing kept costs nothing", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const Report = Schema.Struct({ total: Schema.NumberFromString, label: Schema.String })
      const report = Task.define({ name: "report", queue: "reports", payload: Schema.Number, success: Report })
      const plain = Task.define({ name: "plain", queue: "reports", payload: Schema.Number })
      const quiet = Task.define({ name: "quiet", queue: "reports", payload: Schema.Number, success: Schema.Void })
      const huge = Task.define({ name: "huge", queue: "reports", payload: Schema.Number, success: Schema.String })
      const nul = Task.define({ name: "nul", queue: "reports", payload: Schema.Number, success: Schema.Struct({ text: Schema.String }) })
      const client = yield* TaskClient.make.pipe(Effect.provideService(QueueStore, spy.store))
      const [r, p, q, h, u] = yield* Effect.forEach([report, plain, quiet, huge, nul] as const, (task) => client.send(task, 3))
      // Not run yet: nothing kept.
      assert.deepStrictEqual(yield* client.result(report, r!.id), Option.none())
      yield* startConsumer(spy, Task.dispatcher(
        Task.implement(report, (n) => Effect.succeed({ total: n * 2, label: "six" })),
        Task.implement(plain, (n) => Effect.succeed({ n })),
        Task.implement(quiet, () => Effect.void),
        Task.implement(huge, () => Effect.succeed("x".repeat(70_000))),
        Task.implement(nul, () => Effect.succeed({ text: "upstream said \u0000" }))
      ), {})
      yield* idle(spy, ["reports"])
      assert.strictEqual(spy.of("ack").length, 5)

      const kept = yield* client.result(report, r!.id)
      assertType<Equals<typeof kept, Option.Option<{ readonly total: number; readonly label: string }>>>()
      assert.deepStrictEqual(kept, Option.some({ total: 6, label: "six" }))
      // Stored encoded (the schema's JSON form), with the acked attempt.
      const [attempt] = yield* spy.inner.attempts(r!.id)
      assert.deepStrictEqual([attempt!.outcome, attempt!.result], ["acked", { total: "6", label: "six" }])
      assert.deepStrictEqual(yield* client.resultJson(r!.id), Option.some({ total: "6", label: "six" }))
      // No success schema, or a void one: nothing kept, no key on the record.
      for (const id of [p!.id, q!.id]) {
        const [a] = yield* spy.inner.attempts(id)
        assert.isFalse("result" in a!)
        assert.deepStrictEqual(yield* client.resultJson(id), Option.none())
      }
      // Over the bound: acked all the same, and the reader says why it has no value.
      const tooLarge = yield* Effect.flip(client.result(huge, h!.id))
      assert.instanceOf(tooLarge, ResultUnreadable)
      assert.strictEqual((tooLarge as ResultUnreadable).reason, "too-large")
      assert.match(tooLarge.message, /70002 bytes of JSON, over the 65536-byte bound/)
      // Text jsonb cannot store (a NUL): acked all the same, the reader says where and why.
      const unstorable = yield* Effect.flip(client.result(nul, u!.id))
      assert.strictEqual((unstorable as ResultUnreadable).reason, "unstorable")
      assert.match(unstorable.message, /was not kept: result\.text contains a NUL character/)
      // The kept JSON read with a schema it does not match.
      const mismatch = yield* Effect.flip(client.result(huge, r!.id))
      assert.strictEqual((mismatch as ResultUnreadable).reason, "schema")
      assert.match(mismatch.message, /does not decode with the success schema of task "huge"/)
      // Unknown and malformed ids: nothing.
      assert.deepStrictEqual(yield* client.resultJson("987654321" as MessageId), Option.none())
      assert.deepStrictEqual(yield* client.resultJson("abc" as MessageId), Option.none())
      // A task made in one step keeps its success schema's type too.
      const made = Task.make({ name: "made", payload: Schema.Number, success: Report, handler: () => Effect.succeed({ total: 1, label: "x" }) })
      const fromMade = client.result(made, r!.id)
      assertType<Equals<typeof fromMade, Effect.Effect<Option.Option<{ readonly total: number; readonly label: string }>, ResultUnreadable | import("../src/QueueError.ts").StoreError>>>()
      assert.deepStrictEqual(yield* fromMade, Option.some({ total: 6, label: "six" }))
      // @ts-expect-error: a task without a success schema has no typed result (resultJson reads it)
      void client.result(plain, p!.id)
      // The service accessor reads the same.
      assert.deepStrictEqual(
        yield* TaskClient.result(report, r!.id).pipe(Effect.provideService(TaskClient.TaskClient, client)),
        Option.some({ total: 6, label: "six" })
      )
    }))

  it.effect("a handler's progress: the last value reported wins, written at most every interval, fenced; awaitResult sees the end", () =>
    Effect.scoped(Effect.gen(function*() {
      const spy = yield* makeSpy
      const client = yield* TaskClient.make.pipe(Effect.provideService(QueueStore, spy.store))
      const long = Task.define({ name: "long", queue: "progress", payload: Schema.Number, success: Schema.Number })
      const reported = yield* Deferred.make<string>()
      const release = yield* Deferred.make<void>()
      const sent = yield* client.send(long, 100)
      yield* startConsumer(spy, Task.dispatcher(Task.implement(long, (n, context) =>
        Effect.gen(function*() {
          for (let k = 1; k <= n; k++) yield* context.progress({ done: k, of: n })
          const tooLarge = yield* Effect.flip(context.progress("x".repeat(Lifecycle.limits.maxProgressBytes)))
          yield* Deferred.succeed(reported, `${tooLarge._tag} ${tooLarge.field}`)
          yield* Deferred.await(release)
          yield* context.progress({ done: "after" })
          return n
        }))), {})
      assert.strictEqual(yield* Deferred.await(reported), "InvalidInput progress")
      // The first write went at once; the rest wait for the interval, and only the last is written.
      const progressOf = Effect.map(client.progress(sent.id), Option.getOrUndefined)
      for (let k = 0; k < 20 && !isDone(yield* progressOf); k++) {
        yield* TestClock.adjust(Lifecycle.limits.progressIntervalMs)
        yield* Effect.yieldNow
      }
      assert.deepStrictEqual(yield* progressOf, { done: 100, of: 100 })
      assert.isAtMost(spy.of("progress").length, 2, "a hundred reports, one interval: at most two writes")
      const awaiting = yield* Effect.forkChild(client.awaitResult(long, sent.id, { timeout: "1 minute", pollInterval: "1 hour" }))
      yield* Deferred.succeed(release, undefined)
      yield* idle(spy, ["progress"])
      assert.deepStrictEqual(yield* Fiber.join(awaiting), Option.some(100))
      // Reported in the run's last moment, after the first write's interval: written at most once more, never after the ack.
      assert.isAtMost(spy.of("progress").length, 3)
    })))

  it.effect("a send lands in the store with the payload encoded by the schema", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const sent = yield* TaskClient.send(welcome, { to: "ada@example.com", visits: 7 }, { priority: 3, headers: { from: "test" } })
      const many = yield* TaskClient.sendMany(welcome, [{ to: "b@example.com", visits: 1 }, { to: "c@example.com", visits: 2 }])
      assert.strictEqual(many.length, 2)
      const claims = yield* store.claim("emails", { lease: "1 minute", limit: 10, consumer: "inspector" })
      const first = claims.find((c) => c.id === sent.id)
      assert.isDefined(first)
      assert.strictEqual(first!.task, "user.welcome")
      assert.strictEqual(first!.queue, "emails")
      // Stored encoded: visits through NumberFromString, as a string.
      assert.deepStrictEqual(first!.payload, { to: "ada@example.com", visits: "7" })
      assert.strictEqual(first!.priority, 3)
      assert.deepStrictEqual(first!.headers, { from: "test" })
      assert.strictEqual(first!.maxAttempts, 3)
      assert.sameMembers(claims.map((c) => (c.payload as { visits: string }).visits), ["7", "1", "2"])
    }).pipe(Effect.provide(TaskClient.layer.pipe(Layer.provideMerge(MemoryQueueStore.layer())))))

  it.effect("a payload that does not encode is refused with the task's name, and nothing is stored", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const positive = Task.define({ name: "count.positive", payload: Schema.Struct({ n: Schema.Number.check(Schema.isGreaterThan(0)) }) })
      const error = yield* Effect.flip(TaskClient.send(positive, { n: -1 }))
      assert.instanceOf(error, InvalidInput)
      assert.strictEqual(error._tag, "InvalidInput")
      assert.include(error.message, `task "count.positive"`)
      assert.include((error as InvalidInput).rule, "count.positive")
      // One bad payload refuses the whole batch.
      const batch = yield* Effect.flip(TaskClient.sendMany(positive, [{ n: 1 }, { n: 0 }]))
      assert.include(batch.message, "count.positive")
      const stats = yield* store.stats("default")
      assert.strictEqual(stats.ready, 0)
      // A bad option is the same union's InvalidInput.
      const option = yield* Effect.flip(TaskClient.send(positive, { n: 1 }, { delay: "soon" as never }))
      assert.strictEqual(option._tag, "InvalidInput")
    }).pipe(Effect.provide(TaskClient.layer.pipe(Layer.provideMerge(MemoryQueueStore.layer())))))

  it.live("an HttpApi handler sends with TaskClient.layer provided once", () =>
    Effect.gen(function*() {
      const client = yield* HttpApiClient.make(Api)
      const answer = yield* client.users.signUp({ payload: { email: "ada@example.com" } })
      const again = yield* client.users.signUp({ payload: { email: "ada@example.com" } })
      assert.strictEqual(again.messageId, answer.messageId, "the dedup key holds across requests")
      const store = yield* QueueStore
      const [claim, ...rest] = yield* store.claim("emails", { lease: "1 minute", limit: 10, consumer: "inspector" })
      assert.strictEqual(claim?.id, answer.messageId)
      assert.strictEqual(claim?.task, "user.welcome")
      assert.deepStrictEqual(claim?.payload, { to: "ada@example.com", visits: "1" })
      assert.deepStrictEqual(rest, [])
    }).pipe(
      // One store for the server and for the inspection above.
      Effect.provide(
        HttpRouter.serve(HttpApiBuilder.layer(Api).pipe(Layer.provide(UsersLive)), { disableLogger: true }).pipe(
          Layer.provide(TaskClient.layer),
          Layer.provideMerge(MemoryQueueStore.layer()),
          Layer.provideMerge(NodeHttpServer.layerTest)
        )
      ),
      Effect.scoped
    ))
})
