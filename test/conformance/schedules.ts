/**
 * Conformance, schedules: the rows workers upsert, and the fence that fires each slot once.
 */
import { assert } from "@effect/vitest"
import { Effect, Option } from "effect"
import { defaults, QueueStore, type ScheduleSpec } from "../../src/QueueStore.ts"
import { freshQueue, type Suite } from "./support.ts"

/** schedules tests of the conformance suite (see index.ts). */
export const schedules = ({ it }: Suite) => {
  // Schedules: the rows workers upsert, and the fence that fires each slot once. The slots are in
  // the past of both clocks (a TestClock starts at 1970): a slot ahead of the store's clock never fires.
  const spec = (key: string, queue: string, extra: Partial<ScheduleSpec> = {}): ScheduleSpec => ({
    key,
    cron: "*/5 * * * *",
    tz: "UTC",
    queue,
    task: "tick",
    payload: { n: 1 },
    nextSlot: new Date("1969-12-30T00:05:00Z"),
    ...extra
  })
  const at = (iso: string) => new Date(iso)

  it.effect("schedules: upsert, list, fire each slot once (fenced), trigger, remove", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("sched")
      const key = freshQueue("key")
      const [row] = yield* store.upsertSchedules([spec(key, queue)], { seenBy: "w1", now: at("1969-12-30T00:01:00Z") })
      assert.strictEqual(row!.lastSlot.toISOString(), "1969-12-30T00:01:00.000Z", "a new schedule starts at its declaration")
      assert.strictEqual(row!.lastSeenBy, "w1")
      assert.deepStrictEqual(row!.payload, { n: 1 })
      const fire = (iso: string, extra: { cron?: string; tz?: string } = {}) =>
        store.fireSchedule(key, { slot: at(iso), nextSlot: null, cron: extra.cron ?? "*/5 * * * *", tz: extra.tz ?? "UTC" })
      assert.isTrue(Option.isNone(yield* fire("1969-12-30T00:00:00Z")), "a slot before the declaration never fires")
      const first = yield* fire("1969-12-30T00:05:00Z")
      assert.isTrue(Option.isSome(first))
      assert.isTrue(Option.isNone(yield* fire("1969-12-30T00:05:00Z")), "the same slot fires once")
      assert.isTrue(Option.isNone(yield* fire("1969-12-30T00:10:00Z", { cron: "*/10 * * * *" })), "another definition does not fire")
      assert.isTrue(Option.isNone(yield* fire("1969-12-30T00:10:00Z", { tz: "Europe/Berlin" })))
      assert.isTrue(Option.isSome(yield* fire("1969-12-30T00:10:00Z")))
      const sent = yield* store.messages(queue)
      assert.deepStrictEqual(sent.map((m) => [m.task, m.payload, m.headers["leasehold-schedule"], m.headers["leasehold-slot"]]), [
        ["tick", { n: 1 }, key, "1969-12-30T00:05:00.000Z"],
        ["tick", { n: 1 }, key, "1969-12-30T00:10:00.000Z"]
      ])
      assert.strictEqual(sent[0]!.id, Option.getOrThrow(first).id)
      const listed = (yield* store.schedules).find((s) => s.key === key)!
      assert.strictEqual(listed.lastSlot.toISOString(), "1969-12-30T00:10:00.000Z")
      assert.isNotNull(listed.firedAt)
      // Trigger: a message now, the slots untouched.
      const triggered = yield* store.triggerSchedule(key)
      assert.isTrue(Option.isSome(triggered))
      assert.strictEqual((yield* store.messages(queue)).at(-1)!.headers["leasehold-slot"], "manual")
      assert.strictEqual((yield* store.schedules).find((s) => s.key === key)!.lastSlot.toISOString(), "1969-12-30T00:10:00.000Z")
      // Remove: gone; a fire, a trigger and a second remove find nothing.
      assert.isTrue(yield* store.removeSchedule(key))
      assert.isFalse(yield* store.removeSchedule(key))
      assert.isTrue(Option.isNone(yield* store.triggerSchedule(key)))
      assert.isTrue(Option.isNone(yield* fire("1969-12-30T00:15:00Z")))
      assert.isUndefined((yield* store.schedules).find((s) => s.key === key))
      assert.strictEqual((yield* store.messages(queue)).length, 3)
    }))

  it.effect("schedules: a changed definition replaces the row (a new cron starts from now); a heartbeat only marks it seen", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("sched-change")
      const key = freshQueue("key")
      yield* store.upsertSchedules([spec(key, queue)], { seenBy: "w1", now: at("1969-12-30T00:00:00Z") })
      yield* store.fireSchedule(key, { slot: at("1969-12-30T00:05:00Z"), nextSlot: null, cron: "*/5 * * * *", tz: "UTC" })
      // Same cron, new payload: the definition changes, the last slot stays.
      const [same] = yield* store.upsertSchedules([spec(key, queue, { payload: { n: 2 } })], { seenBy: "w2", now: at("1969-12-30T01:00:00Z") })
      assert.deepStrictEqual([same!.lastSlot.toISOString(), same!.payload, same!.lastSeenBy], ["1969-12-30T00:05:00.000Z", { n: 2 }, "w2"])
      // A heartbeat of an older worker: seen, its definition not taken.
      const [seen] = yield* store.upsertSchedules([spec(key, queue, { cron: "0 * * * *", payload: { n: 1 } })], {
        seenBy: "old",
        now: at("1969-12-30T01:30:00Z"),
        replace: false
      })
      assert.deepStrictEqual([seen!.cron, seen!.payload, seen!.lastSeenBy, seen!.lastSeenAt.toISOString()], [
        "*/5 * * * *",
        { n: 2 },
        "old",
        "1969-12-30T01:30:00.000Z"
      ])
      // A changed cron: the last slot moves up to now, so the new expression fires from now on.
      const [changed] = yield* store.upsertSchedules([spec(key, queue, { cron: "0 * * * *" })], { seenBy: "w3", now: at("1969-12-30T02:00:00Z") })
      assert.deepStrictEqual([changed!.cron, changed!.lastSlot.toISOString()], ["0 * * * *", "1969-12-30T02:00:00.000Z"])
      const stale = yield* store.fireSchedule(key, { slot: at("1969-12-30T02:00:00Z"), nextSlot: null, cron: "0 * * * *", tz: "UTC" })
      assert.isTrue(Option.isNone(stale))
      // A heartbeat for a removed schedule inserts it again (a worker still declares it).
      yield* store.removeSchedule(key)
      const [back] = yield* store.upsertSchedules([spec(key, queue)], { seenBy: "w4", now: at("1969-12-30T03:00:00Z"), replace: false })
      assert.strictEqual(back!.lastSlot.toISOString(), "1969-12-30T03:00:00.000Z")
    }))

  it.effect("schedules: a slot ahead of the store's clock never fires; a declaration ahead of it starts at the store's now", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const storeNow = (yield* store.now).getTime()
      const tolerance = defaults.scheduleClockToleranceMs
      const queue = freshQueue("sched-ahead")
      const key = freshQueue("key")
      const yearMs = 365 * 86_400_000
      // Declared by a worker whose clock runs a year ahead: the row starts at the store's now.
      const [row] = yield* store.upsertSchedules([spec(key, queue, { cron: "* * * * * *" })], { seenBy: "ahead", now: new Date(storeNow + yearMs) })
      assert.isAtMost(Math.abs(row!.lastSlot.getTime() - storeNow), 60_000, "not a year ahead")
      assert.isAtMost(Math.abs(row!.lastSeenAt.getTime() - storeNow), 60_000)
      const fire = (ms: number) => store.fireSchedule(key, { slot: new Date(ms), nextSlot: null, cron: "* * * * * *", tz: "UTC" })
      // Whole seconds (the cron's slots) well past the store's now, and well past the tolerance.
      const future = Math.ceil((storeNow + yearMs) / 1000) * 1000
      assert.isTrue(Option.isNone(yield* fire(future)), "a slot a year ahead is refused")
      assert.isTrue(Option.isNone(yield* fire(Math.ceil((storeNow + tolerance + 60_000) / 1000) * 1000)), "a minute ahead too")
      assert.strictEqual((yield* store.schedules).find((s) => s.key === key)!.lastSlot.getTime(), row!.lastSlot.getTime(), "the fence did not move")
      // A slot the store's clock has reached fires (a schedule declared a few seconds ago).
      const due = freshQueue("key")
      yield* store.upsertSchedules([spec(due, queue, { cron: "* * * * * *" })], { seenBy: "w1", now: new Date(storeNow - 5_000) })
      const fired = yield* store.fireSchedule(due, { slot: new Date(Math.floor(storeNow / 1000) * 1000), nextSlot: null, cron: "* * * * * *", tz: "UTC" })
      assert.isTrue(Option.isSome(fired), "a due slot fires")
      assert.strictEqual((yield* store.messages(queue)).length, 1)
    }))

  it.effect("schedules: bad keys and payloads are refused naming the rule; nothing is written", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("sched-bad")
      const good = freshQueue("key")
      const now = at("1969-12-30T00:00:00Z")
      const refused = (specs: ReadonlyArray<ScheduleSpec>) =>
        Effect.map(Effect.flip(store.upsertSchedules(specs, { seenBy: "w1", now })), (e) => e as { _tag: string; field: string; message: string })
      const badKey = yield* refused([spec(good, queue), spec("a b", queue)])
      assert.deepStrictEqual([badKey._tag, badKey.field], ["InvalidInput", "schedule key"])
      assert.match(badKey.message, /"a b" is not a valid name/)
      assert.strictEqual((yield* refused([spec(good, queue), spec(good, queue)])).field, "schedule key")
      assert.strictEqual((yield* refused([spec(good, "bad queue")])).field, "queue")
      assert.strictEqual((yield* refused([spec(good, queue), spec(`${good}-2`, queue, { payload: () => 1 })])).field, "payload")
      assert.isUndefined((yield* store.schedules).find((s) => s.key.startsWith(good)), "nothing written")
      for (const op of [store.triggerSchedule("x'; --") as Effect.Effect<unknown, unknown>, store.removeSchedule("")]) {
        assert.strictEqual(((yield* Effect.flip(op)) as { field: string }).field, "schedule key")
      }
    }))

  it.effect("schedules: many workers firing the same slots at once send one message per slot", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("sched-race")
      const key = freshQueue("key")
      yield* store.upsertSchedules([spec(key, queue)], { seenBy: "w1", now: at("1969-12-30T00:00:00Z") })
      const slots = Array.from({ length: 12 }, (_, i) => at("1969-12-30T00:00:00Z").getTime() + (i + 1) * 300_000)
      const worker = Effect.forEach(slots, (ms) =>
        store.fireSchedule(key, { slot: new Date(ms), nextSlot: null, cron: "*/5 * * * *", tz: "UTC" }))
      const results = yield* Effect.all(Array.from({ length: 6 }, () => worker), { concurrency: 6 })
      assert.strictEqual(results.flat().filter(Option.isSome).length, slots.length)
      const sent = yield* store.messages(queue, { limit: 1000 })
      assert.deepStrictEqual(sent.map((m) => m.headers["leasehold-slot"]), slots.map((ms) => new Date(ms).toISOString()))
    }))
}
