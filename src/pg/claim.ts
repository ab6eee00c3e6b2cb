/**
 * The claim: one statement that picks, leases and records (the expired attempts, the
 * cancelled rows it drops), shaped for a generic plan.
 *
 * @since 0.1.0
 */
import { Effect, Option, type Tracer } from "effect"
import type { Claim } from "../Message.ts"
import * as QueueMetrics from "../QueueMetrics.ts"
import { type ClaimOptions, defaults, historyErrors, type QueueStoreShape } from "../QueueStore.ts"
import * as FlowControl from "../FlowControl.ts"
import * as Validate from "../internal/validate.ts"
import type { PgContext } from "./context.ts"
import { attemptNumber, historyInsert, storeTime } from "./fragments.ts"
import { type FlowClaimInput, limitedClaim, limitingStages, lockAndReadLimits } from "./flowClaim.ts"
import { type ClaimRow, toClaim } from "./rows.ts"

/** Claim statements one claim runs at most while its picked rows are all cancelled ones (see `claim`). */
const MAX_CLAIM_RUNS = 10

/**
 * What a claim's span says once it is answered: how many came back, and for a
 * claim of one message, which (a batch's ids would make the span as big as the batch).
 */
const claimAttributes = (span: Tracer.Span, claims: ReadonlyArray<Claim>) => {
  span.attribute("count", claims.length)
  if (claims.length === 1) {
    const c = claims[0]!
    span.attribute("messageId", c.id)
    span.attribute("task", c.task)
    span.attribute("attempt", c.attempts)
  }
}

/** A claim's checked inputs and the time it runs at. */
interface ClaimInput {
  readonly queue: string
  readonly limit: number
  /** What a queue with flow limits may be claimed for: `limit` less what would be held ahead. */
  readonly limitedLimit: number
  readonly leaseMs: number
  readonly consumer: string
  readonly now: Date | null
  /** No caller's transaction is open: the claim's own commit may skip the WAL flush. */
  readonly asyncCommit: boolean
}

/** What one claim statement did: what it claimed, the cancelled rows it deleted, whether the queue has limits. */
interface ClaimRun {
  readonly claims: ReadonlyArray<Claim>
  readonly dropped: number
  readonly limited: boolean
}

/** The claims of a claim statement's rows (a row of NULLs when it claimed nothing). */
const claimsOf = (rows: ReadonlyArray<ClaimRow>, input: ClaimInput): ClaimRun => {
  // One pass, one array: a claim's rows are the hot path of a busy consumer.
  const claims: Array<Claim> = []
  for (const row of rows) if (row.id !== null) claims.push(toClaim(row, input.queue, input.consumer))
  return { claims, dropped: rows[0]?.dropped ?? 0, limited: rows[0]?.limited === true }
}

/**
 * One plain claim statement. It claims nothing from a queue with flow limits: it answers
 * `limited` instead, and the limited claim runs.
 */
