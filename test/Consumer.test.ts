/**
 * The consumer and its lease renewer on the memory store, with TestClock:
 * every timing claim of the lease protocol, checked to the tick.
 */
import { assert, describe, it } from "@effect/vitest"
import { Clock, ConfigProvider, Context, Deferred, Effect, Exit, Fiber, Layer, Metric, Option, Ref, References, Scope, Tracer } from "effect"
import { TestClock } from "effect/testing"
import * as Consumer from "../src/Consumer.ts"
import * as ConsumerPresence from "../src/ConsumerPresence.ts"
import { Encoded } from "../src/internal/attemptResult.ts"
import { isResultUnstorable } from "../src/Message.ts"
import type { ConsumerOptions } from "../src/QueueConfig.ts"
import { ConnectionDead, QueryFailed, UnknownTask } from "../src/QueueError.ts"
import * as QueueMetrics from "../src/QueueMetrics.ts"
import { type Completion, QueueStore } from "../src/QueueStore.ts"
import * as Testing from "../src/Testing.ts"
import { captureLogs, gatedHandler, makeSpy, startConsumer } from "./support/ConsumerHarness.ts"

const queue = "default"
const lease = "30 seconds"

/** Let forked fibers run without moving time. */
const settle = Effect.gen(function*() {
  for (let i = 0; i < 20; i++) yield* Effect.yieldNow
})

const counter = (metric: Metric.Metric<number, any>) =>
  Effect.map(Metric.value(metric), (state: any) => Number(state.count ?? state.value ?? 0))

const connectionDead = new ConnectionDead({ operation: "renew", message: "renew: Connection terminated" })

