/**
 * The PostgreSQL queue store: every statement of the lease protocol, each one
 * short, parameterised, and fenced by `(id, lease_token)` where it writes to a
 * claim. All of leasehold's SQL outside the migrations lives in this file.
 *
 * @since 0.1.0
 */
import { PgClient, PgTypes } from "@effect/sql-pg"
import { Clock, Context, Deferred, Duration, Effect, Fiber, Latch, Layer, Option, Queue, Result, type Scope, type Tracer } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import { SqlClient, SqlError, type Statement } from "effect/sql"
import type {
  Attempt,
  CancelResult,
  ClaimRef,
  Claim,
  DeadLetter,
  MessageId,
  MessageInfo,
  MessageState,
  QueueInfo,
  QueueStats,
  SendResult
} from "./Message.ts"
import * as Migrations from "./Migrations.ts"
import * as Pooler from "./Pooler.ts"
import * as QueueConfig from "./QueueConfig.ts"
import { StoreSettings } from "./StoreSettings.ts"
import { classify, type ConfigInvalid, InvalidInput, type StoreError } from "./QueueError.ts"
import {
  type ClaimOptions,
  type Completed,
  type Completion,
  defaults,
  type DeadLetterFilter,
  fromOperations,
  type HandedBack,
  historyErrors,
  QueueStore,
  type QueueStoreShape,
  type ScheduleInfo
} from "./QueueStore.ts"
import * as Abandon from "./internal/abandon.ts"
import * as CancelInbox from "./internal/cancelInbox.ts"
import * as AttemptResult from "./internal/result.ts"
import { hash31 } from "./internal/hash.ts"
import * as Span from "./internal/span.ts"
import * as Validate from "./internal/validate.ts"
import type { PreparedMessage } from "./internal/validate.ts"

/** How to build a {@link PgQueueStore}. */
export interface PgQueueStoreOptions {
  /** The SQL schema holding leasehold's tables (default `leasehold`); validated as an identifier. */
  readonly schema?: string | undefined
  /** Run the migrations when the store is built (default true). */
  readonly migrate?: boolean | undefined
  /** Largest payload accepted, in JSON bytes (default 1 MiB). */
  readonly maxPayloadBytes?: number | undefined
  /** Attempts a message gets unless its sender says otherwise (default 25). */
  readonly defaultMaxAttempts?: number | undefined
  /**
   * Where "now" comes from. `database` (the default) uses the server's `now()`,
   * so workers with skewed clocks agree. `effect` passes Effect's `Clock` as the
   * time of every statement, so tests can drive leases with `TestClock`.
   */
  readonly clock?: "database" | "effect" | undefined
  /**
   * A small pool of its own for lease traffic (renew, ack, release, retry,
   * dead-letter), so handlers that exhaust the main pool cannot starve
   * renewals, with a `statement_timeout` so a stuck statement cannot hold a
   * renewal forever. Built from the `PgClient` in context (default: 2
   * connections, 10 s timeout); `false` sends lease traffic through the main
   * client. Ignored when the context has no `PgClient`.
   */
  readonly leasePool?: false | {
    readonly maxConnections?: number | undefined
    readonly statementTimeout?: Duration.Input | undefined
  } | undefined
}

/** Rows of the messages table, as the driver returns them. */
interface MessageRow {
  readonly id: bigint | string
  readonly queue: string
  readonly task: string
  readonly payload: unknown
  readonly headers: Record<string, string> | null
  readonly priority: number
  readonly attempts: number
  readonly max_attempts: number
  readonly enqueued_at: Date
  readonly visible_at: Date
  readonly lease_token: string | null
  readonly leased_by: string | null
  readonly leased_at: Date | null
  readonly dedup_key: string | null
  readonly last_error: string | null
  readonly dead_reason: string | null
  readonly dead_at: Date | null
  readonly lease_expiries: number
}

/** The columns every message view shares (a claim's row carries no queue: the caller names it). */
type MessageColumns = Pick<
  MessageRow,
  "id" | "task" | "payload" | "headers" | "priority" | "attempts" | "max_attempts" | "enqueued_at" | "dedup_key" | "last_error" | "lease_expiries"
>

const toMessage = (row: MessageColumns & { readonly queue?: string }, queue: string = row.queue ?? "") => ({
  id: String(row.id) as MessageId,
  queue,
  task: row.task,
  payload: row.payload,
  headers: row.headers ?? {},
  priority: row.priority,
  attempts: row.attempts,
  maxAttempts: row.max_attempts,
  enqueuedAt: row.enqueued_at,
  dedupKey: row.dedup_key,
  lastError: row.last_error,
  leaseExpiries: row.lease_expiries
})

/** A row with where it stands, as `get` and `messages` read it. */
interface InfoRow extends MessageRow {
  readonly view_state: MessageState
  readonly cancel_requested_at: Date | null
}

const toInfo = (row: InfoRow): MessageInfo => ({
  ...toMessage(row),
  state: row.view_state,
  visibleAt: row.view_state === "dead" ? null : row.visible_at,
  leasedBy: row.view_state === "in-flight" ? row.leased_by : null,
  leasedAt: row.view_state === "in-flight" ? row.leased_at : null,
  cancelRequestedAt: row.view_state === "in-flight" ? row.cancel_requested_at : null,
  deadReason: row.dead_reason,
  deadAt: row.dead_at
})

/** What claim returns per row: the columns of a claim, nothing else. */
interface ClaimRow extends MessageColumns {
  readonly visible_at: Date
  readonly lease_token: Claim["leaseToken"]
  readonly was_visible_at: Date
  /** How many cancelled rows the claim deleted (the same on every row); `id` is NULL on the row of a claim of none. */
  readonly dropped: number
}

const toDeadLetter = (row: MessageRow): DeadLetter => ({
  ...toMessage(row),
  reason: row.dead_reason ?? "",
  deadAt: row.dead_at ?? row.visible_at
})

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

/** A row of the schedules table. */
interface ScheduleRow {
  readonly key: string
  readonly cron: string
  readonly tz: string
  readonly queue: string
  readonly task: string
  readonly payload: unknown
  readonly last_slot: Date
  readonly next_slot: Date | null
  readonly fired_at: Date | null
  readonly last_seen_at: Date
  readonly last_seen_by: string
}

const toSchedule = (row: ScheduleRow): ScheduleInfo => ({
  key: row.key,
  cron: row.cron,
  tz: row.tz,
  queue: row.queue,
  task: row.task,
  payload: row.payload,
  nextSlot: row.next_slot,
  lastSlot: row.last_slot,
  firedAt: row.fired_at,
  lastSeenAt: row.last_seen_at,
  lastSeenBy: row.last_seen_by
})

const byKey = (a: { readonly key: string }, b: { readonly key: string }) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)

/**
 * An array parameter of one element type, named rather than inferred: inference fails on
 * arrays of nulls, and a fixed type keeps one prepared statement per SQL text.
 */
const array = (values: ReadonlyArray<unknown>, elementOid: number): PgTypes.Parameter =>
  Result.getOrThrow(PgTypes.array(values, elementOid))
const textArray = (values: ReadonlyArray<string | null>) => array(values, PgTypes.OID.text)

/** An attempt's result as JSON text to store (bounded), or NULL for none (undefined or null). */
const resultText = (result: unknown): string | null => AttemptResult.textOf(result) ?? null

/** An attempt read back: `result` only when the row has one (NULL reads as none). */
const withResult = (attempt: Attempt, result: unknown): Attempt =>
  result === null || result === undefined ? attempt : { ...attempt, result }

const ids = (rows: ReadonlyArray<{ readonly id: bigint | string }>): ReadonlyArray<MessageId> =>
  rows.map((row) => String(row.id) as MessageId)

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

/** A finishing write's span attributes: the batch's size, and for one message, which and how it ends. */
const completeAttributes = (completions: ReadonlyArray<Completion>): Record<string, unknown> => {
  if (completions.length !== 1) return { count: completions.length }
  const c = completions[0]!
  return { count: 1, queue: c.queue, task: c.task, messageId: c.ref.id, attempt: c.attempt, finish: c.finish._tag }
}

/** Attempt records deleted per statement by the retention pruning. */
const PRUNE_BATCH = 5_000

/**
 * The advisory lock (single-key form, apart from the two-key presence locks) a
 * consumer holds, one transaction at a time, while it prunes the attempt history of `schema`.
 */
export const pruneLockKey = (schema: string): number => hash31(`leasehold.prune.${schema}`)