const plainClaim = (ctx: PgContext, input: ClaimInput) =>
  Effect.gen(function*() {
    const { attemptsTable, limitsTable, queuesTable, sql, table } = ctx
    const { asyncCommit, consumer: claimer, leaseMs, limit, now, queue } = input
    // Lock the first `limit` ready rows that no other claimer has locked
    // (SKIP LOCKED: concurrent claimers never wait on or share a row).
    // A row still carrying a lease token was not finished by its last holder:
    // its lease expired. Such a suspect (or one that expired before) is
    // claimed alone, never batched with others; otherwise only non-suspects
    // are taken. The expired attempt is recorded in the history in the same
    // statement. A picked row flagged for cancel (its holder stopped) is deleted, not
    // claimed. The final SELECT restores claim order, which RETURNING does not keep.
    // `head` is the first picked row: a top-1 pick, cheaper than numbering them all.
    // Only what a claim carries comes back (queue and consumer are the caller's own).
    // Shaped for a generic plan, planned once per connection: a custom plan of this
    // statement took ~0.75 ms to plan, more than a claim of 50 takes to run. The limit is
    // a sub-select, unknown to a custom plan too (a plain `LIMIT $n` is known to custom
    // plans only, which makes them always look cheaper, so every claim was replanned);
    // the UPDATE finds its rows by primary key from an array of the chosen ids rather
    // than by a join (sized for a generic plan's guess of the limit, that join became a
    // hash join over a scan of the whole table); what the chosen rows held before the
    // claim is joined back afterwards, by id.
    const rows = yield* sql<ClaimRow>`
      WITH picked AS (
        SELECT id, priority, visible_at, lease_token IS NOT NULL AS expired,
               lease_token IS NOT NULL OR lease_expiries > 0 AS suspect,
               cancel_requested_at IS NOT NULL AS cancelled,
               leased_by AS prev_consumer, leased_at AS prev_leased_at
        FROM ${table}
        WHERE queue = ${queue} AND state = 'ready' AND visible_at <= ${storeTime(now)}
          -- A paused queue gives nothing. Uncorrelated: planned as a one-time filter (an
          -- InitPlan, one primary-key probe per claim), never evaluated per row.
          AND NOT EXISTS (SELECT 1 FROM ${queuesTable} WHERE name = ${queue} AND paused)
          -- A queue with flow limits is claimed by the limited claim (pg/flowClaim.ts): a one-time
          -- filter too, one probe of the primary key of flow_limits.
          AND NOT EXISTS (SELECT 1 FROM ${limitsTable} WHERE queue = ${queue})
          -- Committed without waiting for its WAL flush (synchronous_commit off for this
          -- statement's own transaction; never inside a caller's): a claim lost to a server
          -- crash leaves its messages as they were, ready again, and the holder's fenced renew
          -- or ack then finds its token gone (a double run, reported). Whatever is written after
          -- it with a synchronous commit (a renewal, an ack) flushes it first. One-time filter.
          AND (SELECT CASE WHEN ${asyncCommit}::boolean THEN set_config('synchronous_commit', 'off', true) ELSE '' END) IS NOT NULL
        ORDER BY priority, visible_at, id
        LIMIT (SELECT ${limit}::int)
        FOR UPDATE SKIP LOCKED
      ), head AS (
        SELECT id, suspect FROM picked WHERE NOT cancelled ORDER BY priority, visible_at, id LIMIT 1
      ), chosen AS (
        SELECT picked.* FROM picked, head
        WHERE NOT picked.cancelled AND CASE WHEN head.suspect THEN picked.id = head.id ELSE NOT picked.suspect END
      ), dropped AS (
        -- Cancelled while it ran, and its holder stopped before finishing it (its lease expired,
        -- or the reaper released it): deleted, never run again, as the holder would have.
        DELETE FROM ${table} AS m WHERE m.id = ANY(ARRAY(SELECT id FROM picked WHERE cancelled))
        RETURNING m.id, m.queue, m.task, ${attemptNumber("m")} AS attempt, m.leased_by, m.leased_at, m.visible_at
      ), dropped_attempts AS (
        ${historyInsert(attemptsTable)}
        SELECT id, queue, task, attempt, coalesce(leased_by, ''), coalesce(leased_at, visible_at), ${storeTime(now)},
               'cancelled', ${historyErrors.cancelledUnfinished}::text
        FROM dropped
      ), claimed AS (
        -- Every chosen row is locked by picked: its lease token is still the one read there.
        UPDATE ${table} AS m SET
          visible_at     = ${storeTime(now)} + ${leaseMs}::bigint * interval '1 millisecond',
          attempts       = m.attempts + 1,
          lease_expiries = m.lease_expiries + (m.lease_token IS NOT NULL)::int,
          lease_token    = gen_random_uuid(),
          leased_by      = ${claimer},
          leased_at      = ${storeTime(now)},
          -- Not a flow slot (a row once claimed under limits that were since removed renews as any other).
          flow_limited   = false
        WHERE m.id = ANY(ARRAY(SELECT id FROM chosen))
        RETURNING m.id, m.queue, m.task, m.payload, m.headers, m.priority, m.attempts, m.max_attempts,
                  m.enqueued_at, m.visible_at, m.lease_token, m.dedup_key, m.last_error, m.lease_expiries,
                  m.attempt_base, m.flow_key
      ), expired_attempts AS (
        ${historyInsert(attemptsTable)}
        SELECT c.id, c.queue, c.task, ${attemptNumber("c")} - 1, coalesce(h.prev_consumer, ''),
               coalesce(h.prev_leased_at, h.visible_at), h.visible_at,
               'lease-expired', ${historyErrors.leaseExpired}::text
        FROM claimed AS c JOIN chosen AS h ON h.id = c.id WHERE h.expired
      )
      -- Always one row at least: how many cancelled rows were dropped rides along (on a row of
      -- NULLs when nothing was claimed), so a claim that only dropped rows is run again.
      SELECT c.id, c.task, c.payload, c.headers, c.priority, c.attempts, c.max_attempts, c.enqueued_at, c.visible_at,
             c.lease_token, c.dedup_key, c.last_error, c.lease_expiries, c.flow_key, h.visible_at AS was_visible_at,
             d.n AS dropped, EXISTS (SELECT 1 FROM ${limitsTable} WHERE queue = ${queue}) AS limited
      FROM (SELECT count(*)::int AS n FROM dropped) AS d
      LEFT JOIN (claimed AS c JOIN chosen AS h ON h.id = c.id) ON true
      ORDER BY h.priority, h.visible_at, c.id`
    return claimsOf(rows, input)
  })

