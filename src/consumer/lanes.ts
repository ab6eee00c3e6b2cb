/**
 * The lanes of one consumer: each is a group of queues claimed by a claim loop of its own into
 * a pool of handler slots of its own (`QueueConfig.lanes`: the queues without a concurrency of
 * their own share the consumer's; a queue with one is a lane alone). So a slow queue held to 2
 * handlers never takes a slot of a quick one, and a claim of one never waits for the other's. The
 * lanes share everything else: the completer, the renewers, the presence registration, the
 * shutdown. This module makes each lane's slots and idle sleep, and reads them together.
 *
 * @since 0.1.0
 */
import { Effect, Latch, type Scope } from "effect"
import type { Lane, Prefetch } from "../QueueConfig.ts"
import type { QueueStoreShape } from "../QueueStore.ts"
import * as Flight from "./flight.ts"
import * as IdleWake from "./wake.ts"

/** One lane as it runs: its queues, its slots, its idle sleep. */
export interface Running {
  readonly queues: ReadonlyArray<string>
  readonly flight: Flight.Flight
  readonly idle: Effect.Effect<void>
}

/**
 * Make the running lanes: one send subscription for every queue of the consumer (on PostgreSQL a
 * LISTEN connection per subscription), whose wake-ups reach every lane; `reaped` (the presence
 * reaper released something) wakes them all too.
 */
export const make = (options: {
  readonly store: QueueStoreShape
  readonly lanes: ReadonlyArray<Lane>
  readonly queues: ReadonlyArray<string>
  readonly pollIntervalMs: number
  /** What each lane may hold ahead of its free slots. */
  readonly prefetch: Prefetch
  readonly reaped: Effect.Effect<void> | undefined
}): Effect.Effect<ReadonlyArray<Running>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { store, lanes, pollIntervalMs, reaped } = options
    const sent = yield* store.sends(options.queues)
    // One lane: its idle takes the subscription's wake-ups itself, as a single consumer always did.
    const wakes = lanes.length === 1 ? [sent] : yield* fanOut(sent, lanes.length)
    return yield* Effect.forEach(lanes, (lane, i) =>
      Effect.map(Flight.make(lane.concurrency, options.prefetch), (flight): Running => ({
        queues: lane.queues,
        flight,
        idle: IdleWake.make({
          store,
          queues: lane.queues,
          pollIntervalMs,
          wake: reaped === undefined ? wakes[i] : Effect.raceFirst(reaped, wakes[i]!)
        })
      })))
  })

/**
 * Every wake-up of `wake`, heard by each of `count` listeners: a latch per listener, opened by
 * each wake-up and closed by the listener that hears it, so a wake-up that comes while a lane is
 * busy is kept for its next idle sleep (as the subscription itself keeps them).
 */
const fanOut = (wake: Effect.Effect<void>, count: number): Effect.Effect<ReadonlyArray<Effect.Effect<void>>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const latches = Array.from({ length: count }, () => Latch.makeUnsafe(false))
    yield* Effect.forkScoped(Effect.forever(Effect.flatMap(wake, () => Effect.sync(() => latches.forEach((l) => l.openUnsafe())))))
    return latches.map((latch) => Effect.andThen(latch.await, Effect.sync(() => latch.closeUnsafe())))
  })

/** Messages in flight in every lane. */
export const inFlight = (lanes: ReadonlyArray<Running>): number => lanes.reduce((n, lane) => n + lane.flight.inFlight, 0)

/** Stop claiming in every lane (a shutdown began, or a claim loop failed). */
export const stop = (lanes: ReadonlyArray<Running>): void => lanes.forEach((lane) => Flight.stop(lane.flight))

/** Whether every lane made progress within `staleMs` (or is in a wait by design). */
export const fresh = (lanes: ReadonlyArray<Running>, now: number, staleMs: number): boolean =>
  lanes.every((lane) => lane.flight.waits > 0 || now - lane.flight.lastProgress <= staleMs)

/** When the lane that made progress least recently last did. */
export const lastProgress = (lanes: ReadonlyArray<Running>): number => Math.min(...lanes.map((lane) => lane.flight.lastProgress))

/** Wait until no message is in flight in any lane. */
export const drained = (lanes: ReadonlyArray<Running>): Effect.Effect<void> =>
  Effect.forEach(lanes, (lane) => Flight.drained(lane.flight), { discard: true })
