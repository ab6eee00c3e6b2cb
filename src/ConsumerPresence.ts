/**
 * Session liveness: a dead consumer's claims come back in seconds, not after
 * their lease.
 *
 * Each consumer registers itself in `<schema>.consumers` and holds a
 * session-level advisory lock, `pg_advisory_lock(<schema class>, <lock key>)`,
 * on one dedicated connection (its *presence session*), and heartbeats its row
 * every 500 ms through a separate small pool. PostgreSQL frees the lock the
 * moment that session ends: the process died (SIGKILL, OOM), its socket was
 * closed, or the backend was terminated.
 *
 * A reaper runs in every consumer (no leader): every 500 ms it looks for
 * consumers whose heartbeat is older than `staleAfter` AND whose lock nobody
 * holds, and releases their live claims at once (visible now, counted as a
 * lease expiry). Both signals must agree:
 *
 * - a live consumer whose presence connection merely died keeps heartbeating
 *   through its other connection, and re-registers (a new session, a new lock);
 * - a live consumer whose event loop is blocked stops heartbeating, but its
 *   session, and so its lock, stays.
 *
 * Behind a transaction-mode pooler (PgBouncer `pool_mode=transaction`) a
 * session lock is not tied to the client: the presence session and its pool
 * use `LEASEHOLD_DIRECT_DATABASE_URL` when given (see `Pooler`); otherwise the
 * pooler is declared (`LEASEHOLD_POOLER=transaction`) or proven when a session
 * opens (another client connection is granted its lock), or liveness is turned
 * off (`off`), and then claims end by lease expiry only.
 *
 * The consumer uses this service when it is in context (`Effect.serviceOption`):
 * provide {@link layerPg} or {@link layerFromEnv} to the consumer, and
 * `PgQueueStore.layer` below both, so that presence takes its schema from the
 * store (one setting, `LEASEHOLD_SCHEMA`, for both).
 *
 * This module is the service (options, registration, layers). Its parts: the
 * statements in `pg/presence.ts` and `pg/reap.ts`; the presence session and the
 * pooler proof in `presence/session.ts` and `presence/poolerProof.ts`; the
 * heartbeats and the session keeper in `presence/keeper.ts`; the reaper and
 * forgetting old rows as maintenance tasks in `maintenance/`.
 *
 * @since 0.1.0
 */
import { PgClient } from "@effect/sql-pg"
import { Clock, Context, Deferred, type Duration, Effect, Layer, Option, type Scope } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import type { SqlClient } from "effect/sql"
import * as os from "node:os"
import { seconds } from "./internal/format.ts"
import { hash31 } from "./internal/hash.ts"
import * as Validate from "./internal/validate.ts"
import * as ForgetConsumers from "./maintenance/forgetConsumers.ts"
import * as Maintenance from "./maintenance/Maintenance.ts"
import * as Reaper from "./maintenance/reaper.ts"
import * as Migrations from "./Migrations.ts"
import * as PresenceSql from "./pg/presence.ts"
import * as Reap from "./pg/reap.ts"
import * as Pooler from "./Pooler.ts"
import * as Keeper from "./presence/keeper.ts"
import * as PoolerProof from "./presence/poolerProof.ts"
import * as Session from "./presence/session.ts"
import * as QueueConfig from "./QueueConfig.ts"
import { classify, ConfigInvalid, InvalidInput, type StoreError } from "./QueueError.ts"
import { StoreSettings } from "./StoreSettings.ts"

/**
 * `auto` (default): use session liveness when the connection holds session
 * locks reliably, otherwise warn and fall back to lease expiry. `on`: trust
 * the connection to be a direct (or session-mode pooled) one and skip the
 * pooler heuristics (the lock must still be granted and visible). `off`: no
 * registration, no lock, no reaper.
 */
export type Mode = "on" | "off" | "auto"

