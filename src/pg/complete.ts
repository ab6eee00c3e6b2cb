/**
 * The finishing write: `complete`, many finishing writes and their history records in one
 * statement, each fenced by `(id, lease_token)`, run on the lease pool.
 *
 * @since 0.1.0
 */
import * as PgTypes from "@effect/sql-pg/PgTypes"
import { Effect } from "effect"
import type { SqlClient } from "effect/sql"
import type { Completed, Completion, QueueStoreShape } from "../QueueStore.ts"
import * as AttemptResult from "../internal/attemptResult.ts"
import * as Validate from "../internal/validate.ts"
import type { PgContext } from "./context.ts"
import { array, historyInsert, storeTime, textArray } from "./fragments.ts"
import { announceAfterCommit, announceEnded, type Ended } from "./lifecycle.ts"
import { ids } from "./rows.ts"

/** The runs a `complete` ended, as its statement's `ended` CTE tells them (for `announceAfterCommit`). */
export const endedOf = (completions: ReadonlyArray<Completion>, completed: Completed): ReadonlyArray<Ended> => {
  const held = new Set(completed.held)
  const cancelled = new Set(completed.cancelled)
  return completions.flatMap((c): ReadonlyArray<Ended> => {
    if (!held.has(c.ref.id)) return []
    const f = c.finish._tag
    const outcome = cancelled.has(c.ref.id)
      ? "cancelled"
      : f === "Ack" ? "completed" : f === "Retry" ? "retried" : f === "DeadLetter" ? "dead-lettered" : undefined
    return outcome === undefined ? [] : [{ id: c.ref.id, queue: c.queue, task: c.task, outcome }]
  })
}

/** A finishing write's span attributes: the batch's size, and for one message, which and how it ends. */
const completeAttributes = (completions: ReadonlyArray<Completion>): Record<string, unknown> => {
  if (completions.length !== 1) return { count: completions.length }
  const c = completions[0]!
  return { count: 1, queue: c.queue, task: c.task, messageId: c.ref.id, attempt: c.attempt, finish: c.finish._tag }
}

/**
 * Many finishing writes and their history records in one statement, one commit.
 * The completions travel as one array per column. Acks (and cancels) are a fenced DELETE; the
 * rest one fenced UPDATE whose columns follow the kind (a retry: visible after its delay,
 * its error kept; a release: visible now, the attempt given back; a dead letter: dead, with
 * its reason and time); both RETURN the ids that still
 * matched their token, and the history INSERT reads those to tell each
 * record's outcome. The CTEs touch disjoint rows (one kind per message).
 */
export const complete = (ctx: PgContext): QueueStoreShape["complete"] => completeOn(ctx, ctx.leaseSql, "statement")

/**
 * {@link complete} on `client`: the lease pool for the finishing writes of the consumer, the main
 * client for a commit step's (`pg/commit.ts`), whose write joins the transaction it runs in. The
 * runs it ends are announced in the statement (`statement`: it is a transaction of its own, run
 * again without the NOTIFY should the NOTIFY queue be full), or after the caller's commit
 * (`after-commit`: a commit step's, see `announceAfterCommit`).
 */