describe("Consumer (memory store, TestClock)", () => {
  it.effect("renews every lease/3 while the handler runs, and never after the ack", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const h = yield* gatedHandler()
      const [sent] = yield* spy.store.send(queue, [{ task: "t", payload: 1 }])
      yield* startConsumer(spy, h.handler, { lease })
      yield* settle
      assert.deepStrictEqual(yield* Ref.get(h.started), [sent!.id])
      yield* TestClock.adjust("9 seconds")
      assert.strictEqual(spy.of("renew").length, 0)
      yield* TestClock.adjust("1 second")
      assert.deepStrictEqual(spy.of("renew").map((c) => c.at), [10_000])
      yield* TestClock.adjust("20 seconds")
      assert.deepStrictEqual(spy.of("renew").map((c) => c.at), [10_000, 20_000, 30_000])
      // The lease really moved: well past the first 30 s, nobody else can claim it.
      yield* TestClock.adjust("5 seconds")
      assert.strictEqual((yield* spy.inner.claim(queue, { lease, limit: 1, consumer: "other" })).length, 0)
      yield* h.open(sent!.id)
      yield* settle
      const [ack] = spy.of("ack")
      assert.isDefined(ack)
      assert.strictEqual(ack!.at, 35_000)
      yield* TestClock.adjust("2 minutes")
      assert.isFalse(spy.calls.some((c) => c.op === "renew" && c.seq > ack!.seq), "no renewal after the ack")
      assert.strictEqual((yield* spy.inner.stats(queue)).inFlight, 0)
    }))

  it.effect("a handler ending during a slow renewal is acked at once; the renewal's late answer is no lost lease", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const logs = captureLogs()
      const h = yield* gatedHandler()
      const sent = yield* spy.store.send(queue, [1, 2].map((n) => ({ task: "t", payload: n })))
      const [a, b] = sent.map((s) => s.id)
      // Every renewal takes 2 s to answer.
      spy.renew = (refs, inner) => Effect.delay(inner.renew(refs, lease), "2 seconds")
      const before = yield* counter(QueueMetrics.leaseLostBy("reclaimed"))
      yield* startConsumer(spy, h.handler, { lease, batchSize: 2 }, logs)
      yield* settle
      yield* TestClock.adjust("11 seconds") // renewal of [a, b] started at 10 s, answers at 12 s
      yield* h.open(a!)
      yield* settle
      // The finishing write does not wait on the renewal: it is fenced, and it clears the token.
      assert.deepStrictEqual(spy.of("ack").map((c) => [c.ids[0], c.at]), [[a, 11_000]])
      yield* TestClock.adjust("1 second")
      yield* settle
      // The renewal answers without a (acked meanwhile): not a double run, b goes on.
      assert.deepStrictEqual(spy.of("renew").map((c) => [c.ids, c.at]), [[[a, b], 12_000]])
      assert.strictEqual((yield* counter(QueueMetrics.leaseLostBy("reclaimed"))) - before, 0)
      assert.isFalse(logs.entries.some((e) => /lease lost/.test(e.message)), "no lease reported lost")
      assert.deepStrictEqual(yield* Ref.get(h.interrupted), [])
      yield* TestClock.adjust("12 seconds") // the next renewal, lease/3 after the last answered: b only, at 22-24 s
      assert.deepStrictEqual(spy.of("renew").map((c) => [c.ids, c.at]), [[[a, b], 12_000], [[b], 24_000]])
      yield* h.open(b!)
      yield* settle
      assert.strictEqual(spy.of("ack").length, 2)
    }))

  it.effect("a batch is renewed in one statement, and finished messages drop out of it", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const h = yield* gatedHandler()
      const sent = yield* spy.store.send(queue, [1, 2, 3].map((n) => ({ task: "t", payload: n })))
      const [a, b, c] = sent.map((s) => s.id)
      yield* startConsumer(spy, h.handler, { lease, batchSize: 3 })
      yield* settle
      assert.strictEqual(spy.of("claim").length, 1)
      assert.deepStrictEqual(spy.of("claim")[0]!.ids, [a, b, c])
      yield* TestClock.adjust("10 seconds")
      assert.deepStrictEqual(spy.of("renew").map((r) => r.ids), [[a, b, c]])
      yield* h.open(b!)
      yield* settle
      yield* TestClock.adjust("10 seconds")
      assert.deepStrictEqual(spy.of("renew").map((r) => r.ids), [[a, b, c], [a, c]])
      yield* h.open(a!)
      yield* h.open(c!)
      yield* settle
      assert.strictEqual(spy.of("ack").length, 3)
      yield* TestClock.adjust("1 minute")
      assert.strictEqual(spy.of("renew").length, 2, "renewer stopped with the last message")
    }))

  it.effect("connection-dead renewals are retried each tick and escalate exactly when failures reach the lease", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const logs = captureLogs()
      const h = yield* gatedHandler()
      const [sent] = yield* spy.store.send(queue, [{ task: "t", payload: 1 }])
      spy.renew = () => Effect.fail(connectionDead)
      const lostBefore = yield* counter(QueueMetrics.leaseLostBy("renewals-failing"))
      // `continue`: the local deadline does not stop the handler, so escalation is visible.
      // Concurrency 1: the consumer does not reclaim its own expired message meanwhile.
      yield* startConsumer(spy, h.handler, { lease, onLeaseLost: "continue", concurrency: 1 }, logs)
      yield* settle
      yield* TestClock.adjust("29 seconds")
      assert.strictEqual(spy.of("renew").length, 2)
      assert.strictEqual(logs.entries.filter((e) => e.level === "Warn" && /renewal failed, connection dead/.test(e.message)).length, 2)
      assert.isFalse(logs.entries.some((e) => e.level === "Error"), "no escalation before the lease")
      yield* TestClock.adjust("1 second")
      assert.strictEqual(spy.of("renew").length, 3)
      const escalations = logs.entries.filter((e) => e.level === "Error" && /lease lost: renewals failing for 30\.0s/.test(e.message))
      assert.strictEqual(escalations.length, 1)
      assert.strictEqual((yield* counter(QueueMetrics.leaseLostBy("renewals-failing"))) - lostBefore, 1)
      // Renewals recover: the renewer kept trying, and the handler can still ack.
      spy.renew = undefined
      yield* TestClock.adjust("10 seconds")
      assert.strictEqual(spy.of("renew").length, 4)
      yield* h.open(sent!.id)
      yield* settle
      assert.strictEqual(spy.of("ack").length, 1)
    }))

  it.effect("a non-connection renewal error fails the renewer at once, logged at ERROR", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const logs = captureLogs()
      const h = yield* gatedHandler()
      const [sent] = yield* spy.store.send(queue, [{ task: "t", payload: 1 }])
      spy.renew = () => Effect.fail(new QueryFailed({ operation: "renew", message: "renew: syntax error at or near \"UPDAT\"", code: "42601" }))
      yield* startConsumer(spy, h.handler, { lease }, logs)
      yield* settle
      yield* TestClock.adjust("10 seconds")
      const errors = logs.entries.filter((e) => e.level === "Error" && /renewal failed \(QueryFailed\), renewer stopping/.test(e.message))
      assert.strictEqual(errors.length, 1)
      yield* TestClock.adjust("10 seconds")
      assert.strictEqual(spy.of("renew").length, 1, "the failed renewer does not tick again")
      // The handler goes on until the local deadline (tested below); end it here.
      yield* h.open(sent!.id)
      yield* settle
      assert.strictEqual(spy.of("ack").length, 1)
      assert.isTrue(logs.entries.some((e) => e.level === "Error" && /renewer had failed before the claim finished/.test(e.message)))
    }))

  it.effect("the local deadline interrupts the handler before the lease can expire; the message is not acked", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const logs = captureLogs()
      const runs: Array<{ attempt: number; lastError: string | null; interrupted: boolean }> = []
      const handler: Consumer.Handler = (m) =>
        Effect.suspend(() => {
          const run = { attempt: m.attempts, lastError: m.lastError, interrupted: false }
          runs.push(run)
          return Effect.never.pipe(Effect.onInterrupt(() => Effect.sync(() => { run.interrupted = true })))
        })
      yield* spy.store.send(queue, [{ task: "t", payload: 1 }])
      spy.renew = () => Effect.fail(connectionDead)
      const before = yield* counter(QueueMetrics.leaseLostBy("local-deadline"))
      yield* startConsumer(spy, handler, { lease }, logs)
      yield* settle
      // Lease 30 s, margin lease/6 = 5 s: deadline at 25 s after the claim.
      yield* TestClock.adjust("24999 millis")
      assert.deepStrictEqual(runs.map((r) => r.interrupted), [false])
      yield* TestClock.adjust("1 millis")
      yield* settle
      assert.isTrue(runs[0]!.interrupted)
      assert.strictEqual(spy.of("ack").length, 0)
      assert.strictEqual((yield* counter(QueueMetrics.leaseLostBy("local-deadline"))) - before, 1)
      assert.isTrue(logs.entries.some((e) => e.level === "Error" && /lease at risk/.test(e.message)))
      // Still holding the token, the consumer hands the message back at once, with the attempt counted,
      // and (having a free slot) claims it again right away.
      assert.strictEqual(spy.of("retry").length, 1)
      assert.strictEqual(runs.length, 2)
      assert.strictEqual(runs[1]!.attempt, 2)
      assert.match(runs[1]!.lastError ?? "", /lease at risk/)
    }))

  it.effect("a renew statement hanging uninterruptibly holds up neither the finishing write nor the claim's scope", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const logs = captureLogs()
      const h = yield* gatedHandler()
      const [sent] = yield* spy.store.send(queue, [{ task: "t", payload: 1 }])
      // The renewal of 10 s hangs for 10 s and cannot be interrupted.
      let hungUntil = 0
      spy.renew = (refs, inner) =>
        Effect.uninterruptible(Effect.andThen(Effect.sleep("10 seconds"), inner.renew(refs, lease))).pipe(
          Effect.ensuring(Effect.map(Clock.currentTimeMillis, (now) => {
            hungUntil = now
          }))
        )
      const before = yield* counter(QueueMetrics.wedgedRenewers)
      const service = yield* startConsumer(spy, h.handler, { lease, renewerStopTimeout: "5 seconds" }, logs)
      yield* settle
      yield* TestClock.adjust("12 seconds") // the renewal of 10 s hangs until 20 s
      yield* h.open(sent!.id)
      yield* settle
      // Acked at once, well within the stop timeout; the renewer stopped without waiting on its statement.
      const [ack] = spy.of("ack")
      assert.isDefined(ack, "the claim finished while its renewal hung")
      assert.strictEqual(ack!.at, 12_000)
      assert.strictEqual(hungUntil, 0, "the hung statement had not answered")
      // The claim's scope closed: the slot is free, nothing is in flight.
      assert.strictEqual((yield* service.health).inFlight, 0)
      assert.strictEqual((yield* counter(QueueMetrics.wedgedRenewers)) - before, 0)
      assert.isFalse(logs.entries.some((e) => e.level === "Error"), "nothing reported lost or wedged")
      yield* TestClock.adjust("10 seconds")
      yield* settle
      assert.strictEqual(hungUntil, 20_000, "the abandoned statement answered late, harmlessly")
      assert.strictEqual((yield* spy.inner.stats(queue)).inFlight, 0)
    }))

  it.effect("a renewal that loses ids interrupts exactly those handlers", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const logs = captureLogs()
      const h = yield* gatedHandler()
      const sent = yield* spy.store.send(queue, [1, 2, 3].map((n) => ({ task: "t", payload: n })))
      const [a, b, c] = sent.map((s) => s.id)
      // The renewal answers without b: another consumer took it.
      spy.renew = (refs, inner) => Effect.map(inner.renew(refs, lease), (r) => ({ ...r, held: r.held.filter((id) => id !== b) }))
      const before = yield* counter(QueueMetrics.leaseLostBy("reclaimed"))
      yield* startConsumer(spy, h.handler, { lease, batchSize: 3 }, logs)
      yield* settle
      yield* TestClock.adjust("10 seconds")
      yield* settle
      assert.deepStrictEqual(yield* Ref.get(h.interrupted), [b])
      assert.strictEqual((yield* counter(QueueMetrics.leaseLostBy("reclaimed"))) - before, 1)
      const error = logs.entries.find((e) => e.level === "Error" && /lease lost: renewal did not return/.test(e.message))
      assert.include(error?.message ?? "", String(b))
      assert.notInclude(error?.message ?? "", `${a},`)
      // Nothing is written for b: it belongs to someone else now.
      assert.isFalse(spy.calls.some((x) => x.ids.includes(b!) && ["ack", "retry", "release", "deadLetter"].includes(x.op)))
      yield* TestClock.adjust("10 seconds")
      assert.deepStrictEqual(spy.of("renew").at(-1)!.ids, [a, c], "b dropped out of renewal")
      yield* h.open(a!)
      yield* h.open(c!)
      yield* settle
      assert.deepStrictEqual(spy.of("ack").map((x) => x.ids[0]).sort(), [a, c].sort())
    }))

  it.effect("max runtime interrupts a hung handler and retries the message; a lease over it is clamped with a warning", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const logs = captureLogs()
      yield* spy.store.send(queue, [{ task: "t", payload: 1 }])
      yield* startConsumer(spy, () => Effect.never, { lease: "2 minutes", maxRuntime: "1 minute", retryBase: "10 seconds" }, logs)
      yield* settle
      assert.isTrue(logs.entries.some((e) => e.level === "Warn" && /clamping the lease/.test(e.message)))
      assert.strictEqual(spy.of("claim").length, 1)
      yield* TestClock.adjust("59 seconds")
      assert.strictEqual(spy.of("retry").length, 0)
      yield* TestClock.adjust("1 second")
      yield* settle
      assert.strictEqual(spy.of("retry").length, 1)
      const waiting = yield* spy.inner.stats(queue)
      assert.strictEqual(waiting.delayed, 1, "waiting for its retry, holding no lease")
      // The clamped lease (1 minute) was renewed every 20 s while the handler ran (a tick falling on
      // the very moment of the max runtime may still renew it: harmless, the retry clears the token).
      assert.deepStrictEqual(spy.of("renew").map((r) => r.at).filter((at) => at < 60_000), [20_000, 40_000])
    }))

  it.effect("a failing handler is retried with backoff and dead-lettered when its attempts are used up", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      yield* spy.store.send(queue, [{ task: "t", payload: 1, maxAttempts: 3 }])
      const logs = captureLogs()
      yield* startConsumer(spy, () => Effect.fail("boom"), { retryBase: "1 second", pollInterval: "100 millis" }, logs)
      yield* settle
      assert.strictEqual(spy.of("retry").length, 1)
      yield* TestClock.adjust("10 seconds")
      yield* settle
      assert.strictEqual(spy.of("retry").length, 2)
      // Each retry WARN says which attempt failed, of how many.
      const retries = logs.entries.filter((e) => e.level === "Warn" && /retry in/.test(e.message)).map((e) => e.message.split(";")[0])
      assert.deepStrictEqual(retries, ["attempt 1 of 3 failed", "attempt 2 of 3 failed"])
      assert.strictEqual(spy.of("deadLetter").length, 1)
      const [dead] = yield* spy.inner.deadLetters({ queue })
      assert.match(dead!.reason, /attempts exhausted: 3 of 3/)
      assert.match(dead!.lastError ?? "", /boom/)
    }))

  it.effect("an unknown task's retry WARN counts against the unknown-task limit, not the message's maxAttempts", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      yield* spy.store.send(queue, [{ task: "nobody-handles-this", payload: 1 }]) // maxAttempts: the default 25
      const logs = captureLogs()
      const unknown = () => Effect.fail(new UnknownTask({ task: "nobody-handles-this", message: "no handler" }))
      yield* startConsumer(spy, unknown, { unknownTaskAttempts: 3, unknownTaskDelay: "1 second", pollInterval: "100 millis" }, logs)
      yield* settle
      yield* TestClock.adjust("10 seconds")
      yield* settle
      const retries = logs.entries.filter((e) => e.level === "Warn" && /retry in/.test(e.message)).map((e) => e.message.split(";")[0])
      assert.deepStrictEqual(retries, ["attempt 1 of 3 failed", "attempt 2 of 3 failed"])
      const [dead] = yield* spy.inner.deadLetters({ queue })
      assert.match(dead!.reason, /no worker handled it in 3 attempts/)
    }))

  it.effect("shutdown stops claiming, lets a short handler finish and releases a long one after the grace", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const h = yield* gatedHandler()
      const sent = yield* spy.store.send(queue, [1, 2].map((n) => ({ task: "t", payload: n })))
      const [short, long] = sent.map((s) => s.id)
      const scope = yield* Scope.make()
      const logs = captureLogs()
      yield* startConsumer(spy, h.handler, { lease, batchSize: 2, shutdownGrace: "10 seconds" }, logs, true).pipe(
        Scope.provide(scope)
      )
      yield* settle
      const closing = yield* Effect.forkChild(Scope.close(scope, Exit.void))
      yield* settle
      yield* spy.store.send(queue, [{ task: "t", payload: "after shutdown" }])
      yield* TestClock.adjust("3 seconds")
      yield* h.open(short!)
      yield* settle
      assert.deepStrictEqual(spy.of("ack").map((x) => x.ids[0]), [short])
      assert.strictEqual(spy.of("claim").length, 1, "no claim after shutdown began")
      assert.strictEqual(spy.of("renew").length, 0)
      yield* TestClock.adjust("7 seconds")
      yield* Fiber.join(closing)
      assert.deepStrictEqual(yield* Ref.get(h.interrupted), [long])
      assert.deepStrictEqual(spy.of("release").map((x) => x.ids[0]), [long])
      assert.isTrue(logs.entries.some((e) => e.level === "Warn" && /grace elapsed: interrupting 1 handler and releasing/.test(e.message)))
      // Released: visible at once, attempt given back; the message sent after shutdown began is untouched.
      const next = yield* spy.inner.claim(queue, { lease, limit: 10, consumer: "next" })
      assert.deepStrictEqual(next.map((c) => [c.payload, c.attempts]), [["after shutdown", 1], [2, 1]])
    }))

  it.effect("health turns stale when the loop stops making progress", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      // A claim that never answers wedges the loop.
      const stuck = { ...spy.store, claim: () => Effect.never }
      const service = yield* startConsumer({ ...spy, store: stuck }, () => Effect.void, { healthStale: "1 minute" })
      assert.isTrue((yield* service.health).healthy)
      yield* TestClock.adjust("61 seconds")
      assert.isFalse((yield* service.health).healthy)
    }))
})

