/**
 * The commit step in the memory store: the message is locked by its lease token (no claim takes
 * it meanwhile, as `FOR UPDATE` keeps SQL's `SKIP LOCKED` claims off it), the effect runs, then
 * the finishing write and its history record. What the memory store cannot do is roll back what
 * the effect did: a failed effect leaves its own writes (a send through this store, say) in place.
 *
 * @since 0.5.0
 */
import { Effect } from "effect"
import { CommitFenced, type StoreError } from "../QueueError.ts"
import type { Completion, QueueStoreShape } from "../QueueStore.ts"
import { complete } from "./complete.ts"
import { held, type MemoryState } from "./state.ts"

/** `completeWith`: the fence (and the lock), `effect`, then the finishing write. */
export const completeWith = (state: MemoryState): QueueStoreShape["completeWith"] => <A, E, R>(completion: Completion, effect: Effect.Effect<A, E, R>) =>
  Effect.suspend((): Effect.Effect<A, E | CommitFenced | StoreError, R> => {
    const { id, leaseToken } = completion.ref
    const row = held(state, id, leaseToken)
    if (row === undefined || state.committing.has(row.id)) {
      return Effect.fail(
        new CommitFenced({
          messageId: id,
          reason: "lease-lost",
          message: `commit of message ${id} refused: this run no longer holds it (its lease was taken or it was deleted)`
        })
      )
    }
    state.committing.add(row.id)
    return effect.pipe(
      Effect.tap(() => complete(state)([completion])),
      Effect.ensuring(Effect.sync(() => state.committing.delete(row.id)))
    )
  })
