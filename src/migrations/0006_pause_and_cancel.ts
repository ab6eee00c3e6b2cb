/**
 * Migration 6: paused queues, and cancelling messages (running ones too).
 *
 * `queues` holds one row per queue an operator has paused (kept, unpaused, after a
 * resume, so the queue stays listed). The claim statement reads it once per claim, by
 * primary key. `messages.cancel_requested_at` flags a running message whose cancel was
 * asked for: the renewal answer carries the flag to its consumer, which stops the handler
 * and deletes the message. The history gets a `cancelled` outcome, and an index by queue
 * so the queues it names can be listed without reading it all.
 */
import { Effect } from "effect"
import * as SqlClient from "effect/sql/SqlClient"

/** Build the migration for `schema` (already validated as an identifier). */
export default (schema: string) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const messages = sql(`${schema}.messages`)
    const attempts = sql(`${schema}.attempts`)
    const queues = sql(`${schema}.queues`)
    yield* sql`CREATE TABLE ${queues} (
      name      text PRIMARY KEY,
      paused    boolean     NOT NULL DEFAULT false,
      paused_at timestamptz
    )`
    // Nullable, no default: adding it rewrites nothing, and a NULL costs no bytes per row.
    yield* sql`ALTER TABLE ${messages} ADD COLUMN cancel_requested_at timestamptz`
    // Listing queues (`QueueStore.queues`) finds those known only from their history by a
    // skip scan over this index: one probe per queue, not a scan of the history.
    yield* sql`CREATE INDEX attempts_queue_idx ON ${attempts} (queue)`
    yield* sql`ALTER TABLE ${attempts} DROP CONSTRAINT IF EXISTS attempts_outcome_check`
    yield* sql`ALTER TABLE ${attempts} ADD CONSTRAINT attempts_outcome_check
      CHECK (outcome IN ('acked', 'retried', 'dead-lettered', 'released', 'lease-lost', 'lease-expired', 'redriven', 'cancelled'))`
  })