describe("Consumer: what a handler sees (memory store, TestClock)", () => {
  it.effect("a handler runs inside its message's leasehold.handle span, and its log lines carry the message's annotations", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const seen: Array<{ span: Tracer.AnySpan | undefined; annotations: Record<string, unknown> }> = []
      const handler: Consumer.Handler = () =>
        Effect.gen(function*() {
          const span = yield* Effect.option(Effect.currentSpan)
          seen.push({ span: Option.getOrUndefined(span), annotations: yield* References.CurrentLogAnnotations })
        })
      const [sent] = yield* spy.store.send("emails", [{ task: "email.welcome", payload: 1 }])
      yield* startConsumer(spy, handler, { queues: ["emails"] })
      yield* settle
      assert.strictEqual(seen.length, 1)
      const [{ span, annotations }] = seen as [typeof seen[number]]
      assert.strictEqual(span?._tag, "Span")
      if (span?._tag !== "Span") return
      assert.strictEqual(span.name, "leasehold.handle")
      const attributes = Object.fromEntries(span.attributes)
      assert.deepStrictEqual(attributes, { queue: "emails", task: "email.welcome", messageId: sent!.id, attempt: 1 })
      assert.deepInclude(annotations, { queue: "emails", task: "email.welcome", messageId: sent!.id, attempt: 1, consumer: "test-consumer" })
      // The span ended with the run; the message was acked.
      assert.strictEqual(span.status._tag, "Ended")
      assert.strictEqual(spy.of("ack").length, 1)
    }).pipe(Effect.provideService(Tracer.Tracer, Tracer.make({ span: (options) => new Tracer.NativeSpan(options) }))))

  it.effect("with no tracer installed a handler gets no leasehold.handle span (nothing would export it), only the annotations", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const seen: Array<{ span: Option.Option<Tracer.AnySpan>; annotations: Record<string, unknown> }> = []
      const handler: Consumer.Handler = () =>
        Effect.gen(function*() {
          seen.push({ span: yield* Effect.option(Effect.currentSpan), annotations: yield* References.CurrentLogAnnotations })
        })
      const [sent] = yield* spy.store.send("emails", [{ task: "email.welcome", payload: 1 }])
      yield* startConsumer(spy, handler, { queues: ["emails"] })
      yield* settle
      assert.strictEqual(seen.length, 1)
      const [{ span, annotations }] = seen as [typeof seen[number]]
      assert.isTrue(Option.isNone(span) || span.value._tag !== "Span" || span.value.name !== "leasehold.handle")
      assert.deepInclude(annotations, { queue: "emails", task: "email.welcome", messageId: sent!.id, attempt: 1, consumer: "test-consumer" })
      assert.strictEqual(spy.of("ack").length, 1)
    }))
})

