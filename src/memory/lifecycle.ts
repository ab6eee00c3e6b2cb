/**
 * The caller's lifecycle in the memory store: progress written on a held message, and the
 * completion events its finishing writes and cancels publish (`announce` in state.ts).
 *
 * @since 0.6.0
 */
import { Clock, Effect, PubSub } from "effect"
import { type LifecycleOperations, ofQueues } from "../Lifecycle.ts"
import { held, type MemoryState } from "./state.ts"

/** `setProgress`: the value kept on the row its claim still holds (checked by `fromOperations`). */
export const setProgress = (state: MemoryState): LifecycleOperations["setProgress"] => (ref, progress) =>
  Effect.map(Clock.currentTimeMillis, (now) => {
    const row = held(state, ref.id, ref.leaseToken)
    if (row === undefined) return false
    row.progress = structuredClone(progress)
    row.progressAt = now
    return true
  })

/** `completions`: a subscription to the store's events, those of `queues` kept. */
export const completions = (state: MemoryState): LifecycleOperations["completions"] => (queues) =>
  Effect.map(PubSub.subscribe(state.events), (subscription) => ofQueues(PubSub.take(subscription), queues))
