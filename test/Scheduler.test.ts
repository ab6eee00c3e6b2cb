/**
 * Scheduler on the memory store with TestClock: definitions refused naming the expression and
 * the rule, every slot fired once, missed slots (latest, catch-up), a changed cron starting
 * from now, a spring-forward day in a named zone, and Task.schedule encoding its payload.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Option, Schema, Scope } from "effect"
import { TestClock } from "effect/testing"
import * as MemoryQueueStore from "../src/MemoryQueueStore.ts"
import { InvalidInput } from "../src/QueueError.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as Scheduler from "../src/Scheduler.ts"
import * as Task from "../src/Task.ts"
import { advanceTo, everySlot, firedSlots } from "./support/SchedulerHarness.ts"

const MIN = 60_000
const T0 = Date.parse("2026-01-01T00:00:00Z")

const refusal = (f: () => unknown): InvalidInput => {
  try {
    f()
  } catch (e) {
    assert.instanceOf(e, InvalidInput)
    return e as InvalidInput
  }
  return assert.fail("not refused")
}

const tick = (extra: Partial<Scheduler.ScheduleOptions> = {}) =>
  Scheduler.define({ key: "tick", cron: "*/5 * * * *", queue: "q", task: "tick", payload: { n: 1 }, ...extra })

/** Start a scheduler in a scope of its own, closed by the caller to stop it (a worker going down). */
const start = (schedules: ReadonlyArray<Scheduler.Schedule>, id: string) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const scheduler = yield* Scheduler.make(schedules, { id }).pipe(Scope.provide(scope))
    return { scheduler, stop: Scope.close(scope, Effect.void as never) }
  })

