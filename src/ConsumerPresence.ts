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
 * @since 0.1.0
 */
import { PgClient } from "@effect/sql-pg"
import { Cause, Clock, Config, Context, Deferred, type Duration, Effect, Exit, Layer, Metric, Option, Scope } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import { SqlClient } from "effect/sql"
import * as os from "node:os"
import { hash31 } from "./internal/hash.ts"
import * as Validate from "./internal/validate.ts"
import * as Migrations from "./Migrations.ts"
import * as Pooler from "./Pooler.ts"
import { StoreSettings } from "./StoreSettings.ts"
import * as QueueConfig from "./QueueConfig.ts"
import { classify, ConfigInvalid, InvalidInput, QueryFailed, type StoreError } from "./QueueError.ts"
import * as QueueMetrics from "./QueueMetrics.ts"
import { seconds } from "./internal/format.ts"

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

/** One claim released by the reaper. */
export interface Reaped {
  /** The dead consumer. */
  readonly consumer: string
  readonly host: string
  readonly pid: number
  readonly heartbeatAt: Date
  /** The released message, absent when the dead consumer held nothing. */
  readonly messageId: string | null
  readonly queue: string | null
}

/** The presence service. */
export interface ConsumerPresenceShape {
  readonly mode: Mode
  /**
   * Register `consumerId` for the life of the current scope: the consumers row,
   * the presence session and its lock, heartbeats, re-registration when the
   * session dies, and this consumer's reaper. Never fails: without the database
   * it keeps trying in the background and the consumer runs on lease expiry.
   * Closing the scope deletes the row and ends the session.
   */
  readonly register: (consumerId: string) => Effect.Effect<Registration, never, Scope.Scope>
  /**
   * One reaper sweep now, as consumer `self` (never reaped by itself): release
   * the claims of every dead consumer and forget it. For tests and operators.
   */
  readonly sweep: (self: string) => Effect.Effect<ReadonlyArray<Reaped>, StoreError>
  /**
   * The registration of `consumerId` while it lasts (none before `register`
   * returned and after its scope closed). Read by `Http`'s `/readyz`. Optional
   * so that a stand-in built for a test need not provide it.
   */
  readonly registration?: ((consumerId: string) => Effect.Effect<Option.Option<Registration>>) | undefined
}

/**
 * A failure that proves the server itself is down for everyone (not that this
 * consumer is cut off): nothing listening, or PostgreSQL starting or shutting down.
 * A terminated backend (57P01) proves nothing: one session can be killed alone.
 */
const serverDown = (error: StoreError): boolean =>
  error._tag === "ConnectionDead" && (error.code === "ECONNREFUSED" || error.code === "57P03")

/** The presence service; the consumer uses it when present. */
export class ConsumerPresence extends Context.Service<ConsumerPresence, ConsumerPresenceShape>()("leasehold/ConsumerPresence") {}

/** The environment variable that turns session liveness on, off or auto. */
export const variables = { sessionLiveness: "LEASEHOLD_SESSION_LIVENESS" } as const

/** The defaults, in milliseconds. */
export const defaults = {
  heartbeatMs: 500,
  staleAfterMs: 2_000,
  reapEveryMs: 500,
  forgetAfterMs: 3_600_000
} as const

/** A backend older than this at our first statement was not started for us: a pooler's connection. */
const POOLED_BACKEND_AGE_MS = 10_000


/** A registered consumer as an operator sees it (the admin API's consumers route). */
export interface ConsumerInfo {
  readonly id: string
  readonly host: string
  readonly pid: number
  readonly startedAt: Date
  readonly heartbeatAt: Date
  /** Milliseconds since its last heartbeat, on the database's clock. */
  readonly heartbeatAgeMs: number
  /** Messages it holds now: leased by it, lease not expired. */
  readonly inFlight: number
  /** Whether it advertises a presence lock (session liveness); `false`: lease expiry only. */
  readonly sessionLiveness: boolean
}

