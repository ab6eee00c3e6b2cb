/**
 * The send statements: a bulk INSERT per run of plain messages, one statement per keyed
 * message (dedup key or uniqueness window), and the common single send that announces
 * itself in the same statement.
 *
 * @since 0.1.0
 */
import { Effect, Option } from "effect"
import type { MessageId, SendResult } from "../Message.ts"
import type { QueueStoreShape } from "../QueueStore.ts"
import * as Validate from "../internal/validate.ts"
import type { PreparedMessage } from "../internal/validate.ts"
import type { PgContext } from "./context.ts"
import { storeTime } from "./fragments.ts"
import { foreignTransaction, foreignTransactionOpen } from "./onePool.ts"

/** Rows per INSERT of a batch send: keeps one statement's parameters well under protocol limits. */
const SEND_CHUNK = 500
/**
 * JSON text (UTF-16 code units) per INSERT of a batch send. The batch travels as one jsonb
 * array, and PostgreSQL caps a jsonb value at 268,435,455 bytes; jsonb can take up to 6 bytes
 * per character of JSON text (measured: `[1,1,...]` 6.0, `[[1],...]` 5.0, strings at most 3
 * bytes per code unit), so 32 Mi units stay under the cap (~201 MB at worst) whatever the payloads.
 */
const SEND_CHUNK_CHARS = 32 * 1024 * 1024

/** One message as an element of a batch send's jsonb array (read back by `insertBatch`). */
const batchElement = (m: PreparedMessage): string =>
  `{"t":${JSON.stringify(m.task)},"p":${m.payloadJson},"h":${JSON.stringify(m.headers)},"pr":${m.priority},"d":${m.delayMs},"ma":${m.maxAttempts},"k":${JSON.stringify(m.key)}}`

/**
 * The answer of a keyed insert (dedup key or uniqueness window): the row inserted, or the
 * holder of the key. No row means a concurrent send moved the key between this statement's
 * conflict and its read: the statement is run again, at most five more times.
 */
const untilSettled = (key: "dedup" | "unique") =>
<E, R>(statement: Effect.Effect<ReadonlyArray<{ id: bigint; inserted: boolean }>, E, R>): Effect.Effect<SendResult, E, R> =>
  statement.pipe(
    Effect.flatMap((rows) =>
      rows.length === 0
        ? Effect.fail("race" as const)
        : Effect.succeed<SendResult>({ id: String(rows[0]!.id) as MessageId, deduplicated: !rows[0]!.inserted })
    ),
    Effect.retry({ while: (e) => e === "race", times: 5 }),
    Effect.catchIf((e): e is "race" => e === "race", () => Effect.die(new Error(`${key} insert raced 6 times`)))
  )

// Bulk insert of messages without a dedup key: one statement per chunk.
// jsonb_array_elements WITH ORDINALITY + ORDER BY makes ids follow input order.
// `elements` are the messages as `batchElement` writes them.
const insertBatch = (ctx: PgContext, queue: string, now: Date | null, elements: ReadonlyArray<string>) => {
  const { sql, table } = ctx
  const doc = `[${elements.join(",")}]`
  return sql<{ id: bigint }>`
    INSERT INTO ${table} (queue, task, payload, headers, priority, enqueued_at, visible_at, max_attempts, flow_key)
    SELECT ${queue}, e.doc->>'t', e.doc->'p', e.doc->'h', (e.doc->>'pr')::int,
           ${storeTime(now)},
           ${storeTime(now)} + (e.doc->>'d')::bigint * interval '1 millisecond',
           (e.doc->>'ma')::int, e.doc->>'k'
    FROM jsonb_array_elements(${doc}::jsonb) WITH ORDINALITY AS e(doc, ord)
    ORDER BY e.ord
    RETURNING id`.pipe(
    Effect.map((inserted) =>
      [...inserted].map((r) => BigInt(r.id)).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)).map((id): SendResult => ({
        id: String(id) as MessageId,
        deduplicated: false
      }))
    )
  )
}

