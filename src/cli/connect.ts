/**
 * What every command does after its arguments were checked: connect to the store (migrating only
 * for the commands that write), print, and mark a command that ends normally on Ctrl-C.
 */
import { Console, Context, Effect, Layer } from "effect"
import * as SqlClient from "effect/sql/SqlClient"
import * as Migrations from "../Migrations.ts"
import * as PgQueueStore from "../PgQueueStore.ts"
import * as QueueConfig from "../QueueConfig.ts"
import { QueueStore } from "../QueueStore.ts"
import { StoreSettings } from "../StoreSettings.ts"
import { SchemaNotMigrated } from "./errors.ts"

/**
 * The store (and its SQL client and validated schema) from LEASEHOLD_DATABASE_URL and
 * LEASEHOLD_SCHEMA, for the current scope. `migrate` only for the commands that write.
 */
export const connect = (options: { readonly migrate: boolean; readonly maxConnections?: number }) =>
  Effect.gen(function*() {
    const schema = yield* QueueConfig.schemaFromEnv
    const layer = PgQueueStore.layer({ schema, leasePool: false, migrate: options.migrate }).pipe(
      Layer.provideMerge(QueueConfig.pgLayerFromEnv({ maxConnections: options.maxConnections ?? 2, applicationName: "leasehold-cli" }))
    )
    const context = yield* Layer.build(layer)
    const sql = Context.get(context, SqlClient.SqlClient)
    const validated = Context.get(context, StoreSettings).schema
    if (!options.migrate) {
      const pending = yield* Effect.provideService(Migrations.pending({ schema: validated }), SqlClient.SqlClient, sql)
      if (pending.length > 0) return yield* Effect.fail(new SchemaNotMigrated({ schema: validated, pending }))
    }
    return { store: Context.get(context, QueueStore), sql, schema: validated, context }
  })


/** Print one result on stdout. */
export const print = (text: string) => Console.log(text)

/** Set while `stats --watch` refreshes or `serve` serves: Ctrl-C then ends the command normally (exit 0). */
let watching = false

/** From now on Ctrl-C ends the command normally (exit 0): `stats --watch` and `serve` run until then. */
export const endOnInterrupt: Effect.Effect<void> = Effect.sync(() => {
  watching = true
})

/** Whether {@link endOnInterrupt} ran: the teardown then turns an interrupt into exit 0. */
export const interruptEndsNormally = (): boolean => watching
