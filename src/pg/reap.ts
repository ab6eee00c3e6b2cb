/**
 * The reaper's statements: the sweep that releases the claims of dead consumers,
 * and forgetting consumer rows nobody has heartbeated for a long time. Both run
 * on the presence pool ({@link PresenceContext}, `pg/presence.ts`).
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { classify, type StoreError } from "../QueueError.ts"
import { attemptNumber, historyInsert } from "./fragments.ts"
import type { PresenceContext } from "./presence.ts"

/** One claim released by the reaper. */
export interface Reaped {
  /** The dead consumer. */
  readonly consumer: string
  readonly host: string
  readonly pid: number
  readonly heartbeatAt: Date
  /** The released message, absent when the dead consumer held nothing (or this row is an execution). */
  readonly messageId: string | null
  readonly queue: string | null
  /** The released workflow execution (`<workflow>/<execution id>`), when this row is one. */
  readonly execution: string | null
}

/** A consumer whose presence lock nobody held at one look: its id and the key its row advertises. */
export interface FreeLock {
  readonly id: string
  readonly lockKey: number
}

/**
 * The reaper's look, every `reapEvery`: the other consumers advertising a lock that no
 * session holds now, on a server up for longer than the stale bound (after a restart every
 * session is new and everybody gets that long to reconnect). `pg_try_advisory_xact_lock` is
 * exclusive, so it is granted only when none of the consumer's presence sessions (each holds
 * the key shared) is left, and it is let go when this statement ends; a session of that
 * consumer taking the key in that instant is refused and tries again. `OFFSET 0` keeps the
 * lock try on the rows the cheap conditions kept (the consumers table is small). No scan of
 * pg_locks, no row locked, nothing written.
 */
export const freeLocks = (ctx: PresenceContext, self: string): Effect.Effect<ReadonlyArray<FreeLock>, StoreError> =>
  Effect.gen(function*() {
    const { consumers, lockClass, sql, staleMs } = ctx
    const rows = yield* sql<{ id: string; lock_key: number }>`
      SELECT c.id, c.lock_key FROM (
        SELECT id, lock_key FROM ${consumers}
        WHERE lock_key IS NOT NULL AND id <> ${self}
          AND pg_postmaster_start_time() < now() - ${staleMs}::bigint * interval '1 millisecond'
        OFFSET 0
      ) AS c
      WHERE pg_try_advisory_xact_lock(${lockClass}::int, c.lock_key)`
    return rows.map((r) => ({ id: r.id, lockKey: r.lock_key }))
  }).pipe(classify("reap probe"))

/**
 * Release the claims of dead consumers, as consumer `self` (never reaped by itself):
 * `only` those (each with the key it was seen advertising, and free), or, without `only`,
 * every consumer whose lock is free now (an operator's or a test's sweep, on one look).
 * One statement decides and releases, atomically:
 *
 * - `free`: the consumers to release, advertising that key still, on a server up for longer
 *   than the stale bound. Materialized so the lock try below runs on these rows only.
 *   `FOR UPDATE ... SKIP LOCKED`: a row being written right now is a live consumer's
 *   heartbeat under way, so it is skipped rather than waited for, and locking re-reads the
 *   latest row version (the key it advertises).
 * - `dead`: those whose lock is free. `pg_try_advisory_xact_lock` (exclusive) is granted only
 *   when none of the consumer's sessions holds the key (they hold it shared), and it is held
 *   until this statement commits, so the consumer cannot re-take it between the check and
 *   the release, and two reapers never release the same consumer twice.
 * - their rows are deleted (a consumer that was in fact alive writes it again with its next
 *   heartbeat), so a dead consumer is handled once, not at every sweep;
 * - every claim still under lease by a dead consumer is made visible now, its token
 *   cleared (the dead holder's fenced writes match nothing), and counted as a lease
 *   expiry. The attempt is not given back: the worker died mid-attempt, exactly as
 *   when its lease runs out, so attempts still bound a message that kills workers.
 *   `o` is the row as it was, for the attempt history, whose attempt is numbered
 *   across redrives (attempt_base + attempts, as every store write numbers it).
 * - the queues of the released messages are announced on the schema's send channel (`woken`),
 *   one notification per queue, as a send announces its queue: every idle consumer of the queue
 *   wakes and claims at once, not only the one whose reaper released (which wakes itself), so
 *   a rerun waits for no poll interval.
 * - every workflow execution a dead runner holds is made runnable now, its token and holder
 *   cleared (the dead run's fenced writes match nothing), and announced on the workflow
 *   channel once (`run`), so another runner replays it at once instead of after its lease.
 *
 * The announcements are delivered at commit, with the release. When the NOTIFY queue is full
 * (a listener stopped reading) the statement runs again without them (`ctx.announcing`): the
 * release matters, the wake-up is best effort (consumers poll).
 */
