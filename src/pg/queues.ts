/**
 * Queues and their counts: pausing and resuming, the list of every queue, the depths
 * and stats statement, and when a queue's next delayed message becomes ready.
 *
 * @since 0.1.0
 */
import { Effect, Option } from "effect"
import type { QueueInfo, QueueStats } from "../Message.ts"
import type { QueueStoreShape } from "../QueueStore.ts"
import * as Validate from "../internal/validate.ts"
import type { PgContext } from "./context.ts"
import { fullWindows } from "./flow.ts"
import { storeTime, textArray } from "./fragments.ts"

/**
 * Upsert: the first pause of a queue makes its row. Pausing a paused queue keeps the
 * time it was first paused.
 */
export const pause = ({ currentTime, op, queuesTable, sql }: PgContext): QueueStoreShape["pause"] => (queue) =>
  Effect.gen(function*() {
    const now = yield* currentTime
    yield* sql`
      INSERT INTO ${queuesTable} AS q (name, paused, paused_at) VALUES (${queue}, true, ${storeTime(now)})
      ON CONFLICT (name) DO UPDATE SET paused = true, paused_at = CASE WHEN q.paused THEN q.paused_at ELSE excluded.paused_at END`
  }).pipe((e) => op("pause", { queue }, e))

/**
 * The row stays (unpaused), so the queue stays listed. Idle consumers hear of it as of a
 * send (the same NOTIFY, delivered at commit), only when the queue was in fact paused.
 */
export const resume = ({ channel, op, queuesTable, sql }: PgContext): QueueStoreShape["resume"] => (queue) =>
  sql`
    WITH resumed AS (
      UPDATE ${queuesTable} SET paused = false, paused_at = NULL WHERE name = ${queue} AND paused RETURNING name
    )
    SELECT pg_notify(${channel}, name) FROM resumed`.pipe(Effect.asVoid, (e) => op("resume", { queue }, e))

// The names of every queue with messages (live or dead), history or a pause row. Each
// source is read by a skip scan (a recursive CTE hopping from one queue name to the next
// through an index whose first column is the queue), so the cost follows the number of
// queues, not of rows: dashboards call this every few seconds.
const queueNames = ({ attemptsTable, queuesTable, sql, table }: PgContext) =>
  sql<{ queue: string; paused: boolean; paused_at: Date | null }>`
  WITH RECURSIVE live(queue) AS (
    (SELECT queue FROM ${table} WHERE state = 'ready' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT m.queue FROM ${table} AS m WHERE m.state = 'ready' AND m.queue > live.queue ORDER BY m.queue LIMIT 1)
    FROM live WHERE live.queue IS NOT NULL
  ), dead(queue) AS (
    (SELECT queue FROM ${table} WHERE state = 'dead' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT m.queue FROM ${table} AS m WHERE m.state = 'dead' AND m.queue > dead.queue ORDER BY m.queue LIMIT 1)
    FROM dead WHERE dead.queue IS NOT NULL
  ), recorded(queue) AS (
    (SELECT queue FROM ${attemptsTable} ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT a.queue FROM ${attemptsTable} AS a WHERE a.queue > recorded.queue ORDER BY a.queue LIMIT 1)
    FROM recorded WHERE recorded.queue IS NOT NULL
  ), names(queue) AS (
    SELECT queue FROM live UNION SELECT queue FROM dead UNION SELECT queue FROM recorded
    UNION SELECT name FROM ${queuesTable}
  )
  SELECT n.queue, coalesce(q.paused, false) AS paused, q.paused_at
  FROM names AS n LEFT JOIN ${queuesTable} AS q ON q.name = n.queue
  WHERE n.queue IS NOT NULL
  ORDER BY n.queue`

/**
 * A stored name that breaks today's rule (written by hand, or by an older version) is listed
 * and counted like any other: an operator must see it to clean it up.
 */
export const queues = (ctx: PgContext): QueueStoreShape["queues"] => () =>
  Effect.gen(function*() {
    const names = yield* queueNames(ctx)
    if (names.length === 0) return []
    const counts = yield* countQueues(ctx, names.map((n) => n.queue))
    return names.map((n, k): QueueInfo => ({ ...counts[k]!, paused: n.paused, pausedAt: n.paused_at }))
  }).pipe((e) => ctx.op("queues", {}, e))

/** `depths`: the counts of the queues named (checked), each once. */
export const depths = (ctx: PgContext): QueueStoreShape["depths"] => (queues) =>
  Effect.gen(function*() {
    const wanted = [...new Set(queues)]
    for (const queue of wanted) yield* Validate.name("queue", queue)
    return yield* countQueues(ctx, wanted)
  }).pipe((e) => ctx.op("depths", { queues: queues.length }, e))

