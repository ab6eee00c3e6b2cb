/**
 * The claim stage: the loop that claims batches of messages round-robin over the queues of one
 * lane of the consumer (the queues sharing one pool of handler slots), never more than its free
 * slots and what it may hold ahead of them (`prefetch`, see `Flight.ahead`), each queue with its
 * own batch size and lease, and dispatches each claim to its handlers under a renewer that lives
 * exactly as long as the claim's scope: a message held ahead starts as a slot frees, its lease
 * renewed with the claim's meanwhile, or is released if the consumer stops first. Only
 * connection-dead claim failures are retried (with backoff); any other failure ends the loop, and
 * the consumer with it.
 *
 * @since 0.1.0
 */
import { Clock, type Context, Effect, Fiber, type Latch, Metric, type Scope } from "effect"
import type { Dispatcher } from "../Handler.ts"
import type { Claim } from "../Message.ts"
import { type ConsumerSettings, forQueue, type QueueSettings } from "../QueueConfig.ts"
import type { InvalidInput, StoreError } from "../QueueError.ts"
import * as QueueMetrics from "../QueueMetrics.ts"
import type { QueueStore, QueueStoreShape } from "../QueueStore.ts"
import { seconds } from "../internal/format.ts"
import type { Completer } from "./complete.ts"
import * as Flight from "./flight.ts"
import type * as Handle from "./handle.ts"
import * as LeaseRenewer from "./renew.ts"

/** What the claim loop works with: the consumer's parts, built by `Consumer.make`. */
export interface ClaimLoopOptions<R> {
  readonly store: QueueStoreShape
  readonly settings: ConsumerSettings
  readonly dispatcher: Dispatcher<R>
  readonly handle: ReturnType<typeof Handle.make<R>>
  readonly completer: Completer
  /** The queues of this loop's lane: claimed round-robin into its slots. */
  readonly queues: ReadonlyArray<string>
  /** The handler slots of this loop's lane. */
  readonly flight: Flight.Flight
  /** The scope the claims' fibers run in: closed by the shutdown once the grace elapsed. */
  readonly handlers: Scope.Scope
  /** The renewers of the claims in progress (a presence watchdog or a cancel notice reaches them here). */
  readonly renewers: Set<LeaseRenewer.LeaseRenewer>
  /** Closed while a claim statement is in flight (a flush waits for its answer). */
  readonly claimIdle: Latch.Latch
  /** Whether this consumer may be reaped soon (its presence cut off): it claims nothing then. */
  readonly atRisk: Effect.Effect<boolean>
  /** The idle sleep: until the poll interval, the earliest visibility, or a wake-up. */
  readonly idle: Effect.Effect<void>
}

/**
 * Which claim loop of a lane: the `lead` claims whenever there is room, and sleeps when the
 * queues are empty (until the poll interval, the earliest visibility or a wake-up); a lane's
 * second loop, `beside`, claims only while the last claim came back full (a backlog), so two
 * claim statements are in flight at once only when there is more to claim than one brings.
 * Each claim reserves its room first (`Flight.reserve`): together they never claim more.
 */
export type Role = "lead" | "beside"

/**
 * The claim loop of one consumer: round-robin over the queues, never more claims than free
 * slots. It never ends but by failing (an error that is not connection-dead) or being interrupted.
 */
export const make = <R>(options: ClaimLoopOptions<R>, role: Role = "lead"): Effect.Effect<never, StoreError | InvalidInput, R | QueueStore> => {
  const { settings, queues, flight, atRisk, idle } = options
  const lead = role === "lead"
  const claimAndDispatch = claimer(options, lead ? QueueMetrics.claimedByLead : QueueMetrics.claimedBeside)
  // The lead's waits are waits by design, which the consumer's health reads; the second loop's
  // are not, so a stuck lead is never hidden by a second loop waiting for a backlog.
  const wait = <A>(effect: Effect.Effect<A>) => lead ? Flight.waiting(flight, effect) : effect
  // The second loop claims no less than half a batch: a slot or two freed is the lead's to fill.
  const leastRoom = lead ? 1 : Math.max(1, Math.floor(Math.min(settings.batchSize, flight.concurrency) / 2))
  return Effect.gen(function*() {
    let next = 0
    let emptyInARow = 0
    let backoff = settings.pollIntervalMs
    /** A claim ahead (no slot free) found nothing: claim again once a slot frees, not before. */
    let dryAhead = false
    const blocked = (now: number) => !Flight.mayClaim(flight, now, leastRoom) || (dryAhead && Flight.freeSlots(flight) <= 0)
    while (true) {
      if (!lead) yield* flight.backlog.await
      const now = yield* Clock.currentTimeMillis
      if (blocked(now)) {
        yield* flight.slotFreed.close
        // Nothing to do until a handler ends or the held messages started (a presence at risk stops handlers, which frees slots).
        if (blocked(now)) yield* wait(flight.slotFreed.await)
        continue
      }
      if (yield* atRisk) {
        // Cut off long enough to look dead to the others: whatever we claimed now would be stopped at once.
        yield* wait(Effect.sleep(settings.pollIntervalMs))
        continue
      }
      const free = Flight.freeSlots(flight)
      if (free > 0) dryAhead = false
      const queue = queues[next++ % queues.length]!
      const claimed = yield* claimAndDispatch(queue).pipe(
        Effect.catchTag("ConnectionDead", (error) =>
          Effect.gen(function*() {
            yield* Effect.logWarning(`claim failed, connection dead; retrying in ${seconds(backoff)}: ${error.message}`)
            yield* Effect.sleep(backoff)
            backoff = Math.min(backoff * 2, settings.backoffMaxMs)
            return undefined
          }))
      )
      if (claimed === undefined) continue
      backoff = settings.pollIntervalMs
      // A full claim opens the way for the second loop; any other closes it.
      if (claimed.full) flight.backlog.openUnsafe()
      else flight.backlog.closeUnsafe()
      yield* Flight.progress(flight)
      yield* Metric.update(QueueMetrics.inFlight, flight.inFlight)
      if (claimed.count === 0 && lead) {
        if (++emptyInARow >= queues.length) {
          emptyInARow = 0
          // Every slot busy: the next claim waits for one to free (a send meanwhile is claimed then).
          if (free <= 0) dryAhead = true
          else yield* wait(idle)
        }
        continue
      }
      emptyInARow = 0
    }
  })
}

