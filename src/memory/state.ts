/**
 * The in-memory store's state, built once per store in `MemoryQueueStore.make`: the maps
 * mirroring the tables, the id counter, the limits and the wake-up subscribers; and the row
 * helpers every operation module shares.
 *
 * @since 0.1.0
 */
import type { Latch } from "effect"
import type { Attempt, MessageId, MessageState } from "../Message.ts"
import type { ScheduleInfo } from "../QueueStore.ts"
import type * as CancelInbox from "../internal/cancelInbox.ts"
import type * as Validate from "../internal/validate.ts"

/** One stored message: the mutable mirror of a row of the messages table. */
export interface Row {
  readonly id: bigint
  readonly queue: string
  readonly task: string
  readonly payload: unknown
  readonly headers: Readonly<Record<string, string>>
  readonly priority: number
  readonly enqueuedAt: number
  readonly maxAttempts: number
  state: "ready" | "dead"
  visibleAt: number
  attempts: number
  leaseToken: string | null
  leasedBy: string | null
  leasedAt: number | null
  leaseExpiries: number
  /** Attempts before the last redrive: the history numbers attempts on from there. */
  attemptBase: number
  dedupKey: string | null
  lastError: string | null
  deadReason: string | null
  deadAt: number | null
  /** When a cancel of this message, while running, was asked for. */
  cancelRequestedAt: number | null
}

/** What every operation of the memory store works on, built once per store. */
export interface MemoryState {
  /** The messages, by id (insertion order is id order). */
  readonly rows: Map<bigint, Row>
  /** Subscribers per queue, woken by sends of messages ready now. */
  readonly listeners: Map<string, Set<Latch.Latch>>
  /** Subscribers per queue, told of cancels of running messages. */
  readonly cancelListeners: CancelInbox.Registry
  /** The attempt history. */
  readonly history: Array<Attempt>
  /** Queues ever paused (a resumed one stays, unpaused), with when they were paused. */
  readonly pauses: Map<string, { paused: boolean; pausedAt: number | null }>
  /** Reservations by queue and key: they outlive their message, as the unique_keys table does. */
  readonly reserved: Map<string, { until: number; id: MessageId }>
  /** The schedules, by key. */
  readonly scheduleRows: Map<string, ScheduleInfo>
  /** Send limits and defaults: the largest payload, the default attempts. */
  readonly limits: Validate.SendLimits
  /** The next message id. */
  nextId: bigint
}

/** An empty state with these limits. */
export const makeState = (limits: Validate.SendLimits): MemoryState => ({
  rows: new Map(),
  listeners: new Map(),
  cancelListeners: new Map(),
  history: [],
  pauses: new Map(),
  reserved: new Map(),
  scheduleRows: new Map(),
  limits,
  nextId: 1n
})

/** A row as the message fields of what the store answers (payload and headers copied). */
export const message = (row: Row) => ({
  id: String(row.id) as MessageId,
  queue: row.queue,
  task: row.task,
  payload: structuredClone(row.payload),
  headers: { ...row.headers },
  priority: row.priority,
  attempts: row.attempts,
  maxAttempts: row.maxAttempts,
  enqueuedAt: new Date(row.enqueuedAt),
  dedupKey: row.dedupKey,
  lastError: row.lastError,
  leaseExpiries: row.leaseExpiries
})

/** The row a fenced write may touch: same id, same token, still live. */
export const held = (state: MemoryState, id: MessageId, token: string): Row | undefined => {
  const row = state.rows.get(BigInt(id))
  return row !== undefined && row.state === "ready" && row.leaseToken === token ? row : undefined
}

/** The live (not dead) rows of a queue. */
export const live = (state: MemoryState, queue: string) =>
  [...state.rows.values()].filter((r) => r.queue === queue && r.state === "ready")

/** Where a row stands at `now`, as `stats` counts it. */
export const stateOf = (row: Row, now: number): MessageState =>
  row.state === "dead" ? "dead" : row.visibleAt <= now ? "ready" : row.leaseToken === null ? "delayed" : "in-flight"

/** Wake the idle consumers of `queue`, as a send of a message ready now does. */
export const wake = (state: MemoryState, queue: string): void => {
  for (const latch of state.listeners.get(queue) ?? []) latch.openUnsafe()
}

/** The key of a uniqueness reservation. */
export const uniqueKey = (queue: string, key: string) => `${queue}\u0000${key}`
