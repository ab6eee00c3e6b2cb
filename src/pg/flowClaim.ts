/**
 * The claim of a queue with flow limits: serialized per queue by a transaction-scoped advisory
 * lock, then one statement that counts the live slots, picks within every limit (per key, per
 * task, per queue; concurrency and rate windows; FIFO heads; fair turns), leases, records, and
 * writes the rate windows, all in the lock's transaction.
 *
 * The statement is written in steps (slots, candidates, ranking, writes), each a fragment.
 *
 * @since 0.4.0
 */
import * as Statement from "effect/sql/Statement"
import type { FlowLimitStage } from "../QueueMetrics.ts"
import { historyErrors } from "../QueueStore.ts"
import type { PgContext } from "./context.ts"
import { attemptNumber, historyInsert } from "./fragments.ts"
import type { ClaimRow } from "./rows.ts"

/** The limits of a queue as the claim reads them (statement 1). */
export interface LimitsRow {
  readonly task: string | null
  readonly concurrency: number | null
  readonly rate_count: number | null
  readonly rate_period_ms: number | null
  readonly key_concurrency: number | null
  readonly key_rate_count: number | null
  readonly key_rate_period_ms: number | null
  readonly fifo: boolean | null
  readonly fair: boolean | null
}

/** What the limited claim statement answers per row, beyond a plain claim's. */
export interface FlowClaimRow extends ClaimRow {
  readonly cut_key: number
  readonly cut_task: number
  readonly cut_queue: number
  /** Whether a claim that came back short left visible messages of a full key (or task) behind. */
  readonly key_waiting: boolean
  readonly task_waiting: boolean
}

/** Candidates a limited claim looks at: enough to fill `limit` past the ones a limit turns away. */
const scanSize = (limit: number) => Math.min(2_000, limit * 8 + 64)

const literal = (text: string) => Statement.fragment([Statement.literal(text)])

/** Claim order: priority, then (fair) the turn, then visibility and id. `alias` is code, never input. */
const order = (fair: boolean, alias: string) =>
  literal(fair ? `${alias}.priority, ${alias}.turn, ${alias}.visible_at, ${alias}.id` : `${alias}.priority, ${alias}.visible_at, ${alias}.id`)

/**
 * Statement 1: take the queue's claim lock and read its limits. The lock is a transaction-scoped
 * advisory lock keyed by schema and queue: every limited claim of the queue holds it until it
 * commits, so the claim statement that follows (a new snapshot, taken after the lock) sees every
 * slot and window start committed by the claims before it. Racing claimers never overshoot.
 * LEFT JOIN from the lock: the lock is taken even when the queue has no limits (then one row of
 * NULLs comes back, and the caller runs the plain claim instead).
 */
export const lockAndReadLimits = (ctx: PgContext, queue: string) =>
  ctx.sql<LimitsRow>`
    SELECT l.task, l.concurrency, l.rate_count, l.rate_period_ms, l.key_concurrency,
           l.key_rate_count, l.key_rate_period_ms, l.fifo, l.fair
    FROM (SELECT pg_advisory_xact_lock(hashtextextended(${`${ctx.schema}.flow:${queue}`}, 0))) AS lock
    LEFT JOIN ${ctx.limitsTable} AS l ON l.queue = ${queue}`

/** The inputs of the limited claim statement. */
export interface FlowClaimInput {
  readonly queue: string
  readonly limit: number
  readonly leaseMs: number
  readonly consumer: string
  readonly now: Date | null
  readonly asyncCommit: boolean
  /** The queue's own limits (task ''), or none. */
  readonly own: LimitsRow | undefined
  /** The limits of its tasks. */
  readonly tasks: ReadonlyArray<LimitsRow>
}

/** What the steps of the limited claim share: the context, the input and what it derives. */
interface Step {
  readonly ctx: PgContext
  readonly input: FlowClaimInput
  readonly at: Statement.Fragment
  readonly fair: boolean
  readonly fifo: boolean
  readonly keyConcurrency: number | null
  readonly own: Partial<LimitsRow>
}

/**
 * The time a limited claim runs at, `coalesce($now::timestamptz, statement_timestamp())`: the
 * store's clock (`clock: "effect"`), or the start of the claim statement itself, which the server
 * receives once statement 1 was granted the queue's claim lock. Not `now()`, the transaction's
 * start: a claim that waited on the lock behind others would record its start (in `leased_at` and
 * in the rate windows) up to the wait in the past, so a window counted later missed it (more than
 * `count` starts in a real window), and it counted a window that a claim which began after it but
 * got the lock first had already pruned (more than `count` on the recorded starts). With the
 * statement's time the starts are recorded in lock order, as the claims commit.
 */