/**
 * The counts of distinct queues, their names not checked: `depths` checks what it is
 * given; `queues` counts the names it read from the tables, whatever they hold.
 */
const countQueues = ({ currentTime, sql, table }: PgContext, wanted: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    if (wanted.length === 0) return []
    const now = yield* currentTime
    // One statement for every queue: the queues as a text array (one prepared statement
    // whatever their number), each LEFT JOINed to its rows (the queue index), so a queue
    // without rows still answers with zeros. Ready counts expired leases too: they are
    // claimable now. One `now` for every count, so the numbers add up.
    const rows = yield* sql<{
      queue: string
      ready: bigint
      delayed: bigint
      in_flight: bigint
      dead: bigint
      oldest_ready_age_ms: number | null
    }>`
      SELECT
        q.queue,
        count(m.id) FILTER (WHERE m.state = 'ready' AND m.visible_at <= c.now)                                AS ready,
        count(m.id) FILTER (WHERE m.state = 'ready' AND m.visible_at > c.now AND m.lease_token IS NULL)     AS delayed,
        count(m.id) FILTER (WHERE m.state = 'ready' AND m.visible_at > c.now AND m.lease_token IS NOT NULL) AS in_flight,
        count(m.id) FILTER (WHERE m.state = 'dead')                                                          AS dead,
        (extract(epoch FROM c.now - min(m.visible_at) FILTER (WHERE m.state = 'ready' AND m.visible_at <= c.now)) * 1000)::float8
          AS oldest_ready_age_ms
      FROM unnest(${textArray(wanted)}::text[]) AS q(queue)
      CROSS JOIN (SELECT ${storeTime(now)} AS now) AS c
      LEFT JOIN ${table} AS m ON m.queue = q.queue
      GROUP BY q.queue, c.now`
    const byQueue = new Map(rows.map((row) => [row.queue, row]))
    return wanted.map((queue): QueueStats => {
      const row = byQueue.get(queue)
      return {
        queue,
        ready: Number(row?.ready ?? 0),
        delayed: Number(row?.delayed ?? 0),
        inFlight: Number(row?.in_flight ?? 0),
        dead: Number(row?.dead ?? 0),
        oldestReadyAgeMs: Math.max(0, Math.round(row?.oldest_ready_age_ms ?? 0))
      }
    })
  })

/**
 * The counts of one queue: the statement of `depths`, for one queue.
 */
export const stats = (ctx: PgContext): QueueStoreShape["stats"] => (queue) =>
  Effect.gen(function*() {
    yield* Validate.name("queue", queue)
    const [row] = yield* depths(ctx)([queue])
    return row!
  }).pipe((e) => ctx.op("stats", { queue }, e))


/** `nextVisibleAt`: when the queue's next delayed (or leased) message becomes ready, if any. */
export const nextVisibleAt = (ctx: PgContext): QueueStoreShape["nextVisibleAt"] => (queue) =>
  Effect.gen(function*() {
    const { currentTime, sql, table } = ctx
    yield* Validate.name("queue", queue)
    const now = yield* currentTime
    // Over the claim index (queue, priority, visible_at): the distinct priorities of the
    // queue by a skip scan (one probe each), then per priority the first entry after now
    // (one probe each). A plain min() over the queue would read every in-flight and delayed row.
    const [row] = yield* sql<{ at: Date | null }>`
      WITH RECURSIVE priorities(p) AS (
        (SELECT priority FROM ${table} WHERE queue = ${queue} AND state = 'ready' ORDER BY priority LIMIT 1)
        UNION ALL
        SELECT (SELECT m.priority FROM ${table} AS m
                WHERE m.queue = ${queue} AND m.state = 'ready' AND m.priority > priorities.p
                ORDER BY m.priority LIMIT 1)
        FROM priorities WHERE priorities.p IS NOT NULL
      )
      SELECT least(
        (SELECT min((SELECT m.visible_at FROM ${table} AS m
                     WHERE m.queue = ${queue} AND m.state = 'ready' AND m.priority = priorities.p
                       AND m.visible_at > ${storeTime(now)}
                     ORDER BY m.visible_at LIMIT 1))
         FROM priorities WHERE priorities.p IS NOT NULL),
        (SELECT min(f.free_at) FROM (${fullWindows(ctx, queue, now)}) AS f)) AS at`
    return Option.fromNullishOr(row?.at)
  }).pipe((e) => ctx.op("nextVisibleAt", { queue }, e))
