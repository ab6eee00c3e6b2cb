/**
 * leasehold as the engine of effect's `effect/workflow`: `make` builds effect's `WorkflowEngine`
 * service on PostgreSQL (docs/workflows.md), `layer` provides it. Each execution is a row held by a
 * fenced lease; activity results are recorded fenced and replayed, not re-run; sleeps and deferreds
 * hold no lease; a dead runner's execution resumes on another within session liveness (with a
 * `ConsumerPresence` in context) or else its lease; a runner shutting down releases what it holds.
 *
 * @since 0.1.0
 */
import { type Duration, Effect, Layer, Scope } from "effect"
import * as SqlClient from "effect/sql/SqlClient"
import type * as WorkflowEngine from "effect/workflow/WorkflowEngine"
import { defaultSchema } from "./Migrations.ts"
import * as WorkflowConfig from "./config/workflow.ts"
import type { ConfigInvalid, InvalidInput, StoreError } from "./QueueError.ts"
import * as Validate from "./internal/validate.ts"
import * as Maintenance from "./maintenance/Maintenance.ts"
import * as WorkflowRetention from "./maintenance/workflowRetention.ts"
import * as LeasePool from "./pg/leasePool.ts"
import * as QueueConfig from "./QueueConfig.ts"
import * as Sql from "./pg/workflow.ts"
import * as WorkflowAdmin from "./workflow/admin.ts"
import * as Transactional from "./workflow/transactional.ts"
import type { EngineState } from "./workflow/state.ts"

/**
 * The engine's own modules and effect's `WorkflowEngine`, loaded when an engine is built: a
 * worker that runs no workflows does not load them (test/ImportCost.test.ts).
 */
const engineModules = Effect.promise(() =>
  Promise.all([
    import("effect/workflow/WorkflowEngine"),
    import("./workflow/engine.ts"),
    import("./workflow/lifecycle.ts"),
    import("./workflow/runner.ts"),
    import("./workflow/signals.ts")
  ])
)

/** How the engine runs. */
export interface WorkflowOptions {
  /** The schema of leasehold's tables (migrated, migration 14 or later). Default `leasehold`. */
  readonly schema?: string | undefined
  /** How long a run holds its execution between renewals (renewed every lease/3). Default 10 seconds. */
  readonly lease?: Duration.Input | undefined
  /** The longest a runner or a waiting caller goes without looking (NOTIFY usually comes first). Default 1 second. */
  readonly pollInterval?: Duration.Input | undefined
  /** How many executions this process runs at once. Default 32. */
  readonly concurrency?: number | undefined
  /**
   * The consumer id this runner registers with session liveness (a `ConsumerPresence` in
   * context): the reaper releases its executions by it when its session dies. Default
   * `<host>-<pid>-<random>-workflows`.
   */
  readonly consumerId?: string | undefined
  /** How long the drain on shutdown waits for runs to release their executions. Default 10 seconds. */
  readonly shutdownGrace?: Duration.Input | undefined
  /**
   * A small pool of its own for the renewals (default 2 connections, 10 s statement timeout), so
   * runs whose activities keep the main pool busy cannot starve them and lose their leases; built
   * from the `PgClient` in context (without one, renewals use the main client). `false`: renew
   * through the main client.
   */
  readonly leasePool?: false | { readonly maxConnections?: number | undefined } | undefined
  /**
   * How long finished (complete) executions are kept: every five minutes the engine deletes those
   * completed longer ago, with their activities, deferreds and clocks (never one unfinished, nor a
   * child whose parent is not complete). At least a minute; `"off"` keeps them. Default 7 days.
   */
  readonly retention?: Duration.Input | "off" | undefined
}

/**
 * Build the engine: the `WorkflowEngine` service, and this process's runner (claiming executions of
 * the workflows registered with it) forked into the scope. Needs a `SqlClient` (and a `PgClient` for
 * LISTEN; without one, everything polls).
 */
