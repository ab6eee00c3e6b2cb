/**
 * Typed tasks on the memory store with TestClock: sending through the schema,
 * decoding on the worker, retry policies, unrecoverable failures, unknown
 * tasks, quarantine and the attempt history.
 */
import { assert, describe, it } from "@effect/vitest"
import { Clock, Effect, Layer, Option, Schema } from "effect"
import { TestClock } from "effect/testing"
import * as Backoff from "../src/internal/backoff.ts"
import * as MemoryQueueStore from "../src/MemoryQueueStore.ts"
import * as Validate from "../src/internal/validate.ts"
import type { MessageId } from "../src/Message.ts"
import { InvalidInput } from "../src/QueueError.ts"
import { QueueStore, type QueueStoreShape } from "../src/QueueStore.ts"
import * as Task from "../src/Task.ts"
import * as Testing from "../src/Testing.ts"
import { captureLogs, makeSpy, startConsumer, type Spy } from "./support/ConsumerHarness.ts"
import * as Finish from "./support/Finish.ts"

const Email = Schema.Struct({ to: Schema.String, count: Schema.NumberFromString })

const settle = Effect.gen(function*() {
  for (let i = 0; i < 20; i++) yield* Effect.yieldNow
})

/** Let the consumer run every message of `default` to the end, moving the TestClock as needed (bounded). */
const idle = (spy: Spy) => Testing.awaitIdle({ queues: ["default"] }).pipe(Effect.provideService(QueueStore, spy.inner))

/** Provide the spy's store to a producer-side effect. */
const withStore = (spy: Spy) => Effect.provide(Layer.succeed(QueueStore, spy.store))

const claimRaw = (store: QueueStoreShape, queue = "default") =>
  store.claim(queue, { lease: "1 minute", limit: 10, consumer: "inspector" })

