/**
 * The dashboard's figures (`Insights`): finished attempts per minute, read from the attempt
 * history, and the queue depths sampled into `depth_samples` (migration 13), one process at
 * a time.
 *
 * @since 0.5.0
 */
import * as PgTypes from "@effect/sql-pg/PgTypes"
import { Effect } from "effect"
import type { InsightsShape } from "../Insights.ts"
import { hash31 } from "../internal/hash.ts"
import type { PgContext } from "./context.ts"
import { array, storeTime, textArray } from "./fragments.ts"

/** Rows one throughput answer holds at most (a day of minutes for about 14 tasks). */
const THROUGHPUT_ROWS = 20_000
/** Samples one depth answer holds at most. */
const DEPTH_ROWS = 50_000

/** The advisory lock (single-key form) the process storing a depth sample holds for its statement. */
export const depthLockKey = (schema: string): number => hash31(`leasehold.depth.${schema}`)

const samplesTable = ({ schema, sql }: PgContext) => sql(`${schema}.depth_samples`)

/**
 * `throughput`: the history's rows of the last minutes, counted per minute, queue, task and
 * outcome in one pass. The time range is read through the BRIN index on `ended_at`
 * (migration 10); both lease outcomes (lost by the holder, expired and reclaimed) count as
 * lease-lost. The window starts at a whole minute, so the first bucket is complete.
 */
export const throughput = (ctx: PgContext): InsightsShape["throughput"] => ({ minutes, queue }) =>
  Effect.gen(function*() {
    const { attemptsTable, currentTime, sql } = ctx
    const now = yield* currentTime
    const rows = yield* sql<{
      minute: Date; queue: string; task: string; completed: number; retried: number; dead_lettered: number; lease_lost: number; cancelled: number; now: Date
    }>`
      WITH c AS (SELECT ${storeTime(now)} AS now)
      SELECT date_trunc('minute', a.ended_at) AS minute, a.queue, a.task,
             count(*) FILTER (WHERE a.outcome = 'acked')::int AS completed,
             count(*) FILTER (WHERE a.outcome = 'retried')::int AS retried,
             count(*) FILTER (WHERE a.outcome = 'dead-lettered')::int AS dead_lettered,
             count(*) FILTER (WHERE a.outcome IN ('lease-lost', 'lease-expired'))::int AS lease_lost,
             count(*) FILTER (WHERE a.outcome = 'cancelled')::int AS cancelled,
             (SELECT now FROM c) AS now
      FROM ${attemptsTable} AS a
      WHERE a.ended_at >= date_trunc('minute', (SELECT now FROM c)) - (${minutes}::int - 1) * interval '1 minute'
        AND (${queue ?? null}::text IS NULL OR a.queue = ${queue ?? null})
        AND a.outcome <> 'redriven' AND a.outcome <> 'released'
      GROUP BY 1, 2, 3
      ORDER BY 1, 2, 3
      LIMIT ${THROUGHPUT_ROWS}`
    const at = rows[0]?.now ?? (yield* sql<{ now: Date }>`SELECT ${storeTime(now)} AS now`)[0]!.now
    return {
      now: at,
      rows: rows.map((r) => ({
        minute: r.minute, queue: r.queue, task: r.task, completed: r.completed, retried: r.retried,
        deadLettered: r.dead_lettered, leaseLost: r.lease_lost, cancelled: r.cancelled
      }))
    }
  }).pipe((e) => ctx.op("throughput", { minutes }, e))

/** `depthHistory`: a time range of the samples, through their key (time first). */
export const depthHistory = (ctx: PgContext): InsightsShape["depthHistory"] => ({ minutes, queue }) =>
  Effect.gen(function*() {
    const now = yield* ctx.currentTime
    const [clock] = yield* ctx.sql<{ now: Date }>`SELECT ${storeTime(now)} AS now`
    const rows = yield* ctx.sql<{
      at: Date; queue: string; ready: number; delayed: number; in_flight: number; dead: number; oldest_ready_age_ms: string | bigint
    }>`
      SELECT at, queue, ready, delayed, in_flight, dead, oldest_ready_age_ms FROM ${samplesTable(ctx)}
      WHERE at >= ${clock!.now}::timestamptz - ${minutes}::int * interval '1 minute'
        AND (${queue ?? null}::text IS NULL OR queue = ${queue ?? null})
      ORDER BY at, queue
      LIMIT ${DEPTH_ROWS}`
    return {
      now: clock!.now,
      samples: rows.map((r) => ({
        at: r.at, queue: r.queue, ready: r.ready, delayed: r.delayed, inFlight: r.in_flight, dead: r.dead,
        oldestReadyAgeMs: Number(r.oldest_ready_age_ms)
      }))
    }
  }).pipe((e) => ctx.op("depthHistory", { minutes }, e))