// Insert one message with a dedup key, or find the live one holding the key.
// The second branch cannot see a row the first inserted (same snapshot), so
// at most one branch answers; none answers only if the holder vanished
// between the conflict and the read, and then the statement is simply run again.
const insertDeduplicated = ({ sql, table }: PgContext, queue: string, now: Date | null, m: PreparedMessage) =>
  sql<{ id: bigint; inserted: boolean }>`
    WITH ins AS (
      INSERT INTO ${table} (queue, task, payload, headers, priority, enqueued_at, visible_at, max_attempts, dedup_key, flow_key)
      VALUES (${queue}, ${m.task}, ${m.payloadJson}::jsonb, ${JSON.stringify(m.headers)}::jsonb, ${m.priority},
              ${storeTime(now)},
              ${storeTime(now)} + ${m.delayMs}::bigint * interval '1 millisecond',
              ${m.maxAttempts}, ${m.dedupKey}, ${m.key})
      ON CONFLICT (queue, dedup_key) WHERE dedup_key IS NOT NULL AND state = 'ready' DO NOTHING
      RETURNING id
    )
    SELECT id, true AS inserted FROM ins
    UNION ALL
    SELECT id, false AS inserted FROM ${table}
    WHERE queue = ${queue} AND dedup_key = ${m.dedupKey} AND state = 'ready'
    LIMIT 1`.pipe(untilSettled("dedup"))

// Insert one message under a uniqueness window, or find the holder of the window.
// The id is drawn first (nextval of the messages' own sequence) so the reservation can be
// written before the message: the INSERT ... ON CONFLICT on unique_keys takes the key when
// it is free or its window ended, and only then is the message inserted (from `reserved`).
// A live reservation makes `reserved` empty and the last branch answers with its holder.
// A reservation committed by a concurrent send after this statement's snapshot answers
// neither branch: then the statement is run again, like the dedup race above.
const insertUnique = (
  { schema, sql, table, uniqueTable }: PgContext,
  queue: string,
  now: Date | null,
  m: PreparedMessage,
  unique: NonNullable<PreparedMessage["unique"]>
) =>
  sql<{ id: bigint; inserted: boolean }>`
    WITH fresh AS (
      SELECT nextval(${`${schema}.messages_id_seq`}::regclass) AS id
    ), reserved AS (
      INSERT INTO ${uniqueTable} AS u (queue, key, until, message_id)
      SELECT ${queue}, ${unique.key},
             ${storeTime(now)} + ${unique.forMs}::bigint * interval '1 millisecond', fresh.id
      FROM fresh
      ON CONFLICT (queue, key) DO UPDATE SET until = excluded.until, message_id = excluded.message_id
      WHERE u.until <= ${storeTime(now)}
      RETURNING u.message_id
    ), ins AS (
      INSERT INTO ${table} (id, queue, task, payload, headers, priority, enqueued_at, visible_at, max_attempts, flow_key)
      SELECT reserved.message_id, ${queue}, ${m.task}, ${m.payloadJson}::jsonb, ${JSON.stringify(m.headers)}::jsonb, ${m.priority},
             ${storeTime(now)},
             ${storeTime(now)} + ${m.delayMs}::bigint * interval '1 millisecond',
             ${m.maxAttempts}, ${m.key}
      FROM reserved
      RETURNING id
    )
    SELECT id, true AS inserted FROM ins
    UNION ALL
    SELECT message_id AS id, false AS inserted FROM ${uniqueTable}
    WHERE queue = ${queue} AND key = ${unique.key} AND until > ${storeTime(now)}
      AND NOT EXISTS (SELECT 1 FROM reserved)`.pipe(untilSettled("unique"))