/** How to build the presence service. Durations as `Duration.Input` (milliseconds, "1 second", ...). */
export interface PresenceOptions {
  /**
   * Schema of leasehold's tables. Default: the schema of the PostgreSQL store
   * this layer is built on (`PgQueueStore.layer`), else `leasehold`. Given and
   * different from that store's, it is refused: consumers would register where
   * the store's claims are not, and the reaper would release nothing.
   */
  readonly schema?: string | undefined
  readonly mode?: Mode | undefined
  /** How often a consumer heartbeats its row and checks its presence session (default 500 ms). */
  readonly heartbeat?: Duration.Input | undefined
  /** A heartbeat older than this, with the lock free, means dead (default 2 s; at least 2 heartbeats). */
  readonly staleAfter?: Duration.Input | undefined
  /** How often each consumer's reaper looks for dead consumers (default 500 ms). */
  readonly reapEvery?: Duration.Input | undefined
  /** Rows whose heartbeat is older than this are deleted, whatever their lock (default 1 h). */
  readonly forgetAfter?: Duration.Input | undefined
  /** Run the migrations when the layer is built (default true). */
  readonly migrate?: boolean | undefined
}

/** Where session liveness stands for one registered consumer. */
export interface Status {
  readonly mode: Mode
  /**
   * `active`: the lock is held and a heartbeat that succeeded advertised its
   * key. `reconnecting`: the presence session is gone and being replaced, or
   * its new key is not advertised yet (heartbeats go on; the claims are
   * protected by their leases). `unavailable`: a pooler was detected; lease
   * expiry only. `off`: mode off.
   */
  readonly liveness: "active" | "reconnecting" | "unavailable" | "off"
  /** The backend holding the lock (while active). */
  readonly backendPid: number | null
  /**
   * The key the consumers row advertises, as written by the last heartbeat that
   * succeeded (null: the reaper never releases this consumer's claims).
   */
  readonly lockKey: number | null
  /** Presence sessions established so far (1 after the first registration). */
  readonly sessions: number
}

/** A registered consumer. The registration ends with the scope it was made in. */
export interface Registration {
  readonly consumerId: string
  readonly status: Effect.Effect<Status>
  /** Completes the next time this consumer's reaper released claims: an idle consumer wakes to take them. */
  readonly reaped: Effect.Effect<void>
  /**
   * When another consumer's reaper could release this consumer's claims (Clock
   * ms), or none while that cannot happen: the lock its row advertises may be
   * free (the presence session is gone, or a new one's key is not yet written
   * by a heartbeat) and heartbeats stopped succeeding, so at the last
   * successful heartbeat + the stale bound both signals agree. The consumer stops its
   * handlers before then, so a consumer cut off from the database does not
   * run on while another runs its messages. A heartbeat refused because the
   * server itself is down moves that moment on: nobody can reap while the server
   * is down, and reapers wait the stale bound after it starts.
   */
  readonly reapableAt: Effect.Effect<Option.Option<number>>
}

/** One claim released by the reaper (the statement: `pg/reap.ts`). */
export type { Reaped } from "./pg/reap.ts"

/** The presence service. */
export interface ConsumerPresenceShape {
  readonly mode: Mode
  /**
   * Register `consumerId` for the life of the current scope: the consumers row,
   * the presence session and its lock, heartbeats, re-registration when the
   * session dies, and this consumer's reaper. Never fails: without the database
   * it keeps trying in the background and the consumer runs on lease expiry.
   * Closing the scope deletes the row and ends the session. `settings` (its queues,
   * concurrency, lease) go in the row for operators (the dashboard's consumers page).
   */
  readonly register: (consumerId: string, settings?: PresenceSql.ConsumerSettings) => Effect.Effect<Registration, never, Scope.Scope>
  /**
   * One reaper sweep now, as consumer `self` (never reaped by itself): release
   * the claims of every dead consumer and forget it. For tests and operators.
   */
  readonly sweep: (self: string) => Effect.Effect<ReadonlyArray<Reap.Reaped>, StoreError>
  /**
   * The registration of `consumerId` while it lasts (none before `register`
   * returned and after its scope closed). Read by `Http`'s `/readyz`. Optional
   * so that a stand-in built for a test need not provide it.
   */
  readonly registration?: ((consumerId: string) => Effect.Effect<Option.Option<Registration>>) | undefined
}

/** The presence service; the consumer uses it when present. */
export class ConsumerPresence extends Context.Service<ConsumerPresence, ConsumerPresenceShape>()("leasehold/ConsumerPresence") {}

