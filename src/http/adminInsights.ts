/**
 * The dashboard's routes of the admin API (issue 31) over the store and its `Insights`:
 * fleet-wide figures, search, retry now, bulk actions with their counts, schedules. Over a
 * store without `Insights` (the memory store) the figures answer `available: false` (the page
 * asks them on every refresh and says so), and search, retry and bulk actions a 503 saying so. Failures are the store's (a refused input is `InvalidInput`, which `Admin`
 * answers as a 400).
 *
 * @since 0.5.0
 */
import { Clock, Effect, Option } from "effect"
import { type BulkAction, type InsightsShape, type MessageFilter, parsePayloadMatch, runBulk } from "../Insights.ts"
import * as DepthHistory from "../maintenance/depthHistory.ts"
import type { MessageId, MessageState } from "../Message.ts"
import { type InvalidInput, QueryFailed, type StoreError } from "../QueueError.ts"
import type { QueueStoreShape, ScheduleInfo } from "../QueueStore.ts"
import { NotFound } from "./adminSchema.ts"

/** A schedule no worker has declared for this long is not seen (as the CLI's NOT SEEN: workers declare every minute). */
export const scheduleStaleAfterMs = 5 * 60_000

/** The criteria of a request, as the routes take them (text, checked by their schemas). */
export interface FilterQuery {
  readonly queue?: string | undefined
  readonly task?: string | undefined
  readonly state?: MessageState | undefined
  readonly key?: string | undefined
  readonly from?: string | undefined
  readonly to?: string | undefined
  readonly payload?: string | undefined
}

/** A request's criteria as a filter: the payload criterion parsed and checked. */
export const filterOf = (query: FilterQuery): Effect.Effect<MessageFilter, InvalidInput> =>
  Effect.map(
    query.payload === undefined || query.payload.trim() === "" ? Effect.succeed(undefined) : parsePayloadMatch(query.payload),
    (payload) => ({
      queue: query.queue,
      task: query.task,
      state: query.state,
      key: query.key,
      fromId: query.from as MessageId | undefined,
      toId: query.to as MessageId | undefined,
      payload
    })
  )

const minutesOf = (text: string | undefined, fallback: number) => text === undefined ? fallback : Number(text)

/** A stored schedule as the API shows it, `seen` as of `now`. */
const scheduleRow = (row: ScheduleInfo, now: number) => ({
  key: row.key, cron: row.cron, tz: row.tz, queue: row.queue, task: row.task, payload: row.payload,
  lastSlot: row.lastSlot, nextSlot: row.nextSlot, firedAt: row.firedAt, lastSeenAt: row.lastSeenAt, lastSeenBy: row.lastSeenBy,
  seen: now - row.lastSeenAt.getTime() <= scheduleStaleAfterMs
})

/** The handlers of the dashboard's routes over `store` and, where the store has them, `insights`. */
export const insightRoutes = (store: QueueStoreShape, insights: Option.Option<InsightsShape>) => {
  const withInsights = <A, E>(f: (i: InsightsShape) => Effect.Effect<A, E>): Effect.Effect<A, E | StoreError> =>
    Option.isSome(insights)
      ? f(insights.value)
      : Effect.fail(new QueryFailed({ operation: "insights", message: "the dashboard's figures, search and bulk actions need the PostgreSQL store" }))
  return {
    /** `GET /api/stats/throughput`. */
    throughput: (query: { readonly minutes?: string | undefined; readonly queue?: string | undefined }) => {
      const minutes = minutesOf(query.minutes, 60)
      return Option.isNone(insights)
        ? Effect.succeed({ now: new Date(), minutes, available: false, rows: [] })
        : Effect.map(insights.value.throughput({ minutes, queue: query.queue }), (r) => ({ ...r, minutes, available: true }))
    },
    /** `GET /api/stats/depth`. */
    depthHistory: (query: { readonly minutes?: string | undefined; readonly queue?: string | undefined }) => {
      const minutes = minutesOf(query.minutes, 180)
      const everyMs = DepthHistory.everyMs
      return Option.isNone(insights)
        ? Effect.succeed({ now: new Date(), minutes, everyMs, available: false, samples: [] })
        : Effect.map(insights.value.depthHistory({ minutes, queue: query.queue }), (r) => ({ ...r, minutes, everyMs, available: true }))
    },
    /** `GET /api/messages`: a page, newest first; `next` is the `before` of the next one. */
    search: (query: FilterQuery & { readonly before?: string | undefined; readonly limit?: string | undefined }) => {
      const limit = query.limit === undefined ? 50 : Number(query.limit)
      return withInsights((i) =>
        Effect.gen(function*() {
          const messages = yield* i.search(yield* filterOf(query), { before: query.before as MessageId | undefined, limit })
          return { messages, next: messages.length === limit ? messages[messages.length - 1]!.id : null }
        }))
    },
    /** `POST /api/messages/retry`. */
    retry: (ids: ReadonlyArray<string>) =>
      withInsights((i) => Effect.map(i.retryNow(ids as ReadonlyArray<MessageId>), (moved) => ({ retried: moved.map(String) }))),
    /** `GET /api/bulk/:action/count`. */
    bulkCount: (action: BulkAction, query: FilterQuery) =>
      withInsights((i) => Effect.map(Effect.flatMap(filterOf(query), (filter) => i.count(action, filter)), (count) => ({ action, count }))),
    /** `POST /api/bulk/:action`: logged with the count the operator confirmed and what it did. */
    bulk: (action: BulkAction, body: FilterQuery & { readonly confirmed?: number | undefined }) =>
      withInsights((i) =>
        Effect.gen(function*() {
          const outcome = yield* runBulk(store, i, action, yield* filterOf(body))
          yield* Effect.logInfo(
            `admin: bulk ${action}: ${outcome.touched} message(s) in ${outcome.batches} batch(es)` +
              (body.confirmed === undefined ? "" : ` (${body.confirmed} confirmed)`) + (outcome.more ? ", more left" : "")
          )
          return outcome
        })),
    /** `GET /api/schedules`. */
    schedules: Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      return (yield* store.schedules).map((row) => scheduleRow(row, now))
    }),
    /** `POST /api/schedules/:key/trigger`. */
    trigger: (key: string) =>
      Effect.flatMap(store.triggerSchedule(key), Option.match({
        onNone: () => Effect.fail(new NotFound({ message: `no schedule with key ${key}` })),
        onSome: (sent) => Effect.succeed({ key, id: String(sent.id), deduplicated: sent.deduplicated })
      }))
  }
}