export const make = (
  options: WorkflowOptions = {}
): Effect.Effect<WorkflowEngine.WorkflowEngine["Service"], InvalidInput | StoreError, SqlClient.SqlClient | Scope.Scope> =>
  Effect.gen(function*() {
    const [WorkflowEngine, { encoded }, Lifecycle, { claimLoop }, Signals] = yield* engineModules
    const schema = yield* Validate.schemaName(options.schema ?? defaultSchema)
    const { leaseMs: minLease, pollIntervalMs: minPoll, shutdownGraceMs: minGrace } = WorkflowConfig.workflowMinimums
    const leaseMs = yield* Validate.durationMs("lease", options.lease ?? "10 seconds", { min: minLease })
    const pollMs = yield* Validate.durationMs("pollInterval", options.pollInterval ?? "1 second", { min: minPoll })
    const concurrency = yield* Validate.positiveInt("concurrency", options.concurrency ?? 32, WorkflowConfig.MAX_WORKFLOW_CONCURRENCY)
    const graceMs = yield* Validate.durationMs("shutdownGrace", options.shutdownGrace ?? "10 seconds", { min: minGrace })
    const retentionMs = options.retention === "off"
      ? undefined
      : yield* Validate.durationMs("retention", options.retention ?? WorkflowConfig.DEFAULT_WORKFLOW_RETENTION, {
        min: WorkflowConfig.workflowMinimums.retentionMs
      })
    const consumerId = yield* Validate.name("consumerId", options.consumerId ?? `${QueueConfig.defaultConsumerId()}-workflows`)
    const leaseConnections = options.leasePool === false
      ? 0
      : yield* Validate.positiveInt("leasePool.maxConnections", options.leasePool?.maxConnections ?? 2, 100)
    const w = Sql.make(yield* SqlClient.SqlClient, schema)
    const leaseClient = leaseConnections === 0
      ? undefined
      : yield* LeasePool.make({ maxConnections: leaseConnections, statementTimeoutMs: 10_000, suffix: "workflow-lease" })
    const state: EngineState = {
      w,
      leaseSql: leaseClient === undefined ? w : Sql.make(leaseClient, schema),
      settings: { leaseMs, pollMs, concurrency },
      registry: new Map(),
      runs: new Map(),
      signals: yield* Signals.make(w.channel),
      holder: null,
      atRisk: Effect.succeed(false),
      draining: false
    }
    const engine = WorkflowEngine.makeUnsafe(encoded(state))
    // Closed in reverse: the drain first, then the runs' scope, then the presence registration.
    const scope = yield* Effect.scope
    const presence = yield* Scope.fork(scope)
    const runs = yield* Scope.fork(scope)
    const beforeClaim = yield* Lifecycle.holderRegistration(state, consumerId, presence)
    const loop = yield* Effect.forkScoped(claimLoop(state, engine, { runs, beforeClaim }))
    yield* Effect.addFinalizer(() => Lifecycle.drain(state, loop, graceMs))
    if (retentionMs !== undefined) yield* Maintenance.fork(WorkflowRetention.make(w, retentionMs))
    return engine
  })

/** The engine as a layer: effect's `WorkflowEngine`, on leasehold's tables. */
export const layer = (
  options: WorkflowOptions = {}
): Layer.Layer<WorkflowEngine.WorkflowEngine, InvalidInput | StoreError, SqlClient.SqlClient> =>
  Layer.unwrap(Effect.map(engineModules, ([WorkflowEngine]) => Layer.effect(WorkflowEngine.WorkflowEngine, make(options))))

/** The engine's environment variables (docs/configuration.md), by option. */
export const variables = WorkflowConfig.workflowVariables

/**
 * {@link layer} configured from the environment: `LEASEHOLD_WORKFLOW_LEASE`,
 * `LEASEHOLD_WORKFLOW_POLL_INTERVAL`, `LEASEHOLD_WORKFLOW_CONCURRENCY`,
 * `LEASEHOLD_WORKFLOW_SHUTDOWN_GRACE`, `LEASEHOLD_WORKFLOW_RETENTION` and `LEASEHOLD_SCHEMA` (through the current
 * `ConfigProvider`); `options` apply where a variable is unset. A bad value fails the layer
 * with a `ConfigInvalid` naming its variable and rule.
 */
export const layerFromEnv = (
  options: WorkflowOptions = {}
): Layer.Layer<WorkflowEngine.WorkflowEngine, InvalidInput | StoreError | ConfigInvalid, SqlClient.SqlClient> =>
  Layer.unwrap(Effect.gen(function*() {
    const fromEnv = yield* WorkflowConfig.workflowFromEnv
    const schema = yield* QueueConfig.schemaFromEnv
    return layer({
      ...options,
      schema: schema ?? options.schema,
      lease: fromEnv.leaseMs ?? options.lease,
      pollInterval: fromEnv.pollIntervalMs ?? options.pollInterval,
      concurrency: fromEnv.concurrency ?? options.concurrency,
      shutdownGrace: fromEnv.shutdownGraceMs ?? options.shutdownGrace,
      retention: fromEnv.retention ?? options.retention
    })
  }))

/**
 * Mark an activity exactly-once for its writes to the engine's database:
 * `activity.annotate(LeaseholdWorkflow.WithTransaction, true)`. Its writes and its recorded result
 * commit in one transaction, the execution locked by its lease token first (the same key as
 * effect's `ClusterSchema.WithTransaction`).
 */
export const WithTransaction = Transactional.WithTransaction

/** List executions (status, what each is suspended on, its clocks, counts): see `workflow/admin.ts`. */
export const list = WorkflowAdmin.list

/** The recorded activity attempts of one execution. */
export const activities = WorkflowAdmin.activities

/** One execution with its activity attempts, done deferreds and clocks (none if it does not exist). */
export const show = WorkflowAdmin.show

/** Delete executions completed longer ago than `olderThan` (default 7 days), as the engine's retention does by itself. */
export const prune = WorkflowAdmin.prune

/** The statuses an execution can have. */
export const statuses = WorkflowAdmin.statuses

/** An execution as listed. */
export type Execution = WorkflowAdmin.Execution

/** An execution in full, as {@link show} answers it. */
export type ExecutionDetail = WorkflowAdmin.ExecutionDetail
