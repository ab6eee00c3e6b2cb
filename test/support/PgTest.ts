/**
 * Real-PostgreSQL test plumbing: a client for the run's server (started by
 * globalSetup) and a fresh schema per layer, dropped when the layer is released.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { inject } from "vitest"
import type { Insights } from "../../src/Insights.ts"
import * as PgQueueStore from "../../src/PgQueueStore.ts"
import { StoreSettings } from "../../src/StoreSettings.ts"
import type { QueueStore } from "../../src/QueueStore.ts"

/** The URL of the test server. */
export const databaseUrl = (): string => inject("databaseUrl")

/** A pooled client for the test server. */
export const clientLayer = (options: { readonly maxConnections?: number; readonly url?: string } = {}) =>
  PgClient.layer({
    url: Redacted.make(options.url ?? databaseUrl()),
    maxConnections: options.maxConnections ?? 12,
    applicationName: "leasehold-test"
  })

/** A schema name no other test file uses. */
export const uniqueSchema = (prefix = "t"): string =>
  `${prefix}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`

/** Drop `schema` when the layer is released, so test runs against a shared database leave nothing behind. */
export const dropSchemaOnRelease = (schema: string) =>
  Layer.effectDiscard(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* Effect.addFinalizer(() => sql`DROP SCHEMA IF EXISTS ${sql(schema)} CASCADE`.pipe(Effect.ignore))
  }))

/**
 * A `QueueStore` on real PostgreSQL in a fresh schema, timed by Effect's Clock
 * (so `TestClock` drives leases), with the client it runs on.
 */
export const storeLayer = (
  options: Omit<PgQueueStore.PgQueueStoreOptions, "schema"> & { readonly maxConnections?: number } = {}
): Layer.Layer<QueueStore | StoreSettings | Insights | SqlClient.SqlClient | PgClient.PgClient, unknown> => {
  const schema = uniqueSchema()
  return PgQueueStore.layer({ clock: "effect", ...options, schema }).pipe(
    Layer.provideMerge(dropSchemaOnRelease(schema)),
    Layer.provideMerge(clientLayer(options.maxConnections === undefined ? {} : { maxConnections: options.maxConnections }))
  )
}
