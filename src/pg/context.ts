/**
 * The one record every statement module of the PostgreSQL store takes: the clients, the
 * schema's tables, the NOTIFY channel, the time source, the error wrapper and the limits.
 * Built once per store, in `PgQueueStore.make`.
 *
 * @since 0.1.0
 */
import type { PgClient } from "@effect/sql-pg"
import type { Deferred, Effect, Option, PubSub, Scope } from "effect"
import type { CompletionEvent } from "../Lifecycle.ts"
import type { SqlClient, Statement } from "effect/sql"
import type * as CancelInbox from "../internal/cancelInbox.ts"
import type * as Validate from "../internal/validate.ts"
import type { Announcing } from "./channel.ts"
import type { Op } from "./op.ts"

/** What every statement of the store needs, built once per store. */
export interface PgContext {
  /** The schema holding the tables (validated as an identifier). */
  readonly schema: string
  /** The main client, without transforms: every statement but the lease traffic. */
  readonly sql: SqlClient.SqlClient
  /** The lease pool (renew and the finishing writes), or the main client when there is none. */
  readonly leaseSql: SqlClient.SqlClient
  /** The `PgClient` in context, if any: the LISTEN connection copies its settings. */
  readonly pg: Option.Option<PgClient.PgClient>
  /** `<schema>.messages`. */
  readonly table: Statement.Identifier
  /** `<schema>.attempts`: the attempt history. */
  readonly attemptsTable: Statement.Identifier
  /** `<schema>.queues`: pause rows. */
  readonly queuesTable: Statement.Identifier
  /** `<schema>.unique_keys`: uniqueness-window reservations. */
  readonly uniqueTable: Statement.Identifier
  /** `<schema>.schedules`. */
  readonly schedulesTable: Statement.Identifier
  /**
   * The queues this store last saw with flow limits: their claims go straight to the limited
   * claim, and their finished messages wake idle consumers (a slot came back).
   */
  readonly limitedQueues: Set<string>
  /** `<schema>.flow_limits`: the flow limits per queue and task. */
  readonly limitsTable: Statement.Identifier
  /** `<schema>.flow_keys`: each key's next turn and weight. */
  readonly keysTable: Statement.Identifier
  /** `<schema>.flow_rates`: the starts inside each rate window. */
  readonly ratesTable: Statement.Identifier
  /** The NOTIFY channel of the schema (`notifyChannel`). */
  readonly channel: string
  /** The completion-event channel of the schema (`endedChannel`). */
  readonly endedChannel: string
  /** Whether the statements that end runs announce them on `endedChannel` (the store option `announceEnds`). */
  readonly announceEnds: boolean
  /** The completion events heard on `endedChannel`, for `completions` (`events.ts`). */
  readonly events: EventsHub
  /** Send limits and defaults: the largest payload, the default attempts. */
  readonly limits: Validate.SendLimits
  /**
   * The time every statement is run at: `null` means "use the database's now()" (every
   * statement reads `coalesce($now, now())`, see `storeTime`); with `clock: "effect"`, Effect's `Clock`.
   */
  readonly currentTime: Effect.Effect<Date | null>
  /** Run one operation: time it in a span, classify its failures (`op.ts`). */
  readonly op: Op
  /** Run a statement that announces what it wrote, or again without the NOTIFY when its queue is full. */
  readonly announcing: Announcing
  /** Subscribers of `cancels`, per queue: filled by the `sends` listeners of this store. */
  readonly cancelListeners: CancelInbox.Registry
}


/** The store's hub of completion events (`events.ts`): where its listener publishes, and whether it was started. */
export interface EventsHub {
  readonly pubsub: PubSub.PubSub<CompletionEvent>
  /** Done once LISTEN is in place (or listening is impossible); set when the listener starts. */
  listening: Deferred.Deferred<void> | undefined
  /** The scope the listener lives in: the store's. */
  readonly scope: Scope.Scope
}
