/**
 * Searching messages (`Insights.search`) and the selections of bulk actions (`count`, `pick`),
 * and making delayed messages ready now (`retryNow`). One statement text for every filter:
 * each criterion is a parameter that is NULL (or empty) when not given, so no input ever
 * becomes SQL text; the payload path is a `text[]` parameter (checked segment by segment by
 * `Insights.parsePayloadMatch`) and its value a `jsonb` one.
 *
 * @since 0.5.0
 */
import { Effect } from "effect"
import type { Statement } from "effect/sql"
import type { BulkAction, InsightsShape, MessageFilter } from "../Insights.ts"
import type { PgContext } from "./context.ts"
import { storeTime, textArray } from "./fragments.ts"
import { literal, stateCondition, viewState } from "./messages.ts"
import { ids, type InfoRow, toInfo } from "./rows.ts"

/** The largest message id (PostgreSQL bigint). */
const maxId = "9223372036854775807"

/** The messages each bulk action takes, besides the filter's: fixed text, chosen by the action's name. */
const actionCondition: Record<BulkAction | "any", Statement.Fragment> = {
  any: literal(""),
  redrive: literal("AND m.state = 'dead'"),
  purge: literal("AND m.state = 'dead'"),
  // A running message already asked to stop is being cancelled: picking it again would change nothing.
  cancel: literal("AND NOT (m.state = 'ready' AND m.lease_token IS NOT NULL AND m.visible_at > c.now AND m.cancel_requested_at IS NOT NULL)"),
  retry: literal("AND m.state = 'ready' AND m.visible_at > c.now AND m.lease_token IS NULL")
}

/** A filter's criteria as parameters (NULL or empty: not given), with the fixed conditions of its state and action. */
interface Conditions {
  readonly state: Statement.Fragment
  readonly action: Statement.Fragment
  readonly queue: string | null
  readonly task: string | null
  readonly key: string | null
  readonly from: string
  readonly to: string
  readonly path: unknown
  readonly json: string | null
  readonly text: string | null
}

const conditionsOf = (filter: MessageFilter, action: BulkAction | "any"): Conditions => ({
  state: stateCondition[filter.state ?? "all"],
  action: actionCondition[action],
  queue: filter.queue ?? null,
  task: filter.task ?? null,
  key: filter.key ?? null,
  from: filter.fromId ?? "1",
  to: filter.toId ?? maxId,
  path: textArray(filter.payload?.path ?? []),
  json: filter.payload?.json ?? null,
  text: filter.payload?.text ?? null
})

/**
 * The rows a filter and an action select, judged at `c.now`; the caller adds order, keyset
 * and limit. The payload field matches when it equals the value as JSON (`42` matches the
 * number 42) or its text equals the value's text (`42` matches the string "42" too); an
 * empty path is no payload criterion.
 */
const selected = <A extends object>(ctx: PgContext, p: Conditions, now: Date | null, columns: Statement.Fragment, tail: Statement.Fragment) =>
  ctx.sql<A>`
    SELECT ${columns}
    FROM ${ctx.table} AS m CROSS JOIN (SELECT ${storeTime(now)} AS now) AS c
    WHERE (${p.queue}::text IS NULL OR m.queue = ${p.queue})
      AND (${p.task}::text IS NULL OR m.task = ${p.task})
      AND (${p.key}::text IS NULL OR m.flow_key = ${p.key})
      AND m.id BETWEEN ${p.from}::bigint AND ${p.to}::bigint
      AND (cardinality(${p.path}::text[]) = 0
           OR m.payload #> ${p.path}::text[] = ${p.json}::jsonb
           OR m.payload #>> ${p.path}::text[] = ${p.text}::text)
      ${p.state} ${p.action}
    ${tail}`

/**
 * `search`: newest first, a keyset page below `before` (the primary key walked backwards, so
 * a page costs the same wherever it starts when the filter is selective by queue or id). A
 * payload criterion reads the payloads of the rows the other criteria leave: an operator's
 * search, not a hot path.
 */
export const search = (ctx: PgContext): InsightsShape["search"] => (filter, page) =>
  Effect.gen(function*() {
    const now = yield* ctx.currentTime
    // The keyset bound is a condition of its own after the filter's.
    const rows = yield* selected<InfoRow>(ctx, conditionsOf(filter, "any"), now, ctx.sql`m.*, ${viewState} AS view_state`,
      ctx.sql`AND m.id < ${page.before ?? maxId}::bigint ORDER BY m.id DESC LIMIT ${page.limit}`)
    return rows.map(toInfo)
  }).pipe((e) => ctx.op("search", { queue: filter.queue ?? "*" }, e))

/** `count`: what a bulk action would touch now (the same conditions as `pick`). */
export const count = (ctx: PgContext): InsightsShape["count"] => (action, filter) =>
  Effect.gen(function*() {
    const now = yield* ctx.currentTime
    const rows = yield* selected<{ n: number }>(ctx, conditionsOf(filter, action), now, literal("count(*)::int AS n"), literal(""))
    return rows[0]?.n ?? 0
  }).pipe((e) => ctx.op("bulkCount", { action }, e))

/** `pick`: one batch of a bulk action, lowest ids first (the action's own statement then locks and re-checks each). */
export const pick = (ctx: PgContext): InsightsShape["pick"] => (action, filter, limit) =>
  Effect.gen(function*() {
    const now = yield* ctx.currentTime
    const rows = yield* selected<{ id: bigint }>(ctx, conditionsOf(filter, action), now, literal("m.id"),
      ctx.sql`ORDER BY m.id LIMIT ${limit}`)
    return ids(rows)
  }).pipe((e) => ctx.op("bulkPick", { action }, e))

/**
 * `retryNow`: delayed messages (waiting for a retry backoff or a delay, not leased) visible
 * now, announced like a send so idle consumers claim them at once (delivered at commit).
 * A message that is running, ready or dead is left as it is.
 */
export const retryNow = (ctx: PgContext): InsightsShape["retryNow"] => (messageIds) =>
  Effect.gen(function*() {
    const now = yield* ctx.currentTime
    const rows = yield* ctx.announcing((announce) =>
      ctx.sql<{ id: bigint }>`
        WITH moved AS (
          UPDATE ${ctx.table} AS m SET visible_at = c.now
          FROM (SELECT ${storeTime(now)} AS now) AS c
          WHERE m.id = ANY(${textArray(messageIds)}::bigint[])
            AND m.state = 'ready' AND m.lease_token IS NULL AND m.visible_at > c.now
          RETURNING m.id, m.queue
        ), announced AS (
          SELECT pg_notify(${ctx.channel}, q.queue) FROM (SELECT DISTINCT queue FROM moved) AS q WHERE ${announce}::boolean
        )
        SELECT id FROM moved, (SELECT count(*) FROM announced) AS a ORDER BY id`)
    return ids(rows)
  }).pipe((e) => ctx.op("retryNow", { ids: messageIds.length }, e))
