/**
 * Cron schedules: recurring messages that fire exactly once per slot, however many
 * workers declare them, with no leader. Declare a schedule in code ({@link define}, or
 * `Task.schedule` for a typed task) and provide {@link layer} beside the consumer: it
 * upserts its schedules on start, then sleeps until the next slot and fires it. Slots are
 * timed by the store's clock (the database's `now()`, read each round; Effect's `Clock` only
 * measures the time between, so `TestClock` drives it over a store on that clock): a worker
 * whose own clock is off still fires on time, and logs a warning when it is off by more than
 * `defaults.scheduleClockToleranceMs`. Every worker that reaches a slot tries; the store's
 * fenced write (`last_slot < slot`, and never a slot ahead of its clock) lets exactly one send
 * the message.
 *
 * @since 0.1.0
 */
import { Cause, Clock, Context, Cron, type Duration, Effect, Layer, Metric, Option, Result, type Scope } from "effect"
import * as QueueConfig from "./QueueConfig.ts"
import { InvalidInput, type StoreError } from "./QueueError.ts"
import * as QueueMetrics from "./QueueMetrics.ts"
import { defaults, QueueStore, type QueueStoreShape, type ScheduleInfo } from "./QueueStore.ts"
import * as Validate from "./internal/validate.ts"

/**
 * What to do with slots that passed while no worker ran (all down across them):
 * `"latest"` (the default) fires once, for the latest missed slot; `{ catchUp: n }`
 * fires the latest `n` missed slots, oldest first. Slots before a schedule was first
 * declared (or before its cron or time zone changed) never fire.
 */
export type Missed = "latest" | { readonly catchUp: number }

/** What {@link define} takes: a plain message on a cron. */
export interface ScheduleOptions {
  /** Names the schedule across workers (the name rule: 1-128 of `A-Za-z0-9_.:/-`). */
  readonly key: string
  /**
   * Five fields (minute hour day month weekday) or six (seconds first), as effect's `Cron`
   * parses them: `"*\/5 * * * *"`, `"0 30 9 * * 1-5"`.
   */
  readonly cron: string
  /** An IANA time zone (`"Europe/Berlin"`) or an offset (`"+02:00"`); default `"UTC"`. */
  readonly tz?: string | undefined
  readonly queue: string
  readonly task: string
  /** The message's payload (JSON), the same for every slot. */
  readonly payload: unknown
  readonly missed?: Missed | undefined
}

/** A checked schedule: what {@link layer} runs. Build with {@link define} or `Task.schedule`. */
export interface Schedule {
  readonly key: string
  readonly cron: string
  readonly tz: string
  readonly queue: string
  readonly task: string
  readonly payload: unknown
  readonly missed: Missed
  /** The parsed expression. */
  readonly expression: Cron.Cron
}

/** The rule a cron expression follows, as refusals state it. */
export const cronRule =
  "5 fields (minute hour day month weekday) or 6 (second minute hour day month weekday), each *, a number, a range a-b, a step */n or a list, matching some date"

const refuse = (key: string, field: string, rule: string, detail: string) =>
  new InvalidInput({ field, rule, message: `schedule ${JSON.stringify(key)}: ${field} ${detail} (rule: ${rule})` })

/**
 * How a repeated local hour (clocks falling back) is treated: an expression whose hour field
 * is `*` runs on elapsed time, so it fires in both passes of the hour (`"both"`); one naming
 * hours fires at the first pass only (`"earlier"`), so a daily job runs once.
 */
const overlapPolicy = (cron: string): Cron.DstOverlapPolicy => {
  const fields = cron.trim().split(/\s+/)
  const hour = fields.length === 6 ? fields[2] : fields[1]
  return hour === "*" ? "both" : "earlier"
}

