/**
 * The dead letters: listing, redriving (with a `redriven` history row) and purging the
 * messages a `DeadLetterFilter` selects.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { DeadLetterFilter, QueueStoreShape } from "../QueueStore.ts"
import type { PgContext } from "./context.ts"
import { historyInsert, storeTime } from "./fragments.ts"
import { ids, type MessageRow, toDeadLetter } from "./rows.ts"

// Dead-letter filters: a NULL parameter means "any".
const filterIds = (filter: DeadLetterFilter) => filter.ids === undefined ? null : JSON.stringify(filter.ids)
const filterQueue = (filter: DeadLetterFilter) => filter.queue ?? null

/** `redrive`: dead messages ready again, their attempts counted on from a new base. */
export const redrive = (ctx: PgContext): QueueStoreShape["redrive"] => (filter) =>
  Effect.gen(function*() {
    const { attemptsTable, currentTime, sql, table } = ctx
    const now = yield* currentTime
    // A redriven message whose dedup key is now held by a live message gives
    // its key up rather than fail the redrive or merge with the other message. Of several
    // redriven together with one key (same queue), only the first to die (then lowest id)
    // may keep it, as the memory store redrives them one by one: the others give it up too
    // (two would break the one-live-holder index, and the whole redrive would fail).
    // The history gets a `redriven` row numbered as the last attempt before it; the
    // attempts of the new drive are numbered on from there (attempt_base).
    const rows = yield* sql<{ id: bigint }>`
      WITH picked AS (
        SELECT m.id, m.dedup_key IS NOT NULL AND row_number() OVER (
                 PARTITION BY m.queue, m.dedup_key ORDER BY m.dead_at, m.id
               ) = 1 AND NOT EXISTS (
                 SELECT 1 FROM ${table} AS o
                 WHERE o.queue = m.queue AND o.dedup_key = m.dedup_key AND o.state = 'ready'
               ) AS keeps_key
        FROM ${table} AS m
        WHERE m.state = 'dead'
          AND (${filterQueue(filter)}::text IS NULL OR m.queue = ${filterQueue(filter)})
          AND (${filterIds(filter)}::jsonb IS NULL OR m.id IN (SELECT jsonb_array_elements_text(${filterIds(filter)}::jsonb)::bigint))
      ), redriven AS (
      UPDATE ${table} AS m SET
        state = 'ready', attempt_base = m.attempt_base + m.attempts, attempts = 0, lease_expiries = 0, dead_reason = NULL, dead_at = NULL,
        visible_at = ${storeTime(now)},
        dedup_key = CASE WHEN p.keeps_key THEN m.dedup_key ELSE NULL END
      FROM picked AS p
      WHERE m.id = p.id AND m.state = 'dead'
      RETURNING m.id, m.queue, m.task, m.attempt_base
      ), recorded AS (
        ${historyInsert(attemptsTable)}
        SELECT id, queue, task, attempt_base, '', ${storeTime(now)}, ${storeTime(now)},
               'redriven', NULL
        FROM redriven
      )
      SELECT id FROM redriven ORDER BY id`
    return ids(rows)
  }).pipe((e) => ctx.op("redrive", { queue: filter.queue ?? "*" }, e))

/** `purge`: dead messages deleted. */
export const purge = ({ op, sql, table }: PgContext): QueueStoreShape["purge"] => (filter) =>
  sql<{ id: bigint }>`
    DELETE FROM ${table} AS m
    WHERE m.state = 'dead'
      AND (${filterQueue(filter)}::text IS NULL OR m.queue = ${filterQueue(filter)})
      AND (${filterIds(filter)}::jsonb IS NULL OR m.id IN (SELECT jsonb_array_elements_text(${filterIds(filter)}::jsonb)::bigint))
    RETURNING m.id`.pipe(Effect.map(ids), (e) => op("purge", { queue: filter.queue ?? "*" }, e))

/** `deadLetters`: dead messages in the order they died. */
export const deadLetters = ({ op, sql, table }: PgContext): QueueStoreShape["deadLetters"] => (filter) =>
  sql<MessageRow>`
    SELECT * FROM ${table} AS m
    WHERE m.state = 'dead'
      AND (${filterQueue(filter)}::text IS NULL OR m.queue = ${filterQueue(filter)})
      AND (${filterIds(filter)}::jsonb IS NULL OR m.id IN (SELECT jsonb_array_elements_text(${filterIds(filter)}::jsonb)::bigint))
    ORDER BY m.dead_at, m.id
    LIMIT ${filter.limit ?? 100}`.pipe(
    Effect.map((rows) => rows.map(toDeadLetter)),
    (e) => op("deadLetters", { queue: filter.queue ?? "*" }, e)
  )
