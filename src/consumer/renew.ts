/**
 * The renewer of one claim: a fiber that keeps the leases of every unfinished
 * message of the claim alive, in one fenced statement every lease/3, and a
 * watchdog that stops each handler when its lease is lost (or about to be:
 * the local deadline) or when it runs past its max runtime. A renewal that
 * answers a message as cancelled by an operator stops its handler too. One of
 * each per claim, however many messages it holds. A message whose task declares
 * a lease of its own is renewed with that lease, every lease/3 (the first time
 * within a third of the claim's lease): the messages of a claim are renewed in
 * one statement per distinct lease.
 *
 * @since 0.1.0
 */
import { Cause, Clock, Effect, Exit, Fiber, Latch, Metric, Option, type Scope } from "effect"
import type { Claim, ClaimRef, MessageId } from "../Message.ts"
import { LeaseLost, MaxRuntimeExceeded, MessageCancelled, QueryFailed } from "../QueueError.ts"
import * as QueueMetrics from "../QueueMetrics.ts"
import { QueueStore, type QueueStoreShape } from "../QueueStore.ts"
import * as Detached from "../internal/detached.ts"
import { seconds } from "../internal/format.ts"
import { marginFor } from "../config/queues.ts"

/** Timing of a renewer, in milliseconds of Effect's `Clock`. */
export interface RenewerOptions {
  /** The lease the claim gave, and what each renewal asks for unless a message has its own. Renewals run every lease/3. */
  readonly leaseMs: number
  /** The local deadline is last successful renewal + lease - margin (for another lease: `marginFor` it). */
  readonly marginMs: number
  /** A message's own lease (its task's), renewed with instead of the claim's; undefined: the claim's. */
  readonly leaseOf?: ((claim: Claim) => number | undefined) | undefined
  /** How long `finish` and the final stop wait for the renewer before reporting it wedged. */
  readonly stopTimeoutMs: number
  /** Clock time taken just before the claim statement: the lease is known good from then. */
  readonly claimedAt: number
  /** Interrupt a watched handler whose lease is lost (`onLeaseLost: interrupt`), or let it run on. */
  readonly interruptOnLost: boolean
  /** The max runtime of each message, counted from its handler's start (see {@link LeaseRenewer.watch}). */
  readonly maxRuntimeMs: (claim: Claim) => number
}

/** Why the renewer or its watchdog stopped a handler. */
export type Stopped = LeaseLost | MaxRuntimeExceeded | MessageCancelled

/** A running renewer, as the consumer sees it. */
export interface LeaseRenewer {
  /** Clock time taken just before the claim statement (as given in {@link RenewerOptions}). */
  readonly claimedAt: number
  /** The lease the claim statement gave (as given in {@link RenewerOptions}). */
  readonly claimLeaseMs: number
  /** When the lease of `id` ends as far as this consumer knows (last successful renewal + lease). */
  readonly expiresAt: (id: MessageId) => number
  /**
   * Take `id` out of renewal before its final write, at the call; after the last id of the
   * claim, stop the renewer (interrupted and awaited, bounded by the stop
   * timeout; a renewer that takes longer is reported wedged). Never fails.
   * A renewal already in flight may still include `id`: harmless, since the
   * finishing write clears or deletes the token it is fenced by, and its
   * absence from that renewal's answer is not reported as a lost lease.
   */
  readonly finish: (id: MessageId) => Effect.Effect<void>
  /** Declare every unfinished lease of the claim lost (e.g. the consumer is about to be reaped). */
  readonly loseAll: (reason: LeaseLost["reason"], message: string) => Effect.Effect<void>
  /**
   * Watch the handler of `id`, running on `fiber` since `startedAt` (Clock ms):
   * the watchdog interrupts that fiber when the lease is lost (if
   * `interruptOnLost`) or its max runtime, counted from `startedAt`, is over,
   * and records why in {@link LeaseRenewer.stopped}.
   */
  readonly watch: (id: MessageId, fiber: Fiber.Fiber<unknown, unknown>, startedAt: number) => void
  /** Why the watchdog stopped the handler of `id`, if it did. */
  readonly stopped: (id: MessageId) => Stopped | undefined
  /**
   * Renew now instead of at the next tick (the interval then counts from this renewal): an
   * operator cancelled a message of this consumer's queues, and the renewal answer says
   * whether it is one of this claim's. Safe to call at any time.
   */
  readonly renewNow: () => void
  /** Whether `id` is a message of this claim still running (not finished): what a cancel of it wakes. */
  readonly holds: (id: MessageId) => boolean
}

