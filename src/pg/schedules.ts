/**
 * Schedules (migration 7): one row per key; `last_slot` fences each firing. Declaring them,
 * firing a slot with its message in one statement, a manual run, listing and removing; and
 * the store's clock (`now`), which the scheduler computes its slots by.
 *
 * @since 0.1.0
 */
import { Effect, Option } from "effect"
import * as Statement from "effect/sql/Statement"
import type { MessageId, SendResult } from "../Message.ts"
import { defaults, type QueueStoreShape } from "../QueueStore.ts"
import * as Validate from "../internal/validate.ts"
import type { PgContext } from "./context.ts"
import { storeTime } from "./fragments.ts"
import { byKey, type ScheduleRow, toSchedule } from "./rows.ts"
import { send } from "./send.ts"

/** How far a schedule's time may run ahead of the store's clock, as an interval. */
const scheduleTolerance = Statement.fragment([
  Statement.parameter(defaults.scheduleClockToleranceMs),
  Statement.literal("::bigint * interval '1 millisecond'")
])

/** `now`: the store's clock, as every statement reads it (now() is the statement's transaction start). */
export const now = ({ currentTime, op, sql }: PgContext): QueueStoreShape["now"] =>
  Effect.gen(function*() {
    const fixed = yield* currentTime
    if (fixed !== null) return fixed
    const [row] = yield* sql<{ now: Date }>`SELECT now() AS now`
    return row!.now
  }).pipe((e) => op("now", {}, e))

/**
 * All specs in one statement (jsonb_to_recordset), one row per key. A new key starts at
 * `now` (slots before its declaration never fire). An existing key takes the declared
 * definition when `replace` (a worker starting); a changed cron or tz also moves last_slot
 * up to `now`, so the new expression starts from now instead of firing a "missed" slot of
 * itself at once. Without `replace` (the periodic heartbeat) only last_seen moves: two
 * versions of a worker during a rolling deploy do not flip the row back and forth.
 */
export const upsertSchedules = (ctx: PgContext): QueueStoreShape["upsertSchedules"] => (specs, options) =>
  Effect.gen(function*() {
    const { currentTime, limits, schedulesTable, sql } = ctx
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
        (SELECT CASE WHEN ${options.now}::timestamptz > ${storeTime(now)} + ${scheduleTolerance}
                     THEN ${storeTime(now)} ELSE ${options.now}::timestamptz END AS at) AS c
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
  }).pipe((e) => ctx.op("upsertSchedules", { count: specs.length }, e))

/**
 * The fence and the send in one statement, so one transaction on one connection: the
 * UPDATE matches only while the row's last slot is earlier than this one (and its
 * definition is the one the worker computed the slot from). It locks the row, so a
 * concurrent firer of the same slot waits, re-reads the row, finds last_slot = slot and
 * matches nothing: no row, so no INSERT. A slot's row never moves without its message,
 * nor does the message land without the row. A loser costs one UPDATE that matches
 * nothing (no BEGIN/COMMIT round trips). The NOTIFY is delivered at the statement's commit.
 * The payload was checked when the schedule was upserted.
 */
export const fireSchedule = (ctx: PgContext): QueueStoreShape["fireSchedule"] => (key, fire) =>
  Effect.gen(function*() {
    const { announcing, channel, currentTime, limits, schedulesTable, sql, table } = ctx
    const now = yield* currentTime
    const headers = JSON.stringify({ "leasehold-schedule": key, "leasehold-slot": fire.slot.toISOString() })
    // Without the NOTIFY when its queue is full (see `announcing`): the slot still fires.
    const rows = yield* announcing((announce) => sql<{ id: bigint }>`
      WITH fired AS (
        UPDATE ${schedulesTable} SET last_slot = ${fire.slot}, next_slot = ${fire.nextSlot},
               fired_at = ${storeTime(now)}
        WHERE key = ${key} AND last_slot < ${fire.slot} AND cron = ${fire.cron} AND tz = ${fire.tz}
          -- Not a slot still ahead of the database's clock (a firer whose clock runs ahead).
          AND ${fire.slot}::timestamptz <= ${storeTime(now)} + ${scheduleTolerance}
        RETURNING queue, task, payload
      ), ins AS (
        INSERT INTO ${table} (queue, task, payload, headers, priority, enqueued_at, visible_at, max_attempts)
        SELECT queue, task, payload, ${headers}::jsonb, 0,
               ${storeTime(now)}, ${storeTime(now)}, ${limits.defaultMaxAttempts}
        FROM fired
        RETURNING id, queue
      )
      SELECT ins.id FROM ins
      CROSS JOIN LATERAL (SELECT CASE WHEN ${announce}::boolean THEN pg_notify(${channel}, ins.queue) END) AS announced`)
    return rows.length === 0
      ? Option.none<SendResult>()
      : Option.some<SendResult>({ id: String(rows[0]!.id) as MessageId, deduplicated: false })
  }).pipe((e) => ctx.op("fireSchedule", { key, slot: fire.slot.toISOString() }, e))

/**
 * A manual run: the row is read (and locked against a concurrent remove) and its message
 * sent in one transaction; last_slot is not touched, so the slots go on as before.
 */
export const triggerSchedule = (ctx: PgContext): QueueStoreShape["triggerSchedule"] => (key) =>
  ctx.sql.withTransaction(Effect.gen(function*() {
    const { schedulesTable, sql } = ctx
    const [row] = yield* sql<{ queue: string; task: string; payload: unknown }>`
      SELECT queue, task, payload FROM ${schedulesTable} WHERE key = ${key} FOR SHARE`
    if (row === undefined) return Option.none<SendResult>()
    const headers = { "leasehold-schedule": key, "leasehold-slot": "manual" }
    const [sent] = yield* send(ctx)(row.queue, [{ task: row.task, payload: row.payload, headers }])
    return Option.some(sent!)
  })).pipe((e) => ctx.op("triggerSchedule", { key }, e))

/** `schedules`: every schedule, by key. */
export const schedules = ({ op, schedulesTable, sql }: PgContext): QueueStoreShape["schedules"] =>
  sql<ScheduleRow>`SELECT * FROM ${schedulesTable} ORDER BY key`.pipe(
    Effect.map((rows) => rows.map(toSchedule)),
    (e) => op("schedules", {}, e)
  )

/** `removeSchedule`: whether the key had a row. */
export const removeSchedule = ({ op, schedulesTable, sql }: PgContext): QueueStoreShape["removeSchedule"] => (key) =>
  sql<{ key: string }>`DELETE FROM ${schedulesTable} WHERE key = ${key} RETURNING key`.pipe(
    Effect.map((rows) => rows.length === 1),
    (e) => op("removeSchedule", { key }, e)
  )