describe("Consumer: claims while finishing writes lag (memory store, TestClock)", () => {
  // prefetch 0: 4 handler slots + 500 completions in flight. auto (the handlers take no time): 4 + 5 held ahead + 500.
  for (const [prefetch, most] of [[0, 504], ["auto", 509]] as const) {
    it.effect(`with every finishing write stalled, a consumer claims up to concurrency + what it holds ahead (prefetch ${prefetch}) + one completion batch, then waits; all land once writes resume`, () =>
      Effect.gen(function*() {
        const spy = yield* makeSpy
        const writes = yield* Deferred.make<void>()
        const store = { ...spy.store, complete: (completions: Parameters<typeof spy.store.complete>[0]) =>
          Effect.andThen(Deferred.await(writes), spy.store.complete(completions)) }
        yield* spy.store.send(queue, Array.from({ length: 700 }, (_, i) => ({ task: "t", payload: i })))
        let runs = 0
        yield* startConsumer({ ...spy, store }, () => Effect.sync(() => { runs += 1 }), { lease, concurrency: 4, batchSize: 100, prefetch })
        const claimedSoFar = () => spy.of("claim").reduce((n, c) => n + c.ids.length, 0)
        // Until claiming stops, bounded.
        for (let i = 0, last = -1; i < 1_000 && claimedSoFar() !== last; i++) {
          last = claimedSoFar()
          yield* settle
        }
        // Claimed and run (a held message starts as a slot frees), none acked, no claim beyond.
        assert.strictEqual(claimedSoFar(), most)
        assert.strictEqual(runs, most)
        assert.strictEqual(spy.of("ack").length, 0)
        yield* TestClock.adjust("1 second")
        assert.strictEqual(claimedSoFar(), most)
        yield* Deferred.succeed(writes, undefined)
        // Every message run and acked: nothing ready or in flight (moving the clock as needed, bounded).
        yield* Testing.awaitIdle({ queues: [queue] }).pipe(Effect.provideService(QueueStore, spy.inner))
        assert.strictEqual(spy.of("ack").length, 700)
        assert.strictEqual(runs, 700)
      }))
  }
})

