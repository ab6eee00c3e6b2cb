/**
 * Driving schedulers with TestClock: move the clock to a time, then wait (in real time,
 * with a generous bound) until every scheduler has handled the slots up to it.
 */
import { Effect } from "effect"
import { TestClock } from "effect/testing"
import type { SchedulerShape } from "../../src/Scheduler.ts"
import type { QueueStoreShape } from "../../src/QueueStore.ts"

/** Wait until each of `schedulers` has handled every slot up to `ms` (their clock's time). */
export const waitChecked = (schedulers: ReadonlyArray<SchedulerShape>, ms: number, timeoutMs = 15_000) =>
  Effect.gen(function*() {
    const deadline = Date.now() + timeoutMs
    let spins = 0
    while (true) {
      const checked = yield* Effect.forEach(schedulers, (s) => s.checkedUntil)
      if (checked.every((d) => d.getTime() >= ms)) return
      if (Date.now() > deadline) {
        return yield* Effect.die(
          new Error(`schedulers did not reach ${new Date(ms).toISOString()} within ${timeoutMs} ms: ${checked.map((d) => d.toISOString()).join(", ")}`)
        )
      }
      // Fibers on the memory store are done after a few yields; a database round trip needs real time.
      yield* ++spins < 50 ? Effect.yieldNow : Effect.promise(() => new Promise<void>((done) => setTimeout(done, 2)))
    }
  })

/** Set the TestClock to `ms` and wait until every scheduler caught up with it. */
export const advanceTo = (schedulers: ReadonlyArray<SchedulerShape>, ms: number) =>
  Effect.andThen(TestClock.setTime(ms), waitChecked(schedulers, ms))

/** The messages of `queue` with their schedule headers, in id order. */
export const firedSlots = (store: QueueStoreShape, queue: string) =>
  Effect.map(store.messages(queue, { limit: 10_000 }), (messages) =>
    messages.map((m) => ({
      id: m.id,
      key: m.headers["leasehold-schedule"],
      slot: m.headers["leasehold-slot"],
      payload: m.payload
    })))

/** Every slot of `step` ms in (from, to], as ISO strings. */
export const everySlot = (from: number, to: number, step: number): ReadonlyArray<string> => {
  const out: Array<string> = []
  for (let t = Math.floor(from / step) * step + step; t <= to; t += step) out.push(new Date(t).toISOString())
  return out
}

/** Poll `check` in real time (the TestClock stands still meanwhile) until it holds, or die naming `what`. */
export const waitUntil = <E>(what: string, check: Effect.Effect<boolean, E>, timeoutMs = 30_000, describe?: () => string) =>
  Effect.gen(function*() {
    const deadline = Date.now() + timeoutMs
    while (!(yield* check)) {
      if (Date.now() > deadline) return yield* Effect.die(new Error(`timed out after ${timeoutMs} ms waiting for ${what}${describe ? `: ${describe()}` : ""}`))
      yield* Effect.promise(() => new Promise<void>((done) => setTimeout(done, 20)))
    }
  })
