/**
 * A lane's accounting of the messages it holds: the handler slots `concurrency` bounds, the
 * messages claimed ahead of a free slot (held, their leases renewed, until one frees: see
 * {@link ahead}), the messages in flight a shutdown drains, whether it is stopping, and the
 * progress its health reads. One mutable record per lane, shared by the claim loop, the handle
 * step (through each message's {@link Handle.Slot}) and the shutdown.
 *
 * @since 0.1.0
 */
import { Clock, Effect, Latch } from "effect"
import type { Prefetch } from "../QueueConfig.ts"
import type * as Handle from "./handle.ts"

/** Completions written by one statement, at most (the completer's batch bound). */
export const COMPLETION_BATCH = 500

/** The counters of one consumer and the latch that wakes whoever waits on them. */
export interface Flight {
  /** Messages claimed and not yet completed (their finishing write included): what a shutdown drains. */
  inFlight: number
  /** Handlers running: what `concurrency` bounds. A message whose handler ended frees its slot at once. */
  running: number
  /** Messages claimed whose handlers have not started: each waits for a free slot (or is released at shutdown). */
  held: number
  /** What the claims in flight may bring back (each its limit, see {@link reserve}): counted as held until answered. */
  claiming: number
  /** The lane's recent mean handler time (ms, exponentially weighted), once a handler has ended: what `auto` prefetch reads. */
  meanRunMs: number | undefined
  /** When a handler of the lane last ended (Clock ms). */
  lastEndedAt: number
  /** How many messages the lane may hold ahead of its free slots (see {@link ahead}). */
  readonly prefetch: Prefetch
  /** Set once the shutdown began (or the claim loop failed): claims that arrive now are released. */
  stopping: boolean
  /** Waits by design in progress (see {@link waiting}): the loop is healthy while in one. */
  waits: number
  /** When the claim loop last made progress (a claim answered, or a wait by design ended). */
  lastProgress: number
  readonly concurrency: number
  /**
   * Opened when a slot is freed, a message leaves the flight, the last held message starts, or
   * the lane stops: whoever waits on the counters looks again.
   */
  readonly slotFreed: Latch.Latch
  /**
   * Open while the lane's last claim came back full (more is likely ready): a second claim loop
   * claims beside the first only then (see `ClaimLoop.make`'s `role`).
   */
  readonly backlog: Latch.Latch
}

/** The accounting of a lane of `concurrency` handler slots, nothing held yet. */
export const make = (concurrency: number, prefetch: Prefetch = 0): Effect.Effect<Flight> =>
  Effect.gen(function*() {
    return {
      inFlight: 0,
      running: 0,
      held: 0,
      claiming: 0,
      meanRunMs: undefined,
      lastEndedAt: 0,
      prefetch,
      stopping: false,
      waits: 0,
      lastProgress: yield* Clock.currentTimeMillis,
      concurrency,
      slotFreed: yield* Latch.make(false),
      backlog: yield* Latch.make(false)
    }
  })

/**
 * Handlers under this mean time (ms) are short enough for `auto` prefetch: a message held ahead
 * waits about one handler's time for its slot, and saves the claim's round trip (~1 ms here).
 */
export const AUTO_PREFETCH_BELOW_MS = 20

/**
 * Under `auto`, the longest a message is held for a slot (ms) before it is given back (its
 * attempt too): the handlers turned slow after it was claimed, and another consumer may be idle.
 * Quick handlers start a held message within a few of their runs, far under this.
 */
export const AUTO_HOLD_MAX_MS = 250

/**
 * How many messages the lane may hold ahead of its free slots at `now` (Clock ms). `auto`:
 * `concurrency + 1` (graphile-worker's local queue size at its documented best) while the lane's
 * handlers are quick: their mean under {@link AUTO_PREFETCH_BELOW_MS}, and, while some run, one
 * of them ended within that time. None before the first handler ended, or once they are slower
 * (then a message held would wait a long handler out while other consumers idle).
 */
export const ahead = (flight: Flight, now: number): number => {
  if (flight.prefetch !== "auto") return flight.prefetch
  const mean = flight.meanRunMs
  if (mean === undefined || mean >= AUTO_PREFETCH_BELOW_MS) return 0
  return flight.running > 0 && now - flight.lastEndedAt >= AUTO_PREFETCH_BELOW_MS ? 0 : flight.concurrency + 1
}

/** When a message held now must start by before it is given back (Clock ms; a number `prefetch` holds it until a slot frees). */
export const holdUntil = (flight: Flight, now: number): number =>
  flight.prefetch === "auto" ? now + AUTO_HOLD_MAX_MS : Number.POSITIVE_INFINITY

