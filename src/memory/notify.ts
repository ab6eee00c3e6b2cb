/**
 * Wake-ups of the memory store: the `sends` and `cancels` subscriptions.
 *
 * @since 0.1.0
 */
import { Effect, Latch } from "effect"
import type { QueueStoreShape } from "../QueueStore.ts"
import * as CancelInbox from "../internal/cancelInbox.ts"
import type { MemoryState } from "./state.ts"

/** A latch opened by what `registry` hears about `queues`, for the life of the current scope. */
const subscribe = (registry: Map<string, Set<Latch.Latch>>, queues: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const latch = yield* Latch.make(false)
    for (const queue of queues) {
      const set = registry.get(queue) ?? new Set()
      set.add(latch)
      registry.set(queue, set)
    }
    yield* Effect.addFinalizer(() => Effect.sync(() => queues.forEach((q) => registry.get(q)?.delete(latch))))
    return Effect.andThen(latch.await, latch.close)
  })

/** `sends`: woken by sends (and releases, resumes) of messages ready now. */
export const sends = (state: MemoryState): QueueStoreShape["sends"] => (queues) => subscribe(state.listeners, queues)

/** `cancels`: told of cancels of running messages. */
export const cancels = (state: MemoryState): QueueStoreShape["cancels"] => (queues) =>
  CancelInbox.subscribe(state.cancelListeners, queues)
