/**
 * Traces across the queue: a message sent under a span carries it as a W3C
 * `traceparent` header, and the consumer's `leasehold.handle` span continues
 * that trace: as its child across a real PostgreSQL round trip, as a new trace
 * linked to the sender when the message waited longer than a minute. Spans
 * are collected by an in-memory tracer.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Layer, Option, Scope, Tracer } from "effect"
import { execFile } from "node:child_process"
import { existsSync } from "node:fs"
import { resolve } from "node:path"
import { TestClock } from "effect/testing"
import * as Consumer from "../src/Consumer.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import type { Claim } from "../src/Message.ts"
import * as MemoryQueueStore from "../src/MemoryQueueStore.ts"
import { QueueStore } from "../src/QueueStore.ts"
import { makeSpy, startConsumer } from "./support/ConsumerHarness.ts"
import * as PgTest from "./support/PgTest.ts"
import { collecting } from "./support/Spans.ts"


const parentId = (span: Tracer.AnySpan) => span._tag === "Span" ? Option.getOrUndefined(span.parent)?.spanId : undefined
const attributes = (span: Tracer.NativeSpan) => Object.fromEntries(span.attributes)

/** Let forked fibers run without moving time. */
const settle = Effect.gen(function*() {
  for (let i = 0; i < 20; i++) yield* Effect.yieldNow
})

/** Node 22 (type stripping) for the producer process: this one, or the project's. */
const nodeBinary = Number(process.versions.node.split(".")[0]) >= 22 || !existsSync(resolve("node_modules/.bin/node"))
  ? process.execPath
  : resolve("node_modules/.bin/node")

/** Run test/fixtures/producer.ts to completion; what it printed on its `SENT` line. */
const runProducer = (env: Record<string, string>) =>
  Effect.callback<{ id: string; traceId: string; producerSpanId: string; sendSpanId: string }, Error>((resume) => {
    const child = execFile(
      nodeBinary,
      [resolve("test/fixtures/producer.ts")],
      { env: { ...process.env, LEASEHOLD_DATABASE_URL: PgTest.databaseUrl(), ...env }, timeout: 20_000 },
      (error, stdout, stderr) => {
        const line = stdout.split("\n").find((l) => l.startsWith("SENT "))
        if (error !== null || line === undefined) {
          resume(Effect.fail(new Error(`producer failed: ${String(error)}\nstdout: ${stdout}\nstderr: ${stderr}`)))
        } else resume(Effect.succeed(JSON.parse(line.slice("SENT ".length))))
      }
    )
    return Effect.sync(() => child.kill())
  })

interface Handled {
  readonly claim: Claim
  readonly span: Tracer.Span
}

