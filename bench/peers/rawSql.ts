/**
 * The raw baseline's statements (issue 29), shared by its worker (raw-pg.ts, in `npm run bench`)
 * and `npm run bench:isolated` (isolated.ts), so both measure the same text. Shaped as the issue
 * describes the smallest honest SKIP LOCKED worker: a five-column table, a claim that moves the
 * visibility time forward, a DELETE by id array.
 */

/** The queue table (the send role creates it). */
export const createTable = `CREATE TABLE IF NOT EXISTS q (
    id bigserial PRIMARY KEY, vt timestamptz NOT NULL DEFAULT now(), read_ct int NOT NULL DEFAULT 0,
    enqueued_at timestamptz NOT NULL DEFAULT now(), payload jsonb)`

/** The bulk send: one row per element of `$1` (jsonb text). */
export const bulkInsert = "INSERT INTO q (vt, read_ct, enqueued_at, payload) SELECT now(), 0, now(), p FROM unnest($1::jsonb[]) AS p"

/** The claim of up to `$1` visible rows, hidden for 30 s. */
export const claim = `UPDATE q SET vt = now() + interval '30 seconds', read_ct = read_ct + 1
      WHERE id IN (SELECT id FROM q WHERE vt <= now() ORDER BY id FOR UPDATE SKIP LOCKED LIMIT $1)
      RETURNING id, payload`

/** The completion of the claimed rows `$1`. */
export const deleteClaimed = "DELETE FROM q WHERE id = ANY($1::bigint[])"
