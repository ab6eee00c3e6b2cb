/**
 * Retention: pruning the attempt history (one pruner at a time, by an advisory lock) and
 * the uniqueness reservations whose window ended, in bounded batches.
 *
 * @since 0.1.0
 */
import { Duration, Effect } from "effect"
import type { QueueStoreShape } from "../QueueStore.ts"
import { hash31 } from "../internal/hash.ts"
import type { PgContext } from "./context.ts"
import { storeTime } from "./fragments.ts"

/** Attempt records (and unique keys) deleted per statement by the retention pruning. */
const PRUNE_BATCH = 5_000

/**
 * The advisory lock (single-key form, apart from the two-key presence locks) a
 * consumer holds, one transaction at a time, while it prunes the attempt history of `schema`.
 */
export const pruneLockKey = (schema: string): number => hash31(`leasehold.prune.${schema}`)

// One batch of retention: at most PRUNE_BATCH expired records per statement (a short
// transaction, however far behind the pruning is), found through the BRIN index on `ended_at`
// (migration 10: rows are appended in about the order they end) and deleted by their row
// address. No order among them: every one is past retention, and an ORDER BY would read and
// sort every expired row on each batch (a BRIN index gives no order).
// The transaction-level advisory lock makes one consumer the pruner of the moment: a consumer
// that finds it taken prunes nothing (`locked`), since another one is at it.
const pruneBatch = ({ attemptsTable, schema, sql }: PgContext, cutoffMs: number, now: Date | null) =>
  sql<{ locked: boolean; n: number }>`
    WITH lock AS (
      SELECT pg_try_advisory_xact_lock(${pruneLockKey(schema)}::bigint) AS got
    ), gone AS (
      DELETE FROM ${attemptsTable} WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM ${attemptsTable}
        WHERE (SELECT got FROM lock)
          AND ended_at < ${storeTime(now)} - ${cutoffMs}::bigint * interval '1 millisecond'
        LIMIT ${PRUNE_BATCH}
      ))
      RETURNING 1
    )
    SELECT NOT (SELECT got FROM lock) AS locked, (SELECT count(*)::int FROM gone) AS n`

/** `pruneAttempts`: batch after batch, until one is short or another consumer holds the lock. */
export const pruneAttempts = (ctx: PgContext): QueueStoreShape["pruneAttempts"] => (olderThan) =>
  Effect.gen(function*() {
    const now = yield* ctx.currentTime
    const cutoffMs = Math.round(Duration.toMillis(olderThan))
    let total = 0
    while (true) {
      const [row] = yield* pruneBatch(ctx, cutoffMs, now)
      if (row === undefined || row.locked) return total
      total += row.n
      if (row.n < PRUNE_BATCH) return total
    }
  }).pipe((e) => ctx.op("pruneAttempts", {}, e))

/**
 * `pruneUniqueKeys`. Expired reservations are only clutter (the next send with the key takes
 * them over): deleted oldest first through the `until` index, in bounded batches.
 */
export const pruneUniqueKeys = ({ currentTime, op, sql, uniqueTable }: PgContext): QueueStoreShape["pruneUniqueKeys"] =>
  Effect.gen(function*() {
    const now = yield* currentTime
    let total = 0
    while (true) {
      const [row] = yield* sql<{ n: number }>`
        WITH doomed AS (
          SELECT queue, key FROM ${uniqueTable} WHERE until <= ${storeTime(now)}
          ORDER BY until LIMIT ${PRUNE_BATCH}
        ), gone AS (
          DELETE FROM ${uniqueTable} AS u USING doomed AS d
          WHERE u.queue = d.queue AND u.key = d.key AND u.until <= ${storeTime(now)}
          RETURNING 1
        )
        SELECT count(*)::int AS n FROM gone`
      total += row?.n ?? 0
      if ((row?.n ?? 0) < PRUNE_BATCH) return total
    }
  }).pipe((e) => op("pruneUniqueKeys", {}, e))

/**
 * `pruneFlow`: rate windows with no start inside the longest period (a day: outside every
 * window), then keys of weight 1 with no live message, each in bounded batches by primary key.
 * A key row deleted as a send of its key commits only loses that key its place in the rotation
 * (its next message starts at the queue's turn).
 */
export const pruneFlow = ({ currentTime, keysTable, op, ratesTable, sql, table }: PgContext): QueueStoreShape["pruneFlow"] =>
  Effect.gen(function*() {
    const now = yield* currentTime
    let total = 0
    while (true) {
      const [row] = yield* sql<{ n: number }>`
        WITH doomed AS (
          SELECT queue, task, key FROM ${ratesTable} AS r
          WHERE NOT EXISTS (SELECT 1 FROM unnest(r.starts) AS s WHERE s > ${storeTime(now)} - interval '1 day')
          LIMIT ${PRUNE_BATCH}
        ), gone AS (
          DELETE FROM ${ratesTable} AS r USING doomed AS d
          WHERE r.queue = d.queue AND r.task = d.task AND r.key = d.key RETURNING 1
        )
        SELECT count(*)::int AS n FROM gone`
      total += row?.n ?? 0
      if ((row?.n ?? 0) < PRUNE_BATCH) break
    }
    while (true) {
      // The live messages of a key through messages_key_idx (one probe per key row).
      const [row] = yield* sql<{ n: number }>`
        WITH doomed AS (
          SELECT k.queue, k.key FROM ${keysTable} AS k
          WHERE k.weight = 1 AND NOT EXISTS (
            SELECT 1 FROM ${table} AS m WHERE m.queue = k.queue AND m.flow_key = k.key AND m.state = 'ready')
          LIMIT ${PRUNE_BATCH}
        ), gone AS (
          DELETE FROM ${keysTable} AS k USING doomed AS d WHERE k.queue = d.queue AND k.key = d.key RETURNING 1
        )
        SELECT count(*)::int AS n FROM gone`
      total += row?.n ?? 0
      if ((row?.n ?? 0) < PRUNE_BATCH) return total
    }
  }).pipe((e) => op("pruneFlow", {}, e))
