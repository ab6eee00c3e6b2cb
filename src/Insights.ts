/**
 * What the dashboard asks the database beyond the store's own operations: fleet-wide figures
 * (finished attempts per minute from the attempt history, queue depths sampled into the
 * database), search over messages by queue, task, state, key, id range and a payload field,
 * and the selection bulk actions work through in bounded batches. The PostgreSQL store
 * provides it (`PgQueueStore.layer`, statements in `pg/insights.ts` and `pg/search.ts`); a
 * store without it (memory) has no dashboard figures, and the admin routes answer 503.
 *
 * @since 0.5.0
 */
import { Context, Effect } from "effect"
import type { MessageId, MessageInfo, MessageState, QueueStats } from "./Message.ts"
import { InvalidInput, type StoreError } from "./QueueError.ts"
import type { QueueStoreShape } from "./QueueStore.ts"

/** Finished attempts of one task of one queue in one minute, by how they ended. */
export interface ThroughputRow {
  /** The minute (its start). */
  readonly minute: Date
  readonly queue: string
  readonly task: string
  /** Acked: the handler succeeded. */
  readonly completed: number
  readonly retried: number
  readonly deadLettered: number
  /** The lease was lost or expired (the holder hung, died, or lost its connection). */
  readonly leaseLost: number
  readonly cancelled: number
}

/** One depth sample of one queue, as the sampler stored it. */
export interface DepthSample extends QueueStats {
  readonly at: Date
}

/** A payload field to match: the path into the payload and the value it must have. */
export interface PayloadMatch {
  /** Object keys or array indexes, outermost first: `customer.id` is `["customer", "id"]`. */
  readonly path: ReadonlyArray<string>
  /** The value as JSON (`42`, `"a"`, `true`): matched as JSON, or as text against the field's text. */
  readonly json: string
  /** The value as text, matched against the field as text (`#>>`). */
  readonly text: string
}

/** Which messages a search, a count or a bulk action covers; every field narrows it. */
export interface MessageFilter {
  readonly queue?: string | undefined
  readonly task?: string | undefined
  readonly state?: MessageState | undefined
  /** The flow key given at send. */
  readonly key?: string | undefined
  /** Ids from this one (inclusive). */
  readonly fromId?: MessageId | undefined
  /** Ids up to this one (inclusive). */
  readonly toId?: MessageId | undefined
  readonly payload?: PayloadMatch | undefined
}

/**
 * What a bulk action does and to which messages (besides the filter's): `redrive` and `purge`
 * the dead letters, `cancel` every message not already being cancelled, `retry` the delayed
 * ones (made ready now).
 */
export type BulkAction = "redrive" | "purge" | "cancel" | "retry"

/** The bulk actions, in the order the page offers them. */
export const bulkActions: ReadonlyArray<BulkAction> = ["redrive", "purge", "cancel", "retry"]

/** The operations the dashboard reads and works through. */
export interface InsightsShape {
  /** Finished attempts per minute over the last `minutes` (the current one included), optionally of one queue. */
  readonly throughput: (options: { readonly minutes: number; readonly queue?: string | undefined }) => Effect.Effect<
    { readonly now: Date; readonly rows: ReadonlyArray<ThroughputRow> },
    StoreError
  >
  /** The depth samples of the last `minutes`, oldest first, optionally of one queue. */
  readonly depthHistory: (options: { readonly minutes: number; readonly queue?: string | undefined }) => Effect.Effect<
    { readonly now: Date; readonly samples: ReadonlyArray<DepthSample> },
    StoreError
  >
  /**
   * Store `depths` as one sample taken now, unless a sample was stored less than `everyMs` ago
   * or another process is storing one (an advisory lock); samples older than `retentionMs` go.
   * True when this call stored the sample.
   */
  readonly recordDepths: (depths: ReadonlyArray<QueueStats>, everyMs: number, retentionMs: number) => Effect.Effect<boolean, StoreError>
  /** How long ago the latest depth sample was taken (undefined: none yet), by the database's clock. */
  readonly depthSampleAge: Effect.Effect<number | undefined, StoreError>
  /** A keyset page of the messages matching `filter`, newest first: ids below `before`, at most `limit`. */
  readonly search: (
    filter: MessageFilter,
    page: { readonly before?: MessageId | undefined; readonly limit: number }
  ) => Effect.Effect<ReadonlyArray<MessageInfo>, StoreError>
  /** How many messages `action` would touch now: those matching `filter` in the state the action takes. */
  readonly count: (action: BulkAction, filter: MessageFilter) => Effect.Effect<number, StoreError>
  /** Up to `limit` ids `action` would touch now (lowest first): one batch of a bulk action. */
  readonly pick: (action: BulkAction, filter: MessageFilter, limit: number) => Effect.Effect<ReadonlyArray<MessageId>, StoreError>
  /** Make delayed messages ready now (waking idle consumers); the ids it moved. Others are left as they are. */
  readonly retryNow: (ids: ReadonlyArray<MessageId>) => Effect.Effect<ReadonlyArray<MessageId>, StoreError>
}