/**
 * Claim up to the room of the lane (free slots and what it may hold ahead) from a queue and dispatch what came back, as one
 * uninterruptible unit: a claim that committed is always either running or
 * released, never dropped by a shutdown that arrived while it was in flight.
 * Answers how many messages were claimed, counted in `byLoop` too (the series of this loop).
 */
const claimer = <R>(options: ClaimLoopOptions<R>, byLoop: Metric.Metric<number, Metric.CounterState<number>>) => {
  const { store, settings, flight, claimIdle } = options
  const processClaim = claimProcessor(options)
  /** Each queue's own settings (or the consumer's), looked up once. */
  const settingsOf = new Map(options.queues.map((q) => [q, forQueue(settings, q)]))
  return (queue: string): Effect.Effect<Claimed, StoreError | InvalidInput, R | QueueStore> =>
    Effect.uninterruptible(Effect.gen(function*() {
      const claimedAt = yield* Clock.currentTimeMillis
      const own = settingsOf.get(queue) ?? forQueue(settings, queue)
      claimIdle.closeUnsafe()
      const limit = Math.min(own.batchSize, Flight.room(flight, claimedAt))
      // What of the limit would wait for a slot: a queue with flow limits is claimed without it.
      const ahead = Math.min(limit, Math.max(0, limit - Flight.freeSlots(flight)))
      // A claim beside this one (the lane's second loop) sees this room as taken until it answers.
      Flight.reserve(flight, limit)
      const claims = yield* store.claim(queue, { lease: own.leaseMs, limit, ahead, consumer: settings.consumerId }).pipe(
        Effect.onError(() => Effect.sync(() => Flight.settleClaim(flight, limit))),
        Effect.ensuring(Effect.sync(() => claimIdle.openUnsafe())) // a waiting flush starts here, at once
      )
      // The reserved room becomes what was claimed, held, in one step: no claim beside sees neither.
      Flight.settleClaim(flight, limit)
      if (claims.length === 0) return NONE
      if (flight.stopping) {
        yield* releaseUnrun(options, claims, claimedAt, own.leaseMs)
      } else {
        Flight.hold(flight, claims.length)
        yield* Effect.forkIn(processClaim(claims, claimedAt, own), options.handlers, { startImmediately: true })
      }
      yield* Effect.withFiberSucceed((fiber) => countClaimed(queue, claims, byLoop, fiber.context))
      return { count: claims.length, full: claims.length === limit }
    }))
}

/** What one claim took: how many, and whether as many as it asked for (more is likely ready). */
interface Claimed {
  readonly count: number
  readonly full: boolean
}

/** A claim that found nothing. */
const NONE: Claimed = { count: 0, full: false }

/**
 * Process one claim: its renewer lives exactly as long as the claim's scope. Each message starts
 * as it gets a handler slot (at once, unless it was claimed ahead); those still held when the
 * lane stops, or when the claim's fiber is interrupted, are released.
 */