/** The environment variable that turns session liveness on, off or auto. */
export const variables = Keeper.variables

/** The defaults, in milliseconds. */
export const defaults = {
  heartbeatMs: 500,
  staleAfterMs: 2_000,
  reapEveryMs: 500,
  forgetAfterMs: 3_600_000
} as const

/** A registered consumer as an operator sees it, and the list of them (the statement: `pg/presence.ts`). */
export { type ConsumerInfo, type ConsumerSettings, listConsumers } from "./pg/presence.ts"

/**
 * The first key of every presence lock: a hash of the schema, so leasehold
 * installations in different schemas of one database never see each other's
 * locks. Positive, so it reads the same in `pg_locks.classid` (an oid).
 */
export const classKey = (schema: string): number => hash31(`leasehold.presence.${schema}`)

const offRegistration = (consumerId: string): Registration => ({
  consumerId,
  status: Effect.succeed({ mode: "off", liveness: "off", backendPid: null, lockKey: null, sessions: 0 }),
  reaped: Effect.never,
  reapableAt: Effect.succeed(Option.none())
})

/**
 * One source of truth for the schema: the store's, when presence sits on a
 * `PgQueueStore.layer`; a different explicit one is refused.
 */
const resolveSchema = (explicit: string | undefined): Effect.Effect<string, InvalidInput> =>
  Effect.gen(function*() {
    const store = yield* Effect.serviceOption(StoreSettings)
    if (Option.isNone(store)) return yield* Validate.schemaName(explicit ?? Migrations.defaultSchema)
    if (explicit === undefined) return store.value.schema
    const schema = yield* Validate.schemaName(explicit)
    if (schema !== store.value.schema) {
      return yield* new InvalidInput({
        field: "schema",
        rule: "the schema of the store",
        message: `session liveness schema ${JSON.stringify(schema)} is not the store's ${JSON.stringify(store.value.schema)}: ` +
          "consumers would register where the store's claims are not, and the reaper would release nothing. " +
          "Leave the presence schema unset to use the store's."
      })
    }
    return schema
  })

/**
 * Before taking over a consumer id, see whether a consumer that looks alive has it: a
 * fresh heartbeat and its presence lock held by a live session (or no lock advertised).
 * Two consumers with one id share one row, each overwriting the other's lock key, and
 * the reaper's view of both is wrong: WARN, naming who has it. Best effort: a failed
 * check says nothing.
 */
const warnIfAlive = (ctx: PresenceSql.PresenceContext, consumerId: string): Effect.Effect<void> =>
  PresenceSql.liveOwner(ctx, consumerId).pipe(
    Effect.flatMap((row) =>
      row === undefined || (row.lock_key !== null && !row.lock_held)
        ? Effect.void
        : Effect.logWarning(
          `consumer id "${consumerId}" is already registered by a consumer that looks alive: host ${row.host}, ` +
            `pid ${row.pid}, heartbeat ${seconds(Math.max(row.age_ms, 0))} ago` +
            (row.lock_held ? `, presence lock held by backend ${row.backend_pid ?? "?"}` : "") +
            ". Two consumers with one id share one presence row and confuse the reaper: give each its own " +
            "LEASEHOLD_CONSUMER_ID (this one starts anyway)"
        )
    ),
    Effect.timeoutOption(5_000),
    Effect.ignore
  )

/**
 * Build the presence service over the `PgClient` in context: a one-connection
 * pool of its own for heartbeats and the reaper (so busy handlers cannot starve
 * heartbeats), and one dedicated connection per registered consumer.
 */