/**
 * Every consumer registered in `schema` (validated here), by id, with its
 * heartbeat age and how many messages it holds. Use it to show live workers;
 * a consumer with session liveness off registers no row and is not listed.
 */
export const listConsumers = (
  client: SqlClient.SqlClient,
  schema: string
): Effect.Effect<ReadonlyArray<ConsumerInfo>, InvalidInput | StoreError> =>
  Effect.gen(function*() {
    const sql = client.withoutTransforms()
    const valid = yield* Validate.schemaName(schema)
    // One statement; the in-flight count per consumer reads the partial leased_by index
    // (leased rows only). Ages on the database's clock, like every lease.
    const rows = yield* sql<{
      id: string
      host: string
      pid: number
      started_at: Date
      heartbeat_at: Date
      heartbeat_age_ms: number
      in_flight: number
      lock_key: number | null
    }>`
      SELECT c.id, c.host, c.pid, c.started_at, c.heartbeat_at, c.lock_key,
             greatest(0, extract(epoch FROM now() - c.heartbeat_at) * 1000)::float8 AS heartbeat_age_ms,
             (SELECT count(*)::int FROM ${sql(`${valid}.messages`)} AS m
               WHERE m.leased_by = c.id AND m.lease_token IS NOT NULL AND m.visible_at > now()) AS in_flight
        FROM ${sql(`${valid}.consumers`)} AS c
       ORDER BY c.id`.pipe(classify("list consumers"))
    return rows.map((r) => ({
      id: r.id,
      host: r.host,
      pid: r.pid,
      startedAt: r.started_at,
      heartbeatAt: r.heartbeat_at,
      heartbeatAgeMs: Math.round(r.heartbeat_age_ms),
      inFlight: r.in_flight,
      sessionLiveness: r.lock_key !== null
    }))
  })

/**
 * The first key of every presence lock: a hash of the schema, so leasehold
 * installations in different schemas of one database never see each other's
 * locks. Positive, so it reads the same in `pg_locks.classid` (an oid).
 */
export const classKey = (schema: string): number => hash31(`leasehold.presence.${schema}`)

/**
 * Run a background loop for good: a defect (a bug) is logged at ERROR and the
 * loop restarted after a pause, never left to end the fiber silently.
 */
const forever = (name: string, loop: Effect.Effect<never>): Effect.Effect<never> =>
  Effect.forever(loop.pipe(
    Effect.catchCause((cause) =>
      Cause.hasInterruptsOnly(cause)
        ? Effect.failCause(cause)
        : Effect.andThen(Effect.logError(`${name} failed, restarting in 1s:\n${Cause.pretty(cause)}`), Effect.sleep(1_000))
    )
  )) as Effect.Effect<never>

const offRegistration = (consumerId: string): Registration => ({
  consumerId,
  status: Effect.succeed({ mode: "off", liveness: "off", backendPid: null, lockKey: null, sessions: 0 }),
  reaped: Effect.never,
  reapableAt: Effect.succeed(Option.none())
})