const claimTime = (now: Date | null): Statement.Fragment =>
  Statement.fragment([Statement.literal("coalesce("), Statement.parameter(now), Statement.literal("::timestamptz, statement_timestamp())")])

/** `now - period`: where a window of `period` milliseconds starts. */
const windowStart = (step: Step, period: Statement.Fragment) =>
  step.ctx.sql`${step.at} - ${period} * interval '1 millisecond'`

/**
 * The live slots and what is full: the task limits (a parameter), the live leases claimed under
 * limits (messages_held_idx), their counts per key and task, the keys and tasks at their limit.
 */
const slots = (step: Step) => {
  const { ctx: { sql, table }, input, at, keyConcurrency } = step
  const taskLimits = JSON.stringify(input.tasks.map((t) => ({
    task: t.task,
    concurrency: t.concurrency,
    rate_count: t.rate_count,
    rate_period_ms: t.rate_period_ms
  })))
  return sql`task_limits AS (
      SELECT * FROM jsonb_to_recordset(${taskLimits}::jsonb)
        AS t(task text, concurrency int, rate_count int, rate_period_ms int)
    ), held AS (
      -- The live slots: claimed under limits, token set, lease not expired (messages_held_idx).
      SELECT task, flow_key FROM ${table}
      WHERE queue = ${input.queue} AND lease_token IS NOT NULL AND flow_limited AND state = 'ready' AND visible_at > ${at}
    ), held_key AS (
      SELECT flow_key, count(*)::int AS n FROM held WHERE flow_key IS NOT NULL GROUP BY flow_key
    ), held_task AS (
      SELECT task, count(*)::int AS n FROM held GROUP BY task
    ), full_keys AS (
      SELECT flow_key FROM held_key WHERE held_key.n >= ${keyConcurrency}::int
    ), full_tasks AS (
      SELECT h.task FROM held_task AS h JOIN task_limits AS t ON t.task = h.task WHERE h.n >= t.concurrency
    )`
}

/**
 * The candidates, locked (SKIP LOCKED), at most `scanSize(limit)`: ready and visible, the queue
 * not paused, their key and task not at their limit (such rows are never even taken: a key at
 * its limit cannot block others behind it), and under FIFO the oldest ready message of the key
 * (visible or not). Fair: keyed messages in turn order (messages_fair_idx) and unkeyed ones in
 * claim order, two scans (FOR UPDATE takes no UNION), merged by the ranking.
 */
const candidates = (step: Step) => {
  const { ctx: { queuesTable, sql, table }, input: { asyncCommit, limit, queue }, at, fair, fifo } = step
  const eligible = (keyed: "any" | "keyed" | "plain") =>
    sql`m.queue = ${queue} AND m.state = 'ready' AND m.visible_at <= ${at}
      ${literal(keyed === "keyed" ? "AND m.flow_key IS NOT NULL" : keyed === "plain" ? "AND m.flow_key IS NULL" : "")}
      AND NOT EXISTS (SELECT 1 FROM ${queuesTable} WHERE name = ${queue} AND paused)
      -- As the plain claim: committed without waiting for its WAL flush (one-time filter).
      AND (SELECT CASE WHEN ${asyncCommit}::boolean THEN set_config('synchronous_commit', 'off', true) ELSE '' END) IS NOT NULL
      AND (m.flow_key IS NULL OR m.flow_key NOT IN (SELECT flow_key FROM full_keys))
      AND m.task NOT IN (SELECT task FROM full_tasks)
      AND (NOT ${fifo}::boolean OR m.flow_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM ${table} AS p
            WHERE p.queue = ${queue} AND p.flow_key = m.flow_key AND p.state = 'ready' AND p.id < m.id))`
  const columns = literal(`m.id, m.task, m.flow_key, m.priority, m.turn, m.visible_at,
      m.lease_token IS NOT NULL AS expired, m.lease_token IS NOT NULL OR m.lease_expiries > 0 AS suspect,
      m.cancel_requested_at IS NOT NULL AS cancelled, m.leased_by AS prev_consumer, m.leased_at AS prev_leased_at`)
  const scan = scanSize(limit)
  return fair
    ? sql`picked_keyed AS (
        SELECT ${columns} FROM ${table} AS m WHERE ${eligible("keyed")}
        ORDER BY m.priority, m.turn, m.id LIMIT (SELECT ${scan}::int) FOR UPDATE SKIP LOCKED
      ), picked_plain AS (
        SELECT ${columns} FROM ${table} AS m WHERE ${eligible("plain")}
        ORDER BY m.priority, m.visible_at, m.id LIMIT (SELECT ${scan}::int) FOR UPDATE SKIP LOCKED
      ), picked AS (
        SELECT * FROM picked_keyed UNION ALL SELECT * FROM picked_plain
      )`
    : sql`picked AS (
        SELECT ${columns} FROM ${table} AS m WHERE ${eligible("any")}
        ORDER BY m.priority, m.visible_at, m.id LIMIT (SELECT ${scan}::int) FOR UPDATE SKIP LOCKED
      )`
}