describe("Consumer (real time)", () => {
  it.live("warns when a handler blocks the event loop for half a renewal interval", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const logs = captureLogs()
      yield* spy.store.send(queue, [{ task: "cpu", payload: 1 }])
      // Lease 900 ms: renewals every 300 ms, warning above 150 ms of lag; the handler blocks for 600 ms.
      const blocking: Consumer.Handler = () =>
        Effect.sync(() => {
          const end = Date.now() + 600
          while (Date.now() < end) { /* a CPU-bound handler */ }
        })
      yield* startConsumer(spy, blocking, { lease: "900 millis", pollInterval: "50 millis" }, logs, true)
      const deadline = Date.now() + 10_000
      const warned = () => logs.entries.some((e) => e.level === "Warn" && /event loop blocked for up to \d+ms/.test(e.message))
      while (!warned() || spy.of("ack").length === 0) {
        if (Date.now() > deadline) assert.fail(`no event-loop warning and ack within 10 s (warned: ${warned()})`)
        yield* Effect.sleep("50 millis")
      }
    }))
})

describe("Consumer with session liveness (TestClock)", () => {
  it.effect("a consumer about to be judged dead stops its handlers before another consumer's reaper could take over", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const logs = captureLogs()
      const h = yield* gatedHandler()
      const [sent] = yield* spy.store.send(queue, [{ task: "t", payload: 1 }])
      // A fake presence: healthy until the test cuts it off at 5 s; reapable 3 s after that.
      let reapableAt: Option.Option<number> = Option.none()
      const presence = ConsumerPresence.ConsumerPresence.of({
        mode: "on",
        sweep: () => Effect.succeed([]),
        register: (consumerId) =>
          Effect.succeed({
            consumerId,
            status: Effect.die("unused"),
            reaped: Effect.never,
            reapableAt: Effect.sync(() => reapableAt)
          })
      })
      yield* Layer.build(
        Consumer.layer(h.handler, { consumerId: "cut-off", lease }).pipe(
          Layer.provide(Layer.succeed(QueueStore, spy.store)),
          Layer.provide(Layer.succeed(ConsumerPresence.ConsumerPresence, presence)),
          Layer.provide(logs.layer)
        )
      )
      yield* settle
      yield* TestClock.adjust("5 seconds")
      assert.deepStrictEqual(yield* Ref.get(h.interrupted), [])
      reapableAt = Option.some(5_000 + 3_000)
      // Safety margin 100 ms (min(100 ms, lease margin)): stopped at 7.9 s, never as late as 8 s.
      yield* TestClock.adjust("2800 millis")
      assert.deepStrictEqual(yield* Ref.get(h.interrupted), [])
      yield* TestClock.adjust("100 millis")
      yield* settle
      assert.deepStrictEqual(yield* Ref.get(h.interrupted), [sent!.id])
      assert.isTrue(logs.entries.some((e) => e.level === "Error" && /presence lost/.test(e.message)))
      assert.strictEqual(spy.of("ack").length, 0)
      // Still holding the token (nobody reaped it yet), it hands the message back at once.
      assert.strictEqual(spy.of("retry").length, 1)
      const history = yield* spy.inner.attempts(sent!.id)
      assert.deepStrictEqual(history.map((a) => a.outcome), ["lease-lost"])
      // At risk, it claims nothing: the message handed back is not taken again here.
      yield* TestClock.adjust("1 second")
      assert.strictEqual(spy.of("claim").length, 1)
      // Reconnected: it claims again, and nothing more is stopped.
      reapableAt = Option.none()
      yield* TestClock.adjust("1 second")
      assert.strictEqual(spy.of("claim").length, 2)
      assert.strictEqual((yield* Ref.get(h.interrupted)).length, 1)
      yield* h.open(sent!.id)
      yield* settle
      assert.strictEqual(spy.of("ack").length, 1)
    }))
})

