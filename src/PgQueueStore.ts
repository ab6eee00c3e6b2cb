/**
 * The PostgreSQL queue store: every statement of the lease protocol, each one
 * short, parameterised, and fenced by `(id, lease_token)` where it writes to a
 * claim. The statements live in `src/pg/`, one module per group (send, claim,
 * lease, complete, cancel, dead letters, queues, messages, history, prune,
 * notify, schedules), each taking the one context record built here; this
 * module holds the options, the wiring and the layers.
 *
 * @since 0.1.0
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import { Clock, Context, Duration, Effect, Layer, type Scope } from "effect"
import * as Flow from "./pg/flow.ts"
import { Insights, type InsightsShape } from "./Insights.ts"
import * as SqlClient from "effect/sql/SqlClient"
import * as Migrations from "./Migrations.ts"
import * as QueueConfig from "./QueueConfig.ts"
import { StoreSettings } from "./StoreSettings.ts"
import type { ConfigInvalid, InvalidInput, StoreError } from "./QueueError.ts"
import { defaults, fromOperations, QueueStore, type QueueStoreShape } from "./QueueStore.ts"
import type * as CancelInbox from "./internal/cancelInbox.ts"
import * as Validate from "./internal/validate.ts"
import * as Cancel from "./pg/cancel.ts"
import * as Channel from "./pg/channel.ts"
import * as Claim from "./pg/claim.ts"
import * as Commit from "./pg/commit.ts"
import * as Complete from "./pg/complete.ts"
import type { PgContext } from "./pg/context.ts"
import * as DeadLetters from "./pg/deadLetters.ts"
import * as Events from "./pg/events.ts"
import * as History from "./pg/history.ts"
import * as PgInsights from "./pg/insights.ts"
import * as Lifecycle from "./pg/lifecycle.ts"
import * as Lease from "./pg/lease.ts"
import * as LeasePool from "./pg/leasePool.ts"
import * as Messages from "./pg/messages.ts"
import * as Notify from "./pg/notify.ts"
import { op } from "./pg/op.ts"
import * as Prune from "./pg/prune.ts"
import * as Queues from "./pg/queues.ts"
import * as Schedules from "./pg/schedules.ts"
import * as Search from "./pg/search.ts"
import * as Send from "./pg/send.ts"

/** How to build a {@link PgQueueStore}. */
export interface PgQueueStoreOptions {
  /** The SQL schema holding leasehold's tables (default `leasehold`); validated as an identifier. */
  readonly schema?: string | undefined
  /** Run the migrations when the store is built (default true). */
  readonly migrate?: boolean | undefined
  /** Largest payload accepted, in JSON bytes (default 1 MiB). */
  readonly maxPayloadBytes?: number | undefined
  /** Attempts a message gets unless its sender says otherwise (default 25). */
  readonly defaultMaxAttempts?: number | undefined
  /**
   * Where "now" comes from. `database` (the default) uses the server's `now()`,
   * so workers with skewed clocks agree. `effect` passes Effect's `Clock` as the
   * time of every statement, so tests can drive leases with `TestClock`.
   */
  readonly clock?: "database" | "effect" | undefined
  /**
   * Whether finishing writes and cancels announce the runs they end on the schema's ended
   * channel (default true), in their own statement: what wakes `TaskClient.awaitResult` at once
   * and feeds `TaskClient.events`. `false` saves the NOTIFY on every finishing write (a lock each
   * notifying commit takes) where nobody awaits or watches: awaits then find ends by polling.
   */
  readonly announceEnds?: boolean | undefined
  /**
   * A small pool of its own for lease traffic (renew, and `complete`'s acks,
   * releases, retries and dead letters), so handlers that exhaust the main pool cannot starve
   * renewals, with a `statement_timeout` so a stuck statement cannot hold a
   * renewal forever. Built from the `PgClient` in context (default: 2
   * connections, 10 s timeout); `false` sends lease traffic through the main
   * client. Ignored when the context has no `PgClient`.
   */
  readonly leasePool?: false | {
    readonly maxConnections?: number | undefined
    readonly statementTimeout?: Duration.Input | undefined
  } | undefined
}

