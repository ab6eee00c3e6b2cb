/**
 * A consumer keeps nothing of a message once its finishing write was answered: its claim
 * (payload, headers) can be collected, even while the consumer sits idle afterwards. Checked
 * with weak references to every claim a store made and forced garbage collections (gc is
 * exposed for this file through `v8.setFlagsFromString`), in real time on a store that
 * answers at once.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Layer, Logger, Option } from "effect"
import { setFlagsFromString } from "node:v8"
import { runInNewContext } from "node:vm"
import * as Consumer from "../src/Consumer.ts"
import type { Claim, MessageId } from "../src/Message.ts"
import * as MemoryQueueStore from "../src/MemoryQueueStore.ts"
import { QueueStore, type QueueStoreShape } from "../src/QueueStore.ts"
import { waitFor } from "./support/Wait.ts"

setFlagsFromString("--expose-gc")
const gc = runInNewContext("gc") as () => void

/** A store whose claims are made here (`total` of them, each watched), whose writes all land at once. */
const watchedStore = (base: QueueStoreShape, total: number) => {
  const watched: Array<WeakRef<Claim>> = []
  let completed = 0
  const claimOf = (i: number): Claim => ({
    id: String(i) as MessageId,
    queue: "q",
    task: "t",
    payload: { i, body: "x".repeat(1000) },
    headers: {},
    priority: 0,
    attempts: 1,
    maxAttempts: 25,
    enqueuedAt: new Date(0),
    dedupKey: null,
    lastError: null,
    leaseExpiries: 0,
    leaseToken: "00000000-0000-4000-8000-000000000000" as Claim["leaseToken"],
    leaseExpiresAt: new Date(Date.now() + 30_000),
    consumer: "c"
  })
  const store: QueueStoreShape = {
    ...base,
    claim: (_queue, options) =>
      Effect.sync(() => {
        const out: Array<Claim> = []
        while (out.length < options.limit && watched.length < total) {
          const claim = claimOf(watched.length)
          watched.push(new WeakRef(claim))
          out.push(claim)
        }
        return out
      }),
    complete: (completions) =>
      Effect.sync(() => {
        completed += completions.length
        return { held: completions.map((c) => c.ref.id), cancelled: [] }
      }),
    renew: (refs) => Effect.succeed({ held: refs.map((r) => r.id), cancelling: [] }),
    nextVisibleAt: () => Effect.succeed(Option.none())
  }
  return { store, watched, completed: () => completed }
}

/** Collect garbage until what is left stops changing (weak references clear after the job that made them). */
const collect = Effect.gen(function*() {
  for (let i = 0; i < 3; i++) {
    yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 10)))
    gc()
  }
})

describe("retention (memory store, real time)", () => {
  it.live("no finished message is kept once its write was answered, while the consumer idles", () =>
    Effect.scoped(Effect.gen(function*() {
      const total = 300
      const base = Context.get(yield* Layer.build(MemoryQueueStore.layer()), QueueStore)
      const w = watchedStore(base, total)
      yield* Layer.build(
        Consumer.layer(() => Effect.void, { queues: ["q"], concurrency: 50, pollInterval: "1 second" }).pipe(
          Layer.provide(Layer.succeed(QueueStore, w.store)),
          Layer.provide(Logger.layer([]))
        )
      ).pipe(Effect.orDie)
      yield* waitFor("every finishing write", Effect.sync(() => w.completed() === total ? Option.some(true) : Option.none()), 10_000)
      yield* collect
      const kept = w.watched.flatMap((ref, i) => ref.deref() === undefined ? [] : [i])
      assert.deepStrictEqual(kept, [], `${kept.length} finished message(s) still reachable`)
    })))
})