export const completeOn = (ctx: PgContext, client: SqlClient.SqlClient, announceIn: "statement" | "after-commit") => (completions: ReadonlyArray<Completion>) =>
  Effect.gen(function*() {
    const { attemptsTable, currentTime, table } = ctx
    const leaseSql = client
    if (completions.length === 0) return { held: [], cancelled: [] }
    const now = yield* currentTime
    // One array per column (unnest builds the rows): binary parameters, no JSON to write or parse.
    const n = completions.length
    const id = new Array<string>(n), token = new Array<string>(n), kind = new Array<string>(n)
    const delayMs = new Array<number>(n), lastError = new Array<string | null>(n), reason = new Array<string | null>(n)
    const queue = new Array<string>(n), task = new Array<string>(n), attempt = new Array<number>(n)
    const consumer = new Array<string>(n), startedAt = new Array<Date>(n), outcome = new Array<string>(n)
    const error = new Array<string | null>(n), result = new Array<string | null>(n)
    for (let k = 0; k < n; k++) {
      const c = completions[k]!
      const f = c.finish
      id[k] = c.ref.id
      token[k] = c.ref.leaseToken
      kind[k] = f._tag
      delayMs[k] = f._tag === "Retry" ? Math.round(f.delayMs) : 0
      lastError[k] = f._tag === "Retry"
        ? Validate.boundedText(f.error)
        : f._tag === "DeadLetter" && f.error !== undefined ? Validate.boundedText(f.error) : null
      reason[k] = f._tag === "DeadLetter" ? Validate.boundedText(f.reason) : null
      queue[k] = c.queue
      task[k] = c.task
      attempt[k] = c.attempt
      consumer[k] = c.consumer
      startedAt[k] = c.startedAt
      outcome[k] = c.outcome
      error[k] = c.error === null ? null : Validate.boundedText(c.error)
      result[k] = c.result === undefined ? null : AttemptResult.bounded(c.result)
    }
    // The arrays reach unnest through a sub-select that is never flattened (OFFSET 0): a custom
    // plan then cannot see their lengths either, so it costs what the generic plan costs and the
    // generic plan is kept, planned once per connection. Otherwise every batch smaller than the
    // generic plan's guess of 10 rows was planned anew (~0.7 ms, more than it takes to run).
    const statement = (announce: boolean) => leaseSql<{ id: bigint; cancelled: boolean }>`
      WITH items AS (
        SELECT u.* FROM (
          SELECT ${textArray(id)}::bigint[] AS id, ${array(token, PgTypes.OID.uuid)} AS token, ${textArray(kind)} AS kind,
                 ${array(delayMs, PgTypes.OID.float8)}::bigint[] AS delay_ms, ${textArray(lastError)} AS last_error,
                 ${textArray(reason)} AS reason, ${textArray(queue)} AS queue, ${textArray(task)} AS task,
                 ${array(attempt, PgTypes.OID.int4)} AS attempt, ${textArray(consumer)} AS consumer,
                 ${array(startedAt, PgTypes.OID.timestamptz)} AS started_at, ${textArray(outcome)} AS outcome,
                 ${textArray(error)} AS error, ${textArray(result)}::jsonb[] AS result
          OFFSET 0
        ) AS a, unnest(a.id, a.token, a.kind, a.delay_ms, a.last_error, a.reason, a.queue, a.task, a.attempt,
                       a.consumer, a.started_at, a.outcome, a.error, a.result)
          AS u(id, token, kind, delay_ms, last_error, reason, queue, task, attempt, consumer, started_at, outcome, error, result)
      ), handed AS (
        -- A retry, release or dead letter chooses between writing and deleting by the cancel flag,
        -- read here under a row lock: the writes below read their rows as of the statement's start,
        -- so one that waited on a cancel's lock would decide on the flag as it was before the cancel
        -- and match neither branch once the lock is granted (issue 24, item 7). Id order, as cancels lock.
        SELECT m.id, m.cancel_requested_at IS NOT NULL AS cancel_asked
        FROM ${table} AS m JOIN items AS i ON m.id = i.id AND m.lease_token = i.token
        WHERE i.kind IN ('Retry', 'DeadLetter', 'Release')
        ORDER BY m.id
        FOR UPDATE OF m
      ), acked AS (
        -- A retry, release or dead letter of a message whose cancel was asked for while it ran
        -- (the handler ended before the flag reached it) is a cancel: deleted, never run again.
        DELETE FROM ${table} AS m USING items AS i
        WHERE m.id = i.id AND m.lease_token = i.token
          AND (i.kind IN ('Ack', 'Cancel') OR m.id IN (SELECT id FROM handed WHERE cancel_asked))
        RETURNING m.id, m.attempt_base, i.kind <> 'Ack' AS cancelled
      ), updated AS (
        UPDATE ${table} AS m SET
          visible_at  = CASE WHEN i.kind IN ('Retry', 'Release')
                             THEN ${storeTime(now)} + i.delay_ms * interval '1 millisecond'
                             ELSE m.visible_at END,
          attempts    = CASE WHEN i.kind = 'Release' THEN greatest(m.attempts - 1, 0)
                             WHEN i.kind = 'DeadLetter' THEN least(m.attempts, m.max_attempts)
                             ELSE m.attempts END,
          last_error  = coalesce(i.last_error, m.last_error),
          state       = CASE WHEN i.kind = 'DeadLetter' THEN 'dead' ELSE m.state END,
          dead_reason = CASE WHEN i.kind = 'DeadLetter' THEN i.reason ELSE m.dead_reason END,
          dead_at     = CASE WHEN i.kind = 'DeadLetter' THEN ${storeTime(now)} ELSE m.dead_at END,
          lease_token = NULL, leased_by = NULL, leased_at = NULL
        FROM items AS i
        WHERE i.kind IN ('Retry', 'DeadLetter', 'Release') AND m.id = i.id AND m.lease_token = i.token
          AND m.id IN (SELECT id FROM handed WHERE NOT cancel_asked)
        RETURNING m.id, m.attempt_base
      ), held AS (
        SELECT id, attempt_base, cancelled FROM acked
        UNION ALL SELECT id, attempt_base, false FROM updated
      ), earlier AS (
        -- A retried write (the first one's commit landed, its answer was lost) finds its own
        -- history record: same message, consumer, start and error, this outcome, cancelled
        -- or lease-lost. It answers as that record says and records nothing more. Only a
        -- message whose write matched nothing looks (rare). A LATERAL probe per entry, by the
        -- (message_id, id) index: never a join that could scan the whole history.
        SELECT i.id, e.outcome
        FROM items AS i CROSS JOIN LATERAL (
          SELECT a.outcome FROM ${attemptsTable} AS a
          WHERE a.message_id = i.id AND a.consumer = i.consumer AND a.started_at = i.started_at
            AND a.error IS NOT DISTINCT FROM i.error AND a.outcome IN (i.outcome, 'cancelled', 'lease-lost')
          LIMIT 1
        ) AS e
        WHERE NOT EXISTS (SELECT 1 FROM held AS h WHERE h.id = i.id)
      ), recorded AS (
        -- Joined to what the writes returned (their rows' redrive base, the history numbering
        -- attempts on from it): only a message whose lease was lost looks its base up.
        ${historyInsert(attemptsTable, { result: true })}
        SELECT i.id, i.queue, i.task,
               i.attempt + coalesce(h.attempt_base, (SELECT b.attempt_base FROM ${table} AS b WHERE b.id = i.id), 0),
               i.consumer, i.started_at, ${storeTime(now)},
               CASE WHEN h.cancelled THEN 'cancelled' WHEN h.id IS NOT NULL THEN i.outcome ELSE 'lease-lost' END,
               i.error, i.result
        FROM items AS i LEFT JOIN held AS h ON h.id = i.id
        WHERE NOT EXISTS (SELECT 1 FROM earlier AS e WHERE e.id = i.id)
      ), ended AS (
        -- The runs that ended, for callers awaiting them and event streams: an ack completed, a
        -- retry retried, a dead letter dead-lettered, anything deleted as cancelled cancelled (a
        -- release ends nothing). A retried write that found its earlier record was announced then.
        SELECT h.id, i.queue, i.task,
               CASE WHEN h.cancelled THEN 'cancelled' WHEN i.kind = 'Ack' THEN 'completed'
                    WHEN i.kind = 'Retry' THEN 'retried' ELSE 'dead-lettered' END AS outcome
        FROM held AS h JOIN items AS i ON i.id = h.id
        WHERE h.cancelled OR i.kind IN ('Ack', 'Retry', 'DeadLetter')
      ), announced AS (
        -- Delivered at this statement's commit, never for a write that rolled back; read below.
        ${announceEnded(ctx, announce, now)}
      )
      SELECT id, cancelled FROM held CROSS JOIN announced
      UNION ALL SELECT id, outcome = 'cancelled' FROM earlier WHERE outcome <> 'lease-lost'`
    const inStatement = announceIn === "statement" && ctx.announceEnds
    const rows = yield* (inStatement ? ctx.announcing(statement) : statement(false))
    const completed = { held: ids(rows), cancelled: ids(rows.filter((row) => row.cancelled)) }
    yield* notifyReleased(ctx, completions, completed)
    if (announceIn === "after-commit") yield* announceAfterCommit(ctx, endedOf(completions, completed))
    return completed
  }).pipe((e) => ctx.op("complete", completeAttributes(completions), e))

/**
 * Wake idle consumers of the queues whose messages a `complete` released (ready again at
 * once, as a shutting-down worker's are), and of the queues with flow limits a finished message
 * gave a slot back to: a peer claims them now, not at its next poll. After the commit, on a
 * statement of its own, best effort, as a send's notification.
 */
export const notifyReleased = ({ channel, limitedQueues, sql }: PgContext, completions: ReadonlyArray<Completion>, completed: Completed) => {
  // The common flush (acks on queues without limits) wakes no one: found without a set of what landed.
  const candidates = completions.filter((c) => limitedQueues.has(c.queue) || c.finish._tag === "Release")
  if (candidates.length === 0) return Effect.void
  const landed = new Set(completed.held)
  const queues = [...new Set(candidates.filter((c) =>
    landed.has(c.ref.id) &&
    (limitedQueues.has(c.queue) || !completed.cancelled.includes(c.ref.id))
  ).map((c) => c.queue))]
  return queues.length === 0
    ? Effect.void
    : sql.afterCommit(Effect.ignore(sql`SELECT pg_notify(${channel}, q) FROM unnest(${textArray(queues)}) AS q`))
}

