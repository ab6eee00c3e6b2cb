/**
 * The presence session keeper of one registered consumer (`ConsumerPresence.register`):
 * its heartbeats, and its {@link SESSIONS} presence sessions kept open, each holding the
 * consumer's key shared, probed every `probeMs` and replaced the moment one is found dead,
 * over a {@link State} that the registration's status reads.
 *
 * @since 0.1.0
 */
import { Clock, Deferred, Effect, Option } from "effect"
import { env } from "../config/variables.ts"
import { seconds } from "../internal/format.ts"
import * as PresenceSql from "../pg/presence.ts"
import { classify, QueryFailed, type StoreError } from "../QueueError.ts"
import * as Session from "./session.ts"

/** The environment variable that turns session liveness on, off or auto (`ConsumerPresence.variables`). */
export const variables = { sessionLiveness: env.sessionLiveness } as const

/**
 * A failure that proves the server itself is down for everyone (not that this
 * consumer is cut off): nothing listening, or PostgreSQL starting or shutting down.
 * A terminated backend (57P01) proves nothing: one session can be killed alone.
 */
const serverDown = (error: StoreError): boolean =>
  error._tag === "ConnectionDead" && (error.code === "ECONNREFUSED" || error.code === "57P03")

/** How many presence sessions each consumer keeps, each holding its key shared: all must be gone for a reap. */
export const SESSIONS = 2

/** A presence session held, and when (Clock ms) a statement sent on it was last answered. */
export interface Held {
  readonly session: Session.Session
  okAt: number
}

/** What one registration knows of its presence, read by its loops and its status. */
export interface State {
  liveness: "active" | "reconnecting" | "unavailable" | "off"
  /** The presence sessions believed alive (none is known to have ended), each holding `lockKey` shared. */
  held: Array<Held>
  /** The key our sessions hold, and a new session joins (null: none yet, the next takes a fresh one). */
  lockKey: number | null
  /** The backend of the first session held (written in the row, shown in the status). */
  backendPid: number | null
  /** Presence sessions established so far. */
  sessions: number
  /** Clock time taken just before the last heartbeat that succeeded. */
  heartbeatOkAt: number
  /**
   * The lock key the row holds: the one written by the last heartbeat that
   * succeeded (null: none yet, or none advertised, and then no reaper can
   * release this consumer's claims). Until a session holding it is held, the
   * row points at a lock that may be free: not active.
   */
  advertisedKey: number | null
  /**
   * When (Clock ms) a session holding the advertised key was last known alive: a statement
   * sent on it then was answered, so the key was held after that moment. A reaper can
   * release us only once it has seen the key free for its `reapAfter`, so not before this
   * + `reapAfter` (see `ConsumerPresence.Registration.reapableAt`).
   */
  aliveAt: number
  /**
   * When a heartbeat or a session open last found the server itself down (connection
   * refused, or "cannot connect now": starting or shutting down). A server that was down
   * then started later, and reapers release nothing within the stale bound of a start.
   */
  serverDownSeenAt: number
  /** The first such refusal since `aliveAt` (0: none): before a reaper could act, it proves the server went down first. */
  serverDownFirstAt: number
  /**
   * Set when the last session holding our key was found gone: a reaper may release our
   * claims from `at` on. Cleared by a new session holding the key well before `at`; one
   * that comes later leaves it for `until` (Clock ms), long enough for the presence watch
   * to stop the handlers of claims a reaper may have released meanwhile.
   */
  exposure: { readonly at: number; until: number } | undefined
}

/** The pause between the first tries to reopen a session when none is left. */
const FAST_RETRY_MS = 10

/** How long an exposure outlives a session regained too late (the presence watch looks every 25 ms). */
const EXPOSURE_KEPT_MS = 1_000

/** Record a refusal that proves the server down at `now`: the last one, and the first since our lock was last known held. */
export const sawServerDown = (state: State, now: number): void => {
  state.serverDownSeenAt = now
  if (state.serverDownFirstAt <= state.aliveAt) state.serverDownFirstAt = now
}

