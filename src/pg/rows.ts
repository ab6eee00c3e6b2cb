/**
 * Rows as the driver returns them, and their mappers to the store's values.
 *
 * @since 0.1.0
 */
import type { Attempt, Claim, DeadLetter, MessageId, MessageInfo, MessageState } from "../Message.ts"
import type { ScheduleInfo } from "../QueueStore.ts"

/** Rows of the messages table, as the driver returns them. */
export interface MessageRow {
  readonly id: bigint | string
  readonly queue: string
  readonly task: string
  readonly payload: unknown
  readonly headers: Record<string, string> | null
  readonly priority: number
  readonly attempts: number
  readonly max_attempts: number
  readonly enqueued_at: Date
  readonly visible_at: Date
  readonly lease_token: string | null
  readonly leased_by: string | null
  readonly leased_at: Date | null
  readonly dedup_key: string | null
  readonly last_error: string | null
  readonly dead_reason: string | null
  readonly dead_at: Date | null
  readonly lease_expiries: number
  /** The flow key (absent from rows of statements that do not read it). */
  readonly flow_key?: string | null
}

/** The columns every message view shares (a claim's row carries no queue: the caller names it). */
export type MessageColumns = Pick<
  MessageRow,
  "id" | "task" | "payload" | "headers" | "priority" | "attempts" | "max_attempts" | "enqueued_at" | "dedup_key" | "last_error" | "lease_expiries" | "flow_key"
>

/** The message of a row; `queue` for a row that carries none (a claim's). */
export const toMessage = (row: MessageColumns & { readonly queue?: string }, queue: string = row.queue ?? "") => ({
  id: String(row.id) as MessageId,
  queue,
  task: row.task,
  payload: row.payload,
  headers: row.headers ?? {},
  priority: row.priority,
  attempts: row.attempts,
  maxAttempts: row.max_attempts,
  enqueuedAt: row.enqueued_at,
  dedupKey: row.dedup_key,
  lastError: row.last_error,
  leaseExpiries: row.lease_expiries,
  key: row.flow_key ?? null
})

/** A row with where it stands, as `get` and `messages` read it. */
export interface InfoRow extends MessageRow {
  readonly view_state: MessageState
  readonly cancel_requested_at: Date | null
  readonly progress: unknown
  readonly progress_at: Date | null
}

/** A message and where it stands (what is only true of a state is shown in that state only). */
export const toInfo = (row: InfoRow): MessageInfo => ({
  ...toMessage(row),
  state: row.view_state,
  visibleAt: row.view_state === "dead" ? null : row.visible_at,
  leasedBy: row.view_state === "in-flight" ? row.leased_by : null,
  leasedAt: row.view_state === "in-flight" ? row.leased_at : null,
  cancelRequestedAt: row.view_state === "in-flight" ? row.cancel_requested_at : null,
  deadReason: row.dead_reason,
  deadAt: row.dead_at,
  progress: row.progress ?? null,
  progressAt: row.progress_at ?? null
})

/** What claim returns per row: the columns of a claim, nothing else. */
export interface ClaimRow extends MessageColumns {
  readonly visible_at: Date
  readonly lease_token: Claim["leaseToken"]
  readonly was_visible_at: Date
  /** How many cancelled rows the claim deleted (the same on every row); `id` is NULL on the row of a claim of none. */
  readonly dropped: number
  /** Whether the queue has flow limits (the plain claim then claimed nothing and the limited one runs). */
  readonly limited?: boolean
}

/**
 * The claim of a claim statement's row (`queue`: the queue claimed from, `consumer`: the
 * claimer). One object literal, not {@link toMessage}'s spread into another: this runs once per
 * claimed message, on the hot path of a busy consumer (issue 29: allocation per message).
 */
export const toClaim = (row: ClaimRow, queue: string, consumer: string): Claim => ({
  id: String(row.id) as MessageId,
  queue,
  task: row.task,
  payload: row.payload,
  headers: row.headers ?? {},
  priority: row.priority,
  attempts: row.attempts,
  maxAttempts: row.max_attempts,
  enqueuedAt: row.enqueued_at,
  dedupKey: row.dedup_key,
  lastError: row.last_error,
  leaseExpiries: row.lease_expiries,
  key: row.flow_key ?? null,
  leaseToken: row.lease_token,
  leaseExpiresAt: row.visible_at,
  consumer,
  readyAt: row.was_visible_at
})

/** A dead row as a dead letter. */
export const toDeadLetter = (row: MessageRow): DeadLetter => ({
  ...toMessage(row),
  reason: row.dead_reason ?? "",
  deadAt: row.dead_at ?? row.visible_at
})

/** A row of the schedules table. */
export interface ScheduleRow {
  readonly key: string
  readonly cron: string
  readonly tz: string
  readonly queue: string
  readonly task: string
  readonly payload: unknown
  readonly last_slot: Date
  readonly next_slot: Date | null
  readonly fired_at: Date | null
  readonly last_seen_at: Date
  readonly last_seen_by: string
}

/** A schedule row as the store answers it. */
export const toSchedule = (row: ScheduleRow): ScheduleInfo => ({
  key: row.key,
  cron: row.cron,
  tz: row.tz,
  queue: row.queue,
  task: row.task,
  payload: row.payload,
  nextSlot: row.next_slot,
  lastSlot: row.last_slot,
  firedAt: row.fired_at,
  lastSeenAt: row.last_seen_at,
  lastSeenBy: row.last_seen_by
})

/** Schedules in key order. */
export const byKey = (a: { readonly key: string }, b: { readonly key: string }) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)

/** A row of the attempts table. */
export interface AttemptRow {
  readonly message_id: bigint
  readonly queue: string
  readonly task: string
  readonly attempt: number
  readonly consumer: string
  readonly started_at: Date
  readonly ended_at: Date
  readonly outcome: Attempt["outcome"]
  readonly error: string | null
  readonly result: unknown
}

/** An attempt read back: `result` only when the row has one (NULL reads as none). */
const withResult = (attempt: Attempt, result: unknown): Attempt =>
  result === null || result === undefined ? attempt : { ...attempt, result }

/** A history row as an attempt. */
export const toAttempt = (r: AttemptRow): Attempt =>
  withResult({
    messageId: String(r.message_id) as MessageId,
    queue: r.queue,
    task: r.task,
    attempt: r.attempt,
    consumer: r.consumer,
    startedAt: r.started_at,
    endedAt: r.ended_at,
    outcome: r.outcome,
    error: r.error
  }, r.result)

/** The ids of rows, as message ids. */
export const ids = (rows: ReadonlyArray<{ readonly id: bigint | string }>): ReadonlyArray<MessageId> =>
  rows.map((row) => String(row.id) as MessageId)