describe("Scheduler (memory store, TestClock)", () => {
  it("refuses bad definitions at once, naming the expression and the rule", () => {
    const cron = refusal(() => tick({ cron: "61 * * * *" }))
    assert.strictEqual(cron.field, "cron")
    assert.match(cron.message, /schedule "tick": cron "61 \* \* \* \*" is invalid: Expected a value between 0 and 59 \(rule: 5 fields/)
    assert.match(refusal(() => tick({ cron: "* * *" })).message, /"\* \* \*" is invalid: Invalid number of segments/)
    assert.match(refusal(() => tick({ cron: "0 0 31 2 *" })).message, /"0 0 31 2 \*" matches no date/)
    const tz = refusal(() => tick({ tz: "Mars/Olympus_Mons" }))
    assert.strictEqual(tz.field, "tz")
    assert.match(tz.message, /"Mars\/Olympus_Mons" is not a known time zone \(rule: an IANA time zone/)
    const key = refusal(() => tick({ key: "a b" }))
    assert.strictEqual(key.field, "key")
    assert.match(key.message, /"a b" is not a valid name \(rule: 1-128 characters/)
    assert.strictEqual(refusal(() => tick({ queue: "" })).field, "queue")
    assert.strictEqual(refusal(() => tick({ missed: { catchUp: 0 } })).field, "missed")
    assert.strictEqual(refusal(() => tick({ payload: () => 1 })).field, "payload")
    // Seconds (6 fields) and offsets are fine.
    assert.strictEqual(tick({ cron: "*/10 * * * * *", tz: "+02:00" }).tz, "+02:00")
  })

  it("Task.schedule encodes the payload through the task's schema, keyed by the task's name", () => {
    const report = Task.define({ name: "report", queue: "reports", payload: Schema.Struct({ days: Schema.NumberFromString }) })
    const schedule = Task.schedule(report, { cron: "0 9 * * 1-5", tz: "Europe/Berlin", payload: { days: 7 } })
    assert.deepStrictEqual([schedule.key, schedule.queue, schedule.task, schedule.tz], ["report", "reports", "report", "Europe/Berlin"])
    assert.deepStrictEqual(schedule.payload, { days: "7" }, "stored as the schema encodes it")
    assert.strictEqual(Task.schedule(report, { key: "weekly", cron: "0 9 * * 1", payload: { days: 7 } }).key, "weekly")
    const bad = refusal(() => Task.schedule(report, { cron: "0 9 * * *", payload: { days: "x" as never } }))
    assert.match(bad.message, /payload of task "report" does not encode/)
    assert.strictEqual(refusal(() => Task.schedule(report, { cron: "0 25 * * *", payload: { days: 7 } })).field, "cron")
  })

  it.effect("fires every slot once, the message carrying the payload, and nothing between slots", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      yield* TestClock.setTime(T0 + 2 * MIN)
      const { scheduler } = yield* start([tick()], "w1")
      for (let t = T0 + 3 * MIN; t <= T0 + 120 * MIN; t += MIN) yield* advanceTo([scheduler], t)
      const fired = yield* firedSlots(store, "q")
      assert.deepStrictEqual(fired.map((f) => f.slot), everySlot(T0 + 2 * MIN, T0 + 120 * MIN, 5 * MIN))
      assert.deepStrictEqual(fired[0]!.payload, { n: 1 })
      assert.isTrue(fired.every((f) => f.key === "tick"))
      const [row] = yield* store.schedules
      assert.strictEqual(row!.lastSlot.getTime(), T0 + 120 * MIN)
      assert.strictEqual(row!.nextSlot?.getTime(), T0 + 125 * MIN)
    }).pipe(Effect.scoped, Effect.provide(MemoryQueueStore.layer())))

  it.effect("missed slots: latest fires once for the latest; catchUp fires the latest n, oldest first", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      yield* TestClock.setTime(T0)
      const latest = tick({ key: "latest", queue: "latest" })
      const catchUp = tick({ key: "catch-up", queue: "catch-up", missed: { catchUp: 3 } })
      const first = yield* start([latest, catchUp], "w1")
      yield* advanceTo([first.scheduler], T0 + 10 * MIN)
      yield* first.stop
      // Every worker down for an hour, then one starts.
      yield* TestClock.setTime(T0 + 72 * MIN)
      const second = yield* start([latest, catchUp], "w2")
      yield* advanceTo([second.scheduler], T0 + 72 * MIN)
      const iso = (m: number) => new Date(T0 + m * MIN).toISOString()
      assert.deepStrictEqual((yield* firedSlots(store, "latest")).map((f) => f.slot), [iso(5), iso(10), iso(70)])
      assert.deepStrictEqual((yield* firedSlots(store, "catch-up")).map((f) => f.slot), [iso(5), iso(10), iso(60), iso(65), iso(70)])
      yield* advanceTo([second.scheduler], T0 + 75 * MIN)
      assert.strictEqual((yield* firedSlots(store, "latest")).at(-1)!.slot, iso(75))
    }).pipe(Effect.scoped, Effect.provide(MemoryQueueStore.layer())))

  it.effect("a changed cron replaces the row on start and fires from now on, not its own past slots", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      yield* TestClock.setTime(T0)
      const old = yield* start([tick()], "w1")
      yield* advanceTo([old.scheduler], T0 + 5 * MIN)
      yield* old.stop
      yield* TestClock.setTime(T0 + 47 * MIN)
      const hourly = tick({ cron: "30 * * * *", payload: { n: 2 } })
      const fresh = yield* start([hourly], "w2")
      yield* advanceTo([fresh.scheduler], T0 + 47 * MIN)
      const [row] = yield* store.schedules
      assert.deepStrictEqual([row!.cron, row!.payload, row!.lastSlot.getTime()], ["30 * * * *", { n: 2 }, T0 + 47 * MIN])
      assert.strictEqual((yield* firedSlots(store, "q")).length, 1, "00:30 of the new cron was before it was declared")
      yield* advanceTo([fresh.scheduler], T0 + 90 * MIN)
      assert.deepStrictEqual((yield* firedSlots(store, "q")).map((f) => [f.slot, f.payload]), [
        [new Date(T0 + 5 * MIN).toISOString(), { n: 1 }],
        [new Date(T0 + 90 * MIN).toISOString(), { n: 2 }]
      ])
    }).pipe(Effect.scoped, Effect.provide(MemoryQueueStore.layer())))

  it.effect("spring forward in Europe/Berlin: */5 goes on every 5 minutes; a daily 02:30 (a skipped time) fires once", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      // 2026-03-29: 02:00 CET becomes 03:00 CEST. Local midnight to midnight is 23 hours.
      const from = Date.parse("2026-03-28T23:00:00Z")
      const to = Date.parse("2026-03-29T22:00:00Z")
      yield* TestClock.setTime(from)
      const every5 = tick({ key: "every5", queue: "every5", tz: "Europe/Berlin" })
      const daily = tick({ key: "daily", queue: "daily", cron: "30 2 * * *", tz: "Europe/Berlin" })
      const { scheduler } = yield* start([every5, daily], "w1")
      for (let t = from + 5 * MIN; t <= to; t += 5 * MIN) yield* advanceTo([scheduler], t)
      const slots = (yield* firedSlots(store, "every5")).map((f) => f.slot)
      assert.strictEqual(slots.length, 23 * 12)
      assert.deepStrictEqual(slots, everySlot(from, to, 5 * MIN))
      // 02:30 does not exist that day: it runs once, in the hour after the gap (03:30 CEST).
      assert.deepStrictEqual((yield* firedSlots(store, "daily")).map((f) => f.slot), ["2026-03-29T01:30:00.000Z"])
    }).pipe(Effect.scoped, Effect.provide(MemoryQueueStore.layer())))

  it.effect("trigger sends one now without moving the slots", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      yield* TestClock.setTime(T0 + MIN)
      const { scheduler } = yield* start([tick()], "w1")
      yield* advanceTo([scheduler], T0 + 2 * MIN)
      assert.isTrue(Option.isSome(yield* store.triggerSchedule("tick")))
      yield* advanceTo([scheduler], T0 + 5 * MIN)
      assert.deepStrictEqual((yield* firedSlots(store, "q")).map((f) => f.slot), ["manual", new Date(T0 + 5 * MIN).toISOString()])
    }).pipe(Effect.scoped, Effect.provide(MemoryQueueStore.layer())))

  it.effect("every minute a worker records it still declares its schedules, without taking a row another worker changed", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      yield* TestClock.setTime(T0)
      const { scheduler } = yield* start([tick()], "w1")
      // A newer worker declares the schedule with another cron.
      yield* store.upsertSchedules([{ ...tick({ cron: "0 * * * *" }), nextSlot: null }], { seenBy: "w2", now: new Date(T0 + 30_000) })
      yield* advanceTo([scheduler], T0 + 3 * MIN)
      const [row] = yield* store.schedules
      assert.deepStrictEqual([row!.cron, row!.lastSeenBy, row!.lastSeenAt.getTime()], ["0 * * * *", "w1", T0 + 3 * MIN])
      // w1's cron is not the row's: it fires nothing of its own.
      yield* advanceTo([scheduler], T0 + 10 * MIN)
      assert.deepStrictEqual(yield* firedSlots(store, "q"), [])
    }).pipe(Effect.scoped, Effect.provide(MemoryQueueStore.layer())))

  it.effect("a round that fails is logged and tried again; the slot still fires once the store answers", () =>
    Effect.gen(function*() {
      const inner = yield* MemoryQueueStore.make()
      let failing = false
      const flaky = { ...inner, fireSchedule: (key: string, fire: Parameters<typeof inner.fireSchedule>[1]) =>
        failing ? Effect.fail(new InvalidInput({ field: "test", rule: "test", message: "store down" })) : inner.fireSchedule(key, fire) }
      yield* TestClock.setTime(T0 + MIN)
      const { scheduler } = yield* start([tick()], "w1").pipe(Effect.provideService(QueueStore, flaky))
      failing = true
      yield* TestClock.setTime(T0 + 5 * MIN)
      for (let i = 0; i < 50; i++) yield* Effect.yieldNow
      assert.isBelow((yield* scheduler.checkedUntil).getTime(), T0 + 5 * MIN, "the failed round did not count as checked")
      assert.deepStrictEqual(yield* firedSlots(inner, "q"), [])
      failing = false
      yield* advanceTo([scheduler], T0 + 5 * MIN + 1_000)
      assert.deepStrictEqual((yield* firedSlots(inner, "q")).map((f) => f.slot), [new Date(T0 + 5 * MIN).toISOString()])
    }).pipe(Effect.scoped))

  it.effect("the layer refuses a schedule the store refuses, writing nothing", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const twice = yield* Effect.flip(Layer.build(Scheduler.layer([tick(), tick()], { id: "w1" })))
      assert.strictEqual((twice as InvalidInput).field, "schedule key")
      assert.deepStrictEqual(yield* store.schedules, [])
    }).pipe(Effect.scoped, Effect.provide(MemoryQueueStore.layer())))
})
