/**
 * The presence statements: the consumers row (heartbeat, leaving, the check for
 * a live owner of an id), the presence session's lock and its checks, and the
 * operator's list of consumers. The reaper's statements are in `pg/reap.ts`.
 *
 * Every statement takes one {@link PresenceContext}, built once per presence
 * service (its own one-connection pool, the schema's tables, the lock class).
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { SqlClient, Statement } from "effect/sql"
import * as Validate from "../internal/validate.ts"
import { classify, type InvalidInput, type StoreError } from "../QueueError.ts"
import { type Announcing, makeAnnouncing, notifyChannel } from "./channel.ts"

/** What every presence and reaper statement needs, built once per presence service. */
export interface PresenceContext {
  /** The presence pool (heartbeats, sweeps, checks), without transforms. */
  readonly sql: SqlClient.SqlClient
  readonly consumers: Statement.Identifier
  readonly messages: Statement.Identifier
  readonly attempts: Statement.Identifier
  /** The workflow executions a dead runner may hold (released by the reaper too). */
  readonly executions: Statement.Identifier
  /** The workflow runners' channel: a released execution is announced there (`run`). */
  readonly workflowChannel: string
  /** The schema's send channel: the queue of a released message is announced there, as a send is, so its idle consumers wake. */
  readonly channel: string
  /** Runs the reaper's release with its announcements, or without them when the NOTIFY queue is full (`channel.ts`). */
  readonly announcing: Announcing
  /** The sequence handing out lock keys (`<schema>.consumer_lock_keys`), for `::regclass`. */
  readonly lockKeys: string
  /** The first key of every presence lock of this schema. */
  readonly lockClass: number
  /**
   * A heartbeat older than this (ms) is stale (a consumer id free to take over); after a
   * server start, reapers release nothing for this long (everybody reconnects).
   */
  readonly staleMs: number
}

/** The context over `pool` (a client without transforms) for the tables of `schema` (validated). */
export const makeContext = (pool: SqlClient.SqlClient, schema: string, lockClass: number, staleMs: number): PresenceContext => ({
  sql: pool,
  consumers: pool(`${schema}.consumers`),
  messages: pool(`${schema}.messages`),
  attempts: pool(`${schema}.attempts`),
  executions: pool(`${schema}.workflow_executions`),
  workflowChannel: notifyChannel(`${schema}__workflows`),
  channel: notifyChannel(schema),
  announcing: makeAnnouncing(),
  lockKeys: `${schema}.consumer_lock_keys`,
  lockClass,
  staleMs
})

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
  /** What it runs with, as its heartbeat wrote it (null: not written, an older version). */
  readonly settings: ConsumerSettings | null
}