/**
 * The advisory lock (single-key form, apart from the two-key presence locks) a
 * consumer holds, one transaction at a time, while it prunes the attempt history of `schema`.
 */
export const pruneLockKey: (schema: string) => number = Prune.pruneLockKey

/**
 * The NOTIFY channel of `schema`: sends announce their queue on it.
 * `leasehold_<schema>` when that fits in an identifier; otherwise the schema is
 * cut short and a hash of the whole name keeps channels of different schemas apart.
 */
export const notifyChannel: (schema: string) => string = Channel.notifyChannel

/** The one-pool rule, as a send inside another client's transaction is refused with it. */
export { onePoolRule } from "./pg/onePool.ts"

/**
 * The context every statement module takes, over the `SqlClient` in context: the clients,
 * the schema's tables, the channel, the time source, the error wrapper, the limits.
 */
const makeContext = (schema: string, options: PgQueueStoreOptions) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const leaseSql = (yield* makeLeaseClient(options.leasePool)) ?? sql
    /** Subscribers of `cancels`, per queue: opened by the `sends` listeners of this store. */
    const cancelListeners: CancelInbox.Registry = new Map()
    const ctx: PgContext = {
      schema,
      sql,
      leaseSql,
      pg: yield* Effect.serviceOption(PgClient.PgClient),
      table: sql(`${schema}.messages`),
      attemptsTable: sql(`${schema}.attempts`),
      queuesTable: sql(`${schema}.queues`),
      uniqueTable: sql(`${schema}.unique_keys`),
      schedulesTable: sql(`${schema}.schedules`),
      limitedQueues: new Set<string>(),
      limitsTable: sql(`${schema}.flow_limits`),
      keysTable: sql(`${schema}.flow_keys`),
      ratesTable: sql(`${schema}.flow_rates`),
      channel: Channel.notifyChannel(schema),
      endedChannel: Channel.endedChannel(schema),
      announceEnds: options.announceEnds ?? true,
      events: yield* Events.makeHub(yield* Effect.scope),
      limits: {
        maxPayloadBytes: options.maxPayloadBytes ?? defaults.maxPayloadBytes,
        defaultMaxAttempts: options.defaultMaxAttempts ?? defaults.maxAttempts
      },
      /** `null` means "use the database's now()": every statement reads `coalesce($now, now())`. */
      currentTime: options.clock === "effect"
        ? Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))
        : Effect.succeed(null),
      op,
      announcing: Channel.makeAnnouncing(),
      cancelListeners
    }
    return ctx
  })

/**
 * Build a PostgreSQL store over the `SqlClient` in context (provide
 * `PgClient.layer`). When you use the same client for your own
 * `sql.withTransaction`, `send` joins that transaction. A send made while a
 * transaction of another client is open fails with `InvalidInput` (rule
 * {@link onePoolRule}) instead of committing on its own.
 */
export const make = (
  options: PgQueueStoreOptions = {}
): Effect.Effect<QueueStoreShape, InvalidInput | StoreError, SqlClient.SqlClient | Scope.Scope> =>
  Effect.map(makeWithInsights(options), ({ store }) => store)

/** The dashboard's reads (`Insights`) over the store's context. */
const insightsOf = (ctx: PgContext): InsightsShape => ({
  throughput: PgInsights.throughput(ctx),
  depthHistory: PgInsights.depthHistory(ctx),
  recordDepths: PgInsights.recordDepths(ctx),
  depthSampleAge: PgInsights.depthSampleAge(ctx),
  search: Search.search(ctx),
  count: Search.count(ctx),
  pick: Search.pick(ctx),
  retryNow: Search.retryNow(ctx)
})