/** A presence session: one dedicated connection holding the lock. */
interface Session {
  readonly scope: Scope.Closeable
  readonly sql: SqlClient.SqlClient
  readonly backendPid: number
  readonly lockKey: number
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
    // Presence needs a session: the direct URL when given, else the main one (none through a
    // transaction-mode pooler: then every registration falls back to lease expiry).
    const target = yield* Pooler.sessionTarget(main.config)
    const base = Option.match(target, { onNone: () => main.config, onSome: (t) => t.config })
    const targetMode = Option.match(target, { onNone: () => "transaction" as const, onSome: (t) => t.mode })
    // Heartbeats and sweeps: short statements, bounded by a statement_timeout (through a pooler,
    // which refuses startup parameters, by their own timeouts).
    const pool = yield* PgClient.make({
      ...base,
      maxConnections: 1,
      minConnections: 0,
      applicationName: `${appName}-presence-pool`,
      keepAlive: base.keepAlive ?? "10 seconds",
      startupParameters: Pooler.startupParameters(targetMode, base.startupParameters, { statement_timeout: String(Math.max(staleMs, 5_000)) })
    }).pipe(Effect.provide(Reactivity.layer), classify("connect presence pool"))
    const sql = pool.withoutTransforms()
    const consumers = sql(`${schema}.consumers`)
    const messages = sql(`${schema}.messages`)
    const attempts = sql(`${schema}.attempts`)
    const lockKeys = `${schema}.consumer_lock_keys`
    const lockClass = classKey(schema)
    const host = os.hostname().slice(0, 255)

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
    const sharedBackend = (session: SqlClient.SqlClient, pid: number, key: number) =>
      Effect.gen(function*() {
        for (let i = 0; i < 3; i++) {
          yield* session`SELECT 1`
          const [probe] = yield* sql<{ pid: number; got: boolean }>`
            SELECT s.pid, s.got, CASE WHEN s.got THEN pg_advisory_unlock(${lockClass}::int, ${key}::int) END AS gave_back
            FROM (SELECT pg_backend_pid() AS pid, pg_try_advisory_lock(${lockClass}::int, ${key}::int) AS got OFFSET 0) AS s`
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
     * Open a presence session: connect, take a fresh key's session lock, and
     * check that the lock really belongs to this connection's backend. A
     * transaction-mode pooler shows as a backend pid that changes between
     * statements, a lock that this backend does not hold, or (`auto` only) a
     * backend far older than the connection we just opened.
     */
    const openSession: Effect.Effect<Session | { readonly _tag: "Pooler"; readonly detail: string }, StoreError> = Effect.gen(
      function*() {
        if (Option.isNone(target)) {
          return {
            _tag: "Pooler" as const,
            detail: `${QueueConfig.connectionVariables.pooler}=transaction and no ${QueueConfig.connectionVariables.directDatabaseUrl} ` +
              "to hold a session on"
          }
        }
        const scope = yield* Scope.make()
        const attempt = Effect.gen(function*() {
          const client = yield* PgClient.makeClient({
            ...base,
            applicationName: `${appName}-presence`,
            keepAlive: base.keepAlive ?? "10 seconds",
            connectTimeout: base.connectTimeout ?? "10 seconds",
            startupParameters: Pooler.startupParameters(targetMode, base.startupParameters, { statement_timeout: "5000" })
          }).pipe(Effect.provide(Reactivity.layer), Scope.provide(scope))
          const session = client.withoutTransforms()
          for (let i = 0; i < 3; i++) {
            // A fresh key per session: a session that is dying but not yet gone keeps its old
            // key, and never blocks the new one.
            const [lock] = yield* session<{ pid: number; key: number; locked: boolean; age_ms: number | null }>`
              SELECT pg_backend_pid() AS pid, k.key, pg_try_advisory_lock(${lockClass}::int, k.key) AS locked,
                     (SELECT (extract(epoch FROM now() - a.backend_start) * 1000)::float8
                      FROM pg_stat_activity a WHERE a.pid = pg_backend_pid()) AS age_ms
              FROM (SELECT nextval(${lockKeys}::regclass)::int AS key) AS k`
            if (lock === undefined) break
            if (!lock.locked) continue // the sequence wrapped onto a key still held: take the next
            const [check] = yield* session<{ pid: number; held: boolean }>`
              SELECT pg_backend_pid() AS pid, EXISTS (
                SELECT 1 FROM pg_locks AS l
                WHERE l.locktype = 'advisory' AND l.granted AND l.pid = pg_backend_pid()
                  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                  AND l.classid::bigint = ${lockClass}::bigint AND l.objid::bigint = ${lock.key}::bigint AND l.objsubid = 2
              ) AS held`
            const problem = check === undefined
              ? "no answer to the lock check"
              : check.pid !== lock.pid
              ? `the backend changed between two statements (${lock.pid} then ${check.pid})`
              : !check.held
              ? `backend ${lock.pid} does not show the lock it was just granted`
              : (yield* sharedBackend(session, lock.pid, lock.key))
              ?? (mode === "auto" && lock.age_ms !== null && lock.age_ms > POOLED_BACKEND_AGE_MS
                ? `backend ${lock.pid} started ${seconds(lock.age_ms)} before this new connection's first statement`
                : undefined)
            if (problem !== undefined) {
              // Wherever the lock landed, give it back (best effort; the key is never advertised).
              yield* session`SELECT pg_advisory_unlock(${lockClass}::int, ${lock.key}::int)`.pipe(Effect.ignore)
              return { _tag: "Pooler" as const, detail: problem }
            }
            return { scope, sql: session, backendPid: lock.pid, lockKey: lock.key } satisfies Session
          }
          return yield* new QueryFailed({ operation: "register", message: "register: no free presence lock key in 3 tries" })
        }).pipe(classify("register"))
        return yield* attempt.pipe(
          Effect.onExit((exit) => Exit.isSuccess(exit) && !("_tag" in exit.value) ? Effect.void : Scope.close(scope, Exit.void))
        )
      }
    )

    /**
     * One sweep. First a cheap look at the small consumers table; only when some
     * heartbeat is stale, the statement that decides and releases, atomically:
     *
     * - `stale`: other consumers advertising a lock, heartbeat older than the bound,
     *   on a server up for longer than the bound (after a restart every session is
     *   new and everybody gets the bound to heartbeat again). Materialized so the
     *   lock probe below runs on these rows only. `FOR UPDATE ... SKIP LOCKED`: the
     *   statement's snapshot may predate a heartbeat that committed since; locking
     *   re-reads the latest row version and re-checks the staleness on it (and the
     *   key it advertises), and a row being written right now is a heartbeat under
     *   way, so it is skipped rather than waited for.
     * - `dead`: those whose lock is free. `pg_try_advisory_xact_lock` is granted only
     *   when no session holds the key, and it is held until this statement commits,
     *   so the consumer cannot re-take it between the check and the release, and two
     *   reapers never release the same consumer twice. No scan of pg_locks.
     * - their rows are deleted (a consumer that was in fact alive writes it again with
     *   its next heartbeat), so a dead consumer is handled once, not at every sweep;
     * - every claim still under lease by a dead consumer is made visible now, its token
     *   cleared (the dead holder's fenced writes match nothing), and counted as a lease
     *   expiry. The attempt is not given back: the worker died mid-attempt, exactly as
     *   when its lease runs out, so attempts still bound a message that kills workers.
     *   `o` is the row as it was, for the attempt history, whose attempt is numbered
     *   across redrives (attempt_base + attempts, as every store write numbers it).
     */
    const sweep = (self: string, release = true): Effect.Effect<ReadonlyArray<Reaped>, StoreError> =>
      Effect.gen(function*() {
        const [candidates] = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM ${consumers}
          WHERE lock_key IS NOT NULL AND id <> ${self}
            AND heartbeat_at < now() - ${staleMs}::bigint * interval '1 millisecond'`
        if ((candidates?.n ?? 0) === 0 || !release) return []
        const rows = yield* sql<{
          consumer: string
          host: string
          pid: number
          heartbeat_at: Date
          message_id: bigint | string | null
          queue: string | null
        }>`
          WITH stale AS MATERIALIZED (
            SELECT c.id, c.host, c.pid, c.lock_key, c.heartbeat_at FROM ${consumers} AS c
            WHERE c.lock_key IS NOT NULL AND c.id <> ${self}
              AND c.heartbeat_at < now() - ${staleMs}::bigint * interval '1 millisecond'
              AND pg_postmaster_start_time() < now() - ${staleMs}::bigint * interval '1 millisecond'
            ORDER BY c.heartbeat_at
            LIMIT 100
            FOR UPDATE OF c SKIP LOCKED
          ), dead AS MATERIALIZED (
            SELECT * FROM stale WHERE pg_try_advisory_xact_lock(${lockClass}::int, stale.lock_key)
          ), forgotten AS (
            DELETE FROM ${consumers} AS c USING dead WHERE c.id = dead.id
          ), released AS (
            UPDATE ${messages} AS m SET
              visible_at     = now(),
              lease_token    = NULL, leased_by = NULL, leased_at = NULL,
              lease_expiries = m.lease_expiries + 1
            FROM ${messages} AS o JOIN dead AS d ON o.leased_by = d.id
            WHERE m.id = o.id AND m.leased_by = d.id AND m.lease_token IS NOT NULL
              AND m.state = 'ready' AND m.visible_at > now()
            RETURNING m.id, m.queue, m.task, m.attempt_base + m.attempts AS attempt, d.id AS consumer, o.leased_at
          ), history AS (
            INSERT INTO ${attempts} (message_id, queue, task, attempt, consumer, started_at, ended_at, outcome, error)
            SELECT r.id, r.queue, r.task, r.attempt, r.consumer, coalesce(r.leased_at, now()), now(), 'lease-expired',
                   'consumer ' || r.consumer || ' died: its session ended and its heartbeat went stale; released by the reaper'
            FROM released AS r
          )
          SELECT d.id AS consumer, d.host, d.pid, d.heartbeat_at, r.id AS message_id, r.queue
          FROM dead AS d LEFT JOIN released AS r ON r.consumer = d.id
          ORDER BY d.id, r.id`
        return rows.map((r): Reaped => ({
          consumer: r.consumer,
          host: r.host,
          pid: r.pid,
          heartbeatAt: r.heartbeat_at,
          messageId: r.message_id === null ? null : String(r.message_id),
          queue: r.queue
        }))
      }).pipe(classify("reap"), Effect.withSpan("leasehold.reap"))

    /** Log and count what a sweep released. */
    const report = (reaped: ReadonlyArray<Reaped>) =>
      Effect.gen(function*() {
        const byConsumer = new Map<string, Array<Reaped>>()
        for (const r of reaped) byConsumer.set(r.consumer, [...(byConsumer.get(r.consumer) ?? []), r])
        const now = yield* Clock.currentTimeMillis
        let released = 0
        for (const [consumer, rows] of byConsumer) {
          const first = rows[0]!
          const ids = rows.flatMap((r) => (r.messageId === null ? [] : [r.messageId]))
          released += ids.length
          const who = `consumer ${consumer} (host ${first.host}, pid ${first.pid}) is gone: its session ended and its last heartbeat was ${
            seconds(now - first.heartbeatAt.getTime())
          } ago`
          yield* (ids.length === 0
            ? Effect.logInfo(`${who}; it held no claims`)
            : Effect.logWarning(`${who}; released its ${ids.length} claim(s) at once, counted as lease expiries: ${ids.join(", ")}`)).pipe(
              Effect.annotateLogs({ deadConsumer: consumer, messageIds: ids.join(",") })
            )
        }
        if (released > 0) yield* Metric.update(QueueMetrics.reaped, released)
        return released
      })

    /** The registrations in force, by consumer id (what `registration` reads). */
    const registered = new Map<string, Registration>()

    /**
     * Before taking over a consumer id, see whether a consumer that looks alive has it: a
     * fresh heartbeat and its presence lock held by a live session (or no lock advertised).
     * Two consumers with one id share one row, each overwriting the other's lock key, and
     * the reaper's view of both is wrong: WARN, naming who has it. Best effort: a failed
     * check says nothing.
     */
    const warnIfAlive = (consumerId: string): Effect.Effect<void> =>
      sql<{ host: string; pid: number; backend_pid: number | null; age_ms: number; lock_key: number | null; lock_held: boolean }>`
        SELECT c.host, c.pid, c.backend_pid, c.lock_key,
               (extract(epoch FROM now() - c.heartbeat_at) * 1000)::float8 AS age_ms,
               c.lock_key IS NOT NULL AND EXISTS (
                 SELECT 1 FROM pg_locks AS l
                 WHERE l.locktype = 'advisory' AND l.granted
                   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                   AND l.classid::bigint = ${lockClass}::bigint AND l.objid::bigint = c.lock_key::bigint AND l.objsubid = 2
               ) AS lock_held
        FROM ${consumers} AS c
        WHERE c.id = ${consumerId} AND c.heartbeat_at > now() - ${staleMs}::bigint * interval '1 millisecond'`.pipe(
        Effect.flatMap(([row]) =>
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

    const register = (consumerId: string): Effect.Effect<Registration, never, Scope.Scope> =>
      Effect.gen(function*() {
        const state = {
          liveness: "reconnecting" as Status["liveness"],
          session: undefined as Session | undefined,
          lockKey: null as number | null,
          backendPid: null as number | null,
          sessions: 0,
          /** Clock time taken just before the last heartbeat that succeeded. */
          heartbeatOkAt: yield* Clock.currentTimeMillis,
          /**
           * The lock key the row holds: the one written by the last heartbeat that
           * succeeded (null: none yet, or none advertised, and then no reaper can
           * release this consumer's claims). Until it is the key of the session we
           * hold, the row points at a lock that may be free: not active.
           */
          advertisedKey: null as number | null,
          /**
           * When a heartbeat last found the server itself down (connection refused, or
           * "cannot connect now": starting or shutting down). A server that was down then
           * started later, and reapers release nothing within the stale bound of a start.
           */
          serverDownSeenAt: 0
        }
        let reapedSignal = Deferred.makeUnsafe<void>()

        // The row says who we are and which lock proves our session lives. Written whole on
        // every heartbeat (suspended: it reads the state of the moment), so a row deleted
        // meanwhile (by a reaper, or as long dead) comes back.
        // Heartbeats and sweeps share a one-connection pool, so heartbeats commit in the order they
        // answer: the key of the last one that succeeded is the key in the row.
        const heartbeatOnce = Effect.suspend(() => {
          const key = state.lockKey
          const pid = state.backendPid
          return Effect.flatMap(Clock.currentTimeMillis, (startedAt) =>
            sql`
              INSERT INTO ${consumers} (id, host, pid, lock_key, backend_pid)
              VALUES (${consumerId}, ${host}, ${process.pid}, ${key}::int, ${pid}::int)
              ON CONFLICT (id) DO UPDATE SET
                host = excluded.host, pid = excluded.pid, lock_key = excluded.lock_key,
                backend_pid = excluded.backend_pid, heartbeat_at = now()`.pipe(
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
            duration: staleMs,
            orElse: () => Effect.fail(new QueryFailed({ operation: "heartbeat", message: `heartbeat: no answer in ${seconds(staleMs)}` }))
          }),
          classify("heartbeat")
        )

        const closeSession = (session: Session) =>
          Scope.close(session.scope, Exit.void).pipe(Effect.timeoutOption(5_000), Effect.asVoid)

        const goUnavailable = (detail: string) =>
          Effect.gen(function*() {
            state.liveness = "unavailable"
            state.lockKey = null
            state.backendPid = null
            yield* heartbeatOnce.pipe(Effect.ignore)
            yield* Effect.logWarning(
              `session liveness unavailable (transaction-mode pooler?): ${detail}; falling back to lease expiry. ` +
                `Set ${variables.sessionLiveness}=off to silence this, or connect leasehold directly to PostgreSQL.`
            )
          })

        /** Keep a presence session: open it, probe it every heartbeat, replace it when it dies. */
        const supervise = (firstAttempt: Deferred.Deferred<void>) =>
          Effect.gen(function*() {
            let failures = 0
            while (true) {
              if (state.liveness === "unavailable") {
                yield* Deferred.succeed(firstAttempt, undefined)
                return yield* Effect.never
              }
              if (state.session === undefined) {
                const opened = yield* Effect.result(openSession)
                if (opened._tag === "Failure") {
                  // Be in the table anyway (no lock advertised: lease expiry only, for now).
                  if (!(yield* Deferred.isDone(firstAttempt))) yield* heartbeatOnce.pipe(Effect.ignore)
                  yield* Deferred.succeed(firstAttempt, undefined)
                  failures += 1
                  if (failures === 1 || failures % 30 === 0) {
                    yield* Effect.logWarning(
                      `presence session could not be opened (${failures} tries): ${opened.failure.message}; ` +
                        "retrying; meanwhile claims are protected by their leases"
                    )
                  }
                  // Retry at the heartbeat pace: after an outage, being registered again soon matters
                  // more than the few failed connects it costs.
                  yield* Effect.sleep(heartbeatMs)
                  continue
                }
                failures = 0
                const result = opened.success
                if ("_tag" in result) {
                  yield* goUnavailable(result.detail)
                  yield* Deferred.succeed(firstAttempt, undefined)
                  continue
                }
                state.session = result
                state.lockKey = result.lockKey
                state.backendPid = result.backendPid
                state.sessions += 1
                // Not active yet: the row still names the previous key (free by now, if that session
                // ended), so until a heartbeat advertises this one, a reaper could release our claims
                // once the heartbeat is stale. The heartbeat that succeeds makes us active.
                state.liveness = "reconnecting"
                yield* heartbeatOnce.pipe(Effect.ignore)
                yield* Deferred.succeed(firstAttempt, undefined)
                const message = `presence lock held by backend ${result.backendPid} (key ${lockClass}/${result.lockKey})`
                yield* state.sessions === 1 ? Effect.logDebug(`registered: ${message}`) : Effect.logWarning(`re-registered: ${message}`)
                continue
              }
              yield* Effect.sleep(heartbeatMs)
              const session = state.session
              // Is our session still there? Any failure, or a different backend answering, means no.
              const probeOnce = session.sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.pipe(
                Effect.timeoutOption(Math.max(heartbeatMs, 2_000)),
                Effect.result
              )
              let probe = yield* probeOnce
              // No answer in time is no proof: after a long event-loop block the timeout fires before
              // an answer already received is read. Giving up the session would free our own lock, so
              // ask again (the late answer is drained first) and give up only if that too goes unanswered.
              if (probe._tag === "Success" && Option.isNone(probe.success)) probe = yield* probeOnce
              if (probe._tag === "Success" && Option.isSome(probe.success) && probe.success.value[0]?.pid === session.backendPid) continue
              state.session = undefined
              yield* closeSession(session)
              if (probe._tag === "Success" && Option.isSome(probe.success)) {
                yield* goUnavailable(`backend ${session.backendPid} was replaced by ${probe.success.value[0]?.pid} on the same connection`)
                continue
              }
              state.liveness = "reconnecting"
              state.backendPid = null
              const why = probe._tag === "Failure" ? String((probe.failure as { message?: unknown }).message ?? probe.failure) : "no answer"
              yield* Effect.logWarning(
                `presence connection lost (${why}); re-registering. Heartbeats go on, so this consumer is not reaped, ` +
                  "and its claims stay protected by their leases"
              )
            }
          })

        /** Heartbeat every interval; say so when heartbeats have failed for longer than the stale bound. */
        const heartbeats = Effect.gen(function*() {
          let failingSince: number | undefined
          let warned = false
          while (true) {
            const result = yield* Effect.result(heartbeatOnce)
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
            yield* Effect.sleep(heartbeatMs)
          }
        })

        /**
         * The reaper. It releases only after it has itself talked to the database
         * without a failure for the stale bound: after a network blip that cut
         * everybody off, the others get that long to heartbeat again.
         */
        const reaper = Effect.gen(function*() {
          let healthySince: number | undefined
          let sweeps = 0
          let lastError: string | undefined
          while (true) {
            yield* Effect.sleep(reapMs)
            const now = yield* Clock.currentTimeMillis
            const result = yield* Effect.result(sweep(consumerId, healthySince !== undefined && now - healthySince >= staleMs))
            if (result._tag === "Failure") {
              healthySince = undefined
              const error = result.failure
              if (error.message !== lastError) {
                lastError = error.message
                yield* error._tag === "ConnectionDead"
                  ? Effect.logWarning(`reaper: connection dead, retrying: ${error.message}`)
                  : Effect.logError(`reaper failed (${error._tag}), retrying: ${error.message}`)
              }
              continue
            }
            lastError = undefined
            healthySince ??= now
            if (result.success.length > 0 && (yield* report(result.success)) > 0) {
              const signal = reapedSignal
              reapedSignal = Deferred.makeUnsafe<void>()
              yield* Deferred.succeed(signal, undefined)
            }
            // Now and then, forget rows nobody has heartbeated for a long time (no lock, or a
            // process that stalled for that long; a live one writes its row again).
            if (++sweeps % Math.max(1, Math.round(60_000 / reapMs)) === 0) {
              yield* sql`DELETE FROM ${consumers}
                WHERE id <> ${consumerId} AND heartbeat_at < now() - ${forgetMs}::bigint * interval '1 millisecond'`.pipe(
                classify("forget consumers"),
                Effect.catch((error) => Effect.logWarning(`could not forget long-dead consumers: ${error.message}`))
              )
            }
          }
        })

        const annotate = Effect.annotateLogs({ module: "ConsumerPresence", consumer: consumerId })

        // Runs last, after the fibers below are stopped: leave the table, end the session.
        yield* Effect.addFinalizer(() =>
          Effect.gen(function*() {
            yield* sql`DELETE FROM ${consumers} WHERE id = ${consumerId}`.pipe(
              Effect.timeoutOption(5_000),
              Effect.catchCause(() => Effect.logWarning("could not delete the consumers row on shutdown; it will be forgotten"))
            )
            const session = state.session
            state.session = undefined
            if (session !== undefined) yield* closeSession(session)
          }).pipe(annotate)
        )
        yield* warnIfAlive(consumerId).pipe(annotate)
        const firstAttempt = yield* Deferred.make<void>()
        yield* Effect.forkScoped(forever("presence session", supervise(firstAttempt)).pipe(annotate))
        // Wait for the first session (bounded), so the consumer claims with its lock advertised.
        yield* Deferred.await(firstAttempt).pipe(Effect.timeoutOption(15_000))
        yield* Effect.forkScoped(forever("heartbeat", heartbeats).pipe(annotate))
        yield* Effect.forkScoped(forever("reaper", reaper).pipe(annotate))
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
      sweep: (self) => sweep(self),
      registration: (consumerId) => Effect.sync(() => Option.fromUndefinedOr(registered.get(consumerId)))
    })
  })

/** Session liveness over the `PgClient` in context (see {@link make}). */
export const layerPg = (
  options: PresenceOptions = {}
): Layer.Layer<ConsumerPresence, InvalidInput | StoreError, PgClient.PgClient | SqlClient.SqlClient> =>
  Layer.effect(ConsumerPresence, make(options))

/** The mode from `LEASEHOLD_SESSION_LIVENESS` (on, off or auto; default auto). */
export const modeFromEnv: Effect.Effect<Mode, ConfigInvalid> = Effect.gen(function*() {
  const name = variables.sessionLiveness
  const value = yield* Config.option(Config.String(name)).pipe(
    Effect.mapError((e) => new ConfigInvalid({ variable: name, rule: "readable", message: `${name}: ${e.message}` }))
  )
  if (Option.isNone(value) || value.value.trim() === "") return "auto"
  const mode = value.value.trim().toLowerCase()
  if (mode === "on" || mode === "off" || mode === "auto") return mode
  return yield* new ConfigInvalid({
    variable: name,
    rule: "on, off or auto",
    message: `${name}: ${JSON.stringify(value.value)} is invalid; expected on, off or auto`
  })
})

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
