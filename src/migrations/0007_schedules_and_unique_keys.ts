/**
 * Migration 7: cron schedules, and uniqueness windows that outlive their message.
 *
 * `schedules` holds one row per schedule key, upserted by every worker that declares it.
 * `last_slot` is the fence of exactly-once firing: a worker fires slot S with
 * `UPDATE ... SET last_slot = S WHERE key = $1 AND last_slot < S` and the send, in one
 * transaction; the losers of the race update nothing and send nothing. It is NOT NULL:
 * a new schedule starts with the time it was declared, so slots before that never fire.
 *
 * `unique_keys` reserves a (queue, key) until `until`, whatever happens to the message
 * (`message_id`): a table of its own, because acked messages are deleted and dead ones can
 * be purged, and the reservation must outlive both. An expired reservation is taken over
 * by the next send with the key.
 */
import { Effect } from "effect"
import * as SqlClient from "effect/sql/SqlClient"

/** Build the migration for `schema` (already validated as an identifier). */
export default (schema: string) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    yield* sql`CREATE TABLE ${sql(`${schema}.schedules`)} (
      key          text        PRIMARY KEY,
      cron         text        NOT NULL,
      tz           text        NOT NULL,
      queue        text        NOT NULL,
      task         text        NOT NULL,
      payload      jsonb       NOT NULL,
      last_slot    timestamptz NOT NULL,
      next_slot    timestamptz,
      fired_at     timestamptz,
      created_at   timestamptz NOT NULL DEFAULT now(),
      updated_at   timestamptz NOT NULL DEFAULT now(),
      last_seen_at timestamptz NOT NULL,
      last_seen_by text        NOT NULL
    )`
    yield* sql`CREATE TABLE ${sql(`${schema}.unique_keys`)} (
      queue      text        NOT NULL,
      key        text        NOT NULL,
      until      timestamptz NOT NULL,
      message_id bigint      NOT NULL,
      PRIMARY KEY (queue, key)
    )`
    // Serves the pruning of expired reservations (oldest first).
    yield* sql`CREATE INDEX unique_keys_until_idx ON ${sql(`${schema}.unique_keys`)} (until)`
  })
