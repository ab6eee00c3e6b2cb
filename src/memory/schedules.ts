/**
 * Schedules in the memory store, as the SQL store keeps them (migration 7): declaring them,
 * firing a slot behind the same fence, triggering by hand, listing and removing; and the
 * store's clock.
 *
 * @since 0.1.0
 */
import { Clock, Effect, Option } from "effect"
import { defaults, type QueueStoreShape, type ScheduleInfo } from "../QueueStore.ts"
import * as Validate from "../internal/validate.ts"
import { send } from "./send.ts"
import type { MemoryState } from "./state.ts"

/** `now`: the store's clock (Effect's `Clock`). */
export const now: QueueStoreShape["now"] = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

/** `upsertSchedules`: declare schedules, keeping or replacing those already there. */
export const upsertSchedules = (state: MemoryState): QueueStoreShape["upsertSchedules"] => (specs, options) =>
  Effect.gen(function*() {
    const { scheduleRows } = state
    // Every payload checked before the first write, as the one SQL statement does.
    const payloads = yield* Effect.forEach(specs, (spec) =>
      Effect.map(Validate.prepareMessage(spec.queue, { task: spec.task, payload: spec.payload }, state.limits), (m) =>
        JSON.parse(m.payloadJson) as unknown))
    // As SQL: a declared time ahead of the store's clock by more than the tolerance is the store's now.
    const storeNow = yield* Clock.currentTimeMillis
    const now = options.now.getTime() > storeNow + defaults.scheduleClockToleranceMs ? new Date(storeNow) : options.now
    return specs.map((spec, i): ScheduleInfo => {
      const old = scheduleRows.get(spec.key)
      if (old !== undefined && options.replace === false) {
        const seen: ScheduleInfo = { ...old, lastSeenAt: old.lastSeenAt < now ? now : old.lastSeenAt, lastSeenBy: options.seenBy }
        scheduleRows.set(spec.key, seen)
        return seen
      }
      const changed = old !== undefined && (old.cron !== spec.cron || old.tz !== spec.tz)
      const row: ScheduleInfo = {
        ...spec,
        payload: payloads[i],
        lastSlot: old === undefined ? now : changed && old.lastSlot < now ? now : old.lastSlot,
        firedAt: old?.firedAt ?? null,
        lastSeenAt: old === undefined || old.lastSeenAt < now ? now : old.lastSeenAt,
        lastSeenBy: options.seenBy
      }
      scheduleRows.set(spec.key, row)
      return row
    }).sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
  })

/** Send a schedule's message (the store's own send: same checks, same wake-ups). */
const sendScheduled = (state: MemoryState, row: ScheduleInfo, slot: string) =>
  Effect.map(
    send(state)(row.queue, [{ task: row.task, payload: row.payload, headers: { "leasehold-schedule": row.key, "leasehold-slot": slot } }]),
    (results) => Option.some(results[0]!)
  )

/**
 * `fireSchedule`: the fence as the SQL store applies it: only a later slot of the same definition fires.
 * Nothing yields between the check and the move, so a concurrent fiber sees the moved row.
 */
export const fireSchedule = (state: MemoryState): QueueStoreShape["fireSchedule"] => (key, fire) =>
  Effect.flatMap(Clock.currentTimeMillis, (now) => {
    const row = state.scheduleRows.get(key)
    const future = fire.slot.getTime() > now + defaults.scheduleClockToleranceMs
    if (row === undefined || future || !(row.lastSlot < fire.slot) || row.cron !== fire.cron || row.tz !== fire.tz) {
      return Effect.succeedNone
    }
    const moved: ScheduleInfo = { ...row, lastSlot: fire.slot, nextSlot: fire.nextSlot, firedAt: new Date(now) }
    state.scheduleRows.set(key, moved)
    return sendScheduled(state, moved, fire.slot.toISOString())
  })

/** `triggerSchedule`: send a schedule's message now, by hand (its slot untouched). */
export const triggerSchedule = (state: MemoryState): QueueStoreShape["triggerSchedule"] => (key) =>
  Effect.suspend(() => {
    const row = state.scheduleRows.get(key)
    return row === undefined ? Effect.succeedNone : sendScheduled(state, row, "manual")
  })

/** `schedules`: every schedule, by key. */
export const schedules = ({ scheduleRows }: MemoryState): QueueStoreShape["schedules"] =>
  Effect.sync(() => [...scheduleRows.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)))

/** `removeSchedule`: forget a schedule; whether there was one. */
export const removeSchedule = ({ scheduleRows }: MemoryState): QueueStoreShape["removeSchedule"] => (key) =>
  Effect.sync(() => scheduleRows.delete(key))
