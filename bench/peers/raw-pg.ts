/**
 * The raw baseline of `npm run bench` (issue 29): the smallest honest
 * SKIP LOCKED worker on node-postgres (`pg`), over a minimal table of its own:
 *
 *   q (id bigserial primary key, vt timestamptz, read_ct int, enqueued_at timestamptz, payload jsonb)
 *
 * One loop: claim up to C rows (`UPDATE q SET vt = now() + 30 s, read_ct = read_ct + 1 WHERE id IN
 * (SELECT id FROM q WHERE vt <= now() ORDER BY id FOR UPDATE SKIP LOCKED LIMIT C) RETURNING id,
 * payload`), run the batch, `DELETE FROM q WHERE id = ANY($1)`; prepared (named) statements, a
 * 3-connection pool. An empty claim waits for a NOTIFY on `q_new` (a client of its own; the single
 * sends of the pickup-latency run insert and notify in one statement) or 1 s. No renewals,
 * fencing, retries or history.
 * Roles and stdout protocol: common.ts.
 */
import { exitOnSignal, payloads, peerEnv, runJob, timedSend, timedSingles } from "./common.ts"
import { announceReady, makeRecorder, workerEnv } from "../throughput/protocol.ts"
import * as RawSql from "./rawSql.ts"

const env = peerEnv()
// `pg` is in node_modules (a dependency of the dev tooling) without types: imported loosely.
const pgModule = "pg"
const pg = (await import(pgModule)).default
const pool = new pg.Pool({ connectionString: env.url, max: 3, application_name: "peers-raw-pg" })

if (env.role === "send") {
  await pool.query(RawSql.createTable)
  await timedSend(env, (from, count) =>
    pool.query({
      name: "send",
      text: RawSql.bulkInsert,
      values: [payloads(from, count).map((p) => JSON.stringify(p))]
    }))
  await pool.end()
} else if (env.role === "single") {
  await timedSingles((payload) =>
    pool.query({
      name: "single",
      text: "WITH i AS (INSERT INTO q (vt, read_ct, enqueued_at, payload) VALUES (now(), 0, now(), $1::jsonb) RETURNING id) SELECT pg_notify('q_new', '') FROM i",
      values: [JSON.stringify(payload)]
    }))
  await pool.end()
} else {
  const job = runJob(makeRecorder(workerEnv("raw-pg worker")))
  let running = true
  exitOnSignal(async () => {
    running = false
  })
  const claim = {
    name: "claim",
    text: RawSql.claim,
    values: [env.concurrency]
  }
  await pool.query("SELECT 1")
  let wake: (() => void) | undefined
  let notified = false
  const listener = new pg.Client({ connectionString: env.url, application_name: "peers-raw-pg-listen" })
  await listener.connect()
  listener.on("notification", () => {
    notified = true
    wake?.()
  })
  await listener.query("LISTEN q_new")
  announceReady()
  while (running) {
    notified = false
    const rows = (await pool.query(claim)).rows as Array<{ id: string; payload: unknown }>
    if (rows.length === 0) {
      if (notified) continue
      await new Promise<void>((r) => {
        const timer = setTimeout(() => r(), 1_000)
        wake = () => {
          clearTimeout(timer)
          r()
        }
      })
      wake = undefined
      continue
    }
    await Promise.all(rows.map((row) => job(row.payload)))
    await pool.query({ name: "delete", text: RawSql.deleteClaimed, values: [rows.map((r) => r.id)] })
  }
}
