/**
 * A consumer's accounting of the messages it holds: the handler slots `concurrency` bounds,
 * the messages in flight a shutdown drains, whether it is stopping, and the progress its
 * health reads. One mutable record per consumer, shared by the claim loop, the handle step
 * (through each message's {@link Handle.Slot}) and the shutdown.
 *
 * @since 0.1.0
 */
import { Clock, Effect, Latch } from "effect"
import type * as Handle from "./handle.ts"

/** Completions written by one statement, at most (the completer's batch bound). */
export const COMPLETION_BATCH = 500

/** The counters of one consumer and the latch that wakes whoever waits on them. */
export interface Flight {
  /** Messages claimed and not yet completed (their finishing write included): what a shutdown drains. */
  inFlight: number
  /** Handlers running: what `concurrency` bounds. A message whose handler ended frees its slot at once. */
  running: number
  /** Set once the shutdown began (or the claim loop failed): claims that arrive now are released. */
  stopping: boolean
  /** Waits by design in progress (see {@link waiting}): the loop is healthy while in one. */
  waits: number
  /** When the claim loop last made progress (a claim answered, or a wait by design ended). */
  lastProgress: number
  readonly concurrency: number
  /** Opened when a slot is freed or a message leaves the flight. */
  readonly slotFreed: Latch.Latch
}

/** The accounting of a consumer of `concurrency` handler slots, nothing held yet. */
export const make = (concurrency: number): Effect.Effect<Flight> =>
  Effect.gen(function*() {
    return {
      inFlight: 0,
      running: 0,
      stopping: false,
      waits: 0,
      lastProgress: yield* Clock.currentTimeMillis,
      concurrency,
      slotFreed: yield* Latch.make(false)
    }
  })

/**
 * How many messages the next claim may take: the free handler slots, and never more than
 * `concurrency` + one full completion batch claimed at once. Finishing writes that lag cannot
 * pile up without bound, yet while a slow one is in flight the next completions gather into a
 * bigger batch instead of holding up the claims (a bound of `2 x concurrency` made every
 * claim wait for the previous batch's write at small concurrency).
 */
export const freeSlots = (flight: Flight): number =>
  Math.min(flight.concurrency - flight.running, flight.concurrency + COMPLETION_BATCH - flight.inFlight)

/** One message is no longer in flight (its finishing write was answered or given up). */
export const leave = (flight: Flight): Effect.Effect<void> => {
  flight.inFlight -= 1
  return flight.slotFreed.open
}

/**
 * A message's place in the consumer: its handler slot (freed when its handler ends) and its
 * place in the drain (left once its finishing write was answered or given up).
 */
export const slotOf = (flight: Flight): Handle.Slot => new MessageSlot(flight)

/**
 * {@link slotOf}: a class, so a message's slot is one object (its methods on the prototype), not
 * two closures and an effect made per message.
 */
class MessageSlot implements Handle.Slot {
  #held = true
  #settled = false
  readonly #flight: Flight
  constructor(flight: Flight) {
    this.#flight = flight
  }
  // Opening the latch wakes the claim loop through the scheduler, after the fibers already
  // due: the handlers of a claim that end together free their slots for one claim, not one each.
  free(): Effect.Effect<void> {
    if (!this.#held) return Effect.void
    this.#held = false
    this.#flight.running -= 1
    return this.#flight.slotFreed.open
  }
  /** An arrow: handed to the completer as the message's `done`. */
  readonly settle = (): Effect.Effect<void> => {
    if (this.#settled) return Effect.void
    this.#settled = true
    return leave(this.#flight)
  }
}

/** The claim loop made progress now. */
export const progress = (flight: Flight): Effect.Effect<void> =>
  Effect.map(Clock.currentTimeMillis, (now) => {
    flight.lastProgress = now
  })

/**
 * Wait by design (for a free slot, for new work, for presence to come back),
 * counted as progress by the consumer's health: every such wait is bounded by the poll interval.
 */
export const waiting = <A, E, R>(flight: Flight, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      flight.waits += 1
    }),
    () => effect,
    () =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        flight.waits -= 1
        flight.lastProgress = now
      })
  )

/** Wait until no message is in flight: every handler ended and every completion written. */
export const drained = (flight: Flight): Effect.Effect<void> =>
  Effect.gen(function*() {
    while (flight.inFlight > 0) {
      yield* flight.slotFreed.close
      if (flight.inFlight > 0) yield* flight.slotFreed.await
    }
  })
