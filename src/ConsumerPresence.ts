/**
 * Session liveness: a dead consumer's claims come back in seconds, not after
 * their lease.
 *
 * Each consumer registers itself in `<schema>.consumers` and holds its presence
 * lock, the session-level advisory lock `(<schema class>, <lock key>)`, in shared
 * mode on two dedicated connections (its *presence sessions*, `presence/keeper.ts`),
 * and heartbeats its row every 500 ms through a separate small pool (for operators
 * and the duplicate-id check: heartbeats decide nothing about death). PostgreSQL
 * frees a session's hold the moment that session ends: the process died (SIGKILL,
 * OOM: the kernel closes its sockets, its backends end at once), its socket was
 * closed, or the backend was terminated. A presence backend checks its client's
 * socket every 25 ms even mid-probe (`PresenceSql.checkClientConnection`), so a dead
 * process's lock is free within that.
 *
 * A reaper runs in every consumer (no leader): every `reapEvery` (100 ms) it probes
 * the other consumers' keys with an exclusive `pg_try_advisory_xact_lock`, granted
 * only when no session holds the key, and releases the live claims of a consumer whose
 * lock it has seen free on a look and again `reapAfter` (300 ms) or more later, with
 * no look between finding it held (visible now, counted as a lease expiry, its queue
 * announced so that every idle consumer of it wakes). Why that never reaps a live
 * consumer (what protects it is its sessions on the server; `reapAfter` is only the
 * time it gets when it lost both at once):
 *
 * - a blocked event loop (or SIGSTOP) stops the process, not its sessions: the kernel
 *   keeps the sockets and the server keeps the backends, so the lock stays held;
 * - a slow network ends no session either, and the lock is judged on the server;
 * - a consumer advertises its key, and claims, only once both sessions hold it:
 *   with one, that one's loss alone would free the key;
 * - one presence backend terminated (chaos does it every ~2 s) leaves the other
 *   holding the key; the consumer probes each session every 100 ms and replaces a
 *   dead one at once, joining the same key (shared holds do not conflict), so nothing
 *   needs advertising and the key is never free;
 * - both terminated at once look, from the server, exactly like death: nothing can
 *   tell them apart at that instant, so the rule gives the consumer `reapAfter` from
 *   the moment its lock went free (no reaper's first look comes earlier) to hold it
 *   again, which takes a probe and a connect; if it cannot, its presence watch stops
 *   its handlers a margin before any reaper can release them (`reapableAt`), so no
 *   message runs in two places;
 * - a server restart ends every session: reapers release nothing within the stale
 *   bound of the server's start, and everybody reconnects meanwhile;
 * - a reaper's own network blip frees nobody's lock, so unlike a heartbeat window
 *   there is no reason for a reaper to wait until it has been healthy for a while:
 *   a failed look only drops its suspects, and a fresh reaper (a worker started
 *   right after another died) releases as fast as an old one.
 *
 * Behind a transaction-mode pooler (PgBouncer `pool_mode=transaction`) a
 * session lock is not tied to the client: the presence session and its pool
 * use `LEASEHOLD_DIRECT_DATABASE_URL` when given (see `Pooler`); otherwise the
 * pooler is declared (`LEASEHOLD_POOLER=transaction`) or proven when a session
 * opens (another client connection is granted its lock), or liveness is turned
 * off (`off`), and then claims end by lease expiry only. Through a session-mode
 * pooler each client connection keeps its server session, and the pooler's reset
 * (`DISCARD ALL`) frees a closed client's holds: the probe works as directly.
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
import * as PgClient from "@effect/sql-pg/PgClient"
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
  /**
   * A heartbeat older than this marks a consumer id as free to take over (no warning), and
   * after a server start reapers release nothing for this long (default 2 s; at least 2
   * heartbeats). It no longer decides death: the presence lock does (see `reapAfter`).
   */
  readonly staleAfter?: Duration.Input | undefined
  /** How often each consumer's reaper probes the other consumers' presence locks (default 100 ms). */
  readonly reapEvery?: Duration.Input | undefined
  /**
   * A consumer whose presence lock a reaper has seen free for this long (on its first look
   * and on one at least this much later) is dead, and its claims are released (default
   * 300 ms; at least `reapEvery`). A live consumer that lost every presence session at once
   * has this long to hold its lock again; it stops its handlers first if it cannot.
   */
  readonly reapAfter?: Duration.Input | undefined
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
   * ms), or none while that cannot happen (a session holding the key its row
   * advertises is held). Once every such session is found gone, the lock may be
   * free since just after a session holding it last answered, and a reaper needs
   * it free for `reapAfter`: that moment + `reapAfter`. The consumer stops its
   * handlers before then, so a consumer cut off from the database does not
   * run on while another runs its messages. A refusal because the server itself
   * is down moves that moment on: nobody can reap while the server is down, and
   * reapers wait the stale bound after it starts.
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
   * session dies, and this consumer's reaper. Returns once both presence sessions
   * hold the key and the row advertises it (so the consumer claims nothing before),
   * at the latest after 15 s. Never fails: without the database it keeps trying in
   * the background and the consumer runs on lease expiry (no key advertised).
   * Closing the scope deletes the row and ends the session. `settings` (its queues,
   * concurrency, lease) go in the row for operators (the dashboard's consumers page).
   */
  readonly register: (consumerId: string, settings?: PresenceSql.ConsumerSettings) => Effect.Effect<Registration, never, Scope.Scope>
  /**
   * One reaper sweep now, as consumer `self` (never reaped by itself): release
   * the claims of every consumer whose presence lock is free at this one look
   * (no `reapAfter` wait: the caller vouches that the time has passed) and
   * forget it. For tests and operators.
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
  reapEveryMs: 100,
  reapAfterMs: 300,
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
 * When another consumer's reaper could release this consumer's claims (see
 * `Registration.reapableAt`): none while the row advertises no key, or while a session
 * holding the advertised key is held; else a reaper that saw that key free at the earliest
 * right after it was last known held (`aliveAt`) releases after `reapAfter`, and none
 * releases within the stale bound of a server start (a refusal seen at `serverDownSeenAt`
 * means the server starts after it). A session regained too late keeps the moment a while
 * (`State.exposure`), so the presence watch stops what may have been released.
 */
const reapableAt = (state: Keeper.State, now: number, reapAfterMs: number, staleMs: number): Option.Option<number> => {
  const exposure = state.exposure
  if (exposure !== undefined && exposure.until !== Infinity && now >= exposure.until) state.exposure = undefined
  if (state.exposure === undefined && (state.advertisedKey === null || state.held.some((h) => h.session.lockKey === state.advertisedKey))) {
    return Option.none()
  }
  const byLock = state.exposure?.at ?? state.aliveAt + reapAfterMs
  // A refusal seen before a reaper could act on the lock means the server went down first:
  // nobody released before it, and nobody releases within the stale bound of its start.
  // Seen later, it proves nothing about the time between.
  const first = state.serverDownFirstAt
  return Option.some(first > state.aliveAt && first <= byLock ? Math.max(byLock, state.serverDownSeenAt + staleMs) : byLock)
}

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
    const reapAfterMs = yield* duration("reapAfter", options.reapAfter, Math.max(defaults.reapAfterMs, reapMs))
    if (reapAfterMs < reapMs) {
      return yield* new InvalidInput({
        field: "reapAfter",
        rule: "at least reapEvery",
        message: `reapAfter ${reapAfterMs} ms is under reapEvery ${reapMs} ms: a lock must be seen free on two looks`
      })
    }
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
    const openSession = (key: number | undefined) => Session.open({ ctx, where, appName, mode, key })

    /** The registrations in force, by consumer id (what `registration` reads). */
    const registered = new Map<string, Registration>()

    const register = (consumerId: string, settings?: PresenceSql.ConsumerSettings): Effect.Effect<Registration, never, Scope.Scope> =>
      Effect.gen(function*() {
        const startedAt = yield* Clock.currentTimeMillis
        const state: Keeper.State = {
          liveness: "reconnecting",
          held: [],
          lockKey: null,
          backendPid: null,
          sessions: 0,
          heartbeatOkAt: startedAt,
          advertisedKey: null,
          aliveAt: startedAt,
          serverDownSeenAt: 0,
          serverDownFirstAt: 0,
          exposure: undefined
        }
        let reapedSignal = Deferred.makeUnsafe<void>()
        const keeper: Keeper.Keeper = {
          ctx,
          state,
          heartbeatMs,
          probeMs: Math.max(25, Math.min(heartbeatMs, Math.floor(reapAfterMs / 3))),
          reapAfterMs,
          openSession: (key) => openSession(key ?? undefined),
          heartbeatOnce: Keeper.heartbeatOnce(ctx, state, { id: consumerId, host, pid: process.pid, settings }),
          ready: yield* Deferred.make<void>()
        }
        const annotate = Effect.annotateLogs({ module: "ConsumerPresence", consumer: consumerId })

        // Runs last, after the fibers below are stopped: leave the table, end the session.
        yield* Effect.addFinalizer(() =>
          Effect.gen(function*() {
            yield* PresenceSql.leave(ctx, consumerId).pipe(
              Effect.timeoutOption(5_000),
              Effect.catchCause(() => Effect.logWarning("could not delete the consumers row on shutdown; it will be forgotten"))
            )
            for (const held of state.held.splice(0)) yield* Session.close(held.session)
          }).pipe(annotate)
        )
        yield* warnIfAlive(ctx, consumerId).pipe(annotate)
        yield* Effect.forkScoped(Maintenance.forever("presence session", Keeper.supervise(keeper)).pipe(annotate))
        yield* Effect.forkScoped(Maintenance.forever("heartbeat", Keeper.heartbeats(keeper)).pipe(annotate))
        // The consumer claims once both presence sessions hold its key and the row advertises
        // it: with one, losing it would leave nothing holding the key (see `Keeper.ready`).
        yield* Keeper.awaitReady(keeper).pipe(annotate)
        const onReleased = Effect.suspend(() => {
          const signal = reapedSignal
          reapedSignal = Deferred.makeUnsafe<void>()
          return Deferred.succeed(signal, undefined)
        })
        yield* Maintenance.fork(Reaper.make({ ctx, self: consumerId, reapMs, reapAfterMs, onReleased })).pipe(annotate)
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
          reapableAt: Effect.map(Clock.currentTimeMillis, (now) => reapableAt(state, now, reapAfterMs, staleMs))
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