interface Entry {
  readonly ref: ClaimRef
  /** The claimed message (its queue and task label its metrics). */
  readonly claim: Claim
  renewedAt: number
  /** The lease each renewal asks for: the message's own, else the claim's. */
  readonly leaseMs: number
  /** The lease the last successful renewal (or the claim) gave: the lease runs to renewedAt + grantedMs. */
  grantedMs: number
  /** When the next renewal of this message is due (Clock ms). */
  nextRenewalAt: number
  /** Still renewed: not finished, not reported reclaimed. */
  active: boolean
  finished: boolean
  /** Set once the lease is known lost (reported once). */
  lost: LeaseLost | undefined
  readonly maxRuntimeMs: number
  /** When the handler's max runtime is over (Clock ms), from the handler's start; never before it started. */
  maxRuntimeAt: number
  /** The handler's fiber, once watched. */
  fiber: Fiber.Fiber<unknown, unknown> | undefined
  stopped: Stopped | undefined
}

/** The interval between renewals of `e`: a third of the shorter of the lease it has and the one it asks for. */
const intervalOf = (e: Entry): number => Math.max(1, Math.floor(Math.min(e.grantedMs, e.leaseMs) / 3))

/** When the lease of `e` is at risk: its last renewal + the lease it gave - that lease's margin. */
const deadlineOf = (e: Entry, marginMs: number): number => e.renewedAt + e.grantedMs - marginFor(e.grantedMs, marginMs)

/**
 * The lease a message's renewals ask for: its own (never above its max runtime, never under the
 * shortest lease a consumer takes), else the claim's.
 */
const leaseOf = (claim: Claim, options: RenewerOptions): number => {
  const own = options.leaseOf?.(claim)
  return own === undefined || own === options.leaseMs ? options.leaseMs : Math.max(MIN_LEASE_MS, Math.min(own, options.maxRuntimeMs(claim)))
}
/** The shortest lease (as `QueueConfig` accepts one). */
const MIN_LEASE_MS = 300

/** The entry of one claimed message, renewed from the claim (`startedAt`: Clock ms when the renewer started). */
const newEntry = (claim: Claim, options: RenewerOptions, startedAt: number): Entry => {
  const e: Entry = {
  ref: { id: claim.id, leaseToken: claim.leaseToken },
  claim,
  renewedAt: options.claimedAt,
  leaseMs: leaseOf(claim, options),
  grantedMs: options.leaseMs,
  nextRenewalAt: 0,
  active: true,
  finished: false,
  lost: undefined,
  maxRuntimeMs: options.maxRuntimeMs(claim),
  // Counted from the handler's start (`watch`): a message held ahead of a free slot has not started.
  maxRuntimeAt: Number.POSITIVE_INFINITY,
  fiber: undefined,
  stopped: undefined
  }
  e.nextRenewalAt = startedAt + intervalOf(e)
  return e
}

/** Count lost leases per queue and task (the process total by reason is counted by the caller). */
const countLost = (lost: ReadonlyArray<Entry>, reason: string) =>
  Effect.withFiberSucceed((fiber) => {
    for (const e of lost) QueueMetrics.forTask(e.claim.queue, e.claim.task).leaseLost(reason).updateUnsafe(1, fiber.context)
  })

