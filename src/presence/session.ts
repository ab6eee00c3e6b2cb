/**
 * A presence session: one dedicated connection per registered consumer, holding
 * a session-level advisory lock whose end (the process died, the socket closed,
 * the backend was terminated) frees the lock at once. Opened here, proven to be
 * its own by `poolerProof.ts`.
 *
 * @since 0.1.0
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import { Clock, Effect, Exit, Scope } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import type { SqlClient } from "effect/sql"
import * as PresenceSql from "../pg/presence.ts"
import * as Pooler from "../Pooler.ts"
import * as QueueConfig from "../QueueConfig.ts"
import { classify, QueryFailed, type StoreError } from "../QueueError.ts"
import * as PoolerProof from "./poolerProof.ts"

/** A presence session: one dedicated connection holding the lock. */
export interface Session {
  readonly scope: Scope.Closeable
  readonly sql: SqlClient.SqlClient
  readonly backendPid: number
  readonly lockKey: number
  /**
   * Clock ms by which the lock was granted (the answer to the statement taking it was in):
   * the key is held by this session from then on, while it lives.
   */
  readonly grantedBy: number
  /** Clock ms at which the lock was last shown held on the server (the lock check's send time, or later). */
  readonly heldAt: number
}

/** No session to be had: a pooler is in the way (lease expiry only). */
export interface PoolerFound {
  readonly _tag: "Pooler"
  readonly detail: string
}

/**
 * The key to join was refused, try after try: a reaper holds it exclusively (it found every
 * session of this consumer gone, and is releasing its claims). The caller takes a fresh key.
 */
export interface KeyRefused {
  readonly _tag: "KeyRefused"
  readonly key: number
}

/** How often a refused key is asked for again, and how long apart (a reaper's probe holds it for one statement). */
const JOIN_TRIES = 5
const JOIN_PAUSE_MS = 20

/**
 * Open a presence session: connect, take the consumer's lock in shared mode (on `key`,
 * which its other session holds, or a fresh key), and check that the lock really belongs
 * to this connection's backend (see `poolerProof.ts`). Joining a key is the quick check
 * (two statements): a session of this consumer on the same target already passed the
 * whole proof; a fresh key gets the whole proof.
 */
export const open = (options: {
  readonly ctx: PresenceSql.PresenceContext
  readonly where: PoolerProof.Target
  readonly appName: string
  readonly mode: "on" | "auto"
  readonly key?: number | undefined
}): Effect.Effect<Session | PoolerFound | KeyRefused, StoreError> =>
  Effect.gen(function*() {
    const { ctx, where } = options
    if (where.target._tag === "None") {
      return {
        _tag: "Pooler" as const,
        detail: `${QueueConfig.connectionVariables.pooler}=transaction and no ${QueueConfig.connectionVariables.directDatabaseUrl} ` +
          "to hold a session on"
      }
    }
    const base = where.base
    const scope = yield* Scope.make()
    const attempt = Effect.gen(function*() {
      const client = yield* PgClient.makeClient({
        ...base,
        applicationName: `${options.appName}-presence`,
        keepAlive: base.keepAlive ?? "10 seconds",
        connectTimeout: base.connectTimeout ?? "10 seconds",
        startupParameters: Pooler.startupParameters(where.mode, base.startupParameters, { statement_timeout: "5000" })
      }).pipe(Effect.provide(Reactivity.layer), Scope.provide(scope))
      const session = client.withoutTransforms()
      const key = options.key
      for (let i = 0; i < (key === undefined ? 3 : JOIN_TRIES); i++) {
        const lock = yield* PresenceSql.takeLock(ctx, session, key)
        const grantedBy = yield* Clock.currentTimeMillis
        if (lock === undefined) break
        if (!lock.locked) {
          // A fresh key: the sequence wrapped onto a key still held, take the next. A key to
          // join: a reaper holds it for a statement (a probe) or is releasing us: ask again.
          if (key !== undefined) yield* Effect.sleep(JOIN_PAUSE_MS)
          continue
        }
        const heldAt = yield* Clock.currentTimeMillis
        const problem = yield* PoolerProof.prove(ctx, session, lock, options.mode, key !== undefined)
        if (problem !== undefined) {
          // Wherever the lock landed, give it back (best effort; the key is never advertised).
          yield* PresenceSql.unlock(ctx, session, lock.key).pipe(Effect.ignore)
          return { _tag: "Pooler" as const, detail: problem }
        }
        // Proven its own backend (never a pooler's, which would keep the setting): it notices this
        // client's death within PresenceSql.CLIENT_CHECK_MS, even mid-probe. Best effort: a server
        // without the setting frees the lock when the probe ends instead.
        yield* PresenceSql.checkClientConnection(session).pipe(
          classify("presence client check"),
          Effect.catch((e) => Effect.logDebug(`presence session without the client check (its lock frees when a probe ends): ${e.message}`))
        )
        return { scope, sql: session, backendPid: lock.pid, lockKey: lock.key, grantedBy, heldAt } satisfies Session
      }
      if (key !== undefined) return { _tag: "KeyRefused" as const, key }
      return yield* new QueryFailed({ operation: "register", message: "register: no free presence lock key in 3 tries" })
    }).pipe(classify("register"))
    return yield* attempt.pipe(
      Effect.onExit((exit) => Exit.isSuccess(exit) && !("_tag" in exit.value) ? Effect.void : Scope.close(scope, Exit.void))
    )
  })

/** End a session (bounded: a dead connection does not hold up the caller). */
export const close = (session: Session): Effect.Effect<void> =>
  Scope.close(session.scope, Exit.void).pipe(Effect.timeoutOption(5_000), Effect.asVoid)