export const sweep = (
  ctx: PresenceContext,
  self: string,
  only?: ReadonlyArray<FreeLock>
): Effect.Effect<ReadonlyArray<Reaped>, StoreError> =>
  Effect.gen(function*() {
    const { attempts, consumers, lockClass, messages, sql, staleMs } = ctx
    const candidates = only ?? (yield* freeLocks(ctx, self))
    if (candidates.length === 0) return []
    const rows = yield* ctx.announcing((announce) => sql<{
      consumer: string
      host: string
      pid: number
      heartbeat_at: Date
      message_id: bigint | string | null
      queue: string | null
      execution: string | null
    }>`
      WITH free AS MATERIALIZED (
        SELECT c.id, c.host, c.pid, c.lock_key, c.heartbeat_at FROM ${consumers} AS c
        JOIN unnest(${candidates.map((c) => c.id)}::text[], ${candidates.map((c) => c.lockKey)}::int[]) AS w(id, lock_key)
          ON w.id = c.id AND w.lock_key = c.lock_key
        WHERE c.id <> ${self}
          AND pg_postmaster_start_time() < now() - ${staleMs}::bigint * interval '1 millisecond'
        ORDER BY c.id
        LIMIT 100
        FOR UPDATE OF c SKIP LOCKED
      ), dead AS MATERIALIZED (
        SELECT * FROM free WHERE pg_try_advisory_xact_lock(${lockClass}::int, free.lock_key)
      ), forgotten AS (
        DELETE FROM ${consumers} AS c USING dead WHERE c.id = dead.id
      ), released AS (
        UPDATE ${messages} AS m SET
          visible_at     = now(),
          lease_token    = NULL, leased_by = NULL, leased_at = NULL,
          lease_expiries = m.lease_expiries + 1
        FROM ${messages} AS o JOIN dead AS d ON o.leased_by = d.id
        WHERE m.id = o.id AND m.leased_by = d.id AND m.lease_token IS NOT NULL
          AND m.state = 'ready' AND m.visible_at > now()
        RETURNING m.id, m.queue, m.task, ${attemptNumber("m")} AS attempt, d.id AS consumer, o.leased_at
      ), history AS (
        ${historyInsert(attempts)}
        SELECT r.id, r.queue, r.task, r.attempt, r.consumer, coalesce(r.leased_at, now()), now(), 'lease-expired',
               'consumer ' || r.consumer || ' died: its presence sessions ended; released by the reaper'
        FROM released AS r
      ), woken AS (
        SELECT count(pg_notify(${ctx.channel}, q.queue)) AS n FROM (SELECT DISTINCT queue FROM released) AS q WHERE ${announce}::boolean
      ), executions AS (
        UPDATE ${ctx.executions} AS e SET
          lease_token = NULL, leased_by = NULL, status = 'runnable', visible_at = now(), updated_at = now()
        FROM dead AS d
        WHERE e.leased_by = d.id AND e.lease_token IS NOT NULL
        RETURNING e.workflow || '/' || e.execution_id AS execution, d.id AS consumer
      ), announced AS (
        SELECT count(pg_notify(${ctx.workflowChannel}, 'run')) AS n FROM (SELECT 1 FROM executions LIMIT 1) AS one WHERE ${announce}::boolean
      )
      SELECT d.id AS consumer, d.host, d.pid, d.heartbeat_at, r.id AS message_id, r.queue, NULL::text AS execution
      FROM dead AS d LEFT JOIN released AS r ON r.consumer = d.id CROSS JOIN woken
      UNION ALL
      SELECT d.id, d.host, d.pid, d.heartbeat_at, NULL, NULL, x.execution
      FROM dead AS d JOIN executions AS x ON x.consumer = d.id CROSS JOIN announced
      ORDER BY 1, 5, 7`)
    return rows.map((r): Reaped => ({
      consumer: r.consumer,
      host: r.host,
      pid: r.pid,
      heartbeatAt: r.heartbeat_at,
      messageId: r.message_id === null ? null : String(r.message_id),
      queue: r.queue,
      execution: r.execution
    }))
  }).pipe(classify("reap"), Effect.withSpan("leasehold.reap"))

/**
 * Forget rows nobody has heartbeated for `forgetMs` (no lock, or a process that stalled
 * for that long; a live one writes its row again), except `self`'s.
 */
export const forgetConsumers = (ctx: PresenceContext, self: string, forgetMs: number): Effect.Effect<void, StoreError> =>
  ctx.sql`DELETE FROM ${ctx.consumers}
    WHERE id <> ${self} AND heartbeat_at < now() - ${forgetMs}::bigint * interval '1 millisecond'`.pipe(
    Effect.asVoid,
    classify("forget consumers")
  )