describe("traces across the queue", () => {
  it.live("the handler's span is in the sender's trace, a child of the send, across a PostgreSQL round trip", () => {
    const { tracer, named } = collecting()
    return Effect.scoped(Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = `trace-${Math.random().toString(36).slice(2, 8)}`
      const handled = yield* Deferred.make<Handled>()
      const handler: Consumer.Handler = (claim) => Effect.flatMap(Effect.currentSpan, (span) => Deferred.succeed(handled, { claim, span }))
      const scope = yield* Scope.fork(yield* Scope.Scope)
      yield* Layer.buildWithScope(Consumer.layer(handler, { queues: [queue], consumerId: "tracing", pollInterval: "50 millis" }), scope)

      const producer = yield* Effect.flatMap(Effect.currentSpan, (span) => Effect.as(store.send(queue, [{ task: "traced", payload: 1 }]), span)).pipe(
        Effect.withSpan("producer.request")
      )
      const { claim, span } = yield* Deferred.await(handled).pipe(Effect.timeout("10 seconds"))
      // The consumer drains: the ack is written before the spans are read.
      yield* Scope.close(scope, Exit.void)

      const [send] = named("leasehold.send").filter((s) => parentId(s) === producer.spanId)
      assert.isDefined(send, "the store's send span is a child of the producer's")
      assert.strictEqual(claim.headers["traceparent"], `00-${producer.traceId}-${send!.spanId}-01`)
      assert.strictEqual(span.name, "leasehold.handle")
      assert.strictEqual(span.kind, "consumer")
      assert.strictEqual(span.traceId, producer.traceId, "same trace as the sender")
      assert.strictEqual(parentId(span), send!.spanId, "the handler's span is the send's child")
      assert.deepStrictEqual(span.links, [])

      // The claim and the finishing write of a one-message batch name the message.
      const claimSpan = named("leasehold.claim").find((s) => attributes(s)["messageId"] === claim.id)
      assert.deepInclude(attributes(claimSpan!), { queue, count: 1, task: "traced", attempt: 1 })
      const complete = named("leasehold.complete").find((s) => attributes(s)["messageId"] === claim.id)
      assert.deepInclude(attributes(complete!), { queue, task: "traced", attempt: 1, count: 1, finish: "Ack" })
    })).pipe(
      Effect.provide(PgTest.storeLayer({ clock: "database" })),
      Effect.provideService(Tracer.Tracer, tracer)
    )
  }, { timeout: 30_000 })

  it.live("across two processes: a producer process's trace is continued by this process's handler", () => {
    const { tracer } = collecting()
    const schema = PgTest.uniqueSchema("xtrace")
    const queue = "cross-process"
    return Effect.scoped(Effect.gen(function*() {
      const handled = yield* Deferred.make<Handled>()
      const handler: Consumer.Handler = (claim) => Effect.flatMap(Effect.currentSpan, (span) => Deferred.succeed(handled, { claim, span }))
      yield* Layer.build(Consumer.layer(handler, { queues: [queue], consumerId: "xtrace", pollInterval: "50 millis" }))
      const sent = yield* runProducer({ LEASEHOLD_SCHEMA: schema, QUEUE: queue })
      const { claim, span } = yield* Deferred.await(handled).pipe(Effect.timeout("10 seconds"))
      assert.strictEqual(claim.id, sent.id)
      assert.strictEqual(claim.headers["traceparent"], `00-${sent.traceId}-${sent.sendSpanId}-01`)
      assert.strictEqual(span.traceId, sent.traceId, "the producer process's trace")
      assert.strictEqual(parentId(span), sent.sendSpanId, "a child of the producer's send span")
    })).pipe(
      Effect.provide(
        PgQueueStore.layer({ clock: "database", schema }).pipe(
          Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
          Layer.provideMerge(PgTest.clientLayer({ maxConnections: 4 }))
        )
      ),
      Effect.provideService(Tracer.Tracer, tracer)
    )
  }, { timeout: 30_000 })

  it.effect("a message claimed more than a minute after its send starts a trace of its own, linked to the sender", () => {
    const { tracer } = collecting()
    return Effect.gen(function*() {
      const spy = yield* makeSpy
      const seen: Array<Handled> = []
      const handler: Consumer.Handler = (claim) => Effect.map(Effect.currentSpan, (span) => { seen.push({ claim, span }) })
      const now = yield* Effect.flatMap(Effect.currentSpan, (span) => Effect.as(spy.store.send("traced", [{ task: "now", payload: 1 }]), span)).pipe(
        Effect.withSpan("producer.now")
      )
      const later = yield* Effect.flatMap(Effect.currentSpan, (span) =>
        Effect.as(spy.store.send("traced", [{ task: "later", payload: 2, delay: 120_000 }]), span)).pipe(
        Effect.withSpan("producer.later")
      )
      yield* startConsumer(spy, handler, { queues: ["traced"], pollInterval: "1 second" })
      yield* settle
      assert.strictEqual(seen.length, 1)
      assert.strictEqual(seen[0]!.span.traceId, now.traceId)
      assert.strictEqual(parentId(seen[0]!.span), now.spanId, "claimed at once: the sender's child")

      yield* TestClock.adjust("2 minutes")
      yield* settle
      assert.strictEqual(seen.length, 2)
      const delayed = seen[1]!.span
      assert.strictEqual(seen[1]!.claim.task, "later")
      assert.notStrictEqual(delayed.traceId, later.traceId, "a trace of its own")
      assert.isUndefined(parentId(delayed))
      assert.deepStrictEqual(delayed.links.map((l) => [l.span.traceId, l.span.spanId]), [[later.traceId, later.spanId]])
    }).pipe(Effect.provideService(Tracer.Tracer, tracer))
  })

  it.effect("no traceparent without a tracer; a sender's own traceparent is kept", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      yield* store.send("plain", [{ task: "t", payload: 1 }]).pipe(Effect.withSpan("untraced"))
      const own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
      const { tracer } = collecting()
      yield* store.send("plain", [{ task: "t", payload: 2, headers: { traceparent: own } }]).pipe(
        Effect.withSpan("traced"),
        Effect.provideService(Tracer.Tracer, tracer)
      )
      const claims = yield* store.claim("plain", { lease: "30 seconds", limit: 10, consumer: "c" })
      assert.deepStrictEqual(claims.map((c) => c.headers), [{}, { traceparent: own }])
    }).pipe(Effect.provide(MemoryQueueStore.layer())))
})