/** The dashboard's database reads, where the store provides them (`PgQueueStore.layer` does). */
export class Insights extends Context.Service<Insights, InsightsShape>()("leasehold/Insights") {}

// ---------------------------------------------------------------------------
// Payload fields

const segmentPattern = /^[A-Za-z0-9_-]{1,64}$/
/** At most this many segments in a payload path. */
export const maxPathSegments = 8
/** The rule a payload match is checked by, as a 400 states it. */
export const payloadRule =
  `<path> = <value>: a path of 1 to ${maxPathSegments} segments of A-Z a-z 0-9 _ - joined by dots (customer.id), ` +
  "then = and a JSON value (42, \"abc\", true, null) or bare text"

const refuse = (message: string) => new InvalidInput({ field: "payload", rule: payloadRule, message: `payload: ${message} (${payloadRule})` })

/**
 * `customer.id = 42` as a {@link PayloadMatch}: the path checked segment by segment (it goes
 * to the database as a parameter, never as SQL text), the value read as JSON when it is JSON,
 * else taken as text.
 */
export const parsePayloadMatch = (input: string): Effect.Effect<PayloadMatch, InvalidInput> => {
  const at = input.indexOf("=")
  if (at === -1) return Effect.fail(refuse("no = in it"))
  const path = input.slice(0, at).trim().split(".")
  if (path.length > maxPathSegments) return Effect.fail(refuse(`${path.length} segments`))
  const bad = path.find((segment) => !segmentPattern.test(segment))
  if (bad !== undefined) return Effect.fail(refuse(`segment ${JSON.stringify(bad)}`))
  const raw = input.slice(at + 1).trim()
  if (raw.length > 1000) return Effect.fail(refuse("a value over 1000 characters"))
  let value: unknown
  try {
    value = JSON.parse(raw)
  } catch {
    value = raw
  }
  return Effect.succeed({ path, json: JSON.stringify(value), text: typeof value === "string" ? value : JSON.stringify(value) })
}

// ---------------------------------------------------------------------------
// Bulk actions

/** Ids one batch of a bulk action takes (one store operation each). */
export const bulkBatch = 500
/** Batches one request runs at most: a larger selection answers `more: true`, and the same request goes on. */
export const maxBulkBatches = 200

/** What a bulk action did. */
export interface BulkOutcome {
  readonly action: BulkAction
  /** Messages the action changed. */
  readonly touched: number
  readonly batches: number
  /** Matching messages were left when the batch cap was reached: run it again. */
  readonly more: boolean
}

/** Apply `action` to `ids` through the store's own operation (history rows, NOTIFY and all); the ids changed. */
const applyBatch = (store: QueueStoreShape, insights: InsightsShape, action: BulkAction, ids: ReadonlyArray<MessageId>) => {
  switch (action) {
    case "redrive":
      return store.redrive({ ids })
    case "purge":
      return store.purge({ ids })
    case "cancel":
      return Effect.map(store.cancel(ids), (results) => results.map((r) => r.id))
    case "retry":
      return insights.retryNow(ids)
  }
}

/**
 * Run `action` on every message matching `filter`, in batches of {@link bulkBatch} ids picked
 * afresh each time (a message the action changed no longer matches: a batch run twice changes
 * nothing twice, and a request cut short is finished by running it again). Stops when none
 * is left, a batch comes back short or changes nothing (the rest changed under it), or after
 * {@link maxBulkBatches} (then `more`). `batches` counts the batches that ran.
 */
export const runBulk = (
  store: QueueStoreShape,
  insights: InsightsShape,
  action: BulkAction,
  filter: MessageFilter
): Effect.Effect<BulkOutcome, InvalidInput | StoreError> =>
  Effect.gen(function*() {
    let touched = 0
    let batches = 0
    while (batches < maxBulkBatches) {
      const ids = yield* insights.pick(action, filter, bulkBatch)
      if (ids.length === 0) break
      batches++
      const changed = yield* applyBatch(store, insights, action, ids)
      touched += changed.length
      if (ids.length < bulkBatch || changed.length === 0) break
    }
    // At the cap, more may match: the same request goes on from there.
    return { action, touched, batches, more: batches === maxBulkBatches }
  })