/**
 * Declare a schedule of a plain message (for a typed task, use `Task.schedule`). Checked
 * here, before anything is written: a bad key, queue or task name, an invalid cron
 * expression, an unknown time zone, an expression that matches no date, a bad `missed`
 * or a payload that is not JSON throw an {@link InvalidInput} naming the expression and the rule.
 *
 * @throws InvalidInput when a rule is broken.
 */
export const define = (options: ScheduleOptions): Schedule => {
  const key = options.key
  if (typeof key !== "string" || !Validate.namePattern.test(key)) {
    throw refuse(String(key), "key", Validate.nameRule, `${JSON.stringify(key)} is not a valid name`)
  }
  for (const field of ["queue", "task"] as const) {
    const value = options[field]
    if (typeof value !== "string" || !Validate.namePattern.test(value)) {
      throw refuse(key, field, Validate.nameRule, `${JSON.stringify(value)} is not a valid name`)
    }
  }
  const tz = options.tz ?? "UTC"
  if (typeof options.cron !== "string") throw refuse(key, "cron", cronRule, `${String(options.cron)} is not a string`)
  const parsed = Cron.parse(options.cron, tz, { onDstOverlap: overlapPolicy(options.cron) })
  if (Result.isFailure(parsed)) {
    const failure = parsed.failure
    if (failure.message.includes("time zone")) {
      throw refuse(key, "tz", "an IANA time zone such as \"Europe/Berlin\", or an offset such as \"+02:00\"", `${JSON.stringify(tz)} is not a known time zone`)
    }
    throw refuse(key, "cron", cronRule, `${JSON.stringify(options.cron)} is invalid: ${failure.message}`)
  }
  try {
    Cron.next(parsed.success, new Date(0))
  } catch {
    throw refuse(key, "cron", cronRule, `${JSON.stringify(options.cron)} matches no date`)
  }
  const missed = options.missed ?? "latest"
  if (
    missed !== "latest" &&
    !(typeof missed === "object" && missed !== null && Number.isInteger(missed.catchUp) && missed.catchUp >= 1 && missed.catchUp <= 1000)
  ) {
    throw refuse(key, "missed", "\"latest\" or { catchUp: n } with n a whole number from 1 to 1000", `${JSON.stringify(missed)} is not allowed`)
  }
  const checked = Effect.runSync(Effect.result(Validate.prepareMessage(options.queue, { task: options.task, payload: options.payload }, {
    maxPayloadBytes: Number.MAX_SAFE_INTEGER,
    defaultMaxAttempts: 1
  })))
  if (Result.isFailure(checked)) {
    const { field, rule, message } = checked.failure
    throw new InvalidInput({ field, rule, message: `schedule ${JSON.stringify(key)}: ${message}` })
  }
  return {
    key,
    cron: options.cron,
    tz,
    queue: options.queue,
    task: options.task,
    payload: JSON.parse(checked.success.payloadJson) as unknown,
    missed,
    expression: parsed.success
  }
}

/** The first slot strictly after `after`. */
export const nextSlot = (schedule: Schedule, after: number): Date => Cron.next(schedule.expression, after)

/**
 * The slots to fire at `now` when the last fired one is `lastSlot`: the slots in
 * (lastSlot, now], the latest one only or the latest `catchUp`, oldest first.
 */
export const dueSlots = (schedule: Schedule, lastSlot: number, now: number): ReadonlyArray<Date> => {
  const wanted = schedule.missed === "latest" ? 1 : schedule.missed.catchUp
  const slots: Array<Date> = []
  // prev is strict: from now + 1 ms it finds a slot at exactly now too.
  let cursor = now + 1
  while (slots.length < wanted) {
    const slot = Cron.prev(schedule.expression, cursor)
    if (slot.getTime() <= lastSlot) break
    slots.push(slot)
    cursor = slot.getTime()
  }
  return slots.reverse()
}