/**
 * The ranking, limit by limit: per key (its slots and window), then per task over what the keys
 * let through, then the queue (the claim's own limit, the queue's slots and window). Each stage
 * numbers the candidates still in, in claim order, so a candidate a key turns away never takes a
 * task's or the queue's room. Then, as the plain claim, a suspect is claimed alone.
 */
const ranking = (step: Step) => {
  const { ctx: { ratesTable, sql }, input: { limit, queue }, fair, keyConcurrency, own } = step
  return sql`live AS (
      SELECT * FROM picked WHERE NOT cancelled
    ), by_key AS (
      SELECT l.*, row_number() OVER (PARTITION BY l.flow_key ORDER BY ${order(fair, "l")}) AS kn FROM live AS l
    ), key_rates AS (
      -- Starts inside each candidate key's window (only keys among the candidates are read).
      SELECT r.key, cardinality(ARRAY(
               SELECT s FROM unnest(r.starts) AS s WHERE s > ${windowStart(step, sql`${own.key_rate_period_ms ?? null}::bigint`)})) AS used
      FROM ${ratesTable} AS r
      WHERE ${own.key_rate_count ?? null}::int IS NOT NULL AND r.queue = ${queue} AND r.task = ''
        AND r.key IN (SELECT flow_key FROM live WHERE flow_key IS NOT NULL)
    ), key_ok AS (
      SELECT b.* FROM by_key AS b
      LEFT JOIN held_key AS hk ON hk.flow_key = b.flow_key
      LEFT JOIN key_rates AS kr ON kr.key = b.flow_key
      WHERE b.flow_key IS NULL OR (
        (${keyConcurrency}::int IS NULL OR b.kn + coalesce(hk.n, 0) <= ${keyConcurrency}::int) AND
        (${own.key_rate_count ?? null}::int IS NULL OR b.kn + coalesce(kr.used, 0) <= ${own.key_rate_count ?? null}::int))
    ), by_task AS (
      SELECT k.*, row_number() OVER (PARTITION BY k.task ORDER BY ${order(fair, "k")}) AS tn FROM key_ok AS k
    ), task_rates AS (
      SELECT r.task, cardinality(ARRAY(
               SELECT s FROM unnest(r.starts) AS s WHERE s > ${windowStart(step, sql`t.rate_period_ms::bigint`)})) AS used
      FROM ${ratesTable} AS r JOIN task_limits AS t ON t.task = r.task
      WHERE r.queue = ${queue} AND r.key = '' AND r.task <> '' AND t.rate_count IS NOT NULL
    ), task_ok AS (
      SELECT b.* FROM by_task AS b
      LEFT JOIN task_limits AS t ON t.task = b.task
      LEFT JOIN held_task AS ht ON ht.task = b.task
      LEFT JOIN task_rates AS tr ON tr.task = b.task
      WHERE (t.concurrency IS NULL OR b.tn + coalesce(ht.n, 0) <= t.concurrency)
        AND (t.rate_count IS NULL OR b.tn + coalesce(tr.used, 0) <= t.rate_count)
    ), queue_rate AS (
      SELECT cardinality(ARRAY(
               SELECT s FROM unnest(r.starts) AS s WHERE s > ${windowStart(step, sql`${own.rate_period_ms ?? null}::bigint`)})) AS used
      FROM ${ratesTable} AS r WHERE r.queue = ${queue} AND r.task = '' AND r.key = ''
    ), by_queue AS (
      SELECT t.*, row_number() OVER (ORDER BY ${order(fair, "t")}) AS qn FROM task_ok AS t
    ), queue_ok AS (
      SELECT b.* FROM by_queue AS b
      WHERE b.qn <= ${limit}::int
        AND (${own.concurrency ?? null}::int IS NULL OR b.qn + (SELECT count(*) FROM held) <= ${own.concurrency ?? null}::int)
        AND (${own.rate_count ?? null}::int IS NULL
             OR b.qn + coalesce((SELECT used FROM queue_rate), 0) <= ${own.rate_count ?? null}::int)
    ), head AS (
      SELECT id, suspect FROM queue_ok ORDER BY qn LIMIT 1
    ), chosen AS (
      SELECT q.* FROM queue_ok AS q, head
      WHERE CASE WHEN head.suspect THEN q.id = head.id ELSE NOT q.suspect END
    )`
}