/** PostgreSQL's limit on identifiers, channel names included (NAMEDATALEN - 1 bytes). */
const MAX_IDENTIFIER_BYTES = 63

/**
 * The NOTIFY channel of `schema`: sends announce their queue on it.
 * `leasehold_<schema>` when that fits in an identifier; otherwise the schema is
 * cut short and a hash of the whole name keeps channels of different schemas apart.
 */
export const notifyChannel = (schema: string): string => {
  const plain = `leasehold_${schema}`
  if (Buffer.byteLength(plain) <= MAX_IDENTIFIER_BYTES) return plain
  const suffix = `_${hash31(schema).toString(36)}`
  return `leasehold_${schema.slice(0, MAX_IDENTIFIER_BYTES - "leasehold_".length - suffix.length)}${suffix}`
}

/**
 * Messages one transaction of `cancelWhere` cancels: the row locks a renewal of one of them may
 * wait behind are those of one batch, not of the whole queue.
 */
const CANCEL_BATCH = 1_000

/** Claim statements one claim runs at most while its picked rows are all cancelled ones (see `claim`). */
const MAX_CLAIM_RUNS = 10

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
  `{"t":${JSON.stringify(m.task)},"p":${m.payloadJson},"h":${JSON.stringify(m.headers)},"pr":${m.priority},"d":${m.delayMs},"ma":${m.maxAttempts}}`

/**
 * The key of the innermost open transaction of any effect/sql client (set by every
 * `withTransaction`, `undefined` outside one). effect keeps the reference itself internal
 * (`effect/internal/sql.ts`); a reference with the same key reads the same entry. Only a
 * cheap gate: when it is set, the context is scanned for the connections of every open
 * transaction. test/PgQueueStoreExtra.test.ts ("one-pool rule") breaks if the key changes.
 */
const CurrentTransactionService = Context.Reference<Context.Key<unknown, object> | undefined>(
  "effect/sql/CurrentTransactionService",
  { defaultValue: () => undefined }
)

/** Every client's transaction connection key is this prefix and the client's number. */
const transactionKeyPrefix = SqlClient.TransactionConnection(0).key.replace(/0$/, "")

/**
 * Whether a transaction of another SqlClient than `own` is open in `context`. A send there
 * would run on the store's own pool and commit on its own, whatever that transaction does.
 */
const foreignTransactionOpen = (context: Context.Context<never>, own: string): boolean => {
  if (Context.get(context, CurrentTransactionService) === undefined) return false
  for (const key of context.mapUnsafe.keys()) {
    if (key !== own && key.startsWith(transactionKeyPrefix)) return true
  }
  return false
}

/** The one-pool rule, as a send inside another client's transaction is refused with it. */
export const onePoolRule = "one-pool"

const foreignTransaction = (queue: string) =>
  new InvalidInput({
    field: "transaction",
    rule: onePoolRule,
    message: `send to queue ${JSON.stringify(queue)} refused: a transaction is open on another SqlClient ` +
      `than the store's, and the send would commit on its own whatever that transaction does ` +
      `(rule: ${onePoolRule}: build the store and your transactions on the same SqlClient layer, ` +
      `or send outside the transaction)`
  })

/**
 * Whether `error` is PostgreSQL refusing a NOTIFY because its queue is full ("too many
 * notifications in the NOTIFY queue", 54000, raised at commit): a listening session stopped
 * reading (a frozen consumer, a session left in a transaction) and the queue filled behind it.
 * The failing transaction wrote nothing, so its statement can be run again without the NOTIFY.
 */
const notifyQueueFull = (error: unknown): boolean => {
  if (!SqlError.isSqlError(error)) return false
  const cause = error.reason.cause as { readonly code?: unknown; readonly message?: unknown } | undefined
  return cause?.code === "54000" && /NOTIFY queue/i.test(String(cause.message ?? ""))
}

/** How often, at most, a full NOTIFY queue is logged. */
const NOTIFY_FULL_WARN_MS = 60_000

/**
 * Build a PostgreSQL store over the `SqlClient` in context (provide
 * `PgClient.layer`). When you use the same client for your own
 * `sql.withTransaction`, `send` joins that transaction. A send made while a
 * transaction of another client is open fails with `InvalidInput` (rule
 * {@link onePoolRule}) instead of committing on its own.
 */
