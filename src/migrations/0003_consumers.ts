/**
 * Migration 3: the consumers table, for session liveness (see `ConsumerPresence`).
 *
 * Each running consumer keeps one row: who it is (host, pid), when it started,
 * when it last heartbeated, and the advisory-lock key it holds for as long as
 * its database session lives. A reaper releases the claims of a consumer whose
 * heartbeat is stale AND whose lock is free: both signals must agree.
 */
import { Effect } from "effect"
import * as SqlClient from "effect/sql/SqlClient"

/** Build the migration for `schema` (already validated as an identifier). */
export default (schema: string) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const consumers = sql(`${schema}.consumers`)
    const lockKeys = sql(`${schema}.consumer_lock_keys`)
    // Lock keys are handed out by a sequence, a fresh one per presence session, so two
    // sessions never share one (a shared key would only make reaping more conservative,
    // never wrong). Positive int4 values, cycling: the second key of pg_advisory_lock(int4, int4).
    yield* sql`CREATE SEQUENCE ${lockKeys} AS integer MINVALUE 1 MAXVALUE 2147483647 CYCLE`
    yield* sql`CREATE TABLE ${consumers} (
      id           text        PRIMARY KEY,
      host         text        NOT NULL,
      pid          integer     NOT NULL,
      lock_key     integer,
      backend_pid  integer,
      started_at   timestamptz NOT NULL DEFAULT now(),
      heartbeat_at timestamptz NOT NULL DEFAULT now()
    )`
    // lock_key NULL: this consumer runs without session liveness (not established yet, or
    // behind a transaction-mode pooler), and the reaper never releases its claims: they
    // end by lease expiry. backend_pid is the session holding the lock, for operators.
    yield* sql`COMMENT ON COLUMN ${consumers}.lock_key IS
      'second key of pg_advisory_lock(<schema class>, lock_key) held by the consumer''s presence session; NULL = no session liveness, its claims end by lease expiry only'`
    // The reaper's first question, every second in every consumer: who has a stale heartbeat?
    yield* sql`CREATE INDEX consumers_heartbeat_idx ON ${consumers} (heartbeat_at)`
    // The reaper's second: which live claims does a dead consumer hold? Partial: only leased rows.
    yield* sql`CREATE INDEX messages_leased_by_idx ON ${sql(`${schema}.messages`)} (leased_by) WHERE lease_token IS NOT NULL`
  })