/** What the renewal and the watchdog of one claim share: its entries and how to stop or lose one. */
interface Renewal {
  readonly store: QueueStoreShape
  readonly options: RenewerOptions
  readonly entries: Map<MessageId, Entry>
  readonly stopHandler: (e: Entry, why: Stopped) => void
  readonly markLost: (lost: ReadonlyArray<Entry>, reason: LeaseLost["reason"], message: string) => Effect.Effect<void>
  /** Opened when a renewal moved a local deadline earlier (a shorter lease of its own), or a handler started before the watchdog's next wake-up: the watchdog looks again. */
  readonly rearm: Latch.Latch
  /** When the watchdog wakes next (Clock ms; infinity: only when rearmed). */
  wakeAt: number
}

/** The renew statement on a fiber of its own, joined interruptibly; interrupted in the background if abandoned. */
const renewStatement = (r: Renewal, refs: ReadonlyArray<ClaimRef>, leaseMs: number) =>
  Effect.gen(function*() {
    return yield* Detached.detached(r.store.renew(refs, leaseMs).pipe(
      // A defect in the store is a bug like any other: report it as a failed query, at once.
      Effect.catchDefect((defect) => Effect.fail(new QueryFailed({ operation: "renew", message: `renew: ${String(defect)}` }))),
      Effect.result
    ))
  })

/** What becomes of the messages of a claim whose renewer stopped for good: said in its ERROR line. */
const fateWithoutRenewer = (r: Renewal, count: number) =>
  r.options.interruptOnLost
    ? `its ${count} message(s) are stopped at their local deadline (${seconds(r.options.leaseMs - r.options.marginMs)} after the last renewal) and retried at once`
    : `its ${count} message(s) run on unrenewed (on a lost lease: continue); once their leases end another consumer may run them too`

/** One renewal of `sent`, messages of the claim asking for one lease, and what its answer means for each. */
const renewOnce = (r: Renewal, sent: ReadonlyArray<Entry>, leaseMs: number, lastSuccess: { at: number; escalated: boolean }) =>
  Effect.gen(function*() {
    const { entries, stopHandler, markLost } = r
    const startedAt = yield* Clock.currentTimeMillis
    const result = yield* renewStatement(r, sent.map((e) => e.ref), leaseMs)
    if (result._tag === "Success") {
      const held = new Set(result.success.held)
      lastSuccess.at = startedAt
      lastSuccess.escalated = false
      for (const e of sent) {
        if (!held.has(e.ref.id)) continue
        const before = deadlineOf(e, r.options.marginMs)
        e.renewedAt = startedAt
        e.grantedMs = leaseMs
        if (deadlineOf(e, r.options.marginMs) < before) r.rearm.openUnsafe()
      }
      // An operator cancelled these: stop their handlers (still renewed until they finish, so
      // the lease holds while their finalizers run and the cancel is written).
      for (const id of result.success.cancelling) {
        const e = entries.get(id)
        if (e !== undefined && !e.finished) {
          stopHandler(e, new MessageCancelled({ messageId: id, message: "cancelled by an operator while running; handler interrupted" }))
        }
      }
      // A message finished while the renewal was in flight is no longer ours to renew: its finishing
      // write cleared or deleted its token, so its absence from the answer is no double run.
      const missing = sent.filter((e) => !held.has(e.ref.id) && !e.finished)
      yield* Metric.update(QueueMetrics.renewals, held.size)
      if (held.size > 0) {
        yield* Effect.logDebug(`lease renewed for ${held.size} message(s), ${seconds(leaseMs)} from now`).pipe(
          Effect.annotateLogs({ messageIds: [...held].join(",") })
        )
      }
      if (missing.length > 0) {
        for (const e of missing) e.active = false
        yield* markLost(
          missing,
          "reclaimed",
          `lease lost: renewal did not return ${missing.map((e) => e.ref.id).join(", ")}; another consumer holds or finished them (double run)`
        )
      }
      return
    }
    yield* Metric.update(QueueMetrics.renewalFailures, 1)
    const error = result.failure
    if (error._tag !== "ConnectionDead") {
      // A bug or a bad statement: never a blip. Fail the renewer; the local deadline protects the handlers.
      yield* Effect.logError(`renewal failed (${error._tag}), renewer stopping: ${error.message}; ${fateWithoutRenewer(r, sent.length)}`)
      yield* Metric.update(QueueMetrics.leaseLostBy("renewer-failed"), sent.length)
      yield* countLost(sent, "renewer-failed")
      return yield* error
    }
    const failingFor = (yield* Clock.currentTimeMillis) - lastSuccess.at
    yield* Effect.logWarning(`renewal failed, connection dead; retrying next tick: ${error.message}`)
    if (failingFor >= leaseMs && !lastSuccess.escalated) {
      lastSuccess.escalated = true
      yield* markLost(
        sent.filter((e) => !e.finished),
        "renewals-failing",
        `lease lost: renewals failing for ${seconds(failingFor)} (lease ${seconds(leaseMs)})`
      )
    }
  })

