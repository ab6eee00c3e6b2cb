/**
 * Migration 10: a cheaper attempt history (issue 29). Every finished message writes one
 * history row, and each index of the history is written with it: four b-trees (the `id`
 * key, `(message_id, id)`, `ended_at`, `queue`) were a third of the finishing write's
 * server time. Two go:
 *
 * - the primary key becomes `(message_id, id)`, the order a message's history is read in
 *   (it was a separate index); `id` stays unique (its sequence) and every row keeps it;
 * - `ended_at` (what retention deletes by) is indexed by a BRIN index: rows are appended in
 *   about the order they end, so a summary per block range finds the expired ones, and a row
 *   written to a range not yet summarised costs no index write at all.
 *
 * Existing rows are kept; the new key is built over them once (a table scan, under the
 * migration's lock).
 */
import { Effect } from "effect"
import * as SqlClient from "effect/sql/SqlClient"

/** Build the migration for `schema` (already validated as an identifier). */
export default (schema: string) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const attempts = sql(`${schema}.attempts`)
    yield* sql`ALTER TABLE ${attempts} DROP CONSTRAINT attempts_pkey, ADD CONSTRAINT attempts_pkey PRIMARY KEY (message_id, id)`
    yield* sql`DROP INDEX ${sql(`${schema}.attempts_message_idx`)}`
    yield* sql`DROP INDEX ${sql(`${schema}.attempts_ended_idx`)}`
    yield* sql`CREATE INDEX attempts_ended_brin ON ${attempts} USING brin (ended_at)`
  })
