/**
 * The pooler proof: is a presence session's lock its own? A session-level
 * advisory lock proves a consumer alive only when it is tied to one client
 * connection; behind a transaction-mode pooler (PgBouncer `pool_mode=transaction`)
 * the backend holding it is shared between clients. The proof shows such a
 * pooler as a backend pid that changes between statements, a lock this backend
 * does not hold, a lock another client connection is granted too
 * ({@link sharedBackend}), or (`auto` only) a backend far older than the
 * connection just opened. Where the session connects at all: {@link target}.
 *
 * @since 0.1.0
 */
import type { PgClient } from "@effect/sql-pg"
import { Effect, Option } from "effect"
import type { SqlClient } from "effect/sql"
import { seconds } from "../internal/format.ts"
import * as PresenceSql from "../pg/presence.ts"
import * as Probe from "../pg/probe.ts"
import * as Pooler from "../Pooler.ts"

/** A backend older than this at our first statement was not started for us: a pooler's connection. */
export const POOLED_BACKEND_AGE_MS = 10_000

/** Where presence connects: its session and its pool. */
export interface Target {
  /** Where the session goes; none through a transaction-mode pooler without a direct URL. */
  readonly target: Option.Option<Pooler.SessionTarget>
  /** The connection settings of the presence pool and sessions. */
  readonly base: PgClient.PgClientConfig
  /** What is between them and PostgreSQL. */
  readonly mode: Pooler.Mode
}

/**
 * Presence needs a session: the direct URL when given, else the main one (none through a
 * transaction-mode pooler: then every registration falls back to lease expiry).
 */
export const target = (main: PgClient.PgClientConfig): Effect.Effect<Target> =>
  Effect.map(Pooler.sessionTarget(main), (target) => ({
    target,
    base: Option.match(target, { onNone: () => main, onSome: (t) => t.config }),
    mode: Option.match(target, { onNone: () => "transaction" as const, onSome: (t) => t.mode })
  }))

/**
 * The proof of a transaction-mode pooler: another client connection (the presence pool's)
 * can take the lock this session was just granted. Directly, or through a session-mode
 * pooler, every client connection has a backend of its own, and a session lock held by
 * another backend is refused to it. Through a transaction-mode pooler, the session's backend
 * goes back to the pool after each statement, and the next client to run a statement may
 * get it, with the lock: re-entrant, granted. PgBouncer hands out the backend used last
 * first (LIFO), so a statement on the session right before the probe puts that backend on
 * top; three tries, in case another client took it in between. Whatever the probe took, it
 * gives back in the same statement (one statement runs on one backend). A failed probe
 * proves nothing (undefined).
 */
export const sharedBackend = (
  ctx: PresenceSql.PresenceContext,
  session: SqlClient.SqlClient,
  pid: number,
  key: number
): Effect.Effect<string | undefined> =>
  Effect.gen(function*() {
    for (let i = 0; i < 3; i++) {
      yield* Probe.ping(session)
      const probe = yield* PresenceSql.tryTakeOver(ctx, key)
      if (probe?.got === true) {
        return probe.pid === pid
          ? `backend ${pid}, holding this session's lock, answered another client connection and granted it the lock too: ` +
            "backends are shared between clients (transaction pooling)"
          : `another client connection took the lock this session was just granted (backend ${probe.pid}, not ${pid})`
      }
    }
    return undefined
  }).pipe(Effect.catch(() => Effect.succeed(undefined)))

/**
 * What the two statements on the session say (the lock taken, then the lock check), or
 * undefined when they agree that this backend holds the lock.
 */
export const checkProblem = (
  lock: { readonly pid: number },
  check: { readonly pid: number; readonly held: boolean } | undefined
): string | undefined =>
  check === undefined
    ? "no answer to the lock check"
    : check.pid !== lock.pid
    ? `the backend changed between two statements (${lock.pid} then ${check.pid})`
    : !check.held
    ? `backend ${lock.pid} does not show the lock it was just granted`
    : undefined

/** In `auto` mode, a backend started long before our first statement: a pooler's. */
export const ageProblem = (mode: "on" | "auto", lock: PresenceSql.LockTaken): string | undefined =>
  mode === "auto" && lock.age_ms !== null && lock.age_ms > POOLED_BACKEND_AGE_MS
    ? `backend ${lock.pid} started ${seconds(lock.age_ms)} before this new connection's first statement`
    : undefined

/**
 * The proof for a session just granted `lock`: undefined when the lock is this session's
 * own, else what shows a pooler. Never fails on a failed probe (that proves nothing); fails
 * when the lock check itself cannot be asked. A session `joining` the key of another session
 * of the same consumer (same target, already proven) skips the shared-backend probe (several
 * statements on the presence pool, behind its sweeps): it is replacing a lost session, and
 * the sooner it holds the key the less the consumer is exposed.
 */
export const prove = (
  ctx: PresenceSql.PresenceContext,
  session: SqlClient.SqlClient,
  lock: PresenceSql.LockTaken,
  mode: "on" | "auto",
  joining = false
) =>
  Effect.gen(function*() {
    const check = yield* PresenceSql.lockShown(ctx, session, lock.key)
    const problem = checkProblem(lock, check)
    if (problem !== undefined || joining) return problem ?? ageProblem(mode, lock)
    return (yield* sharedBackend(ctx, session, lock.pid, lock.key)) ?? ageProblem(mode, lock)
  })
