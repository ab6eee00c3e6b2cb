/**
 * Sending in the memory store: every message checked before the first write (all or
 * nothing, like the SQL transaction), deduplication by key and by uniqueness window.
 *
 * @since 0.1.0
 */
import { Clock, Effect } from "effect"
import type { MessageId, SendResult } from "../Message.ts"
import type { QueueStoreShape } from "../QueueStore.ts"
import * as Validate from "../internal/validate.ts"
import { flowBucket, live, type MemoryState, uniqueKey, wake } from "./state.ts"

/** The holder of a live reservation, if any. */
const reservation = (state: MemoryState, queue: string, key: string, now: number): MessageId | undefined => {
  const held = state.reserved.get(uniqueKey(queue, key))
  return held !== undefined && held.until > now ? held.id : undefined
}

/**
 * The turn of a keyed message in the fair rotation: max(key's next turn, queue's served turn);
 * the key's next turn moves on by 1e6 / weight (as the SQL store's trigger `flow_turn`).
 */
const turnOf = (state: MemoryState, queue: string, key: string): number => {
  const bucket = flowBucket(queue, "", key)
  const entry = state.flow.keys.get(bucket) ?? { nextTurn: 0, weight: 1 }
  const turn = Math.max(entry.nextTurn, state.flow.servedTurn.get(queue) ?? 0)
  state.flow.keys.set(bucket, { nextTurn: turn + Math.floor(1_000_000 / entry.weight), weight: entry.weight })
  return turn
}

/** `send`: store the messages of one queue, waking its idle consumers when one is ready now. */
export const send = (state: MemoryState): QueueStoreShape["send"] => (queue, messages) =>
  Effect.gen(function*() {
    const { reserved, rows } = state
    const prepared = yield* Validate.prepareSend(queue, messages, state.limits)
    const now = yield* Clock.currentTimeMillis
    // All checks passed before the first write: like the SQL transaction, all or nothing.
    const results = prepared.map((m): SendResult => {
      if (m.dedupKey !== null) {
        const existing = live(state, queue).find((r) => r.dedupKey === m.dedupKey)
        if (existing !== undefined) return { id: String(existing.id) as MessageId, deduplicated: true }
      }
      const holder = m.unique === null ? undefined : reservation(state, queue, m.unique.key, now)
      if (holder !== undefined) return { id: holder, deduplicated: true }
      const id = state.nextId++
      if (m.unique !== null) reserved.set(uniqueKey(queue, m.unique.key), { until: now + m.unique.forMs, id: String(id) as MessageId })
      rows.set(id, {
        id,
        queue,
        task: m.task,
        payload: JSON.parse(m.payloadJson),
        headers: m.headers,
        priority: m.priority,
        enqueuedAt: now,
        maxAttempts: m.maxAttempts,
        state: "ready",
        visibleAt: now + m.delayMs,
        attempts: 0,
        leaseToken: null,
        leasedBy: null,
        leasedAt: null,
        leaseExpiries: 0,
        attemptBase: 0,
        dedupKey: m.dedupKey,
        lastError: null,
        deadReason: null,
        deadAt: null,
        cancelRequestedAt: null,
        key: m.key,
        turn: m.key === null ? 0 : turnOf(state, queue, m.key),
        flowLimited: false,
        progress: null,
        progressAt: null
      })
      return { id: String(id) as MessageId, deduplicated: false }
    })
    if (prepared.some((m) => m.delayMs === 0)) wake(state, queue)
    return results
  })