/** How many of the sessions held hold `key`. */
const holding = (state: State, key: number | null): number =>
  key === null ? 0 : state.held.filter((h) => h.session.lockKey === key).length

/**
 * The key a heartbeat writes in the row: ours once {@link SESSIONS} sessions hold it (a
 * reaper may release us only when all of them are gone), and still while it is advertised
 * (a lost session is being replaced); none while fewer hold a key never advertised (the
 * first session at start, or a fresh key after a reap): with one session, its loss alone
 * would make us reapable, so until the second holds it nobody may release our claims and
 * they are protected by their leases alone.
 */
export const advertisable = (state: State): number | null =>
  state.lockKey !== null && (state.advertisedKey === state.lockKey || holding(state, state.lockKey) >= SESSIONS)
    ? state.lockKey
    : null

/** Fully protected: the row advertises our key, and {@link SESSIONS} sessions hold it. */
export const fullyHeld = (state: State): boolean =>
  state.advertisedKey !== null && holding(state, state.advertisedKey) >= SESSIONS

/** Active when a session holding the advertised key is held; else reconnecting (unless a pooler made us unavailable). */
export const refresh = (state: State): void => {
  if (state.liveness === "unavailable" || state.liveness === "off") return
  const safe = state.advertisedKey !== null && state.held.some((h) => h.session.lockKey === state.advertisedKey)
  state.liveness = safe ? "active" : "reconnecting"
  state.backendPid = state.held[0]?.session.backendPid ?? null
}

/** What the session keeper and the heartbeats of one registration work with. */
export interface Keeper {
  readonly ctx: PresenceSql.PresenceContext
  readonly state: State
  readonly heartbeatMs: number
  /**
   * How long each probe waits on the server before it answers (`PresenceSql.probe`): the
   * sessions are probed back to back, so a session's end is heard at once, from its probe.
   */
  readonly probeMs: number
  /** How long a reaper sees our lock free before it releases our claims. */
  readonly reapAfterMs: number
  readonly openSession: (key: number | null) => Effect.Effect<Session.Session | Session.PoolerFound | Session.KeyRefused, StoreError>
  readonly heartbeatOnce: Effect.Effect<void, StoreError>
  /**
   * Completed once the consumer may claim: {@link SESSIONS} sessions hold its key and the row
   * advertises it, or presence is unavailable (a pooler), or no session could be opened at
   * all (no key advertised: lease expiry only until they are up).
   */
  readonly ready: Deferred.Deferred<void>
}

/** Complete `ready` once fully held (see `Keeper.ready`). */
export const readyWhenHeld = (keeper: Keeper): Effect.Effect<void> =>
  Effect.suspend(() => fullyHeld(keeper.state) ? Deferred.succeed(keeper.ready, undefined) : Effect.void).pipe(Effect.asVoid)

/**
 * One heartbeat. The row says who we are and which lock proves our session lives. Written
 * whole on every heartbeat (suspended: it reads the state of the moment), so a row deleted
 * meanwhile (by a reaper, or as long dead) comes back. Heartbeats and sweeps share a
 * one-connection pool, so heartbeats commit in the order they answer: the key of the last
 * one that succeeded is the key in the row.
 */
export const heartbeatOnce = (
  ctx: PresenceSql.PresenceContext,
  state: State,
  who: { readonly id: string; readonly host: string; readonly pid: number }
): Effect.Effect<void, StoreError> =>
  Effect.suspend(() => {
    const key = advertisable(state)
    const backendPid = key === null ? null : state.backendPid
    return Effect.flatMap(Clock.currentTimeMillis, (startedAt) =>
      PresenceSql.heartbeat(ctx, { ...who, lockKey: key, backendPid }).pipe(
        Effect.tap(() =>
          Effect.sync(() => {
            state.heartbeatOkAt = Math.max(state.heartbeatOkAt, startedAt)
            if (state.advertisedKey !== key) {
              state.advertisedKey = key
              // The row now names the key of the sessions we hold: known alive when last answered.
              for (const h of state.held) if (h.session.lockKey === key) state.aliveAt = Math.max(state.aliveAt, h.okAt)
            }
            // From here on only the end of every session holding that key lets a reaper release our claims.
            refresh(state)
          })
        )
      ))
  }).pipe(
    Effect.timeoutOrElse({
      duration: ctx.staleMs,
      orElse: () => Effect.fail(new QueryFailed({ operation: "heartbeat", message: `heartbeat: no answer in ${seconds(ctx.staleMs)}` }))
    }),
    Effect.asVoid,
    classify("heartbeat")
  )

