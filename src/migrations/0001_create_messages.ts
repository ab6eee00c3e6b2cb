/**
 * Migration 1: the messages table and the indexes that serve claiming.
 *
 * One table holds every live and dead message; `state` tells them apart, so a
 * dead-letter move and a redrive are single-row UPDATEs and a message keeps
 * its id for life. Acked messages are deleted.
 */
import { Effect } from "effect"
import * as SqlClient from "effect/sql/SqlClient"

/** Build the migration for `schema` (already validated as an identifier). */
export default (schema: string) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const messages = sql(`${schema}.messages`)
    yield* sql`CREATE TABLE ${messages} (
      id           bigserial PRIMARY KEY,
      queue        text        NOT NULL,
      task         text        NOT NULL,
      payload      jsonb       NOT NULL,
      headers      jsonb       NOT NULL DEFAULT '{}'::jsonb,
      priority     integer     NOT NULL DEFAULT 0,
      state        text        NOT NULL DEFAULT 'ready' CHECK (state IN ('ready', 'dead')),
      enqueued_at  timestamptz NOT NULL DEFAULT now(),
      visible_at   timestamptz NOT NULL DEFAULT now(),
      attempts     integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
      max_attempts integer     NOT NULL DEFAULT 25 CHECK (max_attempts >= 1),
      lease_token  uuid,
      leased_by    text,
      leased_at    timestamptz,
      dedup_key    text,
      last_error   text,
      dead_reason  text,
      dead_at      timestamptz
    )`
    // Serves claim: WHERE queue = $1 AND state = 'ready' AND visible_at <= now ORDER BY priority, visible_at, id.
    yield* sql`CREATE INDEX messages_claim_idx ON ${messages} (queue, priority, visible_at, id) WHERE state = 'ready'`
    // Serves nextVisibleAt (earliest future visible_at of a queue) and the stats counts.
    yield* sql`CREATE INDEX messages_visible_idx ON ${messages} (queue, visible_at) WHERE state = 'ready'`
    // Dedup: at most one live message per (queue, dedup_key); dead letters do not count.
    yield* sql`CREATE UNIQUE INDEX messages_dedup_idx ON ${messages} (queue, dedup_key)
      WHERE dedup_key IS NOT NULL AND state = 'ready'`
    // Serves dead-letter listing, redrive and purge by queue.
    yield* sql`CREATE INDEX messages_dead_idx ON ${messages} (queue, dead_at, id) WHERE state = 'dead'`
  })
