/**
 * The lease pool: a second, small client on the same server as the main `PgClient`, with a
 * `statement_timeout` of its own, for lease traffic (renewals, and the consumer's finishing
 * writes), so work that exhausts the main pool cannot starve renewals and a stuck statement
 * cannot hold a renewal forever. Used by `PgQueueStore` and the workflow engine.
 *
 * @since 0.1.0
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import { Effect, type Scope } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import type { SqlClient } from "effect/sql"
import * as Pooler from "../Pooler.ts"
import { classify, type StoreError } from "../QueueError.ts"

/** How the lease pool is built. */
export interface LeasePoolOptions {
  readonly maxConnections: number
  readonly statementTimeoutMs: number
  /** Appended to the main client's application name (`<name>-<suffix>`). */
  readonly suffix: string
}

/**
 * The lease pool over the `PgClient` in context, without transforms; `undefined` when there is no
 * `PgClient` to copy the connection settings from. Through a pooler no startup parameter is sent
 * (refused there): its statements are bounded by their callers' timeouts.
 */
export const make = (options: LeasePoolOptions): Effect.Effect<SqlClient.SqlClient | undefined, StoreError, Scope.Scope> =>
  Effect.gen(function*() {
    const main = yield* Effect.serviceOption(PgClient.PgClient)
    if (main._tag === "None") return undefined
    const client = yield* PgClient.make({
      ...main.value.config,
      maxConnections: options.maxConnections,
      minConnections: 0,
      applicationName: `${main.value.config.applicationName ?? "leasehold"}-${options.suffix}`,
      keepAlive: main.value.config.keepAlive ?? "10 seconds",
      startupParameters: Pooler.startupParameters((yield* Pooler.current).mode, main.value.config.startupParameters, {
        statement_timeout: String(Math.round(options.statementTimeoutMs))
      })
    }).pipe(Effect.provide(Reactivity.layer), classify("connect lease pool"))
    return client.withoutTransforms()
  })