const goUnavailable = (keeper: Keeper, detail: string) =>
  Effect.gen(function*() {
    const { state } = keeper
    state.liveness = "unavailable"
    state.lockKey = null
    state.backendPid = null
    for (const h of state.held.splice(0)) yield* Session.close(h.session)
    yield* keeper.heartbeatOnce.pipe(Effect.ignore)
    yield* Effect.logWarning(
      `session liveness unavailable (transaction-mode pooler?): ${detail}; falling back to lease expiry. ` +
        `Set ${variables.sessionLiveness}=off to silence this, or connect leasehold directly to PostgreSQL.`
    )
    // After the WARN: the consumer starts knowing why it runs on lease expiry alone.
    yield* Deferred.succeed(keeper.ready, undefined)
  })

/** A failed open: note a server down, be in the table, say so, and wait before the next try. */
const openFailed = (keeper: Keeper, failure: StoreError, failures: number) =>
  Effect.gen(function*() {
    const { state } = keeper
    if (serverDown(failure)) sawServerDown(state, yield* Clock.currentTimeMillis)
    const started = yield* Deferred.isDone(keeper.ready)
    if (state.held.length === 0 && !started) {
      // Not even one session (the database unreachable?): be in the table anyway, no lock
      // advertised, and let the consumer start on lease expiry only; it claims nothing meanwhile anyway.
      yield* keeper.heartbeatOnce.pipe(Effect.ignore)
      yield* Deferred.succeed(keeper.ready, undefined)
    }
    if (failures + 1 === 1 || (failures + 1) % 30 === 0) {
      yield* Effect.logWarning(
        `presence session could not be opened (${failures + 1} tries): ${failure.message}; retrying; ` +
          (!started && state.held.length > 0
            ? `the consumer does not claim until ${SESSIONS} presence sessions hold its lock`
            : "meanwhile claims are protected by their leases" + (state.held.length > 0 ? " and the other presence session" : ""))
      )
    }
    // While no session holds our key, retry at once a few times, then at the probe pace:
    // being reapable soon is the risk, and a refusal (the server going down: nobody can reap)
    // seen early keeps the handlers running. With a session left, at the heartbeat pace.
    // After an outage, being registered again soon matters more than the failed connects.
    yield* Effect.sleep(state.held.length > 0 ? keeper.heartbeatMs : failures < 10 ? FAST_RETRY_MS : keeper.probeMs)
    return failures + 1
  })

/**
 * A session opened while we were exposed (every session holding our advertised key was
 * found gone). Joining that key: it was held until `aliveAt` and again from the grant on, so a reaper
 * (two looks `reapAfter` apart, both free) could have released us only if the grant came
 * `reapAfter` or more after `aliveAt`. Granted a margin before that: safe again. Late: keep
 * the exposure a while, so the presence watch stops what a reaper may have released.
 */
const rejoined = (keeper: Keeper, session: Session.Session, now: number): void => {
  const exposure = keeper.state.exposure
  if (exposure === undefined || exposure.until !== Infinity) return
  // Another key (a fresh one, after a reaper held ours) proves nothing about the old one.
  if (session.lockKey === keeper.state.advertisedKey && session.grantedBy < exposure.at - keeper.reapAfterMs / 3) {
    keeper.state.exposure = undefined
  } else exposure.until = now + EXPOSURE_KEPT_MS
}