/**
 * The watchdog of the claim: sleeps until the earliest local deadline (last
 * successful renewal + lease - margin: the lease is at risk, declare it lost
 * before anyone can reclaim it) or max runtime of its unfinished messages,
 * acts on what is due, and sleeps again; ends when nothing is left to watch.
 */
const watchdog = (r: Renewal) =>
  Effect.gen(function*() {
    const { entries, options, stopHandler, markLost } = r
    const { marginMs } = options
    while (true) {
      r.rearm.closeUnsafe()
      const now = yield* Clock.currentTimeMillis
      let next = Number.POSITIVE_INFINITY
      const atRisk: Array<Entry> = []
      for (const e of entries.values()) {
        if (e.finished) continue
        // The local deadline matters only to a consumer that stops handlers for lost leases.
        if (options.interruptOnLost && e.lost === undefined) {
          const deadline = deadlineOf(e, marginMs)
          if (now >= deadline) atRisk.push(e)
          else next = Math.min(next, deadline)
        }
        if (e.stopped === undefined) {
          if (now >= e.maxRuntimeAt) {
            const maxRuntimeMs = e.maxRuntimeMs
            stopHandler(e, new MaxRuntimeExceeded({
              messageId: e.ref.id,
              maxRuntimeMs,
              message: `handler ran past its max runtime of ${seconds(maxRuntimeMs)} and was interrupted`
            }))
          } else next = Math.min(next, e.maxRuntimeAt)
        }
      }
      if (atRisk.length > 0) {
        yield* markLost(
          atRisk,
          "local-deadline",
          `lease at risk: no successful renewal for ${seconds(atRisk[0]!.grantedMs - marginFor(atRisk[0]!.grantedMs, marginMs))}; stopping the handler before the lease can expire`
        )
      }
      if (next === Number.POSITIVE_INFINITY) {
        // Nothing unfinished: done. Else only messages not started yet (held ahead): until one is watched.
        if (![...entries.values()].some((e) => !e.finished)) return
        r.wakeAt = next
        yield* r.rearm.await
        continue
      }
      r.wakeAt = next
      yield* Effect.raceFirst(Effect.sleep(next - now), r.rearm.await)
    }
  }).pipe(Effect.annotateLogs({ module: "LeaseRenewer" }))

/**
 * The renewal loop of the claim: sleeps until a renewal is due (every lease/3 of each message),
 * or until `early` is opened (then every active message is renewed), and renews what is due, in
 * one statement per distinct lease asked for (one in all unless tasks declare leases of their own).
 */