/**
 * The writes: the cancelled candidates deleted (as the plain claim), the chosen leased (as
 * slots: flow_limited), the history of both, the rate windows (the starts still inside each, plus
 * one per claim), and a fair queue's served turn (the highest claimed: a key back from idling
 * starts there).
 */
const writes = (step: Step) => {
  const { ctx: { attemptsTable, limitsTable, ratesTable, sql, table }, input: { consumer, leaseMs, queue }, at, fair, own } = step
  return sql`dropped AS (
      DELETE FROM ${table} AS m WHERE m.id = ANY(ARRAY(SELECT id FROM picked WHERE cancelled))
      RETURNING m.id, m.queue, m.task, ${attemptNumber("m")} AS attempt, m.leased_by, m.leased_at, m.visible_at
    ), dropped_attempts AS (
      ${historyInsert(attemptsTable)}
      SELECT id, queue, task, attempt, coalesce(leased_by, ''), coalesce(leased_at, visible_at), ${at},
             'cancelled', ${historyErrors.cancelledUnfinished}::text
      FROM dropped
    ), claimed AS (
      UPDATE ${table} AS m SET
        visible_at     = ${at} + ${leaseMs}::bigint * interval '1 millisecond',
        attempts       = m.attempts + 1,
        lease_expiries = m.lease_expiries + (m.lease_token IS NOT NULL)::int,
        lease_token    = gen_random_uuid(),
        leased_by      = ${consumer},
        leased_at      = ${at},
        flow_limited   = true
      WHERE m.id = ANY(ARRAY(SELECT id FROM chosen))
      RETURNING m.id, m.queue, m.task, m.payload, m.headers, m.priority, m.attempts, m.max_attempts,
                m.enqueued_at, m.visible_at, m.lease_token, m.dedup_key, m.last_error, m.lease_expiries,
                m.attempt_base, m.flow_key, m.turn
    ), expired_attempts AS (
      ${historyInsert(attemptsTable)}
      SELECT c.id, c.queue, c.task, ${attemptNumber("c")} - 1, coalesce(h.prev_consumer, ''),
             coalesce(h.prev_leased_at, h.visible_at), h.visible_at,
             'lease-expired', ${historyErrors.leaseExpired}::text
      FROM claimed AS c JOIN chosen AS h ON h.id = c.id WHERE h.expired
    ), windows AS (
      SELECT b.task, b.key, b.n, b.period FROM (
        SELECT '' AS task, '' AS key, (SELECT count(*) FROM claimed)::int AS n, ${own.rate_period_ms ?? null}::bigint AS period
        WHERE ${own.rate_count ?? null}::int IS NOT NULL
        UNION ALL
        SELECT c.task, '', count(*)::int, t.rate_period_ms::bigint
        FROM claimed AS c JOIN task_limits AS t ON t.task = c.task WHERE t.rate_count IS NOT NULL
        GROUP BY c.task, t.rate_period_ms
        UNION ALL
        SELECT '', c.flow_key, count(*)::int, ${own.key_rate_period_ms ?? null}::bigint
        FROM claimed AS c WHERE c.flow_key IS NOT NULL AND ${own.key_rate_count ?? null}::int IS NOT NULL
        GROUP BY c.flow_key
      ) AS b WHERE b.n > 0
    ), window_writes AS (
      INSERT INTO ${ratesTable} AS r (queue, task, key, starts)
      SELECT ${queue}, w.task, w.key,
             ARRAY(SELECT s FROM unnest(coalesce(o.starts, '{}'::timestamptz[])) AS s
                   WHERE s > ${windowStart(step, sql`w.period`)} ORDER BY s)
             || array_fill(${at}, ARRAY[w.n])
      FROM windows AS w
      LEFT JOIN ${ratesTable} AS o ON o.queue = ${queue} AND o.task = w.task AND o.key = w.key
      ON CONFLICT (queue, task, key) DO UPDATE SET starts = excluded.starts
    ), served AS (
      UPDATE ${limitsTable} SET served_turn = (SELECT max(turn) FROM claimed WHERE flow_key IS NOT NULL)
      WHERE ${fair}::boolean AND queue = ${queue} AND task = ''
        AND served_turn < (SELECT max(turn) FROM claimed WHERE flow_key IS NOT NULL)
    )`
}