describe("Consumer: claims, failures and health (memory store, TestClock)", () => {
  it.effect("a shutdown while a claim is in flight releases the claimed messages at once, attempts given back", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const logs = captureLogs()
      const runs: Array<string> = []
      yield* spy.store.send(queue, [1, 2, 3].map((n) => ({ task: "t", payload: n })))
      // The claim answers after 300 ms; the shutdown comes at 100 ms.
      const slow = { ...spy.store, claim: (q: string, o: any) => Effect.delay(spy.store.claim(q, o), "300 millis") }
      const scope = yield* Scope.make()
      yield* startConsumer({ ...spy, store: slow }, (m) => Effect.sync(() => runs.push(m.id)), { lease, batchSize: 3 }, logs, true).pipe(
        Scope.provide(scope)
      )
      yield* settle
      yield* TestClock.adjust("100 millis")
      const closing = yield* Effect.forkChild(Scope.close(scope, Exit.void))
      yield* settle
      yield* TestClock.adjust("200 millis")
      yield* settle
      yield* Fiber.join(closing)
      assert.strictEqual(spy.of("claim").length, 1)
      assert.deepStrictEqual(runs, [], "nothing runs once the shutdown began")
      assert.strictEqual(spy.of("release").length, 3, "every claimed message released")
      const stats = yield* spy.inner.stats(queue)
      assert.strictEqual(stats.inFlight, 0)
      assert.strictEqual(stats.ready, 3)
      const next = yield* spy.inner.claim(queue, { lease, limit: 10, consumer: "next" })
      assert.deepStrictEqual(next.map((c) => [c.attempts, c.leaseExpiries]), [[1, 0], [1, 0], [1, 0]])
    }))

  it.effect("a claim failing with a non-connection-dead error is not retried: the consumer fails and reports unhealthy", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const logs = captureLogs()
      const h = yield* gatedHandler()
      const [first] = yield* spy.store.send(queue, [{ task: "t", payload: 1 }])
      let claims = 0
      const broken = {
        ...spy.store,
        claim: (q: string, o: any) =>
          ++claims === 1
            ? spy.store.claim(q, o)
            : Effect.fail(new QueryFailed({ operation: "claim", message: "claim: permission denied for table messages", code: "42501" }))
      }
      const service = yield* startConsumer({ ...spy, store: broken }, h.handler, { lease, concurrency: 2, batchSize: 1 }, logs)
      yield* settle
      const failure = yield* Effect.forkChild(Effect.flip(service.failure))
      yield* settle
      const error = yield* Fiber.join(failure)
      assert.strictEqual(error._tag, "QueryFailed")
      assert.strictEqual(claims, 2, "the failed claim is not retried")
      yield* TestClock.adjust("1 minute")
      assert.strictEqual(claims, 2)
      assert.isFalse((yield* service.health).healthy)
      assert.isTrue(logs.entries.some((e) => e.level === "Error" && /claim loop failed/.test(e.message) && /permission denied/.test(e.message)))
      // The message already running goes on and is acked.
      yield* h.open(first!.id)
      yield* settle
      assert.strictEqual(spy.of("ack").length, 1)
    }))

  it.effect("launch fails with the claim loop's error after the consumer shut down and released what it held", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const h = yield* gatedHandler()
      const [first] = yield* spy.store.send(queue, [{ task: "t", payload: 1 }])
      let claims = 0
      const broken = {
        ...spy.store,
        claim: (q: string, o: any) =>
          ++claims === 1 ? spy.store.claim(q, o) : Effect.fail(new QueryFailed({ operation: "claim", message: "claim: relation does not exist", code: "42P01" }))
      }
      const launched = yield* Effect.forkChild(Effect.flip(Consumer.launch(
        Consumer.layer(h.handler, { consumerId: "launched", lease, concurrency: 2, batchSize: 1, shutdownGrace: "5 seconds" }).pipe(
          Layer.provide(Layer.succeed(QueueStore, broken))
        )
      )))
      yield* settle
      assert.deepStrictEqual(yield* Ref.get(h.started), [first!.id])
      yield* TestClock.adjust("5 seconds") // the grace runs out: the running handler is interrupted and released
      yield* settle
      const error = yield* Fiber.join(launched)
      assert.strictEqual(error._tag, "QueryFailed")
      assert.deepStrictEqual(yield* Ref.get(h.interrupted), [first!.id])
      assert.deepStrictEqual(spy.of("release").map((c) => c.ids[0]), [first!.id])
    }))

  it.effect("health: claims failing on a dead connection are no progress; an idle consumer stays healthy", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      let down = false
      const flaky = {
        ...spy.store,
        claim: (q: string, o: any) => down ? Effect.fail(new ConnectionDead({ operation: "claim", message: "claim: Connection terminated" })) : spy.store.claim(q, o)
      }
      const service = yield* startConsumer({ ...spy, store: flaky }, () => Effect.void, {
        pollInterval: "10 seconds",
        healthStale: "30 seconds",
        backoffMax: "10 seconds"
      })
      yield* settle
      // Idle for ten minutes, poll 10 s: healthy all along.
      for (let i = 0; i < 60; i++) {
        yield* TestClock.adjust("10 seconds")
        assert.isTrue((yield* service.health).healthy, `healthy while idle at ${(i + 1) * 10}s`)
      }
      down = true
      yield* TestClock.adjust("25 seconds")
      assert.isTrue((yield* service.health).healthy, "not stale before the bound")
      yield* TestClock.adjust("30 seconds")
      assert.isFalse((yield* service.health).healthy, "claims failing for longer than the bound: stale")
      down = false
      yield* TestClock.adjust("20 seconds")
      assert.isTrue((yield* service.health).healthy, "healthy again once a claim answers")
    }))

  it.effect("health: an idle consumer polling every 10 s with a 2 s stale bound stays healthy", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const service = yield* startConsumer(spy, () => Effect.void, { pollInterval: "10 seconds", healthStale: "2 seconds" })
      yield* settle
      for (let i = 0; i < 30; i++) {
        yield* TestClock.adjust("1 second")
        assert.isTrue((yield* service.health).healthy, `healthy while idle at ${i + 1}s`)
      }
    }))

  it.effect("a retry policy answering NaN does not leave the message leased: it is retried at once and the bug logged", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const logs = captureLogs()
      const [sent] = yield* spy.store.send(queue, [{ task: "t", payload: 1 }])
      let runs = 0
      const dispatcher: Consumer.Dispatcher = {
        handle: () => Effect.suspend(() => ++runs === 1 ? Effect.fail("boom") : Effect.void),
        policy: () => ({ retryDelayMs: () => Number.NaN })
      }
      yield* startConsumer(spy, dispatcher, { lease }, logs)
      yield* settle
      yield* TestClock.adjust("1 second")
      yield* settle
      assert.strictEqual(spy.of("retry").length, 1)
      assert.strictEqual(runs, 2, "run again at once, not after the lease")
      assert.strictEqual(spy.of("ack").length, 1)
      assert.isTrue(logs.entries.some((e) => e.level === "Error" && /retry delay NaN ms/.test(e.message)))
      const history = yield* spy.inner.attempts(sent!.id)
      assert.deepStrictEqual(history.map((a) => a.outcome), ["retried", "acked"])
    }))

  it.effect("a defect in a flush never turns its acks into retries: each entry is written again alone, no handler runs twice", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const logs = captureLogs()
      const sent = yield* spy.store.send(queue, [1, 2, 3].map((n) => ({ task: "t", payload: n })))
      let calls = 0
      const finishes: Array<string> = []
      const buggy = {
        ...spy.store,
        complete: (cs: ReadonlyArray<Completion>) => {
          finishes.push(...cs.map((c) => c.finish._tag))
          return ++calls === 1 ? Effect.die(new Error("bug in ack")) : spy.store.complete(cs)
        }
      }
      let runs = 0
      yield* startConsumer({ ...spy, store: buggy }, () => Effect.sync(() => { runs += 1 }), { lease }, logs)
      yield* settle
      yield* TestClock.adjust("1 second")
      yield* settle
      assert.isTrue(logs.entries.some((e) => e.level === "Warn" && /writing each entry on its own: a defect: .*bug in ack/s.test(e.message)))
      assert.notInclude(finishes, "Retry", "an ack is never rewritten as a retry")
      assert.strictEqual(runs, 3, "each handler ran once")
      assert.strictEqual((yield* spy.inner.stats(queue)).inFlight, 0)
      const histories = yield* Effect.forEach(sent, (m) => spy.inner.attempts(m.id))
      assert.deepStrictEqual(histories.map((h) => h.map((a) => a.outcome)), [["acked"], ["acked"], ["acked"]])
    }))

  it.effect("an entry that dies even alone is written plain: an ack stays an ack (result replaced by the unstorable marker)", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const logs = captureLogs()
      const [sent] = yield* spy.store.send(queue, [{ task: "t", payload: 1 }])
      const finishes: Array<string> = []
      const buggy = {
        ...spy.store,
        // Dies on the result it carries, however often it is written.
        complete: (cs: ReadonlyArray<Completion>) => {
          finishes.push(...cs.map((c) => c.finish._tag))
          return cs.some((c) => c.result?.includes("poison") === true) ? Effect.die(new Error("bug in result")) : spy.store.complete(cs)
        }
      }
      let runs = 0
      yield* startConsumer({ ...spy, store: buggy }, () => Effect.sync(() => (runs += 1, new Encoded(`{"v":"poison"}`))), { lease }, logs)
      yield* settle
      yield* TestClock.adjust("1 second")
      yield* settle
      assert.deepStrictEqual(finishes, ["Ack", "Ack"], "the ack, then its plain form")
      assert.strictEqual(runs, 1)
      const history = yield* spy.inner.attempts(sent!.id)
      assert.deepStrictEqual(history.map((a) => a.outcome), ["acked"])
      assert.isTrue(isResultUnstorable(history[0]!.result))
      assert.match((history[0]!.result as { reason: string }).reason, /could not be written as it was.*bug in result/s)
      assert.isTrue(logs.entries.some((e) => e.level === "Error" && /written plain/.test(e.message)))
    }))

  it.effect("a batch refused by the server (one bad entry) degrades per entry: the others land once, the bad one is written plain and follows its retry policy", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const logs = captureLogs()
      const sent = yield* spy.store.send(queue, [0, 1, 2, 3, 4].map((n) => ({ task: "t", payload: n, maxAttempts: 2 })))
      const sizes: Array<number> = []
      const refusing = {
        ...spy.store,
        // The server refuses any statement carrying the bad text (as PostgreSQL refused a NUL).
        complete: (cs: ReadonlyArray<Completion>) => {
          sizes.push(cs.length)
          return cs.some((c) => c.error?.includes("poison") === true)
            ? Effect.fail(new QueryFailed({ operation: "complete", message: "complete: invalid byte sequence", code: "22021" }))
            : spy.store.complete(cs)
        }
      }
      const gate = yield* Deferred.make<void>()
      const runs = new Map<unknown, number>()
      const handler: Consumer.Handler = (m) =>
        Effect.gen(function*() {
          runs.set(m.payload, (runs.get(m.payload) ?? 0) + 1)
          yield* Deferred.await(gate)
          if (m.payload === 2) return yield* Effect.fail(new Error("poison"))
        })
      yield* startConsumer({ ...spy, store: refusing }, handler, { lease, concurrency: 10, batchSize: 10 }, logs)
      yield* settle
      yield* Deferred.succeed(gate, undefined)
      for (let i = 0; i < 5; i++) {
        yield* settle
        yield* TestClock.adjust("1 second")
      }
      assert.strictEqual(sizes[0], 5, "the five were written in one batch")
      assert.deepStrictEqual([0, 1, 3, 4].map((n) => runs.get(n)), [1, 1, 1, 1], "no good message ran twice")
      assert.strictEqual(runs.get(2), 2, "the bad one ran its two attempts")
      const histories = yield* Effect.forEach(sent, (m) => spy.inner.attempts(m.id))
      assert.deepStrictEqual(histories.map((h) => h.map((a) => a.outcome)), [["acked"], ["acked"], ["retried", "dead-lettered"], ["acked"], ["acked"]])
      const [dead] = yield* spy.inner.deadLetters({ queue })
      assert.strictEqual(dead!.id, sent[2]!.id)
      assert.match(dead!.reason, /the deadLetter could not be written as it was; written without its texts and result: complete: invalid byte sequence/)
      assert.isTrue(logs.entries.some((e) => e.level === "Warn" && /a finishing batch of 5 failed; writing each entry on its own/.test(e.message)))
    }))

  it.effect("a statement timeout (57014) of a batch is retried each entry alone while its lease covers it: nothing runs twice", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const sent = yield* spy.store.send(queue, [0, 1, 2].map((n) => ({ task: "t", payload: n })))
      const sizes: Array<number> = []
      const timingOut = {
        ...spy.store,
        complete: (cs: ReadonlyArray<Completion>) => {
          sizes.push(cs.length)
          return sizes.length === 1
            ? Effect.fail(new QueryFailed({ operation: "complete", message: "complete: canceling statement due to statement timeout", code: "57014" }))
            : spy.store.complete(cs)
        }
      }
      const gate = yield* Deferred.make<void>()
      let runs = 0
      const failuresBefore = yield* counter(QueueMetrics.finishFailures)
      yield* startConsumer({ ...spy, store: timingOut }, () => Effect.andThen(Effect.sync(() => { runs += 1 }), Deferred.await(gate)), { lease })
      yield* settle
      yield* Deferred.succeed(gate, undefined)
      yield* settle
      yield* TestClock.adjust("1 second")
      yield* settle
      assert.deepStrictEqual(sizes, [3, 1, 1, 1], "the batch, then each entry alone")
      assert.strictEqual(runs, 3)
      const histories = yield* Effect.forEach(sent, (m) => spy.inner.attempts(m.id))
      assert.deepStrictEqual(histories.map((h) => h.map((a) => a.outcome)), [["acked"], ["acked"], ["acked"]])
      assert.strictEqual((yield* counter(QueueMetrics.finishFailures)) - failuresBefore, 0)
    }))
})

