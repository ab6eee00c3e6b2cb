/**
 * Flow control on PostgreSQL: the limits (`flow_limits`), key weights (`flow_keys`) and what
 * holds a queue back now. The limited claim itself is `pg/flowClaim.ts`.
 *
 * @since 0.4.0
 */
import { Effect } from "effect"
import type { BlockedKey, FlowLimits, KeyAtLimit, StoredLimits, Throttle } from "../FlowControl.ts"
import type { QueueStoreShape } from "../QueueStore.ts"
import type { PgContext } from "./context.ts"
import { storeTime } from "./fragments.ts"

/** A row of `flow_limits`. */
interface StoredRow {
  readonly queue: string
  readonly task: string
  readonly concurrency: number | null
  readonly rate_count: number | null
  readonly rate_period_ms: number | null
  readonly key_concurrency: number | null
  readonly key_rate_count: number | null
  readonly key_rate_period_ms: number | null
  readonly fifo: boolean
  readonly fair: boolean
  readonly source: "code" | "operator"
  readonly updated_at: Date
}

/** The limits a row holds, absent ones left out. */
const toStored = (row: StoredRow): StoredLimits => {
  const limits: { -readonly [K in keyof FlowLimits]: FlowLimits[K] } = {}
  if (row.concurrency !== null) limits.concurrency = row.concurrency
  if (row.rate_count !== null && row.rate_period_ms !== null) limits.rate = { count: row.rate_count, periodMs: row.rate_period_ms }
  if (row.key_concurrency !== null) limits.keyConcurrency = row.key_concurrency
  if (row.key_rate_count !== null && row.key_rate_period_ms !== null) {
    limits.keyRate = { count: row.key_rate_count, periodMs: row.key_rate_period_ms }
  }
  if (row.fifo) limits.fifo = true
  if (row.fair) limits.fair = true
  return { queue: row.queue, task: row.task === "" ? null : row.task, limits, source: row.source, updatedAt: row.updated_at }
}

/**
 * `setLimits`: an upsert of the row (or its delete for none). A code declaration does not
 * overwrite an operator's row (the upsert's WHERE); the write wakes the queue's idle
 * consumers (a raised limit is claimed at once), best effort.
 */
export const setLimits = (ctx: PgContext): QueueStoreShape["setLimits"] => (target, limits, options) =>
  Effect.gen(function*() {
    const { channel, currentTime, limitsTable, sql } = ctx
    const task = target.task ?? ""
    const source = options?.source ?? "operator"
    const now = yield* currentTime
    let written = true
    if (limits === null) {
      yield* sql`DELETE FROM ${limitsTable} WHERE queue = ${target.queue} AND task = ${task}`
    } else {
      // served_turn is left alone on update: the fair rotation goes on across a change of limits.
      const rows = yield* sql<{ written: boolean }>`
        INSERT INTO ${limitsTable} AS l (queue, task, concurrency, rate_count, rate_period_ms, key_concurrency,
                                         key_rate_count, key_rate_period_ms, fifo, fair, source, updated_at)
        VALUES (${target.queue}, ${task}, ${limits.concurrency ?? null}, ${limits.rate?.count ?? null},
                ${limits.rate?.periodMs ?? null}, ${limits.keyConcurrency ?? null}, ${limits.keyRate?.count ?? null},
                ${limits.keyRate?.periodMs ?? null}, ${limits.fifo === true}, ${limits.fair === true}, ${source},
                ${storeTime(now)})
        ON CONFLICT (queue, task) DO UPDATE SET
          concurrency = excluded.concurrency, rate_count = excluded.rate_count, rate_period_ms = excluded.rate_period_ms,
          key_concurrency = excluded.key_concurrency, key_rate_count = excluded.key_rate_count,
          key_rate_period_ms = excluded.key_rate_period_ms, fifo = excluded.fifo, fair = excluded.fair,
          source = excluded.source, updated_at = excluded.updated_at
        WHERE excluded.source = 'operator' OR l.source = 'code'
        RETURNING true AS written`
      written = rows.length > 0
    }
    if (written) yield* Effect.ignore(sql`SELECT pg_notify(${channel}, ${target.queue})`)
    return written
  }).pipe((e) => ctx.op("setLimits", { queue: target.queue, task: target.task ?? "" }, e))

/** `limits`: by queue, the queue's own row (task '') first. */
export const limits = (ctx: PgContext): QueueStoreShape["limits"] => (queue) =>
  Effect.gen(function*() {
    const { limitsTable, sql } = ctx
    const rows = yield* sql<StoredRow>`
      SELECT queue, task, concurrency, rate_count, rate_period_ms, key_concurrency, key_rate_count,
             key_rate_period_ms, fifo, fair, source, updated_at
      FROM ${limitsTable} WHERE ${queue ?? null}::text IS NULL OR queue = ${queue ?? null}
      ORDER BY queue, task`
    return rows.map(toStored)
  }).pipe((e) => ctx.op("limits", { queue: queue ?? "" }, e))

