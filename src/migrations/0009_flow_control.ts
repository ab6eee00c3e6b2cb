/**
 * Migration 9: flow control (see docs/flow-control.md).
 *
 * - `messages.flow_key`: the key given at send (per-key limits, fairness, FIFO).
 * - `messages.turn`: a keyed message's place in the round-robin of a fair queue, given at
 *   insert by the trigger `flow_turn` (every insert path — bulk, dedup, unique, schedules —
 *   goes through it; the trigger's WHEN clause keeps unkeyed inserts free of it).
 * - `messages.flow_limited`: set by a claim made under limits. Such a lease is a slot: its
 *   renewal is refused once it expired (a slot that came back is never taken back), and the
 *   held index lists it while its lease token is set.
 * - `flow_limits`: the limits per queue (task '') and per task, with who wrote them and the
 *   queue's served turn (the highest turn a fair claim took).
 * - `flow_keys`: each key's next turn and weight.
 * - `flow_rates`: the start times inside each rate window, per queue, task and key bucket.
 */
import { Effect } from "effect"
import * as SqlClient from "effect/sql/SqlClient"

/** Build the migration for `schema` (already validated as an identifier). */
export default (schema: string) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const messages = sql(`${schema}.messages`)
    yield* sql`ALTER TABLE ${messages}
      ADD COLUMN flow_key text,
      ADD COLUMN turn bigint NOT NULL DEFAULT 0,
      ADD COLUMN flow_limited boolean NOT NULL DEFAULT false`
    yield* sql`CREATE TABLE ${sql(`${schema}.flow_limits`)} (
      queue              text        NOT NULL,
      task               text        NOT NULL DEFAULT '',
      concurrency        integer     CHECK (concurrency >= 1),
      rate_count         integer     CHECK (rate_count >= 1),
      rate_period_ms     integer     CHECK (rate_period_ms >= 1),
      key_concurrency    integer     CHECK (key_concurrency >= 1),
      key_rate_count     integer     CHECK (key_rate_count >= 1),
      key_rate_period_ms integer     CHECK (key_rate_period_ms >= 1),
      fifo               boolean     NOT NULL DEFAULT false,
      fair               boolean     NOT NULL DEFAULT false,
      source             text        NOT NULL CHECK (source IN ('code', 'operator')),
      served_turn        bigint      NOT NULL DEFAULT 0,
      updated_at         timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (queue, task)
    )`
    yield* sql`CREATE TABLE ${sql(`${schema}.flow_keys`)} (
      queue     text    NOT NULL,
      key       text    NOT NULL,
      next_turn bigint  NOT NULL DEFAULT 0,
      weight    integer NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 100),
      PRIMARY KEY (queue, key)
    )`
    yield* sql`CREATE TABLE ${sql(`${schema}.flow_rates`)} (
      queue  text          NOT NULL,
      task   text          NOT NULL DEFAULT '',
      key    text          NOT NULL DEFAULT '',
      starts timestamptz[] NOT NULL,
      PRIMARY KEY (queue, task, key)
    )`
    // Live slots of a limited queue: only rows claimed under limits whose token is set (a few
    // per slot), so counting what is in flight never reads the backlog.
    yield* sql`CREATE INDEX messages_held_idx ON ${messages} (queue, task, flow_key)
      WHERE lease_token IS NOT NULL AND flow_limited`
    // A key's oldest ready message (FIFO's head) and the ready messages of one key (status).
    yield* sql`CREATE INDEX messages_key_idx ON ${messages} (queue, flow_key, id)
      WHERE state = 'ready' AND flow_key IS NOT NULL`
    // The fair claim's order over keyed messages: priority, then turn.
    yield* sql`CREATE INDEX messages_fair_idx ON ${messages} (queue, priority, turn, id)
      WHERE state = 'ready' AND flow_key IS NOT NULL`
    // The turn of a keyed message: max(key's next turn, queue's served turn); the key's next
    // turn moves on by 1e6 / weight. The key row is locked by the upsert until the inserting
    // transaction ends: sends of one key take turns one after another.
    // The function body is text, not a parameterised statement: the schema goes in quoted (it
    // is a validated lower-case identifier, which may still be a reserved word such as "user").
    const quoted = `"${schema}"`
    yield* sql.unsafe(`CREATE FUNCTION ${quoted}.flow_turn() RETURNS trigger LANGUAGE plpgsql AS $$
      DECLARE served bigint;
      BEGIN
        SELECT l.served_turn INTO served FROM ${quoted}.flow_limits AS l WHERE l.queue = NEW.queue AND l.task = '';
        served := coalesce(served, 0);
        INSERT INTO ${quoted}.flow_keys AS k (queue, key, next_turn) VALUES (NEW.queue, NEW.flow_key, served + 1000000)
        ON CONFLICT (queue, key) DO UPDATE SET next_turn = greatest(k.next_turn, served) + 1000000 / k.weight
        RETURNING k.next_turn - 1000000 / k.weight INTO NEW.turn;
        RETURN NEW;
      END $$`)
    yield* sql.unsafe(`CREATE TRIGGER flow_turn BEFORE INSERT ON ${quoted}.messages
      FOR EACH ROW WHEN (NEW.flow_key IS NOT NULL) EXECUTE FUNCTION ${quoted}.flow_turn()`)
  })
