/**
 * Migration 15: no deduplication passes on the message indexes whose entries are all distinct
 * (issue 29, the bulk send).
 *
 * `messages_claim_idx` (queue, priority, visible_at, id), `messages_key_idx` (queue, flow_key,
 * id), `messages_fair_idx` (queue, priority, turn, id) and `messages_dead_idx` (queue, dead_at,
 * id) end with the message's id: no two rows share an entry, so a B-tree deduplication pass (run
 * on every full leaf page before it splits) finds nothing to merge, and the page splits anyway.
 * Sends fill the claim index's rightmost page one row after another, so every page's worth of
 * rows paid for a pass over a page of four-column entries: ~4% of a 1,000-row send's server
 * instructions (measured with callgrind on the claim index, the rest of the table as is). Old versions of one row (an update
 * that left the key as it was) are still removed by bottom-up deletion, which does not depend
 * on deduplication. `messages_leased_by_idx` and `messages_held_idx` keep it: many rows share
 * their entries. Nothing is rebuilt (posting lists already written stay readable as they are),
 * and no plan changes: a storage option only.
 */
import { Effect } from "effect"
import * as SqlClient from "effect/sql/SqlClient"

/** Build the migration for `schema` (already validated as an identifier). */
export default (schema: string) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    for (const index of ["messages_claim_idx", "messages_key_idx", "messages_fair_idx", "messages_dead_idx"]) {
      yield* sql`ALTER INDEX ${sql(`${schema}.${index}`)} SET (deduplicate_items = off)`
    }
  })
