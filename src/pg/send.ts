/**
 * The send statements: a bulk INSERT per run of plain messages (the payloads and each column that
 * varies as one array, read by unnest), one statement per keyed message (dedup key or uniqueness window). A send that is one
 * statement outside any transaction (the common single send, a batch of up to SEND_CHUNK plain
 * messages) announces itself in that statement: one round trip, one commit.
 *
 * @since 0.1.0
 */
import * as PgTypes from "@effect/sql-pg/PgTypes"
import { Effect, Option } from "effect"
import * as Statement from "effect/sql/Statement"
import type { MessageId, SendResult } from "../Message.ts"
import type { QueueStoreShape } from "../QueueStore.ts"
import * as Validate from "../internal/validate.ts"
import type { PreparedMessage } from "../internal/validate.ts"
import type { PgContext } from "./context.ts"
import { array, storeTime, textArray } from "./fragments.ts"
import { foreignTransaction, foreignTransactionOpen } from "./onePool.ts"

/**
 * Rows per INSERT of a batch send. The rows travel as one array per column that varies (the
 * payloads always; a fixed number of parameters whatever the count), so this only bounds one
 * statement's work and memory; a call of this many plain messages outside a transaction is one
 * statement, one commit.
 */
export const SEND_CHUNK = 1_000
/**
 * JSON text (UTF-16 code units, payloads and headers) per INSERT of a batch send. The payloads
 * travel as one `text[]` read as `jsonb[]`, and PostgreSQL caps one array value at 1 GB; jsonb
 * can take up to 6 bytes per character of JSON text (measured: `[1,1,...]` 6.0, `[[1],...]`
 * 5.0, strings at most 3 bytes per code unit), so 32 Mi units stay far under it (~201 MB at
 * worst) whatever the payloads.
 */
const SEND_CHUNK_CHARS = 32 * 1024 * 1024

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

/** A run of plain messages (no dedup key, no uniqueness window) written by one `insertBatch`. */
interface Run {
  readonly messages: ReadonlyArray<PreparedMessage>
  /** Their headers as jsonb text, in the same order. */
  readonly headers: ReadonlyArray<string>
  /** Whether a message of the run is ready now, so its statement announces the queue. */
  readonly readyNow: boolean
}

/**
 * A column of a batch, as the one-row sub-select `a` of `insertBatch` holds it: one value when
 * every message has the same (the usual case: `sendMany` gives one task and one set of
 * options), read by every row as `a.<name>`; else an array that unnest reads beside the
 * payloads, `r.<name>`. Which columns vary decides the statement's text (at most 64 texts,
 * each prepared once per connection); a shared value is cast once per statement, not per row.
 */
interface BatchColumn {
  readonly name: string
  /** In the sub-select: `$n<cast> AS <name>`, or `$n<cast>[] AS <name>` (an array) when it varies. */
  readonly source: Statement.Fragment
  /** Whether the values vary (an array read by unnest). */
  readonly varying: boolean
}

/** Whether every value is the first one. */
const allSame = <A>(values: ReadonlyArray<A>): boolean => {
  const first = values[0]
  for (let k = 1; k < values.length; k++) if (values[k] !== first) return false
  return true
}

/** The parameter types of a batch's columns: the scalar's, and the element OID of the array. */
const types = {
  text: { scalar: PgTypes.text, oid: PgTypes.OID.text },
  int4: { scalar: PgTypes.int4, oid: PgTypes.OID.int4 },
  float8: { scalar: PgTypes.float8, oid: PgTypes.OID.float8 }
} as const

/**
 * One column of a batch (see {@link BatchColumn}). `name` and `cast` are code, never input:
 * `cast` turns the parameter's type into the column's (`::jsonb`, `::bigint`, or nothing).
 */
const batchColumn = <A>(
  name: string,
  values: ReadonlyArray<A>,
  type: { readonly scalar: (value: A) => PgTypes.Parameter; readonly oid: number },
  cast: string
): BatchColumn => {
  const varying = !allSame(values)
  const parameter = varying ? array(values, type.oid) : type.scalar(values[0]!)
  const castTo = varying && cast !== "" ? `${cast}[]` : cast
  const source = Statement.fragment([Statement.parameter(parameter), Statement.literal(`${castTo} AS ${name}`)])
  return { name, source, varying }
}

