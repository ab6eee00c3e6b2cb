/**
 * Reading messages where they stand: one by id (`get`), or a keyset page of a queue
 * (`messages`), each judged at one instant exactly as the counts judge it.
 *
 * @since 0.1.0
 */
import { Effect, Option } from "effect"
import * as Statement from "effect/sql/Statement"
import type { MessageState } from "../Message.ts"
import type { QueueStoreShape } from "../QueueStore.ts"
import type { PgContext } from "./context.ts"
import { storeTime } from "./fragments.ts"
import { type InfoRow, toInfo } from "./rows.ts"

/**
 * Where a row stands, exactly as `depths` counts it (an expired lease is ready). Kept as
 * text in TypeScript, not SQL input: it holds no value, only the alias `m` and `c.now`.
 */
export const viewState = Statement.fragment([Statement.literal(`CASE WHEN m.state = 'dead' THEN 'dead'
  WHEN m.visible_at <= c.now THEN 'ready'
  WHEN m.lease_token IS NULL THEN 'delayed'
  ELSE 'in-flight' END`)])

/** A fragment of fixed SQL text (no values). */
export const literal = (text: string) => Statement.fragment([Statement.literal(text)])

/** What `viewState` says of a row, as conditions on its columns (the sargable form, per state); `search` shares them. */
export const stateCondition: Record<MessageState | "all", Statement.Fragment> = {
  all: literal(""),
  ready: literal("AND m.state = 'ready' AND m.visible_at <= c.now"),
  delayed: literal("AND m.state = 'ready' AND m.visible_at > c.now AND m.lease_token IS NULL"),
  "in-flight": literal("AND m.state = 'ready' AND m.visible_at > c.now AND m.lease_token IS NOT NULL"),
  dead: literal("AND m.state = 'dead'")
}

/**
 * One row by primary key; `c.now` is the one instant its state is judged at.
 * Options were checked by `fromOperations`: `id` is a valid bigint.
 */
export const get = ({ currentTime, op, sql, table }: PgContext): QueueStoreShape["get"] => (id) =>
  Effect.gen(function*() {
    const now = yield* currentTime
    const rows = yield* sql<InfoRow>`
      SELECT m.*, ${viewState} AS view_state
      FROM ${table} AS m CROSS JOIN (SELECT ${storeTime(now)} AS now) AS c
      WHERE m.id = ${id}::bigint`
    return rows.length === 0 ? Option.none() : Option.some(toInfo(rows[0]!))
  }).pipe((e) => op("get", { id }, e))

/**
 * A keyset page in id order: `id > after` and LIMIT walk the primary key, so a page costs
 * the same wherever it starts. The state filter is the CASE itself (one statement for
 * every filter; a NULL state keeps all): a helper for tests and operators, not a hot path.
 */
export const messages = ({ currentTime, op, sql, table }: PgContext): QueueStoreShape["messages"] => (queue, options = {}) =>
  Effect.gen(function*() {
    const now = yield* currentTime
    // The state's own conditions, written out (one statement per state) so that the planner can
    // read a few in-flight rows through the leased-rows index instead of every row of the queue.
    const rows = yield* sql<InfoRow>`
      SELECT m.*, ${viewState} AS view_state
      FROM ${table} AS m CROSS JOIN (SELECT ${storeTime(now)} AS now) AS c
      WHERE m.queue = ${queue} AND m.id > ${options.after ?? "0"}::bigint ${stateCondition[options.state ?? "all"]}
      ORDER BY m.id
      LIMIT ${options.limit ?? 100}`
    return rows.map(toInfo)
  }).pipe((e) => op("messages", { queue, state: options.state ?? "all" }, e))