/** Open one more presence session, joining our key (or a fresh one when we hold none yet). */
const establish = (keeper: Keeper, failures: number) =>
  Effect.gen(function*() {
    const { state } = keeper
    const opened = yield* Effect.result(keeper.openSession(state.lockKey))
    if (opened._tag === "Failure") return yield* openFailed(keeper, opened.failure, failures)
    const result = opened.success
    if ("_tag" in result && result._tag === "Pooler") {
      yield* goUnavailable(keeper, result.detail)
      return 0
    }
    if ("_tag" in result) {
      // Our key stays refused: a reaper found every session of ours gone and released our
      // claims (the presence watch stopped our handlers before it could). Start afresh.
      state.lockKey = null
      yield* Effect.logWarning(
        `presence key ${result.key} is held by a reaper: this consumer's claims were released; registering with a new key`
      )
      return failures + 1
    }
    const now = yield* Clock.currentTimeMillis
    rejoined(keeper, result, now)
    state.held.push({ session: result, okAt: result.heldAt })
    state.lockKey = result.lockKey
    state.sessions += 1
    if (result.lockKey === state.advertisedKey) state.aliveAt = Math.max(state.aliveAt, result.heldAt)
    refresh(state)
    // A key not advertised yet is not protecting us: the row names none (or a previous key,
    // free by now), so until a heartbeat advertises this one once enough sessions hold it, no
    // reaper can tell we are alive. The heartbeat that succeeds makes us active.
    if (state.advertisedKey !== advertisable(state)) yield* keeper.heartbeatOnce.pipe(Effect.ignore)
    yield* readyWhenHeld(keeper)
    const message = `presence lock held by backend ${result.backendPid} (key ${keeper.ctx.lockClass}/${result.lockKey}, ` +
      `session ${state.held.length} of ${SESSIONS})`
    yield* state.sessions <= SESSIONS ? Effect.logDebug(`registered: ${message}`) : Effect.logWarning(`re-registered: ${message}`)
    return 0
  })

/**
 * Is this session still there? Any failure, or a different backend answering, means no.
 * Returns whether it is; a session found dead is closed and left out of `held`.
 */
const check = (keeper: Keeper, held: Held) =>
  Effect.gen(function*() {
    const { state } = keeper
    const { session } = held
    const sentAt = yield* Clock.currentTimeMillis
    const probeOnce = PresenceSql.probe(session.sql, keeper.probeMs).pipe(
      Effect.timeoutOption(Math.max(keeper.heartbeatMs, 2_000)),
      Effect.result
    )
    let probe = yield* probeOnce
    // No answer in time is no proof: after a long event-loop block the timeout fires before
    // an answer already received is read. Giving up the session would free our own lock, so
    // ask again (the late answer is drained first) and give up only if that too goes unanswered.
    if (probe._tag === "Success" && Option.isNone(probe.success)) probe = yield* probeOnce
    if (probe._tag === "Success" && Option.isSome(probe.success) && probe.success.value[0]?.pid === session.backendPid) {
      // The backend answered after sleeping probeMs from (at the earliest) the moment we sent it.
      const aliveAt = sentAt + keeper.probeMs
      held.okAt = Math.max(held.okAt, aliveAt)
      if (session.lockKey === state.advertisedKey) state.aliveAt = Math.max(state.aliveAt, aliveAt)
      return true
    }
    state.held = state.held.filter((h) => h !== held)
    refresh(state)
    if (!state.held.some((h) => h.session.lockKey === state.advertisedKey) && state.advertisedKey === session.lockKey) {
      state.exposure = { at: state.aliveAt + keeper.reapAfterMs, until: Infinity }
    }
    yield* Session.close(session)
    if (probe._tag === "Success" && Option.isSome(probe.success)) {
      yield* goUnavailable(keeper, `backend ${session.backendPid} was replaced by ${probe.success.value[0]?.pid} on the same connection`)
      return false
    }
    const why = probe._tag === "Failure" ? String((probe.failure as { message?: unknown }).message ?? probe.failure) : "no answer"
    yield* Effect.logWarning(
      state.held.length > 0
        ? `presence connection lost (${why}); replacing it. The other presence session still holds this consumer's lock, ` +
          "so it is not reaped"
        : `presence connection lost (${why}), and no other presence session is left; re-registering. Unless a new one holds ` +
          "the lock soon, other consumers will release this consumer's claims, and its handlers are stopped first"
    )
    return false
  })