/** Handler slots free now (held messages take theirs first, and so may what the claims in flight bring back). */
export const freeSlots = (flight: Flight): number => flight.concurrency - flight.running - flight.held - flight.claiming

/**
 * How many messages the next claim may take at `now`: the free handler slots and what the lane may
 * hold ahead of them, and never more than that plus one full completion batch in flight at once.
 * Finishing writes that lag cannot pile up without bound, yet while a slow one is in flight the
 * next completions gather into a bigger batch instead of holding up the claims (a bound of
 * `2 x concurrency` made every claim wait for the previous batch's write at small concurrency).
 */
export const room = (flight: Flight, now: number): number => {
  const most = flight.concurrency + ahead(flight, now)
  const taken = flight.running + flight.held + flight.claiming
  return Math.min(most - taken, most + COMPLETION_BATCH - flight.inFlight - flight.claiming)
}

/**
 * Whether the claim loop may claim at `now`: there is room, and no message of the last claim still
 * waits for a slot (the next claim goes out as the last held message starts, and its round trip
 * overlaps the handlers running; graphile-worker's local queue refetches on empty alike).
 */
export const mayClaim = (flight: Flight, now: number, leastRoom = 1): boolean => flight.held === 0 && room(flight, now) >= leastRoom

/** How a held message's wait for a slot ended. */
export type Start = "started" | "stopping" | "expired"

/**
 * Give a held message a handler slot, waiting for one to free until `until` (Clock ms): answers
 * `stopping` once the lane stops and `expired` at `until`, the message still held (the caller
 * releases it).
 */
export const startSlot = (flight: Flight, until: number): Effect.Effect<Start> =>
  Effect.suspend(() => {
    if (flight.stopping) return STOPPING
    if (flight.running < flight.concurrency) {
      flight.running += 1
      flight.held -= 1
      // The claim loop waits for the held messages to start before claiming again.
      return flight.held === 0 ? Effect.as(flight.slotFreed.open, "started" as const) : STARTED
    }
    return Effect.andThen(flight.slotFreed.close, () => {
      if (flight.stopping || flight.running < flight.concurrency) return startSlot(flight, until)
      if (until === Number.POSITIVE_INFINITY) return Effect.andThen(flight.slotFreed.await, startSlot(flight, until))
      return Effect.flatMap(Clock.currentTimeMillis, (now) =>
        now >= until
          ? EXPIRED
          : Effect.andThen(Effect.raceFirst(flight.slotFreed.await, Effect.sleep(until - now)), startSlot(flight, until)))
    })
  })
const STARTED = Effect.succeed<Start>("started")
const STOPPING = Effect.succeed<Start>("stopping")
const EXPIRED = Effect.succeed<Start>("expired")

/**
 * The least concurrency of a lane that claims with a second loop beside its first (`ClaimLoop.Role`):
 * its claims then take at least half of 32 handler slots or of a batch, whichever is less.
 */
export const BESIDE_FROM_CONCURRENCY = 32

/** Whether a lane of `concurrency` runs a second claim loop beside its lead (from {@link BESIDE_FROM_CONCURRENCY}). */
export const claimsBeside = (concurrency: number): boolean => concurrency >= BESIDE_FROM_CONCURRENCY

/**
 * Reserve the room a claim of `limit` is about to take, so a claim beside it never takes the same
 * room: give it back with {@link settleClaim} once the claim answered (or failed).
 */
export const reserve = (flight: Flight, limit: number): void => {
  flight.claiming += limit
}

/** A claim reserved with {@link reserve} answered (or failed): its room is free again, what it brought is then held. */
export const settleClaim = (flight: Flight, limit: number): void => {
  flight.claiming -= limit
}

/** Count `n` messages just claimed as held, until each starts or is released. */
export const hold = (flight: Flight, n: number): void => {
  flight.inFlight += n
  flight.held += n
}

/** A held message will not start (released at shutdown): it no longer waits for a slot. */
export const unhold = (flight: Flight): Effect.Effect<void> => {
  flight.held -= 1
  return flight.held === 0 ? flight.slotFreed.open : Effect.void
}

/** Stop claiming: claims that arrive now, and messages still held, are released. */
export const stop = (flight: Flight): void => {
  flight.stopping = true
  flight.slotFreed.openUnsafe()
}

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
  ran(ms: number, endedAt: number): void {
    const flight = this.#flight
    const mean = flight.meanRunMs
    flight.meanRunMs = mean === undefined ? ms : mean + (ms - mean) * RUN_WEIGHT
    flight.lastEndedAt = endedAt
  }
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

/** The weight of the latest handler time in the lane's mean (about the last 10 count). */
const RUN_WEIGHT = 0.1

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
