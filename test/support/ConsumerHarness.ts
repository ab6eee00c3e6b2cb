/**
 * Test plumbing for the consumer: a memory store wrapped in a spy that records
 * every call (with its Clock time and order) and lets a test replace `renew`,
 * and a logger that keeps what was logged.
 */
import { Clock, Context, Deferred, Effect, Fiber, Layer, Logger, type LogLevel, Ref } from "effect"
import { TestClock } from "effect/testing"
import * as Consumer from "../../src/Consumer.ts"
import * as MemoryQueueStore from "../../src/MemoryQueueStore.ts"
import type { ClaimRef, MessageId } from "../../src/Message.ts"
import type { ConsumerOptions } from "../../src/QueueConfig.ts"
import type { StoreError } from "../../src/QueueError.ts"
import { QueueStore, type QueueStoreShape, type Renewed } from "../../src/QueueStore.ts"

/** One recorded store call. `phase` tells a renew's start from its end. */
export interface Call {
  readonly seq: number
  readonly op: string
  readonly phase: "start" | "end"
  readonly ids: ReadonlyArray<string>
  readonly at: number
}

export type RenewOverride = (
  refs: ReadonlyArray<ClaimRef>,
  inner: QueueStoreShape
) => Effect.Effect<Renewed, StoreError>

export interface Spy {
  readonly store: QueueStoreShape
  readonly inner: QueueStoreShape
  readonly calls: Array<Call>
  renew: RenewOverride | undefined
  /** Calls of one operation (end phase for renew). */
  readonly of: (op: string) => ReadonlyArray<Call>
}

/** The name each finishing kind of a completion is recorded under (a `Forget` writes nothing). */
const opOf: Record<string, string | undefined> = { Ack: "ack", Retry: "retry", DeadLetter: "deadLetter", Release: "release", Cancel: "cancel" }

export const makeSpy: Effect.Effect<Spy> = Effect.gen(function*() {
  const inner = yield* MemoryQueueStore.make()
  const calls: Array<Call> = []
  let seq = 0
  const record = (op: string, phase: Call["phase"], ids: ReadonlyArray<string>) =>
    Effect.map(Clock.currentTimeMillis, (at) => {
      calls.push({ seq: seq++, op, phase, ids, at })
    })
  const spy: Spy = {
    inner,
    calls,
    renew: undefined,
    of: (op) => calls.filter((c) => c.op === op && c.phase === "end"),
    store: {
      ...inner,
      claim: (queue, options) => Effect.tap(inner.claim(queue, options), (cs) => cs.length > 0 ? record("claim", "end", cs.map((c) => c.id)) : Effect.void),
      renew: (refs, lease) =>
        Effect.gen(function*() {
          yield* record("renew", "start", refs.map((r) => r.id))
          return yield* (spy.renew === undefined ? inner.renew(refs, lease) : spy.renew(refs, inner))
        }).pipe(Effect.onExit(() => record("renew", "end", refs.map((r) => r.id)))),
      setProgress: (ref, progress) => Effect.tap(inner.setProgress(ref, progress), () => record("progress", "end", [ref.id])),
      // A batch of finishing writes is recorded as one call per completion, by its kind, in order.
      complete: (completions) =>
        Effect.tap(inner.complete(completions), () =>
          Effect.forEach(completions, (c) => {
            const op = opOf[c.finish._tag]
            return op === undefined ? Effect.void : record(op, "end", [c.ref.id])
          }, { discard: true }))
    }
  }
  return spy
})

export interface LogEntry {
  readonly level: LogLevel.LogLevel
  readonly message: string
}

/** A logger that keeps every entry, replacing the default one. */
export const captureLogs = () => {
  const entries: Array<LogEntry> = []
  const logger = Logger.make<unknown, void>(({ logLevel, message }) => {
    entries.push({ level: logLevel, message: Array.isArray(message) ? message.map(String).join(" ") : String(message) })
  })
  return { entries, layer: Logger.layer([logger]) }
}

/**
 * Start a consumer over the spy's store in the current scope (closing the
 * scope shuts it down). Unless `manualShutdown`, closing the scope also moves
 * the TestClock along, so that a test failing mid-way (handlers still gated)
 * ends in a failure instead of waiting forever for the shutdown grace.
 */
export const startConsumer = (
  spy: Spy,
  handler: Consumer.Handler | Consumer.Dispatcher,
  options: ConsumerOptions,
  logs?: ReturnType<typeof captureLogs>,
  manualShutdown = false
) =>
  Effect.gen(function*() {
    let ticker: Fiber.Fiber<never> | undefined
    // Registered first, runs last: stop the ticker once the consumer has shut down.
    yield* Effect.addFinalizer(() => ticker === undefined ? Effect.void : Fiber.interrupt(ticker))
    const context = yield* Layer.build(
      Consumer.layer(handler, { consumerId: "test-consumer", pollInterval: "1 second", ...options }).pipe(
        Layer.provide(Layer.succeed(QueueStore, spy.store)),
        Layer.provide(logs?.layer ?? Layer.empty)
      )
    )
    if (!manualShutdown) {
      yield* Effect.addFinalizer(() =>
        Effect.map(
          Effect.forkDetach(Effect.forever(Effect.andThen(TestClock.adjust("1 minute"), Effect.yieldNow))),
          (fiber) => {
            ticker = fiber
          }
        )
      )
    }
    return Context.get(context, Consumer.Consumer)
  })

/** A handler whose runs the test controls: each message waits for its own gate. */
export const gatedHandler = () =>
  Effect.gen(function*() {
    const started = yield* Ref.make<Array<MessageId>>([])
    const interrupted = yield* Ref.make<Array<MessageId>>([])
    const gates = new Map<string, Deferred.Deferred<void>>()
    const gate = (id: string) => {
      let g = gates.get(id)
      if (g === undefined) {
        g = Deferred.makeUnsafe<void>()
        gates.set(id, g)
      }
      return g
    }
    const handler: Consumer.Handler = (m) =>
      Ref.update(started, (s) => [...s, m.id]).pipe(
        Effect.andThen(Deferred.await(gate(m.id))),
        Effect.onInterrupt(() => Ref.update(interrupted, (s) => [...s, m.id]))
      )
    return {
      handler,
      started,
      interrupted,
      open: (id: string) => Deferred.succeed(gate(id), undefined)
    }
  })

/** Send `n` messages of task `t` to `queue` (payloads 0..n-1) through the spy's store; answers their ids. */
export const sendN = (spy: Spy, n: number, queue = "default") =>
  Effect.map(spy.store.send(queue, Array.from({ length: n }, (_, i) => ({ task: "t", payload: i }))), (sent) => sent.map((s) => s.id))