export const make = (
  options: PresenceOptions = {}
): Effect.Effect<ConsumerPresenceShape, InvalidInput | StoreError, PgClient.PgClient | SqlClient.SqlClient | Scope.Scope> =>
  Effect.gen(function*() {
    const mode = options.mode ?? "auto"
    if (mode !== "on" && mode !== "off" && mode !== "auto") {
      return yield* new InvalidInput({ field: "mode", rule: "on, off or auto", message: `mode ${String(mode)} is invalid (rule: on, off or auto)` })
    }
    const schema = yield* resolveSchema(options.schema)
    const duration = (field: string, value: Duration.Input | undefined, fallback: number) =>
      value === undefined ? Effect.succeed(fallback) : Validate.durationMs(field, value, { min: 10 })
    const heartbeatMs = yield* duration("heartbeat", options.heartbeat, defaults.heartbeatMs)
    const staleMs = yield* duration("staleAfter", options.staleAfter, defaults.staleAfterMs)
    const reapMs = yield* duration("reapEvery", options.reapEvery, defaults.reapEveryMs)
    const forgetMs = yield* duration("forgetAfter", options.forgetAfter, defaults.forgetAfterMs)
    if (staleMs < 2 * heartbeatMs) {
      return yield* new InvalidInput({
        field: "staleAfter",
        rule: "at least two heartbeats",
        message: `staleAfter ${staleMs} ms is under two heartbeats of ${heartbeatMs} ms: one late heartbeat would look like death`
      })
    }
    if (forgetMs < staleMs) {
      return yield* new InvalidInput({ field: "forgetAfter", rule: "at least staleAfter", message: `forgetAfter ${forgetMs} ms is under staleAfter ${staleMs} ms` })
    }
    if (mode === "off") {
      return ConsumerPresence.of({
        mode,
        register: (id) => Effect.succeed(offRegistration(id)),
        sweep: () => Effect.succeed([]),
        registration: (id) => Effect.succeed(Option.some(offRegistration(id)))
      })
    }

    const main = yield* PgClient.PgClient
    if (options.migrate ?? true) yield* Migrations.run({ schema })
    const appName = main.config.applicationName ?? "leasehold"
    const where = yield* PoolerProof.target(main.config)
    const base = where.base
    // Heartbeats and sweeps: short statements, bounded by a statement_timeout (through a pooler,
    // which refuses startup parameters, by their own timeouts).
    const pool = yield* PgClient.make({
      ...base,
      maxConnections: 1,
      minConnections: 0,
      applicationName: `${appName}-presence-pool`,
      keepAlive: base.keepAlive ?? "10 seconds",
      startupParameters: Pooler.startupParameters(where.mode, base.startupParameters, { statement_timeout: String(Math.max(staleMs, 5_000)) })
    }).pipe(Effect.provide(Reactivity.layer), classify("connect presence pool"))
    const ctx = PresenceSql.makeContext(pool.withoutTransforms(), schema, classKey(schema), staleMs)
    const host = os.hostname().slice(0, 255)
    const openSession = Session.open({ ctx, where, appName, mode })

    /** The registrations in force, by consumer id (what `registration` reads). */
    const registered = new Map<string, Registration>()

    const register = (consumerId: string, settings?: PresenceSql.ConsumerSettings): Effect.Effect<Registration, never, Scope.Scope> =>
      Effect.gen(function*() {
        const state: Keeper.State = {
          liveness: "reconnecting",
          session: undefined,
          lockKey: null,
          backendPid: null,
          sessions: 0,
          heartbeatOkAt: yield* Clock.currentTimeMillis,
          advertisedKey: null,
          serverDownSeenAt: 0
        }
        let reapedSignal = Deferred.makeUnsafe<void>()
        const keeper: Keeper.Keeper = {
          ctx,
          state,
          heartbeatMs,
          openSession,
          heartbeatOnce: Keeper.heartbeatOnce(ctx, state, { id: consumerId, host, pid: process.pid, settings })
        }
        const annotate = Effect.annotateLogs({ module: "ConsumerPresence", consumer: consumerId })

        // Runs last, after the fibers below are stopped: leave the table, end the session.
        yield* Effect.addFinalizer(() =>
          Effect.gen(function*() {
            yield* PresenceSql.leave(ctx, consumerId).pipe(
              Effect.timeoutOption(5_000),
              Effect.catchCause(() => Effect.logWarning("could not delete the consumers row on shutdown; it will be forgotten"))
            )
            const session = state.session
            state.session = undefined
            if (session !== undefined) yield* Session.close(session)
          }).pipe(annotate)
        )
        yield* warnIfAlive(ctx, consumerId).pipe(annotate)
        const firstAttempt = yield* Deferred.make<void>()
        yield* Effect.forkScoped(Maintenance.forever("presence session", Keeper.supervise(keeper, firstAttempt)).pipe(annotate))
        // Wait for the first session (bounded), so the consumer claims with its lock advertised.
        yield* Deferred.await(firstAttempt).pipe(Effect.timeoutOption(15_000))
        yield* Effect.forkScoped(Maintenance.forever("heartbeat", Keeper.heartbeats(keeper)).pipe(annotate))
        const onReleased = Effect.suspend(() => {
          const signal = reapedSignal
          reapedSignal = Deferred.makeUnsafe<void>()
          return Deferred.succeed(signal, undefined)
        })
        yield* Maintenance.fork(Reaper.make({ ctx, self: consumerId, reapMs, onReleased })).pipe(annotate)
        yield* Maintenance.fork(ForgetConsumers.make({ ctx, self: consumerId, reapMs, forgetMs })).pipe(annotate)
        return {
          consumerId,
          status: Effect.sync(() => ({
            mode,
            liveness: state.liveness,
            backendPid: state.backendPid,
            lockKey: state.advertisedKey,
            sessions: state.sessions
          })),
          reaped: Effect.suspend(() => Deferred.await(reapedSignal)),
          reapableAt: Effect.sync(() =>
            // Safe while the row advertises no key (the reaper never releases us), or the key of the
            // session we hold (active). Otherwise the row names a lock that may be free: reapable once
            // the last heartbeat that succeeded is stale.
            state.advertisedKey === null || (state.liveness === "active" && state.session?.lockKey === state.advertisedKey)
              ? Option.none()
              : Option.some(Math.max(state.heartbeatOkAt, state.serverDownSeenAt) + staleMs)
          )
        } satisfies Registration
      }).pipe(Effect.tap((registration) =>
        Effect.andThen(
          Effect.sync(() => registered.set(consumerId, registration)),
          Effect.addFinalizer(() => Effect.sync(() => registered.delete(consumerId)))
        )
      ))

    return ConsumerPresence.of({
      mode,
      register,
      sweep: (self) => Reap.sweep(ctx, self),
      registration: (consumerId) => Effect.sync(() => Option.fromUndefinedOr(registered.get(consumerId)))
    })
  })

