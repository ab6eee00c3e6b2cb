/**
 * Migration 8: the claim index is the only index of ready messages by queue.
 *
 * `messages_visible_idx` (queue, visible_at) served the look-ahead of idle consumers (the
 * earliest future visibility of a queue) and the listing of queue names. It also gave the
 * planner a wrong choice for the claim: on statistics gathered before a queue's backlog
 * arrived (a new table, a new queue, a burst between two autovacuum runs) the planner
 * believed the queue nearly empty, read every ready row of it through this index and sorted
 * them, on every claim (94 ms per claim of 50 over 60,000 ready rows, sorting on disk)
 * instead of taking the head of `messages_claim_idx`. Both reads now use the claim index
 * (the look-ahead one probe per priority), and every claim, send and retry writes one
 * index entry less.
 */
import { Effect } from "effect"
import * as SqlClient from "effect/sql/SqlClient"

/** Build the migration for `schema` (already validated as an identifier). */
export default (schema: string) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    yield* sql`DROP INDEX IF EXISTS ${sql(`${schema}.messages_visible_idx`)}`
  })
