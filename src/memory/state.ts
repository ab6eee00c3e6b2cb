/**
 * The in-memory store's state, built once per store in `MemoryQueueStore.make`: the maps
 * mirroring the tables, the id counter, the limits and the wake-up subscribers; and the row
 * helpers every operation module shares.
 *
 * @since 0.1.0
 */
import { type Latch, PubSub } from "effect"
import type { CompletionEvent } from "../Lifecycle.ts"
import type { Attempt, MessageId, MessageState } from "../Message.ts"
import type { FlowLimits, LimitsSource } from "../FlowControl.ts"
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
  /** The flow key given at send, or null. */
  readonly key: string | null
  /** Its turn in a fair queue's rotation, given at send (0 when unkeyed). */
  readonly turn: number
  /** Claimed under flow limits: its lease is a slot (never renewed once expired). */
  flowLimited: boolean
  /** The last progress a handler reported (JSON data), and when; null for none. */
  progress: unknown
  progressAt: number | null
}

/** A queue's or task's stored limits (task `""` for the queue's own). */
export interface LimitsEntry {
  readonly limits: FlowLimits
  readonly source: LimitsSource
  readonly updatedAt: number
}

/** The flow bookkeeping: limits, the fair rotation, rate windows (the flow_* tables). */
export interface FlowState {
  /** Limits by queue, then task (`""`: the queue's own). */
  readonly limits: Map<string, Map<string, LimitsEntry>>
  /** A fair queue's served turn (the highest turn claimed), kept while the queue has limits. */
  readonly servedTurn: Map<string, number>
  /** Each key's next turn and weight, by `flowBucket(queue, "", key)`. */
  readonly keys: Map<string, { nextTurn: number; weight: number }>
  /** The start times inside each rate window, by `flowBucket(queue, task, key)`. */
  readonly rates: Map<string, Array<number>>
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
  /** Flow control: limits, turns, rate windows. */
  readonly flow: FlowState
  /** Messages locked by a commit step (as `FOR UPDATE` on PostgreSQL): no claim takes them meanwhile. */
  readonly committing: Set<bigint>
  /** Where completion events are published (dropping: a subscriber too far behind misses the newest). */
  readonly events: PubSub.PubSub<CompletionEvent>
  /** The next message id. */
  nextId: bigint
}

/** An empty state with these limits, publishing its completion events to `events`. */
export const makeState = (limits: Validate.SendLimits, events: PubSub.PubSub<CompletionEvent>): MemoryState => ({
  rows: new Map(),
  listeners: new Map(),
  cancelListeners: new Map(),
  history: [],
  pauses: new Map(),
  reserved: new Map(),
  scheduleRows: new Map(),
  limits,
  flow: { limits: new Map(), servedTurn: new Map(), keys: new Map(), rates: new Map() },
  committing: new Set(),
  events,
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
  leaseExpiries: row.leaseExpiries,
  key: row.key
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

/** The key of a flow bucket (a rate window, a key's turn): queue, task (`""` for all) and key (`""` for none). */
export const flowBucket = (queue: string, task: string, key: string) => `${queue}\u0000${task}\u0000${key}`

/** Whether `queue` has flow limits (its own or a task's): its claims run the limited claim. */
export const hasLimits = (state: MemoryState, queue: string): boolean => state.flow.limits.has(queue)

/** Announce that a run of message `id` (of `queue`, `task`) ended with `outcome` at `now`, to the subscribers of completion events. */
export const announce = (
  state: MemoryState,
  message: { readonly id: MessageId; readonly queue: string; readonly task: string },
  outcome: CompletionEvent["outcome"],
  now: number
): void => {
  PubSub.publishUnsafe(state.events, { messageId: message.id, queue: message.queue, task: message.task, outcome, at: new Date(now) })
}