describe("Task (memory store, TestClock)", () => {
  it.effect("send encodes through the schema; the worker decodes back", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const seen: Array<{ to: string; count: number }> = []
      const email = Task.make({
        name: "email.send",
        payload: Email,
        handler: (payload) => Effect.sync(() => seen.push(payload))
      })
      const sent = yield* Task.send(email, { to: "ada@example.com", count: 3 }).pipe(withStore(spy))
      // @ts-expect-error: the payload is type-checked against the task's schema
      yield* Effect.ignore(Task.send(email, { to: 1, count: "x" }).pipe(withStore(spy)))
      // Stored encoded: count as a string.
      const [raw] = yield* spy.inner.claim("default", { lease: "1 second", limit: 1, consumer: "peek" })
      assert.deepStrictEqual(raw!.payload, { to: "ada@example.com", count: "3" })
      assert.strictEqual(yield* Finish.release(spy.inner, raw!), "written")
      yield* startConsumer(spy, Task.dispatcher(email), {})
      yield* idle(spy)
      assert.deepStrictEqual(seen, [{ to: "ada@example.com", count: 3 }])
      assert.deepStrictEqual(spy.of("ack").map((c) => c.ids[0]), [sent.id])
    }))

  it.effect("a task's handler context: its message, attempt, consumer and lease deadline (read when asked)", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const seen: Array<{ id: string; attempt: number; consumerId: string; messageTask: string; deadline: number; startedAt: number }> = []
      const email = Task.make({
        name: "email.context",
        payload: Email,
        handler: (_payload, context) =>
          Effect.gen(function*() {
            const deadline = yield* context.leaseDeadline
            seen.push({
              id: context.messageId,
              attempt: context.attempt,
              consumerId: context.consumerId,
              messageTask: context.message.task,
              deadline: deadline.getTime(),
              startedAt: yield* Clock.currentTimeMillis
            })
          })
      })
      const sent = yield* Task.send(email, { to: "ada@example.com", count: 3 }).pipe(withStore(spy))
      yield* startConsumer(spy, Task.dispatcher(email), { consumerId: "worker-ctx", lease: "30 seconds" })
      yield* idle(spy)
      assert.strictEqual(seen.length, 1)
      const [s] = seen
      assert.strictEqual(s!.id, sent.id)
      assert.strictEqual(s!.attempt, 1)
      assert.strictEqual(s!.consumerId, "worker-ctx")
      assert.strictEqual(s!.messageTask, "email.context")
      // The lease this consumer holds: claimed for 30 s, so it ends 30 s after the claim (no renewal yet).
      assert.isTrue(s!.deadline > s!.startedAt && s!.deadline <= s!.startedAt + 30_000, `deadline ${s!.deadline - s!.startedAt} ms after the start`)
    }))

  it.effect("a payload that does not encode is refused at send with the schema's message", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const positive = Task.make({
        name: "positive",
        payload: Schema.Struct({ n: Schema.Number.check(Schema.isGreaterThan(0)) }),
        handler: () => Effect.void
      })
      const e = yield* Effect.flip(Task.send(positive, { n: -1 }).pipe(withStore(spy)))
      assert.strictEqual(e._tag, "InvalidInput")
      if (e._tag !== "InvalidInput") return
      assert.strictEqual(e.field, "payload")
      assert.include(e.message, `task "positive"`)
      assert.match(e.message, /greater than 0/)
      assert.strictEqual((yield* spy.inner.stats("default")).ready, 0, "nothing was written")
    }))

  it.effect("send options: delay, run-at, priority, dedup key, max attempts, headers, queue", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const job = Task.make({ name: "job", queue: "jobs", payload: Schema.Number, handler: () => Effect.void, maxAttempts: 4 })
      yield* Task.send(job, 1, { delay: "10s" }).pipe(withStore(spy))
      yield* Task.send(job, 2, { priority: -5, headers: { trace: "t-2" }, maxAttempts: 9 }).pipe(withStore(spy))
      const first = yield* Task.send(job, 3, { dedupKey: "k" }).pipe(withStore(spy))
      const again = yield* Task.send(job, 4, { dedupKey: "k" }).pipe(withStore(spy))
      assert.deepStrictEqual(again, { id: first.id, deduplicated: true })
      yield* Task.send(job, 5, { queue: "elsewhere" }).pipe(withStore(spy))
      const ready = yield* claimRaw(spy.inner, "jobs")
      assert.deepStrictEqual(ready.map((c) => [c.payload, c.priority, c.maxAttempts]), [[2, -5, 9], [3, 0, 4]])
      assert.deepStrictEqual(ready[0]!.headers, { trace: "t-2" })
      assert.strictEqual((yield* claimRaw(spy.inner, "elsewhere")).length, 1)
      yield* TestClock.adjust("10 seconds")
      assert.deepStrictEqual((yield* claimRaw(spy.inner, "jobs")).map((c) => c.payload), [1])
      // Run-at is the producer's wall clock; a past run-at means now.
      const past = yield* Task.send(job, 6, { runAt: new Date(0) }).pipe(withStore(spy))
      const [ran] = yield* claimRaw(spy.inner, "jobs")
      assert.strictEqual(ran!.id, past.id)
      const bad = yield* Effect.flip(Task.send(job, 7, { delay: "soon" }).pipe(withStore(spy)))
      assert.strictEqual(bad._tag === "InvalidInput" ? bad.field : bad._tag, "delay")
    }))

  it.effect("a failed attempt is retried after the task's backoff, with the error recorded; no lease held meanwhile", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      let runs = 0
      const flaky = Task.make({
        name: "flaky",
        payload: Schema.Number,
        retry: { base: "1s", factor: 3, jitter: false },
        maxAttempts: 4,
        handler: () => Effect.suspend(() => ++runs < 4 ? Effect.fail(new Error(`failure ${runs}`)) : Effect.void)
      })
      const sent = yield* Task.send(flaky, 1).pipe(withStore(spy))
      yield* startConsumer(spy, Task.dispatcher(flaky), { pollInterval: "100 millis" })
      yield* settle
      // Delays 1 s, 3 s, 9 s: each retry waits, visible at exactly that time, holding nothing.
      for (const [delay, expectedRuns] of [[1_000, 2], [3_000, 3], [9_000, 4]] as const) {
        assert.strictEqual(runs, expectedRuns - 1)
        const stats = yield* spy.inner.stats("default")
        assert.deepStrictEqual([stats.delayed, stats.inFlight], [1, 0])
        const next = Option.getOrThrow(yield* spy.inner.nextVisibleAt("default"))
        assert.strictEqual(next.getTime() - (yield* Clock.currentTimeMillis), delay)
        yield* TestClock.adjust(delay)
        yield* settle
        assert.strictEqual(runs, expectedRuns)
      }
      const history = yield* spy.inner.attempts(sent.id)
      assert.deepStrictEqual(history.map((a) => [a.attempt, a.outcome]), [[1, "retried"], [2, "retried"], [3, "retried"], [4, "acked"]])
      assert.match(history[0]!.error ?? "", /failure 1/)
      assert.strictEqual(history[0]!.consumer, "test-consumer")
    }))

  it.effect("a failure marked unrecoverable goes straight to dead letters", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const doomed = Task.make({
        name: "doomed",
        payload: Schema.String,
        maxAttempts: 10,
        handler: (account) => Task.unrecoverable(`account ${account} is closed`)
      })
      const sent = yield* Task.send(doomed, "acct-9").pipe(withStore(spy))
      yield* startConsumer(spy, Task.dispatcher(doomed), {})
      yield* idle(spy)
      const [dead] = yield* spy.inner.deadLetters({})
      assert.strictEqual(dead!.id, sent.id)
      assert.strictEqual(dead!.reason, "unrecoverable: account acct-9 is closed")
      assert.strictEqual(dead!.attempts, 1)
      assert.strictEqual(spy.of("retry").length, 0)
    }))

  it.effect("a payload that fails the task's schema is dead-lettered at once with the parse error, never run", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      let runs = 0
      const email = Task.make({ name: "email.send", payload: Email, handler: () => Effect.sync(() => runs++) })
      // Written by an old producer, or by hand: not what the schema says.
      const [bad] = yield* spy.store.send("default", [{ task: "email.send", payload: { to: 42 } }])
      const [nul] = yield* spy.store.send("default", [{ task: "email.send", payload: null }])
      yield* startConsumer(spy, Task.dispatcher(email), {})
      yield* idle(spy)
      assert.strictEqual(runs, 0)
      const dead = yield* spy.inner.deadLetters({})
      assert.deepStrictEqual(dead.map((d) => d.id).sort(), [bad!.id, nul!.id].sort())
      for (const d of dead) {
        assert.match(d.reason, /^payload does not match the task's schema: /)
        assert.strictEqual(d.attempts, 1)
      }
      assert.match(dead.find((d) => d.id === bad!.id)!.reason, /Expected string\s+at \["to"\]/)
    }))

  it.effect("a task this worker does not know is retried later a few times, then dead-lettered with the reason", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const known = Task.make({ name: "known", payload: Schema.Unknown, handler: () => Effect.void })
      const [sent] = yield* spy.store.send("default", [{ task: "from-the-future", payload: {} }])
      yield* startConsumer(spy, Task.dispatcher(known), { unknownTaskAttempts: 3, unknownTaskDelay: "30s" })
      yield* settle
      assert.strictEqual(spy.of("retry").length, 1)
      const next = Option.getOrThrow(yield* spy.inner.nextVisibleAt("default"))
      assert.strictEqual(next.getTime() - (yield* Clock.currentTimeMillis), 30_000)
      yield* TestClock.adjust("30 seconds")
      yield* settle
      assert.strictEqual(spy.of("retry").length, 2)
      yield* TestClock.adjust("30 seconds")
      yield* settle
      const [dead] = yield* spy.inner.deadLetters({})
      assert.strictEqual(dead!.id, sent!.id)
      assert.strictEqual(dead!.reason, `unknown task "from-the-future": no worker handled it in 3 attempts`)
    }))

  it.effect("a message whose lease expired K times is dead-lettered as a suspected worker-killer, without running", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      let runs = 0
      const killer = Task.make({ name: "killer", payload: Schema.Unknown, handler: () => Effect.sync(() => runs++) })
      const sent = yield* Task.send(killer, {}).pipe(withStore(spy))
      // Two workers took it and died: their leases ran out.
      for (const worker of ["w1", "w2"]) {
        yield* spy.inner.claim("default", { lease: "1 second", limit: 1, consumer: worker })
        yield* TestClock.adjust("2 seconds")
      }
      yield* startConsumer(spy, Task.dispatcher(killer), { quarantineAfter: 2 })
      yield* idle(spy)
      assert.strictEqual(runs, 0)
      const [dead] = yield* spy.inner.deadLetters({})
      assert.strictEqual(dead!.id, sent.id)
      assert.match(dead!.reason, /suspected worker-killer: its lease expired 2 times/)
      const history = yield* spy.inner.attempts(sent.id as MessageId)
      assert.deepStrictEqual(history.map((a) => [a.attempt, a.outcome, a.consumer]), [
        [1, "lease-expired", "w1"],
        [2, "lease-expired", "w2"],
        [3, "dead-lettered", "test-consumer"]
      ])
    }))

  it.effect("a quarantined message never shows more attempts than it is allowed, nor does its history", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const killer = Task.make({ name: "killer", payload: Schema.Unknown, maxAttempts: 2, handler: () => Effect.void })
      const sent = yield* Task.send(killer, {}).pipe(withStore(spy))
      // Both its attempts taken by workers that died: the next claim is a third.
      for (const worker of ["w1", "w2"]) {
        yield* spy.inner.claim("default", { lease: "1 second", limit: 1, consumer: worker })
        yield* TestClock.adjust("2 seconds")
      }
      yield* startConsumer(spy, Task.dispatcher(killer), { quarantineAfter: 2 })
      yield* idle(spy)
      const [dead] = yield* spy.inner.deadLetters({})
      assert.match(dead!.reason, /suspected worker-killer/)
      assert.deepStrictEqual([dead!.attempts, dead!.maxAttempts], [2, 2])
      const history = yield* spy.inner.attempts(sent.id as MessageId)
      assert.deepStrictEqual(history.map((a) => [a.attempt, a.outcome]), [[1, "lease-expired"], [2, "lease-expired"], [2, "dead-lettered"]])
    }))

  it.effect("a task's error schema turns typed failures into JSON in the recorded error", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      class PaymentDeclined extends Schema.TaggedError<PaymentDeclined>()("PaymentDeclined", { code: Schema.String }) {}
      const charge = Task.make({
        name: "charge",
        payload: Schema.Number,
        error: PaymentDeclined,
        maxAttempts: 1,
        handler: () => Effect.fail(new PaymentDeclined({ code: "insufficient_funds" }))
      })
      yield* Task.send(charge, 100).pipe(withStore(spy))
      yield* startConsumer(spy, Task.dispatcher(charge), {})
      yield* idle(spy)
      const [dead] = yield* spy.inner.deadLetters({})
      assert.include(dead!.lastError ?? "", `charge failed: {"_tag":"PaymentDeclined","code":"insufficient_funds"}`)
    }))

  it.effect("a result that does not match the task's success schema is reported at ERROR, and the message acked", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const logs = captureLogs()
      const sum = Task.make({
        name: "sum",
        payload: Schema.Array(Schema.Number),
        success: Schema.Number,
        handler: (ns) => Effect.succeed(ns.length === 0 ? ("nothing" as unknown as number) : ns.reduce((a, b) => a + b, 0))
      })
      yield* Task.send(sum, [1, 2]).pipe(withStore(spy))
      yield* Task.send(sum, []).pipe(withStore(spy))
      yield* startConsumer(spy, Task.dispatcher(sum), {}, logs)
      yield* idle(spy)
      assert.strictEqual(spy.of("ack").length, 2)
      const errors = logs.entries.filter((e) => e.level === "Error" && /does not match its success schema/.test(e.message))
      assert.strictEqual(errors.length, 1)
      assert.match(errors[0]!.message, /Expected number/)
    }))

  it("a definition whose retry delays could be negative, NaN or unbounded is refused at Task.make, naming the field and the rule", () => {
    const define = (extra: Record<string, unknown>) => () =>
      Task.make({ name: "policy", payload: Schema.Unknown, handler: () => Effect.void, ...extra })
    const cases: ReadonlyArray<readonly [Record<string, unknown>, string, RegExp]> = [
      [{ retry: { factor: -2 } }, "retry.factor", /finite number, 1 or more/],
      [{ retry: { factor: Number.NaN } }, "retry.factor", /finite number, 1 or more/],
      [{ retry: { factor: Number.POSITIVE_INFINITY } }, "retry.factor", /finite number, 1 or more/],
      [{ retry: { factor: 0.5 } }, "retry.factor", /finite number, 1 or more/],
      [{ retry: { factor: "2" } }, "retry.factor", /finite number, 1 or more/],
      [{ retry: { base: -1 } }, "retry.base", /duration/],
      [{ retry: { base: Number.NaN } }, "retry.base", /duration/],
      [{ retry: { base: "soon" } }, "retry.base", /duration/],
      [{ retry: { base: "2h", max: "1h" } }, "retry.max", /at least retry.base \(7200000 ms\)/],
      [{ retry: { base: "1s", max: "3661d" } }, "retry.max", /ten years: the longest delay a store accepts/],
      [{ retry: { max: Number.POSITIVE_INFINITY } }, "retry.max", /duration/],
      [{ retry: { jitter: "yes" } }, "retry.jitter", /true or false/],
      [{ maxAttempts: 0 }, "maxAttempts", /from 1 to 10000/],
      [{ maxAttempts: 2.5 }, "maxAttempts", /from 1 to 10000/],
      [{ maxRuntime: 0 }, "maxRuntime", /from 1 ms/],
      [{ lease: "100ms" }, "lease", /from 300 ms to 86400000 ms/],
      [{ lease: "2d" }, "lease", /from 300 ms to 86400000 ms/],
      [{ lease: "soon" }, "lease", /duration/],
      [{ lease: "30s", maxRuntime: "10s" }, "lease", /at most maxRuntime \(10000 ms\)/],
      [{ queue: "no spaces" }, "queue", /A-Z a-z 0-9/],
      [{ name: "bad name" }, "name", /A-Z a-z 0-9/]
    ]
    for (const [extra, field, rule] of cases) {
      let thrown: unknown
      try {
        define(extra)()
      } catch (e) {
        thrown = e
      }
      assert.instanceOf(thrown, InvalidInput, JSON.stringify(extra))
      const e = thrown as InvalidInput
      assert.strictEqual(e.field, field, JSON.stringify(extra))
      assert.match(e.rule, rule, JSON.stringify(extra))
      assert.include(e.message, field)
      assert.include(e.message, `task "${field === "name" ? "bad name" : "policy"}"`)
    }
    // Sound policies pass, including a constant delay (factor 1) and no delay at all.
    define({ retry: { base: "5s", factor: 1, jitter: false } })()
    define({ retry: { base: 0, max: 0 }, maxAttempts: 10_000, maxRuntime: "7d" })()
    // A task built by hand (not through make) meets the same rules when a dispatcher takes it.
    const good = Task.make({ name: "handmade", payload: Schema.Unknown, handler: () => Effect.void })
    assert.throws(() => Task.dispatcher({ ...good, retry: { factor: -1 } }), /retry.factor/)
  })

  it("computed retry delays stay within [0, max], whatever the attempt, factor or random number", () => {
    const policy = { baseMs: 1_000, maxMs: 60_000, factor: 10, jitter: true }
    for (const attempt of [-5, 0, 1, 2, 5, 61, 1_000, Number.MAX_SAFE_INTEGER]) {
      for (const random of [0, 0.5, 0.999]) {
        const delay = Backoff.backoffMs(policy, attempt, random)
        assert.isTrue(Number.isInteger(delay) && delay >= 0 && delay <= policy.maxMs, `${attempt} ${random}: ${delay}`)
      }
    }
    // A random number out of [0, 1) from a bad generator cannot push a delay out of bounds either.
    assert.strictEqual(Backoff.backoffMs(policy, 10, 5), 60_000)
    assert.strictEqual(Backoff.backoffMs(policy, 1, -5), 0)
    // Any delay, also one from a custom policy function: clamped, and NaN taken as the bound.
    assert.deepStrictEqual(
      [Number.NaN, -3, 1.6, 1e20, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY].map((ms) => Backoff.boundedDelayMs(ms, 5_000)),
      [5_000, 0, 2, 5_000, 5_000, 0]
    )
    // Never beyond what the store accepts, whatever the bound asked for.
    assert.strictEqual(Backoff.boundedDelayMs(1e20, Number.POSITIVE_INFINITY), Validate.MAX_DELAY_MS)
    assert.strictEqual(Backoff.boundedDelayMs(Number.NaN, 1e20), Validate.MAX_DELAY_MS)
  })

  it.effect("a send delay or run-at beyond the store's longest delay is refused at send, naming the option", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const job = Task.make({ name: "job", payload: Schema.Number, handler: () => Effect.void })
      const delay = yield* Effect.flip(Task.send(job, 1, { delay: "3661d" }).pipe(withStore(spy)))
      assert.strictEqual(delay._tag, "InvalidInput")
      if (delay._tag !== "InvalidInput") return
      assert.strictEqual(delay.field, "delay")
      assert.match(delay.rule, /ten years: the longest delay a store accepts/)
      const runAt = yield* Effect.flip(Task.send(job, 1, { runAt: new Date(Date.now() + 11 * 366 * 86_400_000) }).pipe(withStore(spy)))
      assert.strictEqual(runAt._tag === "InvalidInput" ? runAt.field : runAt._tag, "runAt")
      assert.strictEqual((yield* spy.inner.stats("default")).delayed, 0, "nothing was written")
    }))

  it.effect("a dead letter's reason lists every schema issue of the payload, bounded", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const Wide = Schema.Struct(Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`f${i}`, Schema.String])))
      const wide = Task.make({ name: "wide", payload: Wide, handler: () => Effect.void })
      const email = Task.make({ name: "email.send", payload: Email, handler: () => Effect.void })
      const [two] = yield* spy.store.send("default", [{ task: "email.send", payload: { to: 42, count: 7 } }])
      const [many] = yield* spy.store.send("default", [{ task: "wide", payload: {} }])
      yield* startConsumer(spy, Task.dispatcher(email, wide), {})
      yield* idle(spy)
      const dead = yield* spy.inner.deadLetters({})
      const reason = (id: MessageId) => dead.find((d) => d.id === id)!.reason
      // Both issues, not only the first.
      assert.match(reason(two!.id), /Expected string\s+at \["to"\]/)
      assert.match(reason(two!.id), /Expected string\s+at \["count"\]/)
      // Thirty missing keys: twenty listed, the rest counted.
      assert.strictEqual(reason(many!.id).match(/Missing key/g)?.length, 20)
      assert.match(reason(many!.id), /\.\.\. and 10 more issues$/)
      assert.isBelow(reason(many!.id).length, 2200)
    }))

  it.effect("send errors name the task: an oversize payload, a bad header, a bad delay", () =>
    Effect.gen(function*() {
      const store = yield* MemoryQueueStore.make({ maxPayloadBytes: 16 })
      const job = Task.make({ name: "report.build", payload: Schema.String, handler: () => Effect.void })
      const send = (payload: string, options?: Task.SendOptions) => Effect.flip(Task.sendWith(store, job, [payload], options))
      const oversize = yield* send("x".repeat(100))
      assert.strictEqual(oversize._tag === "InvalidInput" ? oversize.field : oversize._tag, "payload")
      assert.match(oversize.message, /^task "report\.build": payload is 102 bytes/)
      const header = yield* send("x", { headers: { "": "v" } })
      assert.match(header.message, /^task "report\.build": headers\[""\] is invalid: it has a name of 0 characters/)
      const delay = yield* send("x", { delay: "3661d" })
      assert.match(delay.message, /^task "report\.build": /)
    }))

  it.effect("stored errors leave out effect's, Node's and the library's stack frames, and keep the handler's", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const failing = Task.make({
        name: "failing",
        payload: Schema.Number,
        handler: function failingHandler() {
          return Effect.fail(new Error("handler boom"))
        }
      })
      const [bad] = yield* spy.store.send("default", [{ task: "failing", payload: "not a number" }])
      const [boom] = yield* spy.store.send("default", [{ task: "failing", payload: 1, maxAttempts: 1 }])
      yield* startConsumer(spy, Task.dispatcher(failing), {})
      yield* idle(spy)
      const dead = yield* spy.inner.deadLetters({})
      const lastError = (id: MessageId) => dead.find((d) => d.id === id)!.lastError ?? ""
      const frames = (text: string) => text.split("\n").filter((line) => /^\s+at /.test(line))
      // A payload failing its schema: the error alone, no frame of the decoding machinery.
      assert.match(lastError(bad!.id), /^DecodeFailed: Expected number/)
      assert.deepStrictEqual(frames(lastError(bad!.id)), [])
      // A handler's failure: its own frame kept, nothing from effect, node:internal or src/.
      const handlerFrames = frames(lastError(boom!.id))
      assert.match(lastError(boom!.id), /^Error: handler boom/)
      assert.isTrue(handlerFrames.some((f) => /failingHandler .*test\/Task\.test\.ts/.test(f)), handlerFrames.join("\n"))
      assert.isFalse(handlerFrames.some((f) => /node_modules\/effect|node:internal|\/src\//.test(f)), handlerFrames.join("\n"))
    }))

  it("a dispatcher refuses two tasks of the same name", () => {
    const a = Task.make({ name: "same", payload: Schema.Unknown, handler: () => Effect.void })
    assert.throws(() => Task.dispatcher(a, a), /defined twice/)
  })
})

describe("Task.dispatcher: the leases its tasks declare", () => {
  it("are listed in milliseconds for the consumer's lag watch and shutdown wait", () => {
    const dispatcher = Task.dispatcher(
      Task.make({ name: "long", payload: Schema.Number, lease: "2 minutes", handler: () => Effect.void }),
      Task.make({ name: "plain", payload: Schema.Number, handler: () => Effect.void }),
      Task.make({ name: "short", payload: Schema.Number, lease: "1 second", handler: () => Effect.void })
    )
    assert.deepStrictEqual(dispatcher.leasesMs, [120_000, 1_000])
  })
})
