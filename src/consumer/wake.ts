/**
 * How long an idle consumer sleeps: until the earlier of its poll interval and
 * the earliest future `visible_at` of its queues (a delay ending, or the lease
 * of a dead worker running out), so a dead worker's message runs again at
 * lease expiry, not lease + a poll interval. A `wake` signal (the presence
 * reaper released something, or a message was sent) cuts the sleep short.
 */
import { Clock, Effect, Fiber, Option } from "effect"
import type { QueueStoreShape } from "../QueueStore.ts"

/** The shortest sleep: never spin. */
const MIN_SLEEP_MS = 1

/**
 * Make the idle sleep of one consumer. The returned effect asks the store for
 * the next visibility of every queue (a failure there only means "sleep the
 * poll interval"), and sleeps on Effect's `Clock`, so `TestClock` drives it;
 * a wake-up ends it at once, even while the store is being asked.
 */
export const make = (options: {
  readonly store: QueueStoreShape
  readonly queues: ReadonlyArray<string>
  readonly pollIntervalMs: number
  readonly wake?: Effect.Effect<void> | undefined
}): Effect.Effect<void> => {
  const { store, queues, pollIntervalMs, wake } = options
  // The store's times come from the database clock, the sleep from this process's: when the
  // database is ahead, waking "at" a time finds the message still invisible and the same
  // time comes back. Each repeat doubles the shortest sleep, so a skew costs a few queries,
  // never a busy loop.
  let lastTarget: number | undefined
  let floorMs = MIN_SLEEP_MS
  // The earliest future visibility of the queues (a failure there only means "unknown").
  const nextVisible = Effect.gen(function*() {
    let earliest: number | undefined
    for (const queue of queues) {
      const next = yield* store.nextVisibleAt(queue).pipe(
        Effect.catch(() => Effect.succeedNone),
        Effect.catchDefect(() => Effect.succeedNone)
      )
      if (Option.isSome(next)) {
        const at = next.value.getTime()
        if (earliest === undefined || at < earliest) earliest = at
      }
    }
    return earliest
  })
  const sleepUntil = (earliest: number | undefined) =>
    Effect.flatMap(Clock.currentTimeMillis, (now) => {
      let delayMs = pollIntervalMs
      if (earliest !== undefined && earliest - now < pollIntervalMs) {
        floorMs = earliest === lastTarget ? Math.min(floorMs * 2, pollIntervalMs) : MIN_SLEEP_MS
        lastTarget = earliest
        delayMs = Math.min(pollIntervalMs, Math.max(floorMs, earliest - now))
      } else {
        lastTarget = undefined
        floorMs = MIN_SLEEP_MS
      }
      return Effect.sleep(delayMs)
    })
  if (wake === undefined) return Effect.flatMap(nextVisible, sleepUntil)
  // A wake-up ends the idle at once, also one heard while the store is being asked (a send
  // announced while the last claim was out): the question runs on a fiber of its own, which is
  // neither waited for nor cancelled (cancelling a statement costs a connection of its own) when
  // the wake-up comes first; its answer is then dropped. It is asked one scheduler turn late, so
  // a wake-up already heard wins before anything is asked.
  const askThenSleep = Effect.andThen(
    Effect.yieldNow,
    Effect.flatMap(Effect.forkDetach(nextVisible), (asking) => Effect.flatMap(Fiber.join(asking), sleepUntil))
  )
  return Effect.raceFirst(askThenSleep, wake)
}
