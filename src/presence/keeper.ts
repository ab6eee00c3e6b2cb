/**
 * The presence session keeper of one registered consumer (`ConsumerPresence.register`):
 * its heartbeats, and its presence session kept open, probed every heartbeat and
 * replaced when it dies, over a {@link State} that the registration's status reads.
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

/** What one registration knows of its presence, read by its loops and its status. */
export interface State {
  liveness: "active" | "reconnecting" | "unavailable" | "off"
  session: Session.Session | undefined
  lockKey: number | null
  backendPid: number | null
  sessions: number
  /** Clock time taken just before the last heartbeat that succeeded. */
  heartbeatOkAt: number
  /**
   * The lock key the row holds: the one written by the last heartbeat that
   * succeeded (null: none yet, or none advertised, and then no reaper can
   * release this consumer's claims). Until it is the key of the session we
   * hold, the row points at a lock that may be free: not active.
   */
  advertisedKey: number | null
  /**
   * When a heartbeat last found the server itself down (connection refused, or
   * "cannot connect now": starting or shutting down). A server that was down then
   * started later, and reapers release nothing within the stale bound of a start.
   */
  serverDownSeenAt: number
}

/** What the session keeper and the heartbeats of one registration work with. */
export interface Keeper {
  readonly ctx: PresenceSql.PresenceContext
  readonly state: State
  readonly heartbeatMs: number
  readonly openSession: Effect.Effect<Session.Session | Session.PoolerFound, StoreError>
  readonly heartbeatOnce: Effect.Effect<void, StoreError>
}

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
  who: { readonly id: string; readonly host: string; readonly pid: number; readonly settings?: PresenceSql.ConsumerSettings | undefined }
): Effect.Effect<void, StoreError> =>
  Effect.suspend(() => {
    const key = state.lockKey
    const backendPid = state.backendPid
    return Effect.flatMap(Clock.currentTimeMillis, (startedAt) =>
      PresenceSql.heartbeat(ctx, { ...who, lockKey: key, backendPid }).pipe(
        Effect.tap(() =>
          Effect.sync(() => {
            state.heartbeatOkAt = Math.max(state.heartbeatOkAt, startedAt)
            state.advertisedKey = key
            // The row now names the lock of the session we hold: from here on only the end
            // of that session (and a stale heartbeat) lets a reaper release our claims.
            if (state.liveness === "reconnecting" && state.session !== undefined && state.session.lockKey === key) {
              state.liveness = "active"
            }
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
    yield* keeper.heartbeatOnce.pipe(Effect.ignore)
    yield* Effect.logWarning(
      `session liveness unavailable (transaction-mode pooler?): ${detail}; falling back to lease expiry. ` +
        `Set ${variables.sessionLiveness}=off to silence this, or connect leasehold directly to PostgreSQL.`
    )
  })

/** Open a presence session (none open): as a new one, or falling back when it cannot be had. */
const establish = (keeper: Keeper, firstAttempt: Deferred.Deferred<void>, failures: number) =>
  Effect.gen(function*() {
    const { state } = keeper
    const opened = yield* Effect.result(keeper.openSession)
    if (opened._tag === "Failure") {
      // Be in the table anyway (no lock advertised: lease expiry only, for now).
      if (!(yield* Deferred.isDone(firstAttempt))) yield* keeper.heartbeatOnce.pipe(Effect.ignore)
      yield* Deferred.succeed(firstAttempt, undefined)
      if (failures + 1 === 1 || (failures + 1) % 30 === 0) {
        yield* Effect.logWarning(
          `presence session could not be opened (${failures + 1} tries): ${opened.failure.message}; ` +
            "retrying; meanwhile claims are protected by their leases"
        )
      }
      // Retry at the heartbeat pace: after an outage, being registered again soon matters
      // more than the few failed connects it costs.
      yield* Effect.sleep(keeper.heartbeatMs)
      return failures + 1
    }
    const result = opened.success
    if ("_tag" in result) {
      yield* goUnavailable(keeper, result.detail)
      yield* Deferred.succeed(firstAttempt, undefined)
      return 0
    }
    state.session = result
    state.lockKey = result.lockKey
    state.backendPid = result.backendPid
    state.sessions += 1
    // Not active yet: the row still names the previous key (free by now, if that session
    // ended), so until a heartbeat advertises this one, a reaper could release our claims
    // once the heartbeat is stale. The heartbeat that succeeds makes us active.
    state.liveness = "reconnecting"
    yield* keeper.heartbeatOnce.pipe(Effect.ignore)
    yield* Deferred.succeed(firstAttempt, undefined)
    const message = `presence lock held by backend ${result.backendPid} (key ${keeper.ctx.lockClass}/${result.lockKey})`
    yield* state.sessions === 1 ? Effect.logDebug(`registered: ${message}`) : Effect.logWarning(`re-registered: ${message}`)
    return 0
  })

/** Is our session still there (after a heartbeat interval)? Any failure, or a different backend answering, means no. */
const check = (keeper: Keeper, session: Session.Session) =>
  Effect.gen(function*() {
    const { state } = keeper
    const probeOnce = PresenceSql.backendPid(session.sql).pipe(
      Effect.timeoutOption(Math.max(keeper.heartbeatMs, 2_000)),
      Effect.result
    )
    let probe = yield* probeOnce
    // No answer in time is no proof: after a long event-loop block the timeout fires before
    // an answer already received is read. Giving up the session would free our own lock, so
    // ask again (the late answer is drained first) and give up only if that too goes unanswered.
    if (probe._tag === "Success" && Option.isNone(probe.success)) probe = yield* probeOnce
    if (probe._tag === "Success" && Option.isSome(probe.success) && probe.success.value[0]?.pid === session.backendPid) return
    state.session = undefined
    yield* Session.close(session)
    if (probe._tag === "Success" && Option.isSome(probe.success)) {
      return yield* goUnavailable(keeper, `backend ${session.backendPid} was replaced by ${probe.success.value[0]?.pid} on the same connection`)
    }
    state.liveness = "reconnecting"
    state.backendPid = null
    const why = probe._tag === "Failure" ? String((probe.failure as { message?: unknown }).message ?? probe.failure) : "no answer"
    yield* Effect.logWarning(
      `presence connection lost (${why}); re-registering. Heartbeats go on, so this consumer is not reaped, ` +
        "and its claims stay protected by their leases"
    )
  })

/** Keep a presence session: open it, probe it every heartbeat, replace it when it dies. */
export const supervise = (keeper: Keeper, firstAttempt: Deferred.Deferred<void>) =>
  Effect.gen(function*() {
    let failures = 0
    while (true) {
      if (keeper.state.liveness === "unavailable") {
        yield* Deferred.succeed(firstAttempt, undefined)
        return yield* Effect.never
      }
      if (keeper.state.session === undefined) {
        failures = yield* establish(keeper, firstAttempt, failures)
        continue
      }
      yield* Effect.sleep(keeper.heartbeatMs)
      const session = keeper.state.session
      if (session !== undefined) yield* check(keeper, session)
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
      if (result._tag === "Failure" && serverDown(result.failure)) state.serverDownSeenAt = now
      if (result._tag === "Success") {
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
              `if the presence session is gone too, other consumers will release this consumer's claims: ${result.failure.message}`
          )
        }
      }
      yield* Effect.sleep(keeper.heartbeatMs)
    }
  })
