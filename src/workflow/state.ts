/**
 * What the workflow engine of one process shares between its parts (the `Encoded` operations in
 * `engine.ts`, the claim loop and runs in `runner.ts`): the statements, the settings, the
 * registered workflows and the runs this process holds.
 *
 * @since 0.1.0
 */
import { Effect, Fiber, Schedule, Scope } from "effect"
import type { SqlError } from "effect/sql"
import type { Workflow, WorkflowEngine } from "effect/workflow"
import { isConnectionDead } from "../QueueError.ts"
import type * as Sql from "../pg/workflow.ts"
import type { Signals } from "./signals.ts"

/** A registered workflow: its definition and body, alive for its registration's scope. */
export interface Registered {
  readonly workflow: Workflow.Any
  readonly execute: (
    payload: object,
    executionId: string
  ) => Effect.Effect<unknown, unknown, WorkflowEngine.WorkflowInstance | WorkflowEngine.WorkflowEngine>
  readonly scope: Scope.Scope
}

/** A run this process holds: its claim (token), its instance, its fiber, what it heard. */
export interface Run {
  readonly claimed: Sql.Claimed
  readonly instance: WorkflowEngine.WorkflowInstance["Service"]
  fiber: Fiber.Fiber<Workflow.Result<unknown, unknown>> | undefined
  /** The interrupt requested (0 none, 1 safe, 2 unsafe), from the claim and each renewal. */
  interrupt: number
  /** Set when a renewal found the lease gone: the run is abandoned and writes nothing more. */
  lost: boolean
  /** Deferred names this run found not done, and children it found not complete: what it suspends on. */
  readonly awaiting: { readonly deferreds: Set<string>; readonly children: Set<string> }
}

/** The engine's settings, resolved. */
export interface Settings {
  readonly leaseMs: number
  readonly pollMs: number
  readonly concurrency: number
}

/** The state of one process's engine. */
export interface EngineState {
  readonly w: Sql.WorkflowSql
  /** The lease traffic's client (renewals, finishing writes): a small pool of its own when there is a `PgClient`. */
  readonly leaseSql: Sql.WorkflowSql
  readonly settings: Settings
  readonly registry: Map<string, Registered>
  readonly runs: Map<string, Run>
  readonly signals: Signals
  /**
   * This runner's presence consumer id once registered with session liveness (`leased_by` of
   * its claims, what the reaper releases by when its session dies); null without it.
   */
  holder: string | null
  /**
   * Whether this runner could be judged dead by another's reaper soon (its presence session gone
   * and its heartbeats failing): its runs stop before that, as a consumer's handlers do.
   */
  atRisk: Effect.Effect<boolean>
  /** Set when the engine shuts down: nothing more is claimed, and runs release what they hold. */
  draining: boolean
}

/** The map key of an execution. */
export const keyOf = (workflow: string, executionId: string): string => `${workflow}\u0000${executionId}`

/**
 * A statement of the engine: retried while its connection is dead (the pool reconnects), a
 * defect otherwise, since effect's `Encoded` operations have no error channel.
 */
export const statement = <A, R = never>(effect: Effect.Effect<A, SqlError.SqlError, R>): Effect.Effect<A, never, R> =>
  effect.pipe(
    Effect.retry({ while: isConnectionDead, schedule: Schedule.exponential(100, 2), times: 8 }),
    Effect.orDie
  )