describe("Consumer: which queues (memory store, TestClock)", () => {
  const emailsDispatcher = (runs: Array<string>): Consumer.Dispatcher => ({
    handle: (m) => Effect.sync(() => runs.push(`${m.queue}:${m.payload}`)),
    policy: () => undefined,
    queues: ["emails"]
  })

  /** One message on `emails` and one on `other`; which queues the consumer took, and what it ran. */
  const consumedWith = (options: ConsumerOptions) =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const runs: Array<string> = []
      yield* spy.store.send("emails", [{ task: "t", payload: 1 }])
      yield* spy.store.send("other", [{ task: "t", payload: 2 }])
      const service = yield* startConsumer(spy, emailsDispatcher(runs), options)
      yield* settle
      yield* TestClock.adjust("1 second")
      return { queues: service.settings.queues, runs }
    })

  it.effect("a consumer built from a dispatcher consumes its tasks' queues unless told otherwise", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(yield* consumedWith({}), { queues: ["emails"], runs: ["emails:1"] })
    }))

  it.effect("named queues win over the dispatcher's", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(yield* consumedWith({ queues: ["other"] }), { queues: ["other"], runs: ["other:2"] })
    }))

  it.effect("from the environment: without LEASEHOLD_QUEUES the dispatcher's queues, with it the variable's", () =>
    Effect.gen(function*() {
      const spy = yield* makeSpy
      const queuesOf = (env: Record<string, string>) =>
        Effect.scoped(Effect.gen(function*() {
          const context = yield* Layer.build(
            Consumer.layerFromEnv(emailsDispatcher([])).pipe(
              Layer.provide(Layer.succeed(QueueStore, spy.store)),
              Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env })))
            )
          )
          return Context.get(context, Consumer.Consumer).settings.queues
        }))
      assert.deepStrictEqual(yield* queuesOf({}), ["emails"])
      assert.deepStrictEqual(yield* queuesOf({ LEASEHOLD_QUEUES: "a,b" }), ["a", "b"])
    }))
})