/** What a consumer runs with, written with its heartbeat for operators: its queues, concurrency and lease. */
export interface ConsumerSettings {
  readonly queues: ReadonlyArray<string>
  readonly concurrency: number
  readonly leaseMs: number
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
      settings: ConsumerSettings | null
    }>`
      SELECT c.id, c.host, c.pid, c.started_at, c.heartbeat_at, c.lock_key, c.settings,
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
      sessionLiveness: r.lock_key !== null,
      settings: r.settings
    }))
  })

/** What a consumers row says: who we are and which lock proves our session lives. */
export interface ConsumerRow {
  readonly id: string
  readonly host: string
  readonly pid: number
  readonly lockKey: number | null
  readonly backendPid: number | null
  /** What the consumer runs with (see {@link ConsumerSettings}); undefined writes NULL. */
  readonly settings?: ConsumerSettings | undefined
}

/**
 * The heartbeat: the row written whole (so a row deleted meanwhile, by a reaper or as
 * long dead, comes back), its heartbeat now.
 */
export const heartbeat = (ctx: PresenceContext, row: ConsumerRow) =>
  ctx.sql`
    INSERT INTO ${ctx.consumers} (id, host, pid, lock_key, backend_pid, settings)
    VALUES (${row.id}, ${row.host}, ${row.pid}, ${row.lockKey}::int, ${row.backendPid}::int,
            ${row.settings === undefined ? null : JSON.stringify(row.settings)}::jsonb)
    ON CONFLICT (id) DO UPDATE SET
      host = excluded.host, pid = excluded.pid, lock_key = excluded.lock_key,
      backend_pid = excluded.backend_pid, settings = excluded.settings, heartbeat_at = now()`

/** Leave the table (on shutdown). */
export const leave = (ctx: PresenceContext, consumerId: string) => ctx.sql`DELETE FROM ${ctx.consumers} WHERE id = ${consumerId}`

/** What a session's first statement says about its backend and the lock it tried. */
export interface LockTaken {
  readonly pid: number
  readonly key: number
  readonly locked: boolean
  /** How long before this statement the backend started (ms), when visible. */
  readonly age_ms: number | null
}

/**
 * On a presence session: take the consumer's lock in shared mode, on `key` (another
 * session of the same consumer holds it too) or, without one, on a fresh key from the
 * sequence, with the backend's pid and age. Shared: every presence session of one consumer
 * holds the same key, and a reaper's exclusive try (`pg/reap.ts`) is granted only once none
 * does, so one session killed alone frees nothing; a replacement joins the key while the
 * other session still holds it. Refused only while a reaper holds the key exclusively (a
 * probe, for the length of one statement) or another consumer's session has it.
 */
export const takeLock = (ctx: PresenceContext, session: SqlClient.SqlClient, key?: number) =>
  Effect.map(
    session<LockTaken>`
      SELECT pg_backend_pid() AS pid, k.key, pg_try_advisory_lock_shared(${ctx.lockClass}::int, k.key) AS locked,
             (SELECT (extract(epoch FROM now() - a.backend_start) * 1000)::float8
              FROM pg_stat_activity a WHERE a.pid = pg_backend_pid()) AS age_ms
      FROM (SELECT coalesce(${key ?? null}::int, nextval(${ctx.lockKeys}::regclass)::int) AS key) AS k`,
    (rows) => rows[0]
  )

/** On a presence session: whether this backend shows lock `key` as granted to it. */
export const lockShown = (ctx: PresenceContext, session: SqlClient.SqlClient, key: number) =>
  Effect.map(
    session<{ pid: number; held: boolean }>`
      SELECT pg_backend_pid() AS pid, EXISTS (
        SELECT 1 FROM pg_locks AS l
        WHERE l.locktype = 'advisory' AND l.granted AND l.pid = pg_backend_pid()
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND l.classid::bigint = ${ctx.lockClass}::bigint AND l.objid::bigint = ${key}::bigint AND l.objsubid = 2
      ) AS held`,
    (rows) => rows[0]
  )

/**
 * How often (ms) a presence session's backend checks, while a statement runs, that its client is
 * still connected (`client_connection_check_interval`, PostgreSQL 14+).
 */
export const CLIENT_CHECK_MS = 25

/**
 * On a presence session, once it holds the lock and is proven its own backend (a pooler's server
 * connection would keep the setting): have its backend check the client's socket every
 * {@link CLIENT_CHECK_MS} while a statement runs. The session is nearly always in its probe (a
 * `pg_sleep`, {@link probe}); without the check a backend notices its client gone (a SIGKILL closes
 * the socket) only when the sleep ends and it writes the answer, so the lock stayed held up to a
 * whole probe after the death. With it, the backend ends, and frees the lock, within the interval.
 * It sees only a socket closed (a hangup): a live client whose event loop is blocked or whose
 * network is slow keeps its socket open, and its backend goes on sleeping.
 * A session setting (`set_config(..., false)`): no other connection is touched. Refused where the
 * server lacks it (before 14, or a platform that cannot tell a closed socket): the caller goes on
 * without it.
 */
export const checkClientConnection = (session: SqlClient.SqlClient) =>
  session`SELECT set_config('client_connection_check_interval', ${String(CLIENT_CHECK_MS)}, false)`

/** On a presence session: give the shared lock `key` back (wherever it landed). */
export const unlock = (ctx: PresenceContext, session: SqlClient.SqlClient, key: number) =>
  session`SELECT pg_advisory_unlock_shared(${ctx.lockClass}::int, ${key}::int)`

/** On a presence session: the backend answering it (a different one means the session is gone). */
export const backendPid = (session: SqlClient.SqlClient) => session<{ pid: number }>`SELECT pg_backend_pid() AS pid`

/**
 * On a presence session: the probe the keeper runs back to back. It waits `sleepMs` on the
 * server before answering with the backend's pid, so that the session is nearly always in
 * a statement: when its backend ends (terminated, the server shutting down) the client
 * hears it at once, from the failed statement, rather than at its next probe. An answer
 * proves the backend was alive `sleepMs` after the probe was sent. No lock, no row.
 */
export const probe = (session: SqlClient.SqlClient, sleepMs: number) =>
  session<{ pid: number }>`SELECT pg_backend_pid() AS pid FROM pg_sleep(${sleepMs / 1000}::float8)`

/**
 * On the presence pool (another client connection than the session's): try to take lock
 * `key`, and give back whatever it took in the same statement (one statement runs on one
 * backend). The try is exclusive, so the session's shared hold refuses it on any other
 * backend. Granted means the session's lock is not the session's alone.
 */
export const tryTakeOver = (ctx: PresenceContext, key: number) =>
  Effect.map(
    ctx.sql<{ pid: number; got: boolean }>`
      SELECT s.pid, s.got, CASE WHEN s.got THEN pg_advisory_unlock(${ctx.lockClass}::int, ${key}::int) END AS gave_back
      FROM (SELECT pg_backend_pid() AS pid, pg_try_advisory_lock(${ctx.lockClass}::int, ${key}::int) AS got OFFSET 0) AS s`,
    (rows) => rows[0]
  )

/** A consumers row with a fresh heartbeat, and whether the lock it advertises is held by a live session. */
export interface LiveOwner {
  readonly host: string
  readonly pid: number
  readonly backend_pid: number | null
  readonly age_ms: number
  readonly lock_key: number | null
  readonly lock_held: boolean
}

/** The row of `consumerId` if its heartbeat is fresh, with whether its advertised lock is held. */
export const liveOwner = (ctx: PresenceContext, consumerId: string) =>
  Effect.map(
    ctx.sql<LiveOwner>`
      SELECT c.host, c.pid, c.backend_pid, c.lock_key,
             (extract(epoch FROM now() - c.heartbeat_at) * 1000)::float8 AS age_ms,
             c.lock_key IS NOT NULL AND EXISTS (
               SELECT 1 FROM pg_locks AS l
               WHERE l.locktype = 'advisory' AND l.granted
                 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                 AND l.classid::bigint = ${ctx.lockClass}::bigint AND l.objid::bigint = c.lock_key::bigint AND l.objsubid = 2
             ) AS lock_held
      FROM ${ctx.consumers} AS c
      WHERE c.id = ${consumerId} AND c.heartbeat_at > now() - ${ctx.staleMs}::bigint * interval '1 millisecond'`,
    (rows) => rows[0]
  )