const renewalLoop = (r: Renewal, early: Latch.Latch) =>
  Effect.gen(function*() {
    /** The last successful renewal of each lease asked for: renewals failing for longer than it are escalated. */
    const lastSuccess = new Map<number, { at: number; escalated: boolean }>()
    while (true) {
      const active = [...r.entries.values()].filter((e) => e.active)
      const next = active.reduce((at, e) => Math.min(at, e.nextRenewalAt), Number.POSITIVE_INFINITY)
      const now = yield* Clock.currentTimeMillis
      yield* next === Number.POSITIVE_INFINITY ? early.await : Effect.raceFirst(Effect.sleep(Math.max(0, next - now)), early.await)
      const forced = early.isOpen()
      early.closeUnsafe()
      const at = yield* Clock.currentTimeMillis
      const due = [...r.entries.values()].filter((e) => e.active && (forced || e.nextRenewalAt <= at))
      const byLease = new Map<number, Array<Entry>>()
      for (const e of due) byLease.set(e.leaseMs, [...(byLease.get(e.leaseMs) ?? []), e])
      for (const [leaseMs, group] of byLease) {
        // A message may have finished while the statement of another lease was in flight.
        const sent = group.filter((e) => e.active)
        if (sent.length === 0) continue
        let last = lastSuccess.get(leaseMs)
        if (last === undefined) lastSuccess.set(leaseMs, last = { at: r.options.claimedAt, escalated: false })
        yield* renewOnce(r, sent, leaseMs, last)
      }
      const end = yield* Clock.currentTimeMillis
      for (const e of due) e.nextRenewalAt = end + intervalOf(e)
    }
  }).pipe(Effect.annotateLogs({ module: "LeaseRenewer" }))

/**
 * Start the renewer of `claims` in the current scope: a fiber forked with
 * `Effect.forkScoped`, so closing the scope stops it and a claim processed
 * inside `Effect.scoped` can never leave a renewer behind.
 *
 * The loop waits only in interruptible places: its sleep, and the join of the
 * renew statement, which runs on a fiber of its own. Stopping it is therefore
 * prompt even when a statement hangs; the abandoned statement is interrupted
 * in the background, and if it still answers late it is harmless, since every
 * renewal is fenced by the lease token and every finishing write clears it.
 */
