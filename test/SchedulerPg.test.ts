/**
 * Three workers (a scheduler and a consumer each) over one PostgreSQL store, driven through a
 * simulated day by TestClock (the store on Effect's clock): every slot of a `*\/5 * * * *`
 * schedule fires exactly once and its message is run once,
 * and the fall-back day in Europe/Berlin is handled as documented (a repeated hour fires in
 * both passes for an expression whose hour is `*`, at its first pass for a daily 02:30).
 * The clock is moved to each slot at once, so the three wake together and race for it.
 */
import { assert, layer } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Redacted } from "effect"
import { TestClock } from "effect/testing"
import * as Consumer from "../src/Consumer.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import * as QueueConfig from "../src/QueueConfig.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as Scheduler from "../src/Scheduler.ts"
import * as PgTest from "./support/PgTest.ts"
import { advanceTo, everySlot, waitUntil } from "./support/SchedulerHarness.ts"

const MIN = 60_000

const define = (key: string, cron: string, tz: string) => Scheduler.define({ key, cron, tz, queue: key, task: "tick", payload: { key } })

/**
 * The store on Effect's clock over a pool of its own. The pool's idle timeout is set beyond the
 * simulated years: the TestClock starts at 1970 and jumps to 2026, and a pool reaper waking every
 * minute of those 56 years would spin through millions of wake-ups.
 */
const schema = PgTest.uniqueSchema("sch")
const StoreLayer = PgQueueStore.layer({ clock: "effect", schema, leasePool: false }).pipe(
  Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
  Layer.provideMerge(PgClient.layer({ url: Redacted.make(PgTest.databaseUrl()), maxConnections: 12, idleTimeout: "100000 days" }))
)

layer(StoreLayer)("Scheduler on PostgreSQL, 3 workers (scheduler and consumer each), TestClock", (it) => {
  it.effect("a simulated day (Europe/Berlin falls back): every slot fired and run exactly once, the repeated hour as documented", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      // 2026-10-25: 03:00 CEST becomes 02:00 CET; local midnight to midnight is 25 hours.
      const from = Date.parse("2026-10-24T22:00:00Z")
      const to = Date.parse("2026-10-25T23:00:00Z")
      yield* TestClock.setTime(from)
      const schedules = [
        define("utc-every5", "*/5 * * * *", "UTC"),
        define("berlin-every5", "*/5 * * * *", "Europe/Berlin"),
        define("berlin-daily", "30 2 * * *", "Europe/Berlin")
      ]
      const schedulers = yield* Effect.forEach(["w1", "w2", "w3"], (id) => Scheduler.make(schedules, { id, heartbeat: "1 hour" }))
      // Three consumers beside them run what is fired (woken by the sends' NOTIFY; they never poll).
      const handled: Array<string> = []
      const handler: Consumer.Handler = (message) =>
        Effect.sync(() => void handled.push(`${message.headers["leasehold-schedule"]} ${message.headers["leasehold-slot"]}`))
      for (const id of ["w1", "w2", "w3"]) {
        const settings = yield* QueueConfig.resolve({
          queues: schedules.map((s) => s.queue),
          consumerId: id,
          pollInterval: "1 hour",
          // Longer than a step of the clock: a 5-minute jump must not expire a lease mid-run.
          lease: "1 hour"
        })
        yield* Consumer.make(handler, settings)
      }
      for (let t = from + 5 * MIN; t <= to; t += 5 * MIN) yield* advanceTo(schedulers, t)

      const expected = everySlot(from, to, 5 * MIN)
      assert.strictEqual(expected.length, 25 * 12)
      // Every fired message is run by one of the consumers and acked (deleted): wait for all of them.
      const total = 2 * expected.length + 1
      yield* waitUntil("every fired message handled", Effect.sync(() => handled.length >= total), 30_000, () => `${handled.length} of ${total}`)
      const slotsOf = (key: string) => handled.filter((h) => h.startsWith(`${key} `)).map((h) => h.slice(key.length + 1)).sort()
      for (const key of ["utc-every5", "berlin-every5"]) {
        const slots = slotsOf(key)
        assert.strictEqual(new Set(slots).size, slots.length, `${key}: no slot twice`)
        assert.deepStrictEqual(slots, expected, `${key}: every slot`)
      }
      // 02:30 happens twice that night (00:30Z in CEST, 01:30Z in CET): a daily job runs at the first.
      assert.deepStrictEqual(slotsOf("berlin-daily"), ["2026-10-25T00:30:00.000Z"])
      assert.strictEqual(handled.length, total, "nothing else was sent or run")
      yield* waitUntil("every message acked", Effect.map(store.depths(schedules.map((x) => x.queue)), (depths) =>
        depths.every((d) => d.ready + d.inFlight + d.delayed + d.dead === 0)))
      const rows = yield* store.schedules
      assert.deepStrictEqual(rows.map((r) => r.key).sort(), ["berlin-daily", "berlin-every5", "utc-every5"])
      assert.isTrue(rows.every((r) => ["w1", "w2", "w3"].includes(r.lastSeenBy)))
      assert.strictEqual(rows.find((r) => r.key === "utc-every5")!.lastSlot.getTime(), to)
    }).pipe(Effect.scoped), 400_000) // 8-10 s alone; 300 steps of database round trips slow down a lot beside the other files
})