export const make = (
  options: PgQueueStoreOptions = {}
): Effect.Effect<QueueStoreShape, InvalidInput | StoreError, SqlClient.SqlClient | Scope.Scope> =>
  Effect.gen(function*() {
    const schema = yield* Validate.schemaName(options.schema ?? Migrations.defaultSchema)
    if (options.migrate ?? true) yield* Migrations.run({ schema })
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const table = sql(`${schema}.messages`)
    const attemptsTable = sql(`${schema}.attempts`)
    const queuesTable = sql(`${schema}.queues`)
    /** Subscribers of `cancels`, per queue: opened by the `sends` listeners of this store. */
    const cancelListeners: CancelInbox.Registry = new Map()
    const uniqueTable = sql(`${schema}.unique_keys`)
    const schedulesTable = sql(`${schema}.schedules`)
    const leaseSql = (yield* makeLeaseClient(options.leasePool)) ?? sql
    const pg = yield* Effect.serviceOption(PgClient.PgClient)
    const channel = notifyChannel(schema)
    const limits: Validate.SendLimits = {
      maxPayloadBytes: options.maxPayloadBytes ?? defaults.maxPayloadBytes,
      defaultMaxAttempts: options.defaultMaxAttempts ?? defaults.maxAttempts
    }
    /** `null` means "use the database's now()": every statement reads `coalesce($now, now())`. */
    const currentTime: Effect.Effect<Date | null> = options.clock === "effect"
      ? Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))
      : Effect.succeed(null)

    let notifyFullWarnedAt = -Infinity
    /**
     * Run a statement that announces what it wrote (a NOTIFY inside its own transaction), or,
     * when the NOTIFY queue is full, run it again without the announcement: the write matters,
     * the wake-up is best effort (consumers poll). Warned about at most once a minute.
     */
    const announcing = <A, E, R>(statement: (announce: boolean) => Effect.Effect<A, E, R>) =>
      statement(true).pipe(Effect.catchIf(notifyQueueFull, () =>
        Effect.andThen(
          Effect.suspend(() => {
            const at = Date.now()
            if (at - notifyFullWarnedAt < NOTIFY_FULL_WARN_MS) return Effect.void
            notifyFullWarnedAt = at
            return Effect.logWarning(
              "the NOTIFY queue is full (a listening session stopped reading; see pg_notification_queue_usage()): " +
                "writing without waking listeners, consumers find the messages by polling"
            ).pipe(Effect.annotateLogs({ module: "PgQueueStore" }))
          }),
          statement(false)
        )))

    /**
     * Run one operation: time it in a span, classify its failures. `after` adds attributes
     * known from the result (what a claim returned).
     */
    const op = <A, E>(
      name: string,
      attributes: Record<string, unknown>,
      effect: Effect.Effect<A, E>,
      after?: (span: Tracer.Span, result: A) => void
    ) =>
      // A lean span (no stack frame): every statement of a kind has the same one, and it is not free.
      after === undefined
        ? effect.pipe(classify(name), Span.within(`leasehold.${name}`, attributes))
        : Span.using(`leasehold.${name}`, { attributes }, (span) =>
          effect.pipe(
            Effect.tap((result) => Effect.sync(() => after(span, result))),
            classify(name)
          ))

    // Bulk insert of messages without a dedup key: one statement per chunk.
    // jsonb_array_elements WITH ORDINALITY + ORDER BY makes ids follow input order.
    // `elements` are the messages as `batchElement` writes them.
    const insertBatch = (queue: string, now: Date | null, elements: ReadonlyArray<string>) => {
      const doc = `[${elements.join(",")}]`
      return sql<{ id: bigint }>`
        INSERT INTO ${table} (queue, task, payload, headers, priority, enqueued_at, visible_at, max_attempts)
        SELECT ${queue}, e.doc->>'t', e.doc->'p', e.doc->'h', (e.doc->>'pr')::int,
               coalesce(${now}::timestamptz, now()),
               coalesce(${now}::timestamptz, now()) + (e.doc->>'d')::bigint * interval '1 millisecond',
               (e.doc->>'ma')::int
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
    const insertDeduplicated = (queue: string, now: Date | null, m: PreparedMessage) =>
      sql<{ id: bigint; inserted: boolean }>`
        WITH ins AS (
          INSERT INTO ${table} (queue, task, payload, headers, priority, enqueued_at, visible_at, max_attempts, dedup_key)
          VALUES (${queue}, ${m.task}, ${m.payloadJson}::jsonb, ${JSON.stringify(m.headers)}::jsonb, ${m.priority},
                  coalesce(${now}::timestamptz, now()),
                  coalesce(${now}::timestamptz, now()) + ${m.delayMs}::bigint * interval '1 millisecond',
                  ${m.maxAttempts}, ${m.dedupKey})
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
    const insertUnique = (queue: string, now: Date | null, m: PreparedMessage, unique: NonNullable<PreparedMessage["unique"]>) =>
      sql<{ id: bigint; inserted: boolean }>`
        WITH fresh AS (
          SELECT nextval(${`${schema}.messages_id_seq`}::regclass) AS id
        ), reserved AS (
          INSERT INTO ${uniqueTable} AS u (queue, key, until, message_id)
          SELECT ${queue}, ${unique.key},
                 coalesce(${now}::timestamptz, now()) + ${unique.forMs}::bigint * interval '1 millisecond', fresh.id
          FROM fresh
          ON CONFLICT (queue, key) DO UPDATE SET until = excluded.until, message_id = excluded.message_id
          WHERE u.until <= coalesce(${now}::timestamptz, now())
          RETURNING u.message_id
        ), ins AS (
          INSERT INTO ${table} (id, queue, task, payload, headers, priority, enqueued_at, visible_at, max_attempts)
          SELECT reserved.message_id, ${queue}, ${m.task}, ${m.payloadJson}::jsonb, ${JSON.stringify(m.headers)}::jsonb, ${m.priority},
                 coalesce(${now}::timestamptz, now()),
                 coalesce(${now}::timestamptz, now()) + ${m.delayMs}::bigint * interval '1 millisecond',
                 ${m.maxAttempts}
          FROM reserved
          RETURNING id
        )
        SELECT id, true AS inserted FROM ins
        UNION ALL
        SELECT message_id AS id, false AS inserted FROM ${uniqueTable}
        WHERE queue = ${queue} AND key = ${unique.key} AND until > coalesce(${now}::timestamptz, now())
          AND NOT EXISTS (SELECT 1 FROM reserved)`.pipe(untilSettled("unique"))

    // The common single send, ready now, outside any transaction: the row and its announcement in
    // one statement, so a waiting consumer hears of it one round trip sooner. The NOTIFY is part of
    // the INSERT's own transaction (delivered at its commit, never before the row); nothing else
    // of the caller's is in that transaction, so it can endanger nothing but this send, and when
    // the NOTIFY queue is full (the commit fails, nothing was written) it is sent again without it.
    const insertAnnounced = (queue: string, now: Date | null, m: PreparedMessage) =>
      announcing((announce) =>
        sql<{ id: bigint }>`
        WITH ins AS (
          INSERT INTO ${table} (queue, task, payload, headers, priority, enqueued_at, visible_at, max_attempts)
          VALUES (${queue}, ${m.task}, ${m.payloadJson}::jsonb, ${JSON.stringify(m.headers)}::jsonb, ${m.priority},
                  coalesce(${now}::timestamptz, now()), coalesce(${now}::timestamptz, now()), ${m.maxAttempts})
          RETURNING id
        )
        SELECT ins.id FROM ins CROSS JOIN LATERAL (SELECT CASE WHEN ${announce}::boolean THEN pg_notify(${channel}, ${queue}) END) AS announced`
      ).pipe(
        Effect.map((rows): ReadonlyArray<SendResult> => rows.map((r) => ({ id: String(r.id) as MessageId, deduplicated: false })))
      )

    const send: QueueStoreShape["send"] = (queue, messages) =>
      Effect.gen(function*() {
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
          if (Option.isNone(inTransaction)) return yield* insertAnnounced(queue, now, single)
        }
        const results: Array<SendResult> = []
        const write = Effect.gen(function*() {
          // Consecutive messages without a dedup key go in one bulk INSERT (at most SEND_CHUNK rows
          // and SEND_CHUNK_CHARS of JSON each); keyed ones one by one.
          let run: Array<string> = []
          let runChars = 0
          const flush = Effect.suspend(() => {
            const rows = run
            run = []
            runChars = 0
            return rows.length === 0 ? Effect.void : Effect.map(insertBatch(queue, now, rows), (r) => {
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
              results.push(yield* (m.unique === null ? insertDeduplicated(queue, now, m) : insertUnique(queue, now, m, m.unique)))
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
        })
        // One statement needs no transaction; several must land together.
        yield* prepared.length === 1 ? write : sql.withTransaction(write)
        return results
      }).pipe((e) => op("send", { queue, count: messages.length }, e))

    /** One claim statement: what it claimed, and how many cancelled rows it deleted instead. */
    const claimOnce = (queue: string, options: ClaimOptions) =>
      Effect.gen(function*() {
        yield* Validate.name("queue", queue)
        yield* Validate.name("consumer", options.consumer)
        const limit = yield* Validate.positiveInt("limit", options.limit, 10_000)
        const leaseMs = yield* Validate.durationMs("lease", options.lease, { min: defaults.minLeaseMs })
        const now = yield* currentTime
        const asyncCommit = Option.isNone(yield* Effect.serviceOption(sql.transactionService))
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
            WHERE queue = ${queue} AND state = 'ready' AND visible_at <= coalesce(${now}::timestamptz, now())
              -- A paused queue gives nothing. Uncorrelated: planned as a one-time filter (an
              -- InitPlan, one primary-key probe per claim), never evaluated per row.
              AND NOT EXISTS (SELECT 1 FROM ${queuesTable} WHERE name = ${queue} AND paused)
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
            RETURNING m.id, m.queue, m.task, m.attempt_base + m.attempts AS attempt, m.leased_by, m.leased_at, m.visible_at
          ), dropped_attempts AS (
            INSERT INTO ${attemptsTable} (message_id, queue, task, attempt, consumer, started_at, ended_at, outcome, error)
            SELECT id, queue, task, attempt, coalesce(leased_by, ''), coalesce(leased_at, visible_at), coalesce(${now}::timestamptz, now()),
                   'cancelled', ${historyErrors.cancelledUnfinished}::text
            FROM dropped
          ), claimed AS (
            -- Every chosen row is locked by picked: its lease token is still the one read there.
            UPDATE ${table} AS m SET
              visible_at     = coalesce(${now}::timestamptz, now()) + ${leaseMs}::bigint * interval '1 millisecond',
              attempts       = m.attempts + 1,
              lease_expiries = m.lease_expiries + (m.lease_token IS NOT NULL)::int,
              lease_token    = gen_random_uuid(),
              leased_by      = ${options.consumer},
              leased_at      = coalesce(${now}::timestamptz, now())
            WHERE m.id = ANY(ARRAY(SELECT id FROM chosen))
            RETURNING m.id, m.queue, m.task, m.payload, m.headers, m.priority, m.attempts, m.max_attempts,
                      m.enqueued_at, m.visible_at, m.lease_token, m.dedup_key, m.last_error, m.lease_expiries,
                      m.attempt_base
          ), expired_attempts AS (
            INSERT INTO ${attemptsTable} (message_id, queue, task, attempt, consumer, started_at, ended_at, outcome, error)
            SELECT c.id, c.queue, c.task, c.attempt_base + c.attempts - 1, coalesce(h.prev_consumer, ''),
                   coalesce(h.prev_leased_at, h.visible_at), h.visible_at,
                   'lease-expired', ${historyErrors.leaseExpired}::text
            FROM claimed AS c JOIN chosen AS h ON h.id = c.id WHERE h.expired
          )
          -- Always one row at least: how many cancelled rows were dropped rides along (on a row of
          -- NULLs when nothing was claimed), so a claim that only dropped rows is run again.
          SELECT c.id, c.task, c.payload, c.headers, c.priority, c.attempts, c.max_attempts, c.enqueued_at, c.visible_at,
                 c.lease_token, c.dedup_key, c.last_error, c.lease_expiries, h.visible_at AS was_visible_at, d.n AS dropped
          FROM (SELECT count(*)::int AS n FROM dropped) AS d
          LEFT JOIN (claimed AS c JOIN chosen AS h ON h.id = c.id) ON true
          ORDER BY h.priority, h.visible_at, c.id`
        const consumer = options.consumer
        const claims = rows.filter((row) => row.id !== null).map((row): Claim => ({
          ...toMessage(row, queue),
          leaseToken: row.lease_token,
          leaseExpiresAt: row.visible_at,
          consumer,
          readyAt: row.was_visible_at
        }))
        return { claims, dropped: rows[0]?.dropped ?? 0 }
      })

    // A claim whose picked rows were all cancelled ones (deleted, not claimed) would answer nothing
    // while ready messages wait behind them: it is run again (each run deletes what it dropped, so
    // this ends; bounded all the same).
    const claim: QueueStoreShape["claim"] = (queue, options) =>
      Effect.gen(function*() {
        for (let run = 1;; run++) {
          const { claims, dropped } = yield* claimOnce(queue, options)
          if (claims.length > 0 || dropped === 0 || run >= MAX_CLAIM_RUNS) return claims
        }
      }).pipe((e) => op("claim", { queue, limit: options.limit, consumer: options.consumer }, e, claimAttributes))

    const renew: QueueStoreShape["renew"] = (claims, lease) =>
      Effect.gen(function*() {
        if (claims.length === 0) return { held: [], cancelling: [] }
        const leaseMs = yield* Validate.durationMs("lease", lease, { min: defaults.minLeaseMs }).pipe(Effect.orDie)
        const now = yield* currentTime
        const refs = JSON.stringify(claims.map((c) => ({ id: c.id, token: c.leaseToken })))
        // One statement for the whole claim; only rows whose token still matches move. The
        // cancel flag rides along: a held message an operator cancelled is told to stop.
        const rows = yield* leaseSql<{ id: bigint; cancelling: boolean }>`
          UPDATE ${table} AS m
          SET visible_at = coalesce(${now}::timestamptz, now()) + ${leaseMs}::bigint * interval '1 millisecond'
          FROM jsonb_to_recordset(${refs}::jsonb) AS c(id bigint, token uuid)
          WHERE m.id = c.id AND m.lease_token = c.token AND m.state = 'ready'
          RETURNING m.id, m.cancel_requested_at IS NOT NULL AS cancelling`
        return { held: ids(rows), cancelling: ids(rows.filter((row) => row.cancelling)) }
      }).pipe((e) => op("renew", claims.length === 1 ? { count: 1, messageId: claims[0]!.id } : { count: claims.length }, e))

    const ack: QueueStoreShape["ack"] = (ref) =>
      leaseSql<{ id: bigint }>`
        DELETE FROM ${table} WHERE id = ${ref.id}::bigint AND lease_token = ${ref.leaseToken}::uuid
        RETURNING id`.pipe(
        Effect.map((rows) => rows.length === 1),
        (e) => op("ack", { messageId: ref.id }, e)
      )

    /**
     * One fenced finishing write that hands the message back (`set`: the columns a retry,
     * release or dead letter writes; the lease is cleared too). A message whose cancel was
     * asked for while it ran is deleted instead, as `complete` does (never run again), with a
     * `cancelled` history row (`error`: the write's own error text, if any); the history of a
     * write that landed is the caller's to record.
     *
     * The row is locked first (`target`) and the choice made on what the lock read. The two
     * writes read their rows as of the statement's start: a write that waited on a cancel's row
     * lock would otherwise decide on the flag as it was before the cancel, then find the flag
     * set once the lock is granted, and match neither branch (answered "lost", the message
     * hidden until its lease ran out). A locking read waits, then reads the committed row.
     */
    const finishOne = (ref: ClaimRef, set: Statement.Fragment, error: string | null, now: Date | null) =>
      leaseSql<{ id: bigint; cancelled: boolean }>`
        WITH target AS (
          SELECT id, cancel_requested_at IS NOT NULL AS cancel_asked FROM ${table}
          WHERE id = ${ref.id}::bigint AND lease_token = ${ref.leaseToken}::uuid
          FOR UPDATE
        ), cancelled AS (
          DELETE FROM ${table} AS m USING target AS t WHERE m.id = t.id AND t.cancel_asked
          RETURNING m.id, m.queue, m.task, m.attempt_base + m.attempts AS attempt, m.leased_by, m.leased_at, m.visible_at
        ), recorded AS (
          INSERT INTO ${attemptsTable} (message_id, queue, task, attempt, consumer, started_at, ended_at, outcome, error)
          SELECT id, queue, task, attempt, coalesce(leased_by, ''), coalesce(leased_at, visible_at), coalesce(${now}::timestamptz, now()),
                 'cancelled', ${error}::text
          FROM cancelled
        ), written AS (
          UPDATE ${table} AS m SET ${set}, lease_token = NULL, leased_by = NULL, leased_at = NULL
          FROM target AS t WHERE m.id = t.id AND NOT t.cancel_asked
          RETURNING m.id
        )
        SELECT id, true AS cancelled FROM cancelled UNION ALL SELECT id, false AS cancelled FROM written`.pipe(
        Effect.map((rows): HandedBack => rows.length === 0 ? "lost" : rows[0]!.cancelled ? "cancelled" : "written")
      )

    const release: QueueStoreShape["release"] = (ref, options) =>
      Effect.gen(function*() {
        const delayMs = options?.delay === undefined
          ? 0
          : yield* Validate.durationMs("delay", options.delay, { min: 0 }).pipe(Effect.orDie)
        const now = yield* currentTime
        // The attempt is given back: a release is not a failure of the handler.
        const held = yield* finishOne(ref, sql`
            visible_at  = coalesce(${now}::timestamptz, now()) + ${delayMs}::bigint * interval '1 millisecond',
            attempts    = greatest(attempts - 1, 0)`, null, now)
        // Ready again now: wake idle consumers of its queue, as a send does (its queue read by id:
        // a ref carries none; a row deleted meanwhile notifies nothing).
        if (held === "written" && delayMs === 0) {
          yield* sql.afterCommit(Effect.ignore(sql`SELECT pg_notify(${channel}, queue) FROM ${table} WHERE id = ${ref.id}::bigint`))
        }
        return held
      }).pipe((e) => op("release", { messageId: ref.id }, e))

    const retry: QueueStoreShape["retry"] = (ref, options) =>
      Effect.gen(function*() {
        const delayMs = yield* Validate.durationMs("delay", options.delay, { min: 0 }).pipe(Effect.orDie)
        const now = yield* currentTime
        const error = Validate.boundedText(options.error)
        return yield* finishOne(ref, sql`
            visible_at  = coalesce(${now}::timestamptz, now()) + ${delayMs}::bigint * interval '1 millisecond',
            last_error  = ${error}`, error, now)
      }).pipe((e) => op("retry", { messageId: ref.id }, e))

    const deadLetter: QueueStoreShape["deadLetter"] = (ref, options) =>
      Effect.gen(function*() {
        const now = yield* currentTime
        const error = options.error === undefined ? null : Validate.boundedText(options.error)
        return yield* finishOne(ref, sql`
            state       = 'dead',
            attempts    = least(attempts, max_attempts),
            dead_reason = ${Validate.boundedText(options.reason)},
            dead_at     = coalesce(${now}::timestamptz, now()),
            last_error  = coalesce(${error}::text, last_error)`, error, now)
      }).pipe((e) => op("deadLetter", { messageId: ref.id }, e))

    /**
     * Many finishing writes and their history records in one statement, one commit.
     * The completions travel as one array per column. Acks (and cancels) are a fenced DELETE; the
     * rest one fenced UPDATE whose columns follow the kind (as `retry`, `release`
     * and `deadLetter` write them one by one); both RETURN the ids that still
     * matched their token, and the history INSERT reads those to tell each
     * record's outcome. The CTEs touch disjoint rows (one kind per message).
     */
    const complete: QueueStoreShape["complete"] = (completions) =>
      Effect.gen(function*() {
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
        const rows = yield* leaseSql<{ id: bigint; cancelled: boolean }>`
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
                                 THEN coalesce(${now}::timestamptz, now()) + i.delay_ms * interval '1 millisecond'
                                 ELSE m.visible_at END,
              attempts    = CASE WHEN i.kind = 'Release' THEN greatest(m.attempts - 1, 0)
                                 WHEN i.kind = 'DeadLetter' THEN least(m.attempts, m.max_attempts)
                                 ELSE m.attempts END,
              last_error  = coalesce(i.last_error, m.last_error),
              state       = CASE WHEN i.kind = 'DeadLetter' THEN 'dead' ELSE m.state END,
              dead_reason = CASE WHEN i.kind = 'DeadLetter' THEN i.reason ELSE m.dead_reason END,
              dead_at     = CASE WHEN i.kind = 'DeadLetter' THEN coalesce(${now}::timestamptz, now()) ELSE m.dead_at END,
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
            INSERT INTO ${attemptsTable} (message_id, queue, task, attempt, consumer, started_at, ended_at, outcome, error, result)
            SELECT i.id, i.queue, i.task,
                   i.attempt + coalesce(h.attempt_base, (SELECT b.attempt_base FROM ${table} AS b WHERE b.id = i.id), 0),
                   i.consumer, i.started_at, coalesce(${now}::timestamptz, now()),
                   CASE WHEN h.cancelled THEN 'cancelled' WHEN h.id IS NOT NULL THEN i.outcome ELSE 'lease-lost' END,
                   i.error, i.result
            FROM items AS i LEFT JOIN held AS h ON h.id = i.id
            WHERE NOT EXISTS (SELECT 1 FROM earlier AS e WHERE e.id = i.id)
          )
          SELECT id, cancelled FROM held
          UNION ALL SELECT id, outcome = 'cancelled' FROM earlier WHERE outcome <> 'lease-lost'`
        const completed = { held: ids(rows), cancelled: ids(rows.filter((row) => row.cancelled)) }
        yield* notifyReleased(completions, completed)
        return completed
      }).pipe((e) => op("complete", completeAttributes(completions), e))

    /**
     * Wake idle consumers of the queues whose messages a `complete` released (ready again at
     * once, as a shutting-down worker's are): a peer claims them now, not at its next poll. After
     * the commit, on a statement of its own, best effort, as a send's notification.
     */
    const notifyReleased = (completions: ReadonlyArray<Completion>, completed: Completed) => {
      const landed = new Set(completed.held)
      for (const id of completed.cancelled) landed.delete(id)
      const queues = [...new Set(completions.filter((c) => c.finish._tag === "Release" && landed.has(c.ref.id)).map((c) => c.queue))]
      return queues.length === 0
        ? Effect.void
        : sql.afterCommit(Effect.ignore(sql`SELECT pg_notify(${channel}, q) FROM unnest(${textArray(queues)}) AS q`))
    }

    // Dead-letter filters: a NULL parameter means "any".
    const filterIds = (filter: DeadLetterFilter) => filter.ids === undefined ? null : JSON.stringify(filter.ids)
    const filterQueue = (filter: DeadLetterFilter) => filter.queue ?? null

    const redrive: QueueStoreShape["redrive"] = (filter) =>
      Effect.gen(function*() {
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
            visible_at = coalesce(${now}::timestamptz, now()),
            dedup_key = CASE WHEN p.keeps_key THEN m.dedup_key ELSE NULL END
          FROM picked AS p
          WHERE m.id = p.id AND m.state = 'dead'
          RETURNING m.id, m.queue, m.task, m.attempt_base
          ), recorded AS (
            INSERT INTO ${attemptsTable} (message_id, queue, task, attempt, consumer, started_at, ended_at, outcome, error)
            SELECT id, queue, task, attempt_base, '', coalesce(${now}::timestamptz, now()), coalesce(${now}::timestamptz, now()),
                   'redriven', NULL
            FROM redriven
          )
          SELECT id FROM redriven ORDER BY id`
        return ids(rows)
      }).pipe((e) => op("redrive", { queue: filter.queue ?? "*" }, e))

    const purge: QueueStoreShape["purge"] = (filter) =>
      sql<{ id: bigint }>`
        DELETE FROM ${table} AS m
        WHERE m.state = 'dead'
          AND (${filterQueue(filter)}::text IS NULL OR m.queue = ${filterQueue(filter)})
          AND (${filterIds(filter)}::jsonb IS NULL OR m.id IN (SELECT jsonb_array_elements_text(${filterIds(filter)}::jsonb)::bigint))
        RETURNING m.id`.pipe(Effect.map(ids), (e) => op("purge", { queue: filter.queue ?? "*" }, e))

    const deadLetters: QueueStoreShape["deadLetters"] = (filter) =>
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

    // Upsert: the first pause of a queue makes its row. Pausing a paused queue keeps the
    // time it was first paused.
    const pause: QueueStoreShape["pause"] = (queue) =>
      Effect.gen(function*() {
        const now = yield* currentTime
        yield* sql`
          INSERT INTO ${queuesTable} AS q (name, paused, paused_at) VALUES (${queue}, true, coalesce(${now}::timestamptz, now()))
          ON CONFLICT (name) DO UPDATE SET paused = true, paused_at = CASE WHEN q.paused THEN q.paused_at ELSE excluded.paused_at END`
      }).pipe((e) => op("pause", { queue }, e))

    // The row stays (unpaused), so the queue stays listed. Idle consumers hear of it as of a
    // send (the same NOTIFY, delivered at commit), only when the queue was in fact paused.
    const resume: QueueStoreShape["resume"] = (queue) =>
      sql`
        WITH resumed AS (
          UPDATE ${queuesTable} SET paused = false, paused_at = NULL WHERE name = ${queue} AND paused RETURNING name
        )
        SELECT pg_notify(${channel}, name) FROM resumed`.pipe(Effect.asVoid, (e) => op("resume", { queue }, e))

    // The names of every queue with messages (live or dead), history or a pause row. Each
    // source is read by a skip scan (a recursive CTE hopping from one queue name to the next
    // through an index whose first column is the queue), so the cost follows the number of
    // queues, not of rows: dashboards call this every few seconds.
    const queueNames = sql<{ queue: string; paused: boolean; paused_at: Date | null }>`
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

    // A stored name that breaks today's rule (written by hand, or by an older version) is listed
    // and counted like any other: an operator must see it to clean it up.
    const queues: QueueStoreShape["queues"] = () =>
      Effect.gen(function*() {
        const names = yield* queueNames
        if (names.length === 0) return []
        const counts = yield* countQueues(names.map((n) => n.queue))
        return names.map((n, k): QueueInfo => ({ ...counts[k]!, paused: n.paused, pausedAt: n.paused_at }))
      }).pipe((e) => op("queues", {}, e))

    /**
     * Cancel the messages `lock` selects, in one transaction of two statements. The first
     * locks them (waiting for a claim or finishing write in flight, so what it reads is
     * settled) and says which are running; the second deletes the others, recording a
     * `cancelled` history row for each, and flags the running ones for their consumer. The
     * two writes touch only the ids the first statement locked.
     */
    const cancelLocked = (
      lock: (now: Date | null) => Effect.Effect<ReadonlyArray<{ id: bigint; running: boolean }>, SqlError.SqlError>
    ) =>
      // Without the NOTIFY when its queue is full (see `announcing`): the cancel still lands.
      announcing((announce) => sql.withTransaction(Effect.gen(function*() {
        const now = yield* currentTime
        const locked = yield* lock(now)
        if (locked.length === 0) return []
        const rows = yield* sql<{ id: bigint; result: CancelResult["result"] }>`
          WITH items AS (
            SELECT * FROM unnest(${textArray(locked.map((r) => String(r.id)))}::bigint[], ${array(locked.map((r) => r.running), PgTypes.OID.bool)})
              AS i(id, running)
          ), removed AS (
            DELETE FROM ${table} AS m USING items AS i WHERE m.id = i.id AND NOT i.running
            RETURNING m.id, m.queue, m.task, m.attempt_base + m.attempts AS attempt
          ), flagged AS (
            UPDATE ${table} AS m SET cancel_requested_at = coalesce(m.cancel_requested_at, coalesce(${now}::timestamptz, now()))
            FROM items AS i WHERE m.id = i.id AND i.running
            RETURNING m.id, m.queue
          ), announced AS (
            -- Consumers holding them renew at once on hearing it (delivered at commit; see cancels):
            -- 'cancel <queue> <id>,<id>...', or 'cancel <queue>' when the ids would not fit a payload.
            SELECT count(pg_notify(${channel}, 'cancel ' || queue ||
                     CASE WHEN length(ids) <= ${CancelInbox.MAX_LISTED_BYTES}::int THEN ' ' || ids ELSE '' END)) AS n
            FROM (SELECT queue, string_agg(id::text, ',' ORDER BY id) AS ids FROM flagged GROUP BY queue) AS q
            WHERE ${announce}::boolean
          ), recorded AS (
            INSERT INTO ${attemptsTable} (message_id, queue, task, attempt, consumer, started_at, ended_at, outcome, error)
            SELECT id, queue, task, attempt, '', coalesce(${now}::timestamptz, now()), coalesce(${now}::timestamptz, now()),
                   'cancelled', NULL
            FROM removed
          )
          SELECT id, 'cancelled' AS result FROM removed
          UNION ALL
          SELECT id, 'cancelling' AS result FROM flagged CROSS JOIN announced
          ORDER BY id`
        return rows.map((row): CancelResult => ({ id: String(row.id) as MessageId, result: row.result }))
      })))

    /**
     * Lock the rows `where` selects, in id order (two bulk cancels cannot deadlock), and say
     * which are running: leased, the lease not expired (as `stats` counts in flight). A message
     * whose lease expired has no holder that can still finish it: it is deleted at once (should
     * its holder still be at it, its renewal finds it gone).
     */
    const lockForCancel = (where: Statement.Fragment) => (now: Date | null) =>
      sql<{ id: bigint; running: boolean }>`
        SELECT id, (state = 'ready' AND lease_token IS NOT NULL AND visible_at > coalesce(${now}::timestamptz, now())) AS running
        FROM ${table} WHERE ${where}
        ORDER BY id
        FOR UPDATE`

    // Ids checked by `fromOperations`: valid and distinct.
    const cancel: QueueStoreShape["cancel"] = (cancelIds) =>
      cancelLocked(lockForCancel(sql`id = ANY(${textArray(cancelIds)}::bigint[])`)).pipe(
        (e) => op("cancel", { count: cancelIds.length }, e)
      )

    // Every message of the queue (of one task, if given), in transactions of CANCEL_BATCH messages
    // each: one transaction over a whole large queue held every row's lock until its commit, and
    // every renewal or finishing write of those rows waited for all of it. The ids are read first
    // (no lock, the messages there now: later sends are not cancelled), then locked and cancelled
    // batch by batch in id order, each batch re-checked against the filter under its lock.
    const cancelWhere: QueueStoreShape["cancelWhere"] = (filter) =>
      Effect.gen(function*() {
        const task = filter.task ?? null
        const where = sql`queue = ${filter.queue} AND (${task}::text IS NULL OR task = ${task})`
        const found = yield* sql<{ id: bigint }>`SELECT id FROM ${table} WHERE ${where} ORDER BY id`
        const results: Array<CancelResult> = []
        for (let k = 0; k < found.length; k += CANCEL_BATCH) {
          const batch = found.slice(k, k + CANCEL_BATCH).map((row) => String(row.id))
          results.push(...(yield* cancelLocked(lockForCancel(sql`id = ANY(${textArray(batch)}::bigint[]) AND ${where}`))))
        }
        return results
      }).pipe((e) => op("cancelWhere", { queue: filter.queue, task: filter.task ?? "*" }, e))

    const recordAttempt: QueueStoreShape["recordAttempt"] = (a) =>
      sql`
        INSERT INTO ${attemptsTable} (message_id, queue, task, attempt, consumer, started_at, ended_at, outcome, error, result)
        VALUES (${a.messageId}::bigint, ${a.queue}, ${a.task},
                ${a.attempt} + coalesce((SELECT b.attempt_base FROM ${table} AS b WHERE b.id = ${a.messageId}::bigint), 0),
                ${a.consumer}, ${a.startedAt}, ${a.endedAt},
                ${a.outcome}, ${a.error === null ? null : Validate.boundedText(a.error)}, ${resultText(a.result)}::jsonb)`.pipe(
        Effect.asVoid,
        (e) => op("recordAttempt", { messageId: a.messageId }, e)
      )

    const attempts: QueueStoreShape["attempts"] = (id) =>
      sql<{
        message_id: bigint
        queue: string
        task: string
        attempt: number
        consumer: string
        started_at: Date
        ended_at: Date
        outcome: Attempt["outcome"]
        error: string | null
        result: unknown
      }>`SELECT * FROM ${attemptsTable} WHERE message_id = ${id}::bigint ORDER BY id`.pipe(
        Effect.map((rows) =>
          rows.map((r): Attempt => withResult({
            messageId: String(r.message_id) as MessageId,
            queue: r.queue,
            task: r.task,
            attempt: r.attempt,
            consumer: r.consumer,
            startedAt: r.started_at,
            endedAt: r.ended_at,
            outcome: r.outcome,
            error: r.error
          }, r.result))
        ),
        (e) => op("attempts", { messageId: id }, e)
      )

    // One batch of retention: the oldest expired records, through the `ended_at` index, at most
    // PRUNE_BATCH of them per statement (a short transaction, however far behind the pruning is).
    // The transaction-level advisory lock makes one consumer the pruner of the moment: a consumer
    // that finds it taken prunes nothing (`locked`), since another one is at it.
    const pruneBatch = (cutoffMs: number, now: Date | null) =>
      sql<{ locked: boolean; n: number }>`
        WITH lock AS (
          SELECT pg_try_advisory_xact_lock(${pruneLockKey(schema)}::bigint) AS got
        ), doomed AS (
          SELECT id FROM ${attemptsTable}
          WHERE (SELECT got FROM lock)
            AND ended_at < coalesce(${now}::timestamptz, now()) - ${cutoffMs}::bigint * interval '1 millisecond'
          ORDER BY ended_at
          LIMIT ${PRUNE_BATCH}
        ), gone AS (
          DELETE FROM ${attemptsTable} WHERE id IN (SELECT id FROM doomed) RETURNING 1
        )
        SELECT NOT (SELECT got FROM lock) AS locked, (SELECT count(*)::int FROM gone) AS n`

    const pruneAttempts: QueueStoreShape["pruneAttempts"] = (olderThan) =>
      Effect.gen(function*() {
        const now = yield* currentTime
        const cutoffMs = Math.round(Duration.toMillis(olderThan))
        let total = 0
        while (true) {
          const [row] = yield* pruneBatch(cutoffMs, now)
          if (row === undefined || row.locked) return total
          total += row.n
          if (row.n < PRUNE_BATCH) return total
        }
      }).pipe((e) => op("pruneAttempts", {}, e))

    const sends: QueueStoreShape["sends"] = (queues) =>
      Effect.gen(function*() {
        const latch = yield* Latch.make(false)
        if (pg._tag === "None") return Effect.never // no LISTEN without a PgClient: consumers poll
        const wanted = new Set(queues)
        const listening = yield* Deferred.make<void>()
        const cancelPrefix = "cancel "
        // One connection of its own per subscription, not one held from the main pool (a small
        // pool would lose a slot for good). When it dies, listen again after a pause; meanwhile
        // consumers poll.
        // LISTEN needs a session: through a transaction-mode pooler, the direct URL or nothing (poll).
        const target = yield* Pooler.sessionTarget(pg.value.config)
        if (target._tag === "None") return Effect.never
        const listen = Effect.scoped(Effect.gen(function*() {
          const client = yield* PgClient.makeClient({
            ...target.value.config,
            applicationName: `${pg.value.config.applicationName ?? "leasehold"}-listen`
          }).pipe(Effect.provide(Reactivity.layer))
          const notifications = yield* client.listen(channel)
          yield* Deferred.succeed(listening, undefined)
          while (true) {
            const notification = yield* Queue.take(notifications)
            if (wanted.has(notification.payload)) yield* latch.open
            // A cancel of running messages, announced on the same channel (queue names have no spaces):
            // `cancel <queue> <id>,<id>...`, or `cancel <queue>` naming none.
            else if (notification.payload.startsWith(cancelPrefix)) {
              const [queue = "", listed] = notification.payload.slice(cancelPrefix.length).split(" ", 2)
              const ids = listed === undefined ? undefined : listed.split(",") as Array<MessageId>
              for (const inbox of cancelListeners.get(queue) ?? []) inbox.add(ids)
            }
          }
        })).pipe(
          Effect.catchCause((cause) =>
            Effect.logDebug("send notifications interrupted; listening again in 1s", cause).pipe(Effect.andThen(Effect.sleep(1_000)))
          ),
          Effect.forever,
          Effect.annotateLogs({ module: "PgQueueStore", channel })
        )
        // Detached, and stopped with a bound: closing a listening connection that stopped answering
        // (a network partition) must not hold up the subscriber's shutdown; it is left to die alone.
        const listener = yield* Effect.forkDetach(listen)
        yield* Effect.addFinalizer(() => Effect.asVoid(Abandon.within(Fiber.interrupt(listener), 1_000)))
        // Sends made after this returns must be heard: wait (boundedly) until LISTEN is in place.
        yield* Deferred.await(listening).pipe(Effect.timeoutOption(5_000))
        return Effect.andThen(latch.await, latch.close)
      })

    // Heard by the listener of `sends`, which fills these inboxes on a `cancel <queue>` payload.
    const cancels: QueueStoreShape["cancels"] = (queues) => CancelInbox.subscribe(cancelListeners, queues)

    const depths: QueueStoreShape["depths"] = (queues) =>
      Effect.gen(function*() {
        const wanted = [...new Set(queues)]
        for (const queue of wanted) yield* Validate.name("queue", queue)
        return yield* countQueues(wanted)
      }).pipe((e) => op("depths", { queues: queues.length }, e))

    /**
     * The counts of distinct queues, their names not checked: `depths` checks what it is
     * given; `queues` counts the names it read from the tables, whatever they hold.
     */
    const countQueues = (wanted: ReadonlyArray<string>) =>
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
          CROSS JOIN (SELECT coalesce(${now}::timestamptz, now()) AS now) AS c
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

    // The counts of one queue: the statement of `depths`, for one queue.
    const stats: QueueStoreShape["stats"] = (queue) =>
      Effect.gen(function*() {
        yield* Validate.name("queue", queue)
        const [row] = yield* depths([queue])
        return row!
      }).pipe((e) => op("stats", { queue }, e))

    // Where a row stands, exactly as `depths` counts it (an expired lease is ready). Kept as
    // text in TypeScript, not SQL input: it holds no value, only the alias `m` and `c.now`.
    const viewState = sql.literal(`CASE WHEN m.state = 'dead' THEN 'dead'
      WHEN m.visible_at <= c.now THEN 'ready'
      WHEN m.lease_token IS NULL THEN 'delayed'
      ELSE 'in-flight' END`)

    /** What `viewState` says of a row, as conditions on its columns (the sargable form, per state). */
    const stateCondition: Record<MessageState | "all", Statement.Fragment> = {
      all: sql.literal(""),
      ready: sql.literal("AND m.state = 'ready' AND m.visible_at <= c.now"),
      delayed: sql.literal("AND m.state = 'ready' AND m.visible_at > c.now AND m.lease_token IS NULL"),
      "in-flight": sql.literal("AND m.state = 'ready' AND m.visible_at > c.now AND m.lease_token IS NOT NULL"),
      dead: sql.literal("AND m.state = 'dead'")
    }

    // One row by primary key; `c.now` is the one instant its state is judged at.
    // Options were checked by `fromOperations`: `id` is a valid bigint.
    const get: QueueStoreShape["get"] = (id) =>
      Effect.gen(function*() {
        const now = yield* currentTime
        const rows = yield* sql<InfoRow>`
          SELECT m.*, ${viewState} AS view_state
          FROM ${table} AS m CROSS JOIN (SELECT coalesce(${now}::timestamptz, now()) AS now) AS c
          WHERE m.id = ${id}::bigint`
        return rows.length === 0 ? Option.none() : Option.some(toInfo(rows[0]!))
      }).pipe((e) => op("get", { id }, e))

    // A keyset page in id order: `id > after` and LIMIT walk the primary key, so a page costs
    // the same wherever it starts. The state filter is the CASE itself (one statement for
    // every filter; a NULL state keeps all): a helper for tests and operators, not a hot path.
    const messages: QueueStoreShape["messages"] = (queue, options = {}) =>
      Effect.gen(function*() {
        const now = yield* currentTime
        // The state's own conditions, written out (one statement per state) so that the planner can
        // read a few in-flight rows through the leased-rows index instead of every row of the queue.
        const rows = yield* sql<InfoRow>`
          SELECT m.*, ${viewState} AS view_state
          FROM ${table} AS m CROSS JOIN (SELECT coalesce(${now}::timestamptz, now()) AS now) AS c
          WHERE m.queue = ${queue} AND m.id > ${options.after ?? "0"}::bigint ${stateCondition[options.state ?? "all"]}
          ORDER BY m.id
          LIMIT ${options.limit ?? 100}`
        return rows.map(toInfo)
      }).pipe((e) => op("messages", { queue, state: options.state ?? "all" }, e))

    const nextVisibleAt: QueueStoreShape["nextVisibleAt"] = (queue) =>
      Effect.gen(function*() {
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
          SELECT min((SELECT m.visible_at FROM ${table} AS m
                      WHERE m.queue = ${queue} AND m.state = 'ready' AND m.priority = priorities.p
                        AND m.visible_at > coalesce(${now}::timestamptz, now())
                      ORDER BY m.visible_at LIMIT 1)) AS at
          FROM priorities WHERE priorities.p IS NOT NULL`
        return Option.fromNullishOr(row?.at)
      }).pipe((e) => op("nextVisibleAt", { queue }, e))

    // -------------------------------------------------------------------------
    // Schedules (migration 7): one row per key; `last_slot` fences each firing.

    /** How far a schedule's time may run ahead of the store's clock, as an interval. */
    const scheduleTolerance = sql`${defaults.scheduleClockToleranceMs}::bigint * interval '1 millisecond'`

    // The store's clock, as every statement reads it (now() is the statement's transaction start).
    const now: QueueStoreShape["now"] = Effect.gen(function*() {
      const fixed = yield* currentTime
      if (fixed !== null) return fixed
      const [row] = yield* sql<{ now: Date }>`SELECT now() AS now`
      return row!.now
    }).pipe((e) => op("now", {}, e))

    // All specs in one statement (jsonb_to_recordset), one row per key. A new key starts at
    // `now` (slots before its declaration never fire). An existing key takes the declared
    // definition when `replace` (a worker starting); a changed cron or tz also moves last_slot
    // up to `now`, so the new expression starts from now instead of firing a "missed" slot of
    // itself at once. Without `replace` (the periodic heartbeat) only last_seen moves: two
    // versions of a worker during a rolling deploy do not flip the row back and forth.
    const upsertSchedules: QueueStoreShape["upsertSchedules"] = (specs, options) =>
      Effect.gen(function*() {
        const docs = yield* Effect.forEach(specs, (spec) =>
          Effect.map(Validate.prepareMessage(spec.queue, { task: spec.task, payload: spec.payload }, limits), (m) => ({
            key: spec.key,
            cron: spec.cron,
            tz: spec.tz,
            queue: spec.queue,
            task: spec.task,
            payload: JSON.parse(m.payloadJson) as unknown,
            next_slot: spec.nextSlot?.toISOString() ?? null
          })))
        if (docs.length === 0) return []
        const replace = options.replace ?? true
        const now = yield* currentTime
        // The declared time, unless it is ahead of the store's clock by more than the tolerance: a
        // worker whose clock runs ahead neither starts a schedule in the future (no slot would fire
        // until then) nor marks it seen in the future (greatest() below would keep that).
        const rows = yield* sql<ScheduleRow>`
          INSERT INTO ${schedulesTable} AS s
            (key, cron, tz, queue, task, payload, last_slot, next_slot, last_seen_at, last_seen_by)
          SELECT d.key, d.cron, d.tz, d.queue, d.task, d.payload, c.at, d.next_slot, c.at, ${options.seenBy}
          FROM jsonb_to_recordset(${JSON.stringify(docs)}::jsonb)
            AS d(key text, cron text, tz text, queue text, task text, payload jsonb, next_slot timestamptz),
            (SELECT CASE WHEN ${options.now}::timestamptz > coalesce(${now}::timestamptz, now()) + ${scheduleTolerance}
                         THEN coalesce(${now}::timestamptz, now()) ELSE ${options.now}::timestamptz END AS at) AS c
          ON CONFLICT (key) DO UPDATE SET
            last_slot    = CASE WHEN ${replace}::boolean AND (s.cron, s.tz) IS DISTINCT FROM (excluded.cron, excluded.tz)
                                THEN greatest(s.last_slot, excluded.last_slot) ELSE s.last_slot END,
            updated_at   = CASE WHEN ${replace}::boolean AND (s.cron, s.tz, s.queue, s.task, s.payload) IS DISTINCT FROM
                                     (excluded.cron, excluded.tz, excluded.queue, excluded.task, excluded.payload)
                                THEN now() ELSE s.updated_at END,
            cron         = CASE WHEN ${replace}::boolean THEN excluded.cron ELSE s.cron END,
            tz           = CASE WHEN ${replace}::boolean THEN excluded.tz ELSE s.tz END,
            queue        = CASE WHEN ${replace}::boolean THEN excluded.queue ELSE s.queue END,
            task         = CASE WHEN ${replace}::boolean THEN excluded.task ELSE s.task END,
            payload      = CASE WHEN ${replace}::boolean THEN excluded.payload ELSE s.payload END,
            next_slot    = CASE WHEN ${replace}::boolean THEN excluded.next_slot ELSE s.next_slot END,
            last_seen_at = greatest(s.last_seen_at, excluded.last_seen_at),
            last_seen_by = excluded.last_seen_by
          RETURNING s.*`
        return rows.map(toSchedule).sort(byKey)
      }).pipe((e) => op("upsertSchedules", { count: specs.length }, e))

    // The fence and the send in one statement, so one transaction on one connection: the
    // UPDATE matches only while the row's last slot is earlier than this one (and its
    // definition is the one the worker computed the slot from). It locks the row, so a
    // concurrent firer of the same slot waits, re-reads the row, finds last_slot = slot and
    // matches nothing: no row, so no INSERT. A slot's row never moves without its message,
    // nor does the message land without the row. A loser costs one UPDATE that matches
    // nothing (no BEGIN/COMMIT round trips). The NOTIFY is delivered at the statement's commit.
    // The payload was checked when the schedule was upserted.
    const fireSchedule: QueueStoreShape["fireSchedule"] = (key, fire) =>
      Effect.gen(function*() {
        const now = yield* currentTime
        const headers = JSON.stringify({ "leasehold-schedule": key, "leasehold-slot": fire.slot.toISOString() })
        // Without the NOTIFY when its queue is full (see `announcing`): the slot still fires.
        const rows = yield* announcing((announce) => sql<{ id: bigint }>`
          WITH fired AS (
            UPDATE ${schedulesTable} SET last_slot = ${fire.slot}, next_slot = ${fire.nextSlot},
                   fired_at = coalesce(${now}::timestamptz, now())
            WHERE key = ${key} AND last_slot < ${fire.slot} AND cron = ${fire.cron} AND tz = ${fire.tz}
              -- Not a slot still ahead of the database's clock (a firer whose clock runs ahead).
              AND ${fire.slot}::timestamptz <= coalesce(${now}::timestamptz, now()) + ${scheduleTolerance}
            RETURNING queue, task, payload
          ), ins AS (
            INSERT INTO ${table} (queue, task, payload, headers, priority, enqueued_at, visible_at, max_attempts)
            SELECT queue, task, payload, ${headers}::jsonb, 0,
                   coalesce(${now}::timestamptz, now()), coalesce(${now}::timestamptz, now()), ${limits.defaultMaxAttempts}
            FROM fired
            RETURNING id, queue
          )
          SELECT ins.id FROM ins
          CROSS JOIN LATERAL (SELECT CASE WHEN ${announce}::boolean THEN pg_notify(${channel}, ins.queue) END) AS announced`)
        return rows.length === 0
          ? Option.none<SendResult>()
          : Option.some<SendResult>({ id: String(rows[0]!.id) as MessageId, deduplicated: false })
      }).pipe((e) => op("fireSchedule", { key, slot: fire.slot.toISOString() }, e))

    // A manual run: the row is read (and locked against a concurrent remove) and its message
    // sent in one transaction; last_slot is not touched, so the slots go on as before.
    const triggerSchedule: QueueStoreShape["triggerSchedule"] = (key) =>
      sql.withTransaction(Effect.gen(function*() {
        const [row] = yield* sql<{ queue: string; task: string; payload: unknown }>`
          SELECT queue, task, payload FROM ${schedulesTable} WHERE key = ${key} FOR SHARE`
        if (row === undefined) return Option.none<SendResult>()
        const headers = { "leasehold-schedule": key, "leasehold-slot": "manual" }
        const [sent] = yield* send(row.queue, [{ task: row.task, payload: row.payload, headers }])
        return Option.some(sent!)
      })).pipe((e) => op("triggerSchedule", { key }, e))

    const schedules: QueueStoreShape["schedules"] = sql<ScheduleRow>`SELECT * FROM ${schedulesTable} ORDER BY key`.pipe(
      Effect.map((rows) => rows.map(toSchedule)),
      (e) => op("schedules", {}, e)
    )

    const removeSchedule: QueueStoreShape["removeSchedule"] = (key) =>
      sql<{ key: string }>`DELETE FROM ${schedulesTable} WHERE key = ${key} RETURNING key`.pipe(
        Effect.map((rows) => rows.length === 1),
        (e) => op("removeSchedule", { key }, e)
      )

    // Expired reservations are only clutter (the next send with the key takes them over):
    // deleted oldest first through the `until` index, in bounded batches.
    const pruneUniqueKeys: QueueStoreShape["pruneUniqueKeys"] = Effect.gen(function*() {
      const now = yield* currentTime
      let total = 0
      while (true) {
        const [row] = yield* sql<{ n: number }>`
          WITH doomed AS (
            SELECT queue, key FROM ${uniqueTable} WHERE until <= coalesce(${now}::timestamptz, now())
            ORDER BY until LIMIT ${PRUNE_BATCH}
          ), gone AS (
            DELETE FROM ${uniqueTable} AS u USING doomed AS d
            WHERE u.queue = d.queue AND u.key = d.key AND u.until <= coalesce(${now}::timestamptz, now())
            RETURNING 1
          )
          SELECT count(*)::int AS n FROM gone`
        total += row?.n ?? 0
        if ((row?.n ?? 0) < PRUNE_BATCH) return total
      }
    }).pipe((e) => op("pruneUniqueKeys", {}, e))

    return fromOperations({
      now,
      upsertSchedules,
      fireSchedule,
      triggerSchedule,
      schedules,
      removeSchedule,
      pruneUniqueKeys,
      send,
      claim,
      renew,
      ack,
      release,
      retry,
      deadLetter,
      complete,
      redrive,
      purge,
      deadLetters,
      pause,
      resume,
      queues,
      cancel,
      cancelWhere,
      get,
      messages,
      recordAttempt,
      attempts,
      pruneAttempts,
      sends,
      cancels,
      stats,
      depths,
      nextVisibleAt
    })
  })

