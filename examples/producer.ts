/**
 * Sending (see README): with the task's declaration and the `TaskClient` layer only,
 * type-checked, encoded through the task's schema, and inside your own transaction
 * when you want it to commit with your writes.
 *
 * `LEASEHOLD_DATABASE_URL=... node --conditions=leasehold-source examples/producer.ts` (in this checkout: `leasehold` resolves to src/ under that condition, to the built dist/ otherwise). The `users (name, email)` table
 * is your application's, not leasehold's: it is found on the connection's search_path
 * (`public.users` unless your role or database sets another), never in `LEASEHOLD_SCHEMA`,
 * where leasehold keeps its own tables. Create it first, e.g.
 * `CREATE TABLE public.users (name text, email text)`.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { PgQueueStore, QueueConfig, TaskClient } from "leasehold"
import { sendWelcomeEmail } from "./tasks.ts" // the declaration only: no handler, no worker code

const signUp = (name: string, to: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    // The user row and the email commit together, or not at all.
    return yield* sql.withTransaction(Effect.gen(function*() {
      yield* sql`INSERT INTO users (name, email) VALUES (${name}, ${to})`
      return yield* TaskClient.send(sendWelcomeEmail, { to, name }, { dedupKey: `welcome:${to}`, delay: "10s" })
    }))
  })

// One layer for sending: TaskClient on the store, on the same client as your own SQL.
const SenderLayer = TaskClient.layer.pipe(
  Layer.provide(PgQueueStore.layer()),
  Layer.provideMerge(QueueConfig.pgLayerFromEnv())
)

signUp("Ada", "ada@example.com").pipe(
  Effect.tap((sent) => Effect.logInfo(`enqueued ${sent.id}${sent.deduplicated ? " (already queued)" : ""}`)),
  Effect.provide(SenderLayer),
  NodeRuntime.runMain
)