// The common single send, ready now, outside any transaction: the row and its announcement in
// one statement, so a waiting consumer hears of it one round trip sooner. The NOTIFY is part of
// the INSERT's own transaction (delivered at its commit, never before the row); nothing else
// of the caller's is in that transaction, so it can endanger nothing but this send, and when
// the NOTIFY queue is full (the commit fails, nothing was written) it is sent again without it.
const insertAnnounced = ({ announcing, channel, sql, table }: PgContext, queue: string, now: Date | null, m: PreparedMessage) =>
  announcing((announce) =>
    sql<{ id: bigint }>`
    WITH ins AS (
      INSERT INTO ${table} (queue, task, payload, headers, priority, enqueued_at, visible_at, max_attempts, flow_key)
      VALUES (${queue}, ${m.task}, ${m.payloadJson}::jsonb, ${JSON.stringify(m.headers)}::jsonb, ${m.priority},
              ${storeTime(now)}, ${storeTime(now)}, ${m.maxAttempts}, ${m.key})
      RETURNING id
    )
    SELECT ins.id FROM ins CROSS JOIN LATERAL (SELECT CASE WHEN ${announce}::boolean THEN pg_notify(${channel}, ${queue}) END) AS announced`
  ).pipe(
    Effect.map((rows): ReadonlyArray<SendResult> => rows.map((r) => ({ id: String(r.id) as MessageId, deduplicated: false })))
  )

/**
 * The writes of a send of several messages (or of one that is delayed, keyed, or inside a
 * transaction), in input order. Consecutive messages without a dedup key go in one bulk
 * INSERT (at most SEND_CHUNK rows and SEND_CHUNK_CHARS of JSON each); keyed ones one by one.
 */
const writeAll = (ctx: PgContext, queue: string, now: Date | null, prepared: ReadonlyArray<PreparedMessage>) =>
  Effect.gen(function*() {
    const { channel, sql } = ctx
    const results: Array<SendResult> = []
    let run: Array<string> = []
    let runChars = 0
    const flush = Effect.suspend(() => {
      const rows = run
      run = []
      runChars = 0
      return rows.length === 0 ? Effect.void : Effect.map(insertBatch(ctx, queue, now, rows), (r) => {
        results.push(...r)
      })
    })
    for (const m of prepared) {
      if (m.dedupKey === null && m.unique === null) {
        const element = batchElement(m)
        if (run.length > 0 && runChars + element.length + 1 > SEND_CHUNK_CHARS) yield* flush
        run.push(element)
        runChars += element.length + 1
        if (run.length >= SEND_CHUNK) yield* flush
      } else {
        yield* flush
        results.push(yield* (m.unique === null ? insertDeduplicated(ctx, queue, now, m) : insertUnique(ctx, queue, now, m, m.unique)))
      }
    }
    yield* flush
    // Wake idle consumers of this queue when something is ready now. Sent after the
    // outermost transaction commits (the caller's, if any; at once without one), on a
    // statement of its own: best effort (a consumer also polls), so it can neither fail
    // the send nor abort the caller's transaction, and it is never heard before the rows.
    if (prepared.some((m) => m.delayMs === 0)) {
      yield* sql.afterCommit(Effect.ignore(sql`SELECT pg_notify(${channel}, ${queue})`))
    }
    return results
  })

/** `send`: checked, refused inside another client's transaction (the one-pool rule), then written. */
export const send = (ctx: PgContext): QueueStoreShape["send"] => (queue, messages) =>
  Effect.gen(function*() {
    const { currentTime, limits, sql } = ctx
    const prepared = yield* Validate.prepareSend(queue, messages, limits)
    // Atomic with the caller's transaction only on the store's own client: refuse to
    // pretend otherwise (a commit of its own would survive the caller's rollback).
    const context = yield* Effect.context<never>()
    if (foreignTransactionOpen(context, sql.transactionService.key)) return yield* Effect.fail(foreignTransaction(queue))
    if (prepared.length === 0) return []
    const now = yield* currentTime
    const single = prepared.length === 1 ? prepared[0]! : undefined
    if (single !== undefined && single.dedupKey === null && single.unique === null && single.delayMs === 0) {
      const inTransaction = yield* Effect.serviceOption(sql.transactionService)
      if (Option.isNone(inTransaction)) return yield* insertAnnounced(ctx, queue, now, single)
    }
    const write = writeAll(ctx, queue, now, prepared)
    // One statement needs no transaction; several must land together.
    return yield* (prepared.length === 1 ? write : sql.withTransaction(write))
  }).pipe((e) => ctx.op("send", { queue, count: messages.length }, e))