/**
 * For the metric of claims cut short (QueueMetrics.claimsLimited): whether a claim that took
 * fewer than asked left a visible message of a full key (or task) behind. Full keys and tasks are
 * never candidates, so the ranking's counts miss them; this probe asks only after a short claim
 * (CASE keeps it from running otherwise) and stops at the first such message of each
 * (messages_key_idx for keys).
 */
const waiting = (step: Step, what: "key" | "task") => {
  const { ctx: { sql, table }, input: { limit, queue }, at } = step
  const match = what === "key"
    ? sql`SELECT 1 FROM full_keys AS f WHERE EXISTS (
        SELECT 1 FROM ${table} AS w WHERE w.queue = ${queue} AND w.flow_key = f.flow_key
          AND w.state = 'ready' AND w.visible_at <= ${at})`
    : sql`SELECT 1 FROM full_tasks AS f WHERE EXISTS (
        SELECT 1 FROM ${table} AS w WHERE w.queue = ${queue} AND w.task = f.task
          AND w.state = 'ready' AND w.visible_at <= ${at})`
  return sql`CASE WHEN (SELECT count(*) FROM claimed) < ${limit}::int THEN EXISTS (${match}) ELSE false END`
}

/**
 * Statement 2: the limited claim, one statement of the steps above. Answers as the plain claim
 * does (a row of NULLs when it claimed nothing), plus how many candidates each stage turned away.
 */
export const limitedClaim = (ctx: PgContext, input: FlowClaimInput) => {
  const fifo = input.own?.fifo === true
  const step: Step = {
    ctx,
    input,
    at: claimTime(input.now),
    fair: input.own?.fair === true,
    fifo,
    keyConcurrency: fifo ? 1 : input.own?.key_concurrency ?? null,
    own: input.own ?? {}
  }
  return ctx.sql<FlowClaimRow>`
    WITH ${slots(step)}, ${candidates(step)}, ${ranking(step)}, ${writes(step)}
    SELECT c.id, c.task, c.payload, c.headers, c.priority, c.attempts, c.max_attempts, c.enqueued_at, c.visible_at,
           c.lease_token, c.dedup_key, c.last_error, c.lease_expiries, c.flow_key, h.visible_at AS was_visible_at,
           d.n AS dropped, true AS limited,
           (SELECT count(*) FROM live)::int - (SELECT count(*) FROM key_ok)::int AS cut_key,
           (SELECT count(*) FROM key_ok)::int - (SELECT count(*) FROM task_ok)::int AS cut_task,
           (SELECT count(*) FROM by_queue WHERE qn <= ${input.limit}::int)::int - (SELECT count(*) FROM queue_ok)::int AS cut_queue,
           ${waiting(step, "key")} AS key_waiting,
           ${waiting(step, "task")} AS task_waiting
    FROM (SELECT count(*)::int AS n FROM dropped) AS d
    LEFT JOIN (claimed AS c JOIN chosen AS h ON h.id = c.id) ON true
    ORDER BY h.qn`
}

/**
 * The stages that cut a limited claim short (fewer claimed than `limit`), for the metric
 * `QueueMetrics.claimsLimited`: a stage that turned a candidate away, or a full key or task that
 * left a visible message behind.
 */
export const limitingStages = (rows: ReadonlyArray<FlowClaimRow>, limit: number): Array<FlowLimitStage> => {
  const first = rows[0]
  if (first === undefined || rows.filter((row) => row.id !== null).length >= limit) return []
  const stages: Array<FlowLimitStage> = []
  if (first.cut_key > 0 || first.key_waiting) stages.push("key")
  if (first.cut_task > 0 || first.task_waiting) stages.push("task")
  if (first.cut_queue > 0) stages.push("queue")
  return stages
}