/** A column's value in a row of `insertBatch`: the shared `a.<name>` or the row's `r.<name>`. */
const valueOf = (column: BatchColumn) => Statement.fragment([Statement.literal(`${column.varying ? "r" : "a"}.${column.name}`)])

/**
 * The ids of a batch, in input order, from what its statement answered: the lowest id and the
 * count when the ids are consecutive (one sender at a time: the usual case), else every id.
 */
const batchIds = (row: { readonly lo: bigint; readonly n: bigint; readonly ids: string | null }): ReadonlyArray<SendResult> => {
  if (row.ids !== null) return row.ids.split(",").map((id): SendResult => ({ id: id as MessageId, deduplicated: false }))
  const count = Number(row.n)
  const results: Array<SendResult> = new Array(count)
  if (row.lo + row.n <= BigInt(Number.MAX_SAFE_INTEGER)) {
    const lo = Number(row.lo)
    for (let k = 0; k < count; k++) results[k] = { id: String(lo + k) as MessageId, deduplicated: false }
  } else {
    for (let k = 0; k < count; k++) results[k] = { id: String(row.lo + BigInt(k)) as MessageId, deduplicated: false }
  }
  return results
}

// Bulk insert of messages without a dedup key: one statement per run. The payloads travel as
// one array (binary text[], each parsed once as jsonb), read by unnest; a column every message
// shares is one parameter, cast once in the one-row sub-select `a` (as is the time it runs at);
// a column that varies is one more array read by the same unnest (see BatchColumn). Rows are
// inserted in array order, so ids follow input order: the only row source is one function
// scan of the arrays, laterally joined to the one-row sub-select, and nothing in the plan can
// reorder its rows (no join of its own, no sort, no hash, never parallel: an INSERT's plan has
// no workers); ids are drawn by nextval in insertion order. (The statement used to number the
// rows WITH ORDINALITY and sort on that number: a sort of the whole batch the order never
// needed.) The sub-select is never flattened (OFFSET 0), so the generic plan is kept (as
// complete.ts explains). The ids come back as the lowest and the count when they are
// consecutive (one row, no list to build or read); otherwise (another send drew ids in
// between) as one text of ascending ids, built only then (a sub-select in a CASE runs on
// demand). When `announce`, the statement also NOTIFYs the queue, once (the aggregate makes
// one row): delivered at its commit, never before the rows; only set when the statement is a
// transaction of its own (see `send`).
const insertBatch = (ctx: PgContext, queue: string, now: Date | null, run: Run, announce: boolean) => {
  const { channel, sql, table } = ctx
  const { messages } = run
  const task = batchColumn("task", messages.map((m) => m.task), types.text, "")
  const headers = batchColumn("headers", run.headers, types.text, "::jsonb")
  const priority = batchColumn("priority", messages.map((m) => m.priority), types.int4, "")
  const delayMs = batchColumn("delay_ms", messages.map((m) => m.delayMs), types.float8, "::bigint")
  const maxAttempts = batchColumn("max_attempts", messages.map((m) => m.maxAttempts), types.int4, "")
  const flowKey = batchColumn("flow_key", messages.map((m) => m.key), types.text, "")
  const columns = [task, headers, priority, delayMs, maxAttempts, flowKey]
  const unnested = ["payload", ...columns.filter((c) => c.varying).map((c) => c.name)]
  return sql<{ lo: bigint; n: bigint; ids: string | null }>`
    WITH ins AS (
      INSERT INTO ${table} (queue, task, payload, headers, priority, enqueued_at, visible_at, max_attempts, flow_key)
      SELECT ${queue}, ${valueOf(task)}, r.payload, ${valueOf(headers)}, ${valueOf(priority)}, a.enqueued_at,
             a.enqueued_at + ${valueOf(delayMs)} * interval '1 millisecond', ${valueOf(maxAttempts)}, ${valueOf(flowKey)}
      FROM (
        SELECT ${storeTime(now)} AS enqueued_at, ${textArray(messages.map((m) => m.payloadJson))}::jsonb[] AS payload,
               ${sql.csv(columns.map((c) => c.source))}
        OFFSET 0
      ) AS a, unnest(${sql.literal(unnested.map((name) => `a.${name}`).join(", "))}) AS r(${sql.literal(unnested.join(", "))})
      RETURNING id
    ), span AS (
      SELECT min(id) AS lo, max(id) AS hi, count(*) AS n FROM ins
    )
    SELECT span.lo, span.n,
           CASE WHEN span.hi - span.lo + 1 <> span.n THEN (SELECT string_agg(ins.id::text, ',' ORDER BY ins.id) FROM ins) END AS ids,
           CASE WHEN ${announce && run.readyNow}::boolean THEN pg_notify(${channel}, ${queue}) END AS announced
    FROM span`.pipe(Effect.map((rows) => batchIds(rows[0]!)))
}

