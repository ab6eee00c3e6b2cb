/**
 * Schedules and a worker whose clock is off (issue 24, item 8), on real PostgreSQL on the
 * database's clock, in real time. A worker whose `Clock` runs a year ahead used to declare a
 * new schedule with its first slot a year ahead and fire future slots, after which the correct
 * workers fired nothing. Slots are now timed by the store's clock: the skewed worker declares
 * the schedule at the database's now, fires only slots the database's clock has reached, and
 * warns about its clock; the correct worker beside it shares the slots, each fired once.
 */
import { assert, layer } from "@effect/vitest"
import { Clock, Duration, Effect, Option } from "effect"
import { SqlClient } from "effect/sql"
import { defaults, QueueStore } from "../src/QueueStore.ts"
import * as Scheduler from "../src/Scheduler.ts"
import { captureLogs } from "./support/ConsumerHarness.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitFor } from "./support/Wait.ts"

const YEAR_MS = 365 * 86_400_000

/** The machine's clock moved by `offsetMs`: a worker whose clock is off. Sleeps are real. */
const offsetClock = (offsetMs: number): Clock.Clock => {
  const nanos = BigInt(offsetMs) * 1_000_000n
  const wall = () => BigInt(Date.now()) * 1_000_000n
  return {
    currentTimeMillisUnsafe: () => Date.now() + offsetMs,
    currentTimeMillis: Effect.sync(() => Date.now() + offsetMs),
    currentTimeNanosUnsafe: () => wall() + nanos,
    currentTimeNanos: Effect.sync(() => wall() + nanos),
    monotonicTimeNanosUnsafe: () => process.hrtime.bigint(),
    monotonicTimeNanos: Effect.sync(() => process.hrtime.bigint()),
    // Effect.sleep would ask this very clock again: a timer of its own.
    sleep: (duration: Duration.Duration) =>
      Effect.callback<void>((resume) => {
        const timer = setTimeout(() => resume(Effect.void), Duration.toMillis(duration))
        return Effect.sync(() => clearTimeout(timer))
      })
  } as Clock.Clock
}

layer(PgTest.storeLayer({ clock: "database" }), { excludeTestServices: true })("Scheduler with a skewed worker clock (PostgreSQL)", (it) => {
  it.effect("a worker a year ahead declares at the database's now, fires only due slots, warns; with a correct worker each slot fires once", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      const key = `skew-${Math.random().toString(36).slice(2, 8)}`
      const schedule = Scheduler.define({ key, cron: "* * * * * *", queue: key, task: "tick", payload: {} })
      const dbNow = Effect.map(sql<{ ms: number }>`SELECT (extract(epoch FROM now()) * 1000)::float8 AS ms`, (rows) => rows[0]!.ms)
      const logs = captureLogs()

      const declaredAt = yield* dbNow
      yield* Scheduler.make([schedule], { id: "ahead" }).pipe(Effect.provideService(Clock.Clock, offsetClock(YEAR_MS)), Effect.provide(logs.layer))
      const [row] = (yield* store.schedules).filter((s) => s.key === key)
      assert.isAtMost(Math.abs(row!.lastSlot.getTime() - declaredAt), 10_000, `first slot from the database's now, not a year ahead: ${row!.lastSlot.toISOString()}`)
      assert.isAtMost(Math.abs(row!.lastSeenAt.getTime() - declaredAt), 10_000)

      const slots = Effect.map(store.messages(key, { limit: 1000 }), (messages) => messages.map((m) => Date.parse(m.headers["leasehold-slot"]!)))
      /** Every fired slot once, none ahead of the database's clock when it was read. */
      const check = (fired: ReadonlyArray<number>, until: number) => {
        assert.strictEqual(new Set(fired).size, fired.length, "no slot fired twice")
        for (const slot of fired) {
          assert.isAtMost(slot, until + defaults.scheduleClockToleranceMs, `slot ${new Date(slot).toISOString()} is not in the future`)
          assert.isAbove(slot, declaredAt - 1_000, "no slot from before the declaration")
        }
      }
      // Alone, the skewed worker fires the slots as the database's clock reaches them.
      const alone = yield* waitFor("the skewed worker to fire 2 slots", Effect.map(slots, (s) => (s.length >= 2 ? Option.some(s) : Option.none())), 15_000)
      check(alone, yield* dbNow)
      const warning = logs.entries.find((e) => e.level === "Warn" && e.message.includes("clock is"))
      assert.isDefined(warning, `a warning about the clock: ${JSON.stringify(logs.entries.map((e) => e.message))}`)
      assert.match(warning!.message, /ahead of the store's/)

      // A correct worker joins: the two share the slots, each fired once.
      yield* Scheduler.make([schedule], { id: "right" })
      const both = yield* waitFor(
        "3 more slots with both workers",
        Effect.map(slots, (s) => (s.length >= alone.length + 3 ? Option.some(s) : Option.none())),
        15_000
      )
      check(both, yield* dbNow)
      assert.isFalse(logs.entries.some((e) => e.level === "Warn" && e.message.includes("a round failed")), "no failed rounds")
    }))
})