describe("Consumer: a flush waits for the claim in flight (memory store, TestClock)", () => {
  /**
   * A store whose claims after the first wait for `gate`: the first claim's messages run and are
   * queued for their finishing write while the next claim is in flight.
   */
  const stalledSecondClaim = Effect.gen(function*() {
    const spy = yield* makeSpy
    const gate = yield* Deferred.make<void>()
    let claims = 0
    const store = {
      ...spy.store,
      claim: (q: string, options: Parameters<typeof spy.store.claim>[1]) =>
        ++claims === 1 ? spy.store.claim(q, options) : Effect.andThen(Deferred.await(gate), spy.store.claim(q, options))
    }
    yield* spy.store.send(queue, Array.from({ length: 3 }, (_, i) => ({ task: "t", payload: i })))
    return { spy, store, gate, claims: () => claims }
  })

  it.effect("the first claim's acks are written once the next claim is answered, not while it is in flight", () =>
    Effect.gen(function*() {
      const { claims, gate, spy, store } = yield* stalledSecondClaim
      let runs = 0
      yield* startConsumer({ ...spy, store }, () => Effect.sync(() => { runs += 1 }), { lease, concurrency: 3 })
      for (let i = 0; i < 100 && claims() < 2; i++) yield* settle
      assert.strictEqual(runs, 3, "the first claim's messages ran")
      assert.strictEqual(claims(), 2, "the next claim is in flight")
      for (let i = 0; i < 10; i++) yield* settle
      assert.strictEqual(spy.of("ack").length, 0, "no flush while the claim is in flight")
      yield* Deferred.succeed(gate, undefined)
      for (let i = 0; i < 100 && spy.of("ack").length < 3; i++) yield* settle
      assert.strictEqual(spy.of("ack").length, 3, "flushed as the claim was answered")
    }))

  it.effect("the wait is bounded: a claim that does not answer holds the acks for at most 20 ms", () =>
    Effect.gen(function*() {
      const { claims, spy, store } = yield* stalledSecondClaim
      yield* startConsumer({ ...spy, store }, () => Effect.void, { lease, concurrency: 3 })
      for (let i = 0; i < 100 && claims() < 2; i++) yield* settle
      assert.strictEqual(claims(), 2, "the next claim is in flight, and stays so")
      yield* TestClock.adjust("19 millis")
      for (let i = 0; i < 10; i++) yield* settle
      assert.strictEqual(spy.of("ack").length, 0, "held within the bound")
      yield* TestClock.adjust("1 millis")
      for (let i = 0; i < 100 && spy.of("ack").length < 3; i++) yield* settle
      assert.strictEqual(spy.of("ack").length, 3, "written once the bound passed")
    }))
})
