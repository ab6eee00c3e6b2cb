/**
 * Cancelling: by ids or by queue (and task), in transactions of two statements that lock,
 * then delete the waiting messages and flag the running ones for their consumers.
 *
 * @since 0.1.0
 */
import * as PgTypes from "@effect/sql-pg/PgTypes"
import { Effect } from "effect"
import type { SqlError, Statement } from "effect/sql"
import type { CancelResult, MessageId } from "../Message.ts"
import type { QueueStoreShape } from "../QueueStore.ts"
import * as CancelInbox from "../internal/cancelInbox.ts"
import type { PgContext } from "./context.ts"
import { array, attemptNumber, historyInsert, storeTime, textArray } from "./fragments.ts"
import { announceEnded } from "./lifecycle.ts"

/**
 * Messages one transaction of `cancelWhere` cancels: the row locks a renewal of one of them may
 * wait behind are those of one batch, not of the whole queue.
 */
const CANCEL_BATCH = 1_000

/**
 * Cancel the messages `lock` selects, in one transaction of two statements. The first
 * locks them (waiting for a claim or finishing write in flight, so what it reads is
 * settled) and says which are running; the second deletes the others, recording a
 * `cancelled` history row for each, and flags the running ones for their consumer. The
 * two writes touch only the ids the first statement locked.
 */
const cancelLocked = (
  ctx: PgContext,
  lock: (now: Date | null) => Effect.Effect<ReadonlyArray<{ id: bigint; running: boolean }>, SqlError.SqlError>
) =>
  // Without the NOTIFY when its queue is full (see `announcing`): the cancel still lands.
  ctx.announcing((announce) => ctx.sql.withTransaction(Effect.gen(function*() {
    const { attemptsTable, channel, currentTime, sql, table } = ctx
    const now = yield* currentTime
    const locked = yield* lock(now)
    if (locked.length === 0) return []
    const rows = yield* sql<{ id: bigint; result: CancelResult["result"] }>`
      WITH items AS (
        SELECT * FROM unnest(${textArray(locked.map((r) => String(r.id)))}::bigint[], ${array(locked.map((r) => r.running), PgTypes.OID.bool)})
          AS i(id, running)
      ), removed AS (
        DELETE FROM ${table} AS m USING items AS i WHERE m.id = i.id AND NOT i.running
        RETURNING m.id, m.queue, m.task, ${attemptNumber("m")} AS attempt
      ), flagged AS (
        UPDATE ${table} AS m SET cancel_requested_at = coalesce(m.cancel_requested_at, ${storeTime(now)})
        FROM items AS i WHERE m.id = i.id AND i.running
        RETURNING m.id, m.queue
      ), announced AS (
        -- Consumers holding them renew at once on hearing it (delivered at commit; see cancels):
        -- 'cancel <queue> <id>,<id>...', or 'cancel <queue>' when the ids would not fit a payload.
        SELECT count(pg_notify(${channel}, 'cancel ' || queue ||
                 CASE WHEN length(ids) <= ${CancelInbox.MAX_LISTED_BYTES}::int THEN ' ' || ids ELSE '' END)) AS n
        FROM (SELECT queue, string_agg(id::text, ',' ORDER BY id) AS ids FROM flagged GROUP BY queue) AS q
        WHERE ${announce}::boolean
      ), recorded AS (
        ${historyInsert(attemptsTable)}
        SELECT id, queue, task, attempt, '', ${storeTime(now)}, ${storeTime(now)},
               'cancelled', NULL
        FROM removed
      ), ended AS (
        -- The removed messages' runs ended, cancelled (a flagged one ends when its holder finishes it).
        SELECT id, queue, task, 'cancelled' AS outcome FROM removed
      ), ended_announced AS (
        -- Callers awaiting the removed messages, and event streams, hear they were cancelled
        -- (delivered at commit; read below so that it runs).
        ${announceEnded(ctx, announce && ctx.announceEnds, now)}
      )
      SELECT id, 'cancelled' AS result FROM removed CROSS JOIN ended_announced
      UNION ALL
      SELECT id, 'cancelling' AS result FROM flagged CROSS JOIN announced
      ORDER BY id`
    return rows.map((row): CancelResult => ({ id: String(row.id) as MessageId, result: row.result }))
  })))

/**
 * Lock the rows `where` selects, in id order (two bulk cancels cannot deadlock), and say
 * which are running: leased, the lease not expired (as `stats` counts in flight). A message
 * whose lease expired has no holder that can still finish it: it is deleted at once (should
 * its holder still be at it, its renewal finds it gone).
 */
const lockForCancel = ({ sql, table }: PgContext, where: Statement.Fragment) => (now: Date | null) =>
  sql<{ id: bigint; running: boolean }>`
    SELECT id, (state = 'ready' AND lease_token IS NOT NULL AND visible_at > ${storeTime(now)}) AS running
    FROM ${table} WHERE ${where}
    ORDER BY id
    FOR UPDATE`

/**
 * Ids checked by `fromOperations`: valid and distinct.
 */
export const cancel = (ctx: PgContext): QueueStoreShape["cancel"] => (cancelIds) =>
  cancelLocked(ctx, lockForCancel(ctx, ctx.sql`id = ANY(${textArray(cancelIds)}::bigint[])`)).pipe(
    (e) => ctx.op("cancel", { count: cancelIds.length }, e)
  )

/**
 * Every message of the queue (of one task, if given), in transactions of CANCEL_BATCH messages
 * each: one transaction over a whole large queue held every row's lock until its commit, and
 * every renewal or finishing write of those rows waited for all of it. The ids are read first
 * (no lock, the messages there now: later sends are not cancelled), then locked and cancelled
 * batch by batch in id order, each batch re-checked against the filter under its lock.
 */
export const cancelWhere = (ctx: PgContext): QueueStoreShape["cancelWhere"] => (filter) =>
  Effect.gen(function*() {
    const { sql, table } = ctx
    const task = filter.task ?? null
    const where = sql`queue = ${filter.queue} AND (${task}::text IS NULL OR task = ${task})`
    const found = yield* sql<{ id: bigint }>`SELECT id FROM ${table} WHERE ${where} ORDER BY id`
    const results: Array<CancelResult> = []
    for (let k = 0; k < found.length; k += CANCEL_BATCH) {
      const batch = found.slice(k, k + CANCEL_BATCH).map((row) => String(row.id))
      results.push(...(yield* cancelLocked(ctx, lockForCancel(ctx, sql`id = ANY(${textArray(batch)}::bigint[]) AND ${where}`))))
    }
    return results
  }).pipe((e) => ctx.op("cancelWhere", { queue: filter.queue, task: filter.task ?? "*" }, e))
