/**
 * Reading messages in the memory store: one by id, or a page of a queue's.
 *
 * @since 0.1.0
 */
import { Clock, Effect, Option } from "effect"
import type { MessageInfo } from "../Message.ts"
import type { QueueStoreShape } from "../QueueStore.ts"
import { type MemoryState, message, type Row, stateOf } from "./state.ts"

/** A row as `get` and `messages` show it at `now`. */
const info = (row: Row, now: number): MessageInfo => {
  const state = stateOf(row, now)
  return {
    ...message(row),
    state,
    visibleAt: state === "dead" ? null : new Date(row.visibleAt),
    leasedBy: state === "in-flight" ? row.leasedBy : null,
    leasedAt: state === "in-flight" && row.leasedAt !== null ? new Date(row.leasedAt) : null,
    cancelRequestedAt: state === "in-flight" && row.cancelRequestedAt !== null ? new Date(row.cancelRequestedAt) : null,
    deadReason: row.deadReason,
    deadAt: row.deadAt === null ? null : new Date(row.deadAt),
    progress: structuredClone(row.progress),
    progressAt: row.progressAt === null ? null : new Date(row.progressAt)
  }
}

/** `get`: one message by id. */
export const get = ({ rows }: MemoryState): QueueStoreShape["get"] => (id) =>
  Effect.map(Clock.currentTimeMillis, (now) => {
    const row = rows.get(BigInt(id))
    return row === undefined ? Option.none() : Option.some(info(row, now))
  })

/** `messages`: a page of a queue's messages in id order. Options checked by `fromOperations`: `limit` is set, `after` a valid id. */
export const messages = ({ rows }: MemoryState): QueueStoreShape["messages"] => (queue, options = {}) =>
  Effect.map(Clock.currentTimeMillis, (now) => {
    const after = options.after === undefined ? 0n : BigInt(options.after)
    const limit = options.limit ?? 100
    const out: Array<MessageInfo> = []
    // The map keeps insertion order, which is id order.
    for (const row of rows.values()) {
      if (out.length >= limit) break
      if (row.queue !== queue || row.id <= after) continue
      if (options.state !== undefined && stateOf(row, now) !== options.state) continue
      out.push(info(row, now))
    }
    return out
  })