/** How to run a {@link Scheduler}. */
export interface SchedulerOptions {
  /** Recorded as who last declared the schedules (default: host, pid and a random suffix). */
  readonly id?: string | undefined
  /**
   * How often the worker records that it still declares its schedules (default 1 minute):
   * `leasehold schedules list` shows schedules no worker has declared for a while.
   */
  readonly heartbeat?: Duration.Input | undefined
}

/** A running scheduler. */
export interface SchedulerShape {
  readonly id: string
  readonly schedules: ReadonlyArray<Schedule>
  /**
   * The time (on the store's clock) up to which every slot of its schedules was handled:
   * fired here, or found fired by another worker. For tests and health checks.
   */
  readonly checkedUntil: Effect.Effect<Date>
}

/** The scheduler service: present while its layer's scope is open. */
export class Scheduler extends Context.Service<Scheduler, SchedulerShape>()("leasehold/Scheduler") {}

/** After a failed round, try again after this long, doubling while rounds keep failing, up to {@link MAX_RETRY_MS}. */
const RETRY_MS = 1_000
const MAX_RETRY_MS = 30_000

/**
 * Start a scheduler in the current scope: upsert `schedules` (failing if the store refuses
 * them), then fire their slots until the scope closes. Most programs use {@link layer}.
 */
export const make = (
  schedules: ReadonlyArray<Schedule>,
  options: SchedulerOptions = {}
): Effect.Effect<SchedulerShape, InvalidInput | StoreError, QueueStore | Scope.Scope> =>
  Effect.gen(function*() {
    const store = yield* QueueStore
    const id = yield* Validate.name("scheduler id", options.id ?? QueueConfig.defaultConsumerId())
    const heartbeatMs = yield* Validate.durationMs("heartbeat", options.heartbeat ?? "1 minute", { min: 100 })
    const state = new Map<string, number>()
    /** The next slot of each schedule after the last round (cron arithmetic in a named zone is not cheap). */
    const upcoming = new Map<string, number>()
    const clock = skewWatch(store, heartbeatMs)
    const start = (yield* clock.read).at
    const upsert = (now: number, replace: boolean) =>
      Effect.map(
        store.upsertSchedules(specs(schedules, now), { seenBy: id, now: new Date(now), replace }),
        (rows) => remember(state, rows)
      )
    yield* upsert(start, true)
    if (schedules.length > 0) {
      const list = schedules.map((s) => `${s.key} (${s.cron} ${s.tz}, next ${nextSlot(s, start).toISOString()})`).join(", ")
      yield* Effect.logInfo(`schedules declared: ${list}`).pipe(Effect.annotateLogs({ module: "Scheduler", scheduler: id }))
    }
    let checkedUntil = start
    let lastHeartbeat = start

    /** One round: heartbeat when due, fire every due slot, then sleep until the next slot. */
    const round = Effect.gen(function*() {
      const time = yield* clock.read
      const now = time.at
      if (now - lastHeartbeat >= heartbeatMs) {
        yield* upsert(now, false)
        lastHeartbeat = now
      }
      let next = lastHeartbeat + heartbeatMs
      for (const schedule of schedules) {
        const due = upcoming.get(schedule.key)
        if (due === undefined || due <= now) {
          yield* fireDue(store, schedule, state, now)
          upcoming.set(schedule.key, nextSlot(schedule, now).getTime())
        }
        next = Math.min(next, upcoming.get(schedule.key)!)
      }
      checkedUntil = now
      // Until the next slot or heartbeat, counted from the time as it is after the round
      // (which took time): when that is already past, the next round starts at once.
      const after = now + (yield* Clock.currentTimeMillis) - time.local
      if (next > after) yield* Effect.sleep(next - after)
    })
    let retryMs = RETRY_MS
    const loop = round.pipe(
      Effect.tap(() => Effect.sync(() => void (retryMs = RETRY_MS))),
      Effect.catchCause((cause) => {
        if (Cause.hasInterruptsOnly(cause)) return Effect.failCause(cause)
        const wait = retryMs
        retryMs = Math.min(retryMs * 2, MAX_RETRY_MS)
        return Effect.logWarning(`schedules: a round failed; trying again in ${wait} ms`, cause).pipe(Effect.andThen(Effect.sleep(wait)))
      }),
      Effect.forever,
      Effect.annotateLogs({ module: "Scheduler", scheduler: id })
    )
    if (schedules.length > 0) yield* Effect.forkScoped(loop)
    return Scheduler.of({
      id,
      schedules,
      checkedUntil: Effect.sync(() => new Date(checkedUntil))
    })
  })