/** `depthSampleAge`: the newest sample's age, read from the end of the key. */
export const depthSampleAge = (ctx: PgContext): InsightsShape["depthSampleAge"] =>
  Effect.gen(function*() {
    const now = yield* ctx.currentTime
    const [row] = yield* ctx.sql<{ age_ms: number | null }>`
      SELECT (extract(epoch FROM ${storeTime(now)} - max(at)) * 1000)::float8 AS age_ms FROM ${samplesTable(ctx)}`
    return row?.age_ms ?? undefined
  }).pipe((e) => ctx.op("depthSampleAge", {}, e))

/**
 * `recordDepths`: two statements in one transaction. The transaction-level advisory lock makes
 * one process the sampler of the moment (one that finds it taken stores nothing). Under it, no
 * sample when the latest is younger than `everyMs` (several processes each sampling every
 * interval store one sample per interval between them); the same turn deletes the samples past
 * retention (few: one sample's worth per turn once it has caught up). The lock is taken by a
 * statement of its own, before the one that looks for a recent sample: a statement reads as of
 * its start, so one that took the lock itself could have begun before the last holder's sample
 * committed (and the lock was freed), not see it, and store a second (seen in CI, three samplers
 * at once storing two).
 */
export const recordDepths = (ctx: PgContext): InsightsShape["recordDepths"] => (depths, everyMs, retentionMs) =>
  ctx.sql.withTransaction(Effect.gen(function*() {
    const now = yield* ctx.currentTime
    const table = samplesTable(ctx)
    const int = (values: ReadonlyArray<number>) => array(values, PgTypes.OID.int4)
    const [lock] = yield* ctx.sql<{ got: boolean }>`SELECT pg_try_advisory_xact_lock(${depthLockKey(ctx.schema)}::bigint) AS got`
    if (lock?.got !== true) return false
    const [row] = yield* ctx.sql<{ sampled: boolean }>`
      WITH c AS (
        SELECT ${storeTime(now)} AS now
      ), due AS (
        SELECT NOT EXISTS (
          SELECT 1 FROM ${table} WHERE at > (SELECT now FROM c) - ${everyMs}::bigint * interval '1 millisecond'
        ) AS go
      ), stored AS (
        INSERT INTO ${table} (at, queue, ready, delayed, in_flight, dead, oldest_ready_age_ms)
        SELECT (SELECT now FROM c), d.queue, d.ready, d.delayed, d.in_flight, d.dead, d.age
        FROM unnest(${textArray(depths.map((d) => d.queue))}::text[], ${int(depths.map((d) => d.ready))}, ${int(depths.map((d) => d.delayed))},
                    ${int(depths.map((d) => d.inFlight))}, ${int(depths.map((d) => d.dead))},
                    ${textArray(depths.map((d) => String(Math.round(d.oldestReadyAgeMs))))}::bigint[])
          AS d(queue, ready, delayed, in_flight, dead, age)
        WHERE (SELECT go FROM due)
        ON CONFLICT DO NOTHING
        RETURNING 1
      ), expired AS (
        DELETE FROM ${table}
        WHERE (SELECT go FROM due) AND at < (SELECT now FROM c) - ${retentionMs}::bigint * interval '1 millisecond'
        RETURNING 1
      )
      SELECT (SELECT go FROM due) AS sampled, (SELECT count(*) FROM stored) + (SELECT count(*) FROM expired) AS n`
    return row?.sampled === true
  })).pipe((e) => ctx.op("recordDepths", { queues: depths.length }, e))
