/**
 * Migration 2: attempt history, and a count of lease expiries per message.
 *
 * `lease_expiries` counts claims that ended because the lease ran out (the
 * holder died or hung) rather than with an outcome: a message that keeps
 * killing workers is quarantined on it. `attempts` keeps one row per finished
 * attempt, bounded by a retention setting.
 */
import { Effect } from "effect"
import * as SqlClient from "effect/sql/SqlClient"

/** Build the migration for `schema` (already validated as an identifier). */
export default (schema: string) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const messages = sql(`${schema}.messages`)
    const attempts = sql(`${schema}.attempts`)
    yield* sql`ALTER TABLE ${messages} ADD COLUMN lease_expiries integer NOT NULL DEFAULT 0`
    yield* sql`CREATE TABLE ${attempts} (
      id          bigserial PRIMARY KEY,
      message_id  bigint      NOT NULL,
      queue       text        NOT NULL,
      task        text        NOT NULL,
      attempt     integer     NOT NULL,
      consumer    text        NOT NULL,
      started_at  timestamptz NOT NULL,
      ended_at    timestamptz NOT NULL,
      outcome     text        NOT NULL
        CHECK (outcome IN ('acked', 'retried', 'dead-lettered', 'released', 'lease-lost', 'lease-expired')),
      error       text
    )`
    // History of one message, in order.
    yield* sql`CREATE INDEX attempts_message_idx ON ${attempts} (message_id, id)`
    // Retention deletes by age.
    yield* sql`CREATE INDEX attempts_ended_idx ON ${attempts} (ended_at)`
  })