/**
 * Keep the presence sessions: open them, probe each back to back (each probe waits
 * `probeMs` on the server), replace one the moment it is found dead (the other still holds
 * the key meanwhile). One fiber per session, so a slow answer on one delays no other.
 */
export const supervise = (keeper: Keeper) =>
  Effect.gen(function*() {
    const { state } = keeper
    let failures = 0
    /** Completed by a session's prober when it found its session dead. */
    let lost = Deferred.makeUnsafe<void>()
    const probe = (held: Held) =>
      Effect.forkChild(
        Effect.repeat(check(keeper, held), { while: (alive) => alive }).pipe(
          Effect.andThen(Effect.suspend(() => Deferred.succeed(lost, undefined)))
        )
      )
    // After a restart of this loop (a defect), the sessions still held get probers again.
    for (const held of state.held) yield* probe(held)
    while (true) {
      if (state.liveness === "unavailable") {
        yield* Deferred.succeed(keeper.ready, undefined)
        return yield* Effect.never
      }
      if (state.held.length < SESSIONS) {
        const before = state.held.length
        failures = yield* establish(keeper, failures)
        if (state.held.length > before) yield* probe(state.held[state.held.length - 1]!)
        continue
      }
      yield* Deferred.await(lost)
      lost = Deferred.makeUnsafe<void>()
    }
  })

/** Heartbeat every interval; say so when heartbeats have failed for longer than the stale bound. */
export const heartbeats = (keeper: Keeper) =>
  Effect.gen(function*() {
    const { state } = keeper
    const staleMs = keeper.ctx.staleMs
    let failingSince: number | undefined
    let warned = false
    while (true) {
      const result = yield* Effect.result(keeper.heartbeatOnce)
      const now = yield* Clock.currentTimeMillis
      if (result._tag === "Failure" && serverDown(result.failure)) sawServerDown(state, now)
      if (result._tag === "Success") {
        yield* readyWhenHeld(keeper)
        if (warned) yield* Effect.logInfo("heartbeats are back")
        failingSince = undefined
        warned = false
      } else {
        failingSince ??= now
        yield* Effect.logDebug(`heartbeat failed: ${result.failure.message}`)
        if (!warned && now - failingSince >= staleMs) {
          warned = true
          yield* Effect.logWarning(
            `heartbeats failing for ${seconds(now - failingSince)} (stale after ${seconds(staleMs)}): ` +
              `its claims stay protected by its presence sessions (not by heartbeats): ${result.failure.message}`
          )
        }
      }
      yield* Effect.sleep(keeper.heartbeatMs)
    }
  })

/** How long a registration waits for its presence sessions before the consumer starts on lease expiry alone. */
const READY_TIMEOUT_MS = 15_000

/**
 * Wait until the consumer may claim (`Keeper.ready`), saying so while it waits; bounded: past
 * the bound it starts anyway, its key not advertised (nobody can release its claims, which
 * are protected by their leases alone) until both sessions hold it.
 */
export const awaitReady = (keeper: Keeper): Effect.Effect<void> =>
  Effect.gen(function*() {
    const slow = yield* Deferred.await(keeper.ready).pipe(Effect.timeoutOption(2_000))
    if (Option.isSome(slow)) return
    yield* Effect.logInfo(
      `waiting for ${SESSIONS} presence sessions to hold this consumer's lock before claiming ` +
        `(${keeper.state.held.length} so far)`
    )
    const done = yield* Deferred.await(keeper.ready).pipe(Effect.timeoutOption(READY_TIMEOUT_MS - 2_000))
    if (Option.isNone(done)) {
      yield* Effect.logWarning(
        `${SESSIONS} presence sessions not up in ${seconds(READY_TIMEOUT_MS)} (${keeper.state.held.length} so far): ` +
          "claiming on lease expiry alone (no lock advertised, so no reaper releases this consumer's claims) " +
          "until they are; still trying"
      )
    }
  })