/** Session liveness over the `PgClient` in context (see {@link make}). */
export const layerPg = (
  options: PresenceOptions = {}
): Layer.Layer<ConsumerPresence, InvalidInput | StoreError, PgClient.PgClient | SqlClient.SqlClient> =>
  Layer.effect(ConsumerPresence, make(options))

/** The mode from `LEASEHOLD_SESSION_LIVENESS` (on, off or auto; default auto): `QueueConfig.presenceModeFromEnv`. */
export const modeFromEnv: Effect.Effect<Mode, ConfigInvalid> = QueueConfig.presenceModeFromEnv

/**
 * {@link layerPg} with the mode from `LEASEHOLD_SESSION_LIVENESS`. The schema
 * is the store's when built on `PgQueueStore.layer` (which reads
 * `LEASEHOLD_SCHEMA` itself), else `LEASEHOLD_SCHEMA`.
 */
export const layerFromEnv = (
  options: Omit<PresenceOptions, "mode" | "schema"> = {}
): Layer.Layer<ConsumerPresence, InvalidInput | StoreError | ConfigInvalid, PgClient.PgClient | SqlClient.SqlClient> =>
  Layer.unwrap(Effect.gen(function*() {
    const mode = yield* modeFromEnv
    const store = yield* Effect.serviceOption(StoreSettings)
    const fromEnv = yield* QueueConfig.schemaFromEnv
    if (Option.isNone(store)) return layerPg({ ...options, mode, schema: fromEnv })
    // On a store, its schema rules (the store read LEASEHOLD_SCHEMA itself unless given one).
    if (fromEnv !== undefined && fromEnv !== store.value.schema) {
      yield* Effect.logWarning(
        `${QueueConfig.variables.schema}=${fromEnv} is not the store's schema ${store.value.schema}: ` +
          "session liveness uses the store's, where its claims are"
      )
    }
    return layerPg({ ...options, mode })
  }))