/** A message's headers as jsonb text; most carry none. */
const headersJson = (headers: Readonly<Record<string, string>>): string => {
  for (const _ in headers) return JSON.stringify(headers)
  return "{}"
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

/** One statement of a send: a run of plain messages, or one keyed message (dedup key or uniqueness window). */
type Step = { readonly _tag: "Run"; readonly run: Run } | { readonly _tag: "Keyed"; readonly message: PreparedMessage }

/**
 * The statements of a send, in input order: consecutive messages without a key in runs (at most
 * SEND_CHUNK rows and SEND_CHUNK_CHARS of JSON each), keyed ones one by one.
 */
const plan = (prepared: ReadonlyArray<PreparedMessage>): ReadonlyArray<Step> => {
  const steps: Array<Step> = []
  let messages: Array<PreparedMessage> = []
  let headers: Array<string> = []
  let chars = 0
  let readyNow = false
  const flush = () => {
    if (messages.length > 0) steps.push({ _tag: "Run", run: { messages, headers, readyNow } })
    messages = []
    headers = []
    chars = 0
    readyNow = false
  }
  for (const m of prepared) {
    if (m.dedupKey !== null || m.unique !== null) {
      flush()
      steps.push({ _tag: "Keyed", message: m })
      continue
    }
    const json = headersJson(m.headers)
    const size = m.payloadJson.length + json.length
    if (messages.length > 0 && chars + size > SEND_CHUNK_CHARS) flush()
    messages.push(m)
    headers.push(json)
    chars += size
    readyNow ||= m.delayMs === 0
    if (messages.length >= SEND_CHUNK) flush()
  }
  flush()
  return steps
}

/**
 * The writes of a send that is more than one statement, or inside a transaction, in input
 * order; the queue announced after the outermost transaction commits.
 */
const writeAll = (ctx: PgContext, queue: string, now: Date | null, prepared: ReadonlyArray<PreparedMessage>, steps: ReadonlyArray<Step>) =>
  Effect.gen(function*() {
    const { channel, sql } = ctx
    const results: Array<SendResult> = []
    for (const step of steps) {
      if (step._tag === "Run") results.push(...(yield* insertBatch(ctx, queue, now, step.run, false)))
      else {
        const m = step.message
        results.push(yield* (m.unique === null ? insertDeduplicated(ctx, queue, now, m) : insertUnique(ctx, queue, now, m, m.unique)))
      }
    }
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
    const steps = plan(prepared)
    const single = steps.length === 1 ? steps[0]! : undefined
    const inTransaction = Option.isSome(yield* Effect.serviceOption(sql.transactionService))
    // One statement outside any transaction is a transaction of its own: it announces itself.
    if (single?._tag === "Run" && !inTransaction) {
      const { messages, readyNow } = single.run
      return yield* (messages.length === 1 && readyNow
        ? insertAnnounced(ctx, queue, now, messages[0]!)
        : ctx.announcing((announce) => insertBatch(ctx, queue, now, single.run, announce)))
    }
    const write = writeAll(ctx, queue, now, prepared, steps)
    // One statement needs no transaction; several must land together.
    return yield* (steps.length === 1 ? write : sql.withTransaction(write))
  }).pipe((e) => ctx.op("send", { queue, count: messages.length }, e))
