/**
 * Migration 13: queue depths over time, for the dashboard's charts (issue 31).
 *
 * `depth_samples` holds one row per queue per sample: what the depth gauges show a single
 * process, kept in the database so any server (a standalone `leasehold serve` too) draws
 * the fleet's history. One process stores a sample at a time (an advisory lock, and no
 * sample sooner than the interval after the last one); samples past retention are deleted
 * by the sampler. Keyed by time first: every read is a time range.
 *
 * `consumers.settings`: what a consumer runs with (its queues, concurrency, lease), written
 * with its heartbeat, for the dashboard's consumers page; NULL for a consumer of an older
 * version.
 */
import { Effect } from "effect"
import * as SqlClient from "effect/sql/SqlClient"

/** Build the migration for `schema` (already validated as an identifier). */
export default (schema: string) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    yield* sql`CREATE TABLE ${sql(`${schema}.depth_samples`)} (
      at                  timestamptz NOT NULL,
      queue               text        NOT NULL,
      ready               integer     NOT NULL,
      delayed             integer     NOT NULL,
      in_flight           integer     NOT NULL,
      dead                integer     NOT NULL,
      oldest_ready_age_ms bigint      NOT NULL,
      PRIMARY KEY (at, queue)
    )`
    // Nullable, no default: adding it rewrites nothing.
    yield* sql`ALTER TABLE ${sql(`${schema}.consumers`)} ADD COLUMN settings jsonb`
  })