const claimProcessor = <R>(options: ClaimLoopOptions<R>) => {
  const { settings, dispatcher, handle, flight, renewers } = options
  return (claims: ReadonlyArray<Claim>, claimedAt: number, own: QueueSettings): Effect.Effect<void, never, R | QueueStore> =>
    Effect.scoped(Effect.gen(function*() {
      const renewer = yield* LeaseRenewer.start(claims, {
        leaseMs: own.leaseMs,
        marginMs: own.leaseMarginMs,
        leaseOf: (claim) => dispatcher.policy(claim)?.leaseMs,
        stopTimeoutMs: settings.renewerStopTimeoutMs,
        claimedAt,
        interruptOnLost: settings.onLeaseLost === "interrupt",
        maxRuntimeMs: (claim) => dispatcher.policy(claim)?.maxRuntimeMs ?? settings.maxRuntimeMs
      })
      renewers.add(renewer)
      yield* Effect.addFinalizer(() => Effect.sync(() => renewers.delete(renewer)))
      // A fiber per message, awaited rather than joined: a handler stopped by the watchdog ends its
      // own fiber interrupted, which must not interrupt the other messages of the claim.
      // Started at once, not on the scheduler's next turn: a handler starts before the claim loop
      // builds and sends its next claim (an idle pickup measured ~1 ms sooner).
      const fibers: Array<Fiber.Fiber<unknown>> = []
      const holdUntil = Flight.holdUntil(flight, claimedAt)
      let started = 0
      let ended: Flight.Start = "started"
      const startEach = Effect.gen(function*() {
        while (started < claims.length) {
          ended = yield* Flight.startSlot(flight, holdUntil)
          if (ended !== "started") return
          const claim = claims[started++]!
          fibers.push(yield* Effect.forkChild(handle.run(renewer, claim, Flight.slotOf(flight)), AT_ONCE))
        }
      })
      // Interrupted while held (the grace ended): released all the same.
      yield* startEach.pipe(Effect.ensuring(Effect.suspend(() => releaseHeld(options, renewer, claims.slice(started), ended))))
      yield* Fiber.awaitAll(fibers)
    }))
}

/** Fork options of a message's fiber: started at once (one object for every message). */
const AT_ONCE = { startImmediately: true } as const

/**
 * Hand back the messages of a claim held for a slot that did not come (the lane stopped, or under
 * `auto` prefetch the hold's bound passed): fenced, the attempt given back, each taken out of
 * renewal; they stay in flight until written.
 */
const releaseHeld = <R>(options: ClaimLoopOptions<R>, renewer: LeaseRenewer.LeaseRenewer, held: ReadonlyArray<Claim>, why: Flight.Start) =>
  Effect.uninterruptible(Effect.gen(function*() {
    const { completer, flight } = options
    if (held.length === 0) return
    yield* why === "expired"
      ? Effect.logDebug(`giving back ${held.length} message(s) held ahead for ${Flight.AUTO_HOLD_MAX_MS} ms without a free slot: the handlers are slower now`)
      : Effect.logInfo(`stopping: releasing ${held.length} message(s) claimed ahead that had not started`)
    for (const claim of held) {
      yield* Flight.unhold(flight)
      const leaseEndsAt = renewer.expiresAt(claim.id)
      yield* renewer.finish(claim.id)
      yield* completer.complete(
        { claim, action: why === "expired" ? GIVEN_BACK : RELEASE, startedAt: renewer.claimedAt, leaseEndsAt },
        () => Flight.leave(flight)
      ).pipe(Effect.annotateLogs({ queue: claim.queue, task: claim.task, messageId: claim.id, attempt: claim.attempts }))
    }
  }))

/** The release of a message held ahead as the consumer stops. */
const RELEASE = { _tag: "Release" } as const
/** The release of a message held ahead past its bound (`auto` prefetch): not a shutdown's. */
const GIVEN_BACK = { _tag: "Release", unstarted: true } as const

/** Hand claimed messages back at once (fenced, attempt given back): the consumer is stopping. */
const releaseUnrun = <R>(options: ClaimLoopOptions<R>, claims: ReadonlyArray<Claim>, claimedAt: number, leaseMs: number) =>
  Effect.gen(function*() {
    const { completer, flight } = options
    yield* Effect.logInfo(`stopping: releasing ${claims.length} message(s) claimed as the shutdown began`)
    // In flight until released, so the shutdown waits for these writes too.
    flight.inFlight += claims.length
    yield* Effect.forEach(claims, (claim) =>
      completer.complete(
        { claim, action: { _tag: "Release" }, startedAt: claimedAt, leaseEndsAt: claimedAt + leaseMs },
        () => Flight.leave(flight)
      ).pipe(
        Effect.annotateLogs({ queue: claim.queue, task: claim.task, messageId: claim.id, attempt: claim.attempts })
      ), { concurrency: "unbounded", discard: true })
  })

/**
 * Count a claim: the process total, the claiming loop's series, and per task (a claim's
 * messages of one task come in runs; one update per run, usually one per claim).
 */
const countClaimed = (
  queue: string,
  claims: ReadonlyArray<Claim>,
  byLoop: Metric.Metric<number, Metric.CounterState<number>>,
  context: Context.Context<never>
) => {
  QueueMetrics.claimed.updateUnsafe(claims.length, context)
  byLoop.updateUnsafe(claims.length, context)
  let task = claims[0]!.task
  let run = 0
  for (const claim of claims) {
    if (claim.task !== task) {
      QueueMetrics.forTask(queue, task).claimed.updateUnsafe(run, context)
      task = claim.task
      run = 0
    }
    run += 1
  }
  QueueMetrics.forTask(queue, task).claimed.updateUnsafe(run, context)
}
