/**
 * Migration 4: redrives in the attempt history, and attempt numbers that go on after one.
 *
 * `attempt_base` is how many attempts a message had before its last redrive (0 if never
 * redriven): `attempts` counts the attempts of the current drive (what `max_attempts`
 * bounds), and the history numbers each attempt `attempt_base + attempts`. A redrive adds
 * the drive's attempts to the base and records a `redriven` row.
 */
import { Effect } from "effect"
import * as SqlClient from "effect/sql/SqlClient"

/** Build the migration for `schema` (already validated as an identifier). */
export default (schema: string) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const messages = sql(`${schema}.messages`)
    const attempts = sql(`${schema}.attempts`)
    yield* sql`ALTER TABLE ${messages} ADD COLUMN attempt_base integer NOT NULL DEFAULT 0`
    yield* sql`ALTER TABLE ${attempts} DROP CONSTRAINT IF EXISTS attempts_outcome_check`
    yield* sql`ALTER TABLE ${attempts} ADD CONSTRAINT attempts_outcome_check
      CHECK (outcome IN ('acked', 'retried', 'dead-lettered', 'released', 'lease-lost', 'lease-expired', 'redriven'))`
  })