/**
 * One limited claim, in a transaction of its own (a savepoint inside a caller's): the queue's
 * claim lock and its limits, then the limited statement. A queue whose limits are gone runs
 * the plain claim (after this transaction, which held only the lock).
 */
const flowClaim = (ctx: PgContext, input: ClaimInput) =>
  // All of it would be held ahead of a slot: nothing to claim from a limited queue (its limits stay as they are).
  input.limitedLimit === 0 ? Effect.succeed(NOTHING_LIMITED) : ctx.sql.withTransaction(Effect.gen(function*() {
    const rows = yield* lockAndReadLimits(ctx, input.queue)
    const present = rows.filter((row) => row.task !== null)
    if (present.length === 0) return undefined
    const flow: FlowClaimInput = {
      ...input,
      limit: input.limitedLimit,
      own: present.find((row) => row.task === ""),
      tasks: present.filter((row) => row.task !== "")
    }
    const claimed = yield* limitedClaim(ctx, flow)
    yield* QueueMetrics.recordLimitedClaim(input.queue, limitingStages(claimed, input.limitedLimit))
    return claimsOf(claimed, input)
  }))

/** A limited claim that was all ahead: nothing claimed, nothing dropped. */
const NOTHING_LIMITED: ClaimRun = { claims: [], dropped: 0, limited: true }

/** Check a claim's options and read the time it runs at. */
const claimInput = (ctx: PgContext, queue: string, options: ClaimOptions) =>
  Effect.gen(function*() {
    yield* Validate.name("queue", queue)
    yield* Validate.name("consumer", options.consumer)
    const limit = yield* Validate.positiveInt("limit", options.limit, 10_000)
    const limitedLimit = yield* FlowControl.limitedClaimSize(options.ahead, limit)
    const leaseMs = yield* Validate.durationMs("lease", options.lease, { min: defaults.minLeaseMs })
    const now = yield* ctx.currentTime
    const asyncCommit = Option.isNone(yield* Effect.serviceOption(ctx.sql.transactionService))
    return { queue, limit, limitedLimit, leaseMs, consumer: options.consumer, now, asyncCommit } satisfies ClaimInput
  })

/**
 * One claim statement, plain or limited: the queues last seen with limits (`limitedQueues`, per
 * store) go straight to the limited claim; a plain claim that finds limits hands over to it.
 */
const claimOnce = (ctx: PgContext, limitedQueues: Set<string>, input: ClaimInput) =>
  Effect.gen(function*() {
    if (limitedQueues.has(input.queue)) {
      const run = yield* flowClaim(ctx, input)
      if (run !== undefined) return run
      limitedQueues.delete(input.queue)
    }
    const plain = yield* plainClaim(ctx, input)
    if (!plain.limited) return plain
    limitedQueues.add(input.queue)
    return (yield* flowClaim(ctx, input)) ?? plain
  })

/**
 * `claim`: the claim statement, run again while it only deleted cancelled rows.
 *
 * A claim whose picked rows were all cancelled ones (deleted, not claimed) would answer nothing
 * while ready messages wait behind them: it is run again (each run deletes what it dropped, so
 * this ends; bounded all the same).
 */
export const claim = (ctx: PgContext): QueueStoreShape["claim"] => (queue, options) =>
  Effect.gen(function*() {
    const input = yield* claimInput(ctx, queue, options)
    for (let run = 1;; run++) {
      const { claims, dropped } = yield* claimOnce(ctx, ctx.limitedQueues, input)
      if (claims.length > 0 || dropped === 0 || run >= MAX_CLAIM_RUNS) return claims
    }
  }).pipe((e) => ctx.op("claim", { queue, limit: options.limit, consumer: options.consumer }, e, claimAttributes))