/** `setKeyWeight`: the key's row, created at the queue's current turn when new (the trigger moves it on). */
export const setKeyWeight = (ctx: PgContext): QueueStoreShape["setKeyWeight"] => (queue, key, weight) =>
  ctx.sql`
    INSERT INTO ${ctx.keysTable} (queue, key, weight) VALUES (${queue}, ${key}, ${weight})
    ON CONFLICT (queue, key) DO UPDATE SET weight = excluded.weight`.pipe(
    Effect.asVoid,
    (e) => ctx.op("setKeyWeight", { queue }, e)
  )

/**
 * The full rate windows of `queue` and when each frees a start (its oldest start inside the
 * window, plus the period): what `nextVisibleAt` and `flowStatus` read. Key windows (task '')
 * are timed by the queue's key rate, the others by their own row's rate. A queue without rate
 * limits reads one empty index range of flow_rates.
 */
export const fullWindows = ({ limitsTable, ratesTable, sql }: PgContext, queue: string, now: Date | null) =>
  sql`SELECT b.task, b.key, w.free_at FROM (
        SELECT r.task, r.key, r.starts,
               CASE WHEN r.key <> '' THEN l.key_rate_count ELSE l.rate_count END AS count,
               (CASE WHEN r.key <> '' THEN l.key_rate_period_ms ELSE l.rate_period_ms END) * interval '1 millisecond' AS period
        FROM ${ratesTable} AS r JOIN ${limitsTable} AS l ON l.queue = r.queue AND l.task = r.task
        WHERE r.queue = ${queue}
      ) AS b CROSS JOIN LATERAL (
        SELECT min(s) + b.period AS free_at, count(*) AS used
        FROM unnest(b.starts) AS s WHERE s > ${storeTime(now)} - b.period
      ) AS w
      WHERE w.used >= b.count`

/** `flowStatus`: four reads of what holds the queue back, each bounded to 100 rows. */
export const flowStatus = (ctx: PgContext): QueueStoreShape["flowStatus"] => (queue) =>
  Effect.gen(function*() {
    const { currentTime, sql, table } = ctx
    const now = yield* currentTime
    const stored = yield* limits(ctx)(queue)
    const own = stored.find((s) => s.task === null)?.limits
    const keyLimit = own?.fifo === true ? 1 : own?.keyConcurrency ?? null
    // Every live lease of the queue (over the claim index: visible_at > now, token set).
    const [flight] = yield* sql<{ n: number }>`
      SELECT count(*)::int AS n FROM ${table}
      WHERE queue = ${queue} AND state = 'ready' AND visible_at > ${storeTime(now)} AND lease_token IS NOT NULL`
    // Keys whose slots are all taken (messages_held_idx).
    const atLimit = yield* sql<{ key: string; n: number }>`
      SELECT flow_key AS key, count(*)::int AS n FROM ${table}
      WHERE queue = ${queue} AND lease_token IS NOT NULL AND flow_limited AND state = 'ready'
        AND visible_at > ${storeTime(now)} AND flow_key IS NOT NULL AND ${keyLimit}::int IS NOT NULL
      GROUP BY flow_key HAVING count(*) >= ${keyLimit}::int
      ORDER BY count(*) DESC, flow_key LIMIT 100`
    // FIFO heads (each key's lowest ready id, messages_key_idx) that wait: not leased, not due yet.
    const blocked = own?.fifo !== true ? [] : yield* sql<
      { key: string; id: bigint; attempts: number; last_error: string | null; visible_at: Date }
    >`
      SELECT h.flow_key AS key, h.id, h.attempts, h.last_error, h.visible_at FROM (
        SELECT DISTINCT ON (flow_key) flow_key, id, attempts, last_error, visible_at, lease_token
        FROM ${table} WHERE queue = ${queue} AND state = 'ready' AND flow_key IS NOT NULL
        ORDER BY flow_key, id
      ) AS h
      WHERE h.lease_token IS NULL AND h.visible_at > ${storeTime(now)}
      ORDER BY h.visible_at, h.flow_key LIMIT 100`
    // Full rate windows and when each frees a start (as nextVisibleAt reads them).
    const full = yield* sql<{ task: string; key: string; free_at: Date }>`
      SELECT f.task, f.key, f.free_at FROM (${fullWindows(ctx, queue, now)}) AS f
      ORDER BY f.free_at LIMIT 100`
    return {
      queue,
      limits: stored,
      inFlight: flight?.n ?? 0,
      keysAtLimit: atLimit.map((r): KeyAtLimit => ({ key: r.key, inFlight: r.n })),
      blockedKeys: blocked.map((r): BlockedKey => ({
        key: r.key,
        headId: String(r.id),
        attempts: r.attempts,
        lastError: r.last_error,
        visibleAt: r.visible_at
      })),
      throttles: full.map((r): Throttle => ({
        task: r.task === "" ? null : r.task,
        key: r.key === "" ? null : r.key,
        nextAt: r.free_at
      }))
    }
  }).pipe((e) => ctx.op("flowStatus", { queue }, e))