export const start = (
  claims: ReadonlyArray<Claim>,
  options: RenewerOptions
): Effect.Effect<LeaseRenewer, never, QueueStore | Scope.Scope> =>
  Effect.gen(function*() {
    const store = yield* QueueStore
    const { stopTimeoutMs } = options
    const entries = new Map<MessageId, Entry>()
    const startedAt = yield* Clock.currentTimeMillis
    for (const claim of claims) entries.set(claim.id, newEntry(claim, options, startedAt))

    /** Stop a watched handler (at once if it is already running, else as soon as it is watched). */
    const stopHandler = (e: Entry, why: Stopped) => {
      if (e.stopped !== undefined || e.finished) return
      e.stopped = why
      e.fiber?.interruptUnsafe()
    }
    const ids = [...entries.keys()]
    let unfinished = entries.size
    let wedgedReported = false
    let stopped = false

    // Uninterruptible: stopping a handler may interrupt the fiber that called this (the presence
    // watch's caller, say); the metric and log must still land.
    const markLost = (lost: ReadonlyArray<Entry>, reason: LeaseLost["reason"], message: string) =>
      Effect.uninterruptible(Effect.gen(function*() {
        const fresh: Array<Entry> = []
        for (const e of lost) {
          const error = new LeaseLost({ ids: [e.ref.id], reason, message })
          if (e.lost === undefined) {
            e.lost = error
            fresh.push(e)
          }
          // A message held ahead (not started: no fiber watched yet) never starts on a lost lease,
          // even where running handlers go on (`onLeaseLost: continue`).
          if (options.interruptOnLost || e.fiber === undefined) stopHandler(e, error)
        }
        if (fresh.length === 0) return
        yield* Metric.update(QueueMetrics.leaseLostBy(reason), fresh.length)
        yield* countLost(fresh, reason)
        yield* Effect.logError(message).pipe(Effect.annotateLogs({ messageIds: fresh.map((e) => e.ref.id).join(",") }))
      }))

    const renewal: Renewal = { store, options, entries, stopHandler, markLost, rearm: Latch.makeUnsafe(false), wakeAt: 0 }

    /**
     * Opened by `renewNow`: cuts the wait for the next renewal short. Open from the start for a
     * claim of a message whose previous holder died (its lease expired or was reaped): a cancel
     * asked for while that holder ran is heard at once, not after the handler ran for lease/3.
     */
    const early = Latch.makeUnsafe(claims.some((c) => c.leaseExpiries > 0))
    const loop = renewalLoop(renewal, early)

    // Forked before the renewal loop: a deadline due at a renewal tick is acted on first.
    yield* Effect.forkScoped(watchdog(renewal))

    // Forked into the claim's scope: if the claim ends without `stop` (a defect, an interruption),
    // the scope's close interrupts it; once it has exited, its finalizer leaves the scope.
    const fiber = yield* Effect.forkScoped(loop)

    const reportWedged = (what: string) =>
      Effect.gen(function*() {
        if (wedgedReported) return
        wedgedReported = true
        yield* Metric.update(QueueMetrics.wedgedRenewers, 1)
        yield* Effect.logError(`renewer wedged: ${what} within ${seconds(stopTimeoutMs)}; going on without it`).pipe(
          Effect.annotateLogs({ module: "LeaseRenewer", messageIds: ids.join(",") })
        )
      })

    /**
     * Interrupt the renewer and wait for it, bounded by the stop timeout (the timeout is itself
     * interruptible, so the bound holds even where the caller is uninterruptible), then say how it
     * ended. On timeout the renewer is reported wedged and the claim goes on without it. Runs once.
     */
    const stop = Effect.gen(function*() {
      if (stopped) return
      stopped = true
      // The loop is normally asleep: the interruption ends it at once, and its exit is read without a
      // race. Otherwise it is awaited under the bound.
      fiber.interruptUnsafe()
      const ended = fiber.pollUnsafe()
      const exit = ended !== undefined
        ? Option.some(ended)
        : yield* Fiber.await(fiber).pipe(Effect.interruptible, Effect.timeoutOption(stopTimeoutMs))
      if (Option.isNone(exit)) return yield* reportWedged("did not stop")
      if (Exit.isFailure(exit.value) && !Cause.hasInterruptsOnly(exit.value.cause)) {
        yield* Effect.logError(`renewer had failed before the claim finished:\n${Cause.pretty(exit.value.cause)}`).pipe(
          Effect.annotateLogs({ module: "LeaseRenewer", messageIds: ids.join(",") })
        )
      }
    })
    yield* Effect.addFinalizer(() => stop)

    const entry = (id: MessageId): Entry => {
      const e = entries.get(id)
      if (e === undefined) throw new Error(`LeaseRenewer: ${id} is not part of this claim`)
      return e
    }

    return {
      watch: (id, fiber, handlerStartedAt) => {
        const e = entry(id)
        e.fiber = fiber
        // The max runtime counts from here: the watchdog looks again if it sleeps past it (on a later deadline, or none).
        e.maxRuntimeAt = handlerStartedAt + e.maxRuntimeMs
        if (e.maxRuntimeAt < renewal.wakeAt) renewal.rearm.openUnsafe()
        if (e.stopped !== undefined) fiber.interruptUnsafe()
      },
      stopped: (id) => entry(id).stopped,
      renewNow: () => {
        early.openUnsafe()
      },
      holds: (id) => {
        const e = entries.get(id)
        return e !== undefined && !e.finished
      },
      claimedAt: options.claimedAt,
      claimLeaseMs: options.leaseMs,
      expiresAt: (id) => {
        const e = entry(id)
        return e.renewedAt + e.grantedMs
      },
      loseAll: (reason, message) => markLost([...entries.values()].filter((e) => !e.finished), reason, message),
      // Takes `id` out at the call (no effect of its own per message); only the stop is an effect.
      finish: (id) => {
        const e = entry(id)
        if (e.finished) return Effect.void
        e.finished = true
        e.active = false
        e.fiber = undefined
        return --unfinished === 0 ? stop : Effect.void
      }
    } satisfies LeaseRenewer
  })