/**
 * The store's time, read around one round trip, with this worker's `Clock` beside it: `at` is
 * the store's now, `local` the worker's clock right after the read (what later readings of it
 * are measured from). A worker whose clock is off the store's by more than the tolerance is
 * warned about, at the first reading that shows it and then at most once per `everyMs`.
 */
const skewWatch = (store: QueueStoreShape, everyMs: number) => {
  let warnedAt = -Infinity
  const read = Effect.gen(function*() {
    const before = yield* Clock.currentTimeMillis
    const at = (yield* store.now).getTime()
    const local = yield* Clock.currentTimeMillis
    // The store read its clock somewhere within the round trip: compare with its middle.
    const skewMs = Math.round((before + local) / 2 - at)
    if (Math.abs(skewMs) > defaults.scheduleClockToleranceMs + (local - before) / 2 && at - warnedAt >= everyMs) {
      warnedAt = at
      yield* Effect.logWarning(
        `schedules: this worker's clock is ${Math.abs(skewMs)} ms ${skewMs > 0 ? "ahead of" : "behind"} the store's ` +
          `(tolerance ${defaults.scheduleClockToleranceMs} ms); slots are timed by the store's clock, fix the worker's clock (NTP)`
      ).pipe(Effect.annotateLogs({ skewMs }))
    }
    return { at, local }
  })
  return { read }
}

/** The schedules as the store takes them, with their next slot after `now`. */
const specs = (schedules: ReadonlyArray<Schedule>, now: number) =>
  schedules.map((s) => ({
    key: s.key,
    cron: s.cron,
    tz: s.tz,
    queue: s.queue,
    task: s.task,
    payload: s.payload,
    nextSlot: nextSlot(s, now)
  }))

/** Keep the latest known last slot per key (a lower bound: another worker may have fired since). */
const remember = (state: Map<string, number>, rows: ReadonlyArray<ScheduleInfo>) => {
  for (const row of rows) state.set(row.key, Math.max(state.get(row.key) ?? -Infinity, row.lastSlot.getTime()))
}

/**
 * Fire the due slots of one schedule. A slot another worker fired (or that the row's
 * definition no longer has) sends nothing; either way it is handled, so it is remembered.
 */
const fireDue = (store: QueueStoreShape, schedule: Schedule, state: Map<string, number>, now: number) =>
  Effect.gen(function*() {
    const last = state.get(schedule.key) ?? now
    for (const slot of dueSlots(schedule, last, now)) {
      const fired = yield* store.fireSchedule(schedule.key, {
        slot,
        nextSlot: nextSlot(schedule, slot.getTime()),
        cron: schedule.cron,
        tz: schedule.tz
      })
      state.set(schedule.key, slot.getTime())
      if (Option.isSome(fired)) {
        yield* Metric.update(QueueMetrics.schedulesFired, 1)
        yield* Effect.logDebug(`schedule ${schedule.key}: fired slot ${slot.toISOString()} as message ${fired.value.id}`)
      }
    }
  })

/**
 * The scheduler as a layer: provide it beside the consumer (it needs only the
 * `QueueStore`). Building it upserts the schedules; a store that refuses one fails the layer.
 */
export const layer = (
  schedules: ReadonlyArray<Schedule>,
  options: SchedulerOptions = {}
): Layer.Layer<Scheduler, InvalidInput | StoreError, QueueStore> => Layer.effect(Scheduler, make(schedules, options))