/** {@link make}, and the dashboard's reads over the same context. */
const makeWithInsights = (options: PgQueueStoreOptions) =>
  Effect.gen(function*() {
    const schema = yield* Validate.schemaName(options.schema ?? Migrations.defaultSchema)
    if (options.migrate ?? true) yield* Migrations.run({ schema })
    const ctx = yield* makeContext(schema, options)
    const insights = insightsOf(ctx)
    const store = fromOperations({
      now: Schedules.now(ctx),
      upsertSchedules: Schedules.upsertSchedules(ctx),
      fireSchedule: Schedules.fireSchedule(ctx),
      triggerSchedule: Schedules.triggerSchedule(ctx),
      schedules: Schedules.schedules(ctx),
      removeSchedule: Schedules.removeSchedule(ctx),
      pruneUniqueKeys: Prune.pruneUniqueKeys(ctx),
      pruneFlow: Prune.pruneFlow(ctx),
      send: Send.send(ctx),
      claim: Claim.claim(ctx),
      renew: Lease.renew(ctx),
      complete: Complete.complete(ctx),
      completeWith: Commit.completeWith(ctx),
      redrive: DeadLetters.redrive(ctx),
      purge: DeadLetters.purge(ctx),
      deadLetters: DeadLetters.deadLetters(ctx),
      pause: Queues.pause(ctx),
      resume: Queues.resume(ctx),
      queues: Queues.queues(ctx),
      cancel: Cancel.cancel(ctx),
      cancelWhere: Cancel.cancelWhere(ctx),
      get: Messages.get(ctx),
      messages: Messages.messages(ctx),
      attempts: History.attempts(ctx),
      pruneAttempts: Prune.pruneAttempts(ctx),
      sends: Notify.sends(ctx),
      cancels: Notify.cancels(ctx),
      stats: Queues.stats(ctx),
      depths: Queues.depths(ctx),
      nextVisibleAt: Queues.nextVisibleAt(ctx),
      setLimits: Flow.setLimits(ctx),
      limits: Flow.limits(ctx),
      setKeyWeight: Flow.setKeyWeight(ctx),
      flowStatus: Flow.flowStatus(ctx),
      setProgress: Lifecycle.setProgress(ctx),
      completions: Events.completions(ctx)
    })
    return { store, insights }
  })

/** The lease pool (`pg/leasePool.ts`): `undefined` when disabled or without a `PgClient` in context. */
const makeLeaseClient = (options: PgQueueStoreOptions["leasePool"]) =>
  options === false
    ? Effect.succeed(undefined)
    : LeasePool.make({
      maxConnections: options?.maxConnections ?? 2,
      statementTimeoutMs: Duration.toMillis(options?.statementTimeout ?? "10 seconds"),
      suffix: "lease"
    })

/**
 * The store as a layer over the `SqlClient` in context (migrating first unless
 * `migrate: false`), with the settings it resolved ({@link StoreSettings}) and the dashboard's
 * reads ({@link Insights}).
 * The schema is `options.schema`, else `LEASEHOLD_SCHEMA`, else `leasehold`:
 * read once, here, and taken from here by session liveness built on this layer.
 */
export const layer = (
  options: PgQueueStoreOptions = {}
): Layer.Layer<QueueStore | StoreSettings | Insights, InvalidInput | StoreError | ConfigInvalid, SqlClient.SqlClient> =>
  Layer.effectContext(Effect.gen(function*() {
    const schema = yield* Validate.schemaName(options.schema ?? (yield* QueueConfig.schemaFromEnv) ?? Migrations.defaultSchema)
    const { insights, store } = yield* makeWithInsights({ ...options, schema })
    return Context.make(QueueStore, store).pipe(
      Context.add(StoreSettings, StoreSettings.of({ schema })),
      Context.add(Insights, Insights.of(insights))
    )
  }))

