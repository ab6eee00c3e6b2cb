/**
 * Attempt-history and unique-key pruning, as maintenance tasks: every consumer
 * prunes now and then (indexed deletes in the store), so the history stays
 * bounded and uniqueness reservations whose window ended go (the next send of a
 * key would replace one anyway).
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { StoreError } from "../QueueError.ts"
import type { QueueStoreShape } from "../QueueStore.ts"
import type { Task } from "./Maintenance.ts"

/** How often a consumer prunes. */
export const everyMs = 600_000

/** Delete attempt-history rows older than `retentionMs`. */
export const attempts = (store: QueueStoreShape, retentionMs: number): Task<StoreError> => ({
  name: "prune attempts",
  every: everyMs,
  run: Effect.asVoid(store.pruneAttempts(retentionMs)),
  failed: (e) => `attempt history not pruned: ${e.message}`
})

/** Delete uniqueness reservations whose window ended. */
export const uniqueKeys = (store: QueueStoreShape): Task<StoreError> => ({
  name: "prune unique keys",
  every: everyMs,
  run: Effect.asVoid(store.pruneUniqueKeys),
  failed: (e) => `expired unique keys not pruned: ${e.message}`
})

/** Delete flow bookkeeping nothing needs any more (old rate windows, idle keys). */
export const flow = (store: QueueStoreShape): Task<StoreError> => ({
  name: "prune flow bookkeeping",
  every: everyMs,
  run: Effect.asVoid(store.pruneFlow),
  failed: (e) => `flow bookkeeping not pruned: ${e.message}`
})