/**
 * The lease pool: a second client on the same server as the main `PgClient`,
 * small, with its own `statement_timeout`. `undefined` when there is no
 * `PgClient` to copy the connection settings from, or when disabled.
 */
const makeLeaseClient = (options: PgQueueStoreOptions["leasePool"]) =>
  Effect.gen(function*() {
    if (options === false) return undefined
    const main = yield* Effect.serviceOption(PgClient.PgClient)
    if (main._tag === "None") return undefined
    const timeoutMs = Duration.toMillis(options?.statementTimeout ?? "10 seconds")
    const client = yield* PgClient.make({
      ...main.value.config,
      maxConnections: options?.maxConnections ?? 2,
      minConnections: 0,
      applicationName: `${main.value.config.applicationName ?? "leasehold"}-lease`,
      keepAlive: main.value.config.keepAlive ?? "10 seconds",
      // Through a pooler, no startup parameter (refused): lease statements are bounded by the consumer's timeouts.
      startupParameters: Pooler.startupParameters((yield* Pooler.current).mode, main.value.config.startupParameters, {
        statement_timeout: String(Math.round(timeoutMs))
      })
    }).pipe(Effect.provide(Reactivity.layer), classify("connect lease pool"))
    return client.withoutTransforms()
  })

/**
 * The store as a layer over the `SqlClient` in context (migrating first unless
 * `migrate: false`), with the settings it resolved ({@link StoreSettings}).
 * The schema is `options.schema`, else `LEASEHOLD_SCHEMA`, else `leasehold`:
 * read once, here, and taken from here by session liveness built on this layer.
 */
export const layer = (
  options: PgQueueStoreOptions = {}
): Layer.Layer<QueueStore | StoreSettings, InvalidInput | StoreError | ConfigInvalid, SqlClient.SqlClient> =>
  Layer.effectContext(Effect.gen(function*() {
    const schema = yield* Validate.schemaName(options.schema ?? (yield* QueueConfig.schemaFromEnv) ?? Migrations.defaultSchema)
    const store = yield* make({ ...options, schema })
    return Context.make(QueueStore, store).pipe(Context.add(StoreSettings, StoreSettings.of({ schema })))
  }))
