/**
 * The raw baseline of `npm run bench:own`: the smallest honest PostgreSQL queue
 * worker, over the same driver (`@effect/sql-pg`) and leasehold's own messages
 * table (in a schema of its own). One loop: claim up to C ready rows with
 * `FOR UPDATE SKIP LOCKED` (hiding them for a 30 s lease with a fresh token,
 * as a real queue must), run their handlers at once, delete them all in one
 * statement. When the queue is empty it sleeps until a NOTIFY on the queue's
 * channel (sent by bench/throughput/producer.ts) or 1 s. No renewals, no
 * fencing, no retries, no history: what leasehold is measured against.
 * Run, like the leasehold worker, as compiled JavaScript (see run.ts).
 * Stdout protocol: see protocol.ts.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { PgClient } from "@effect/sql-pg"
import { Cause, Effect, Exit, Queue, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { announceReady, makeRecorder, QUEUE, rawChannel, workerEnv } from "./protocol.ts"

const env = workerEnv("raw worker")
const record = makeRecorder(env)

const program = Effect.gen(function*() {
  const sql = (yield* SqlClient.SqlClient).withoutTransforms()
  const wake = yield* (yield* PgClient.PgClient).listen(rawChannel(env.schema))
  const table = sql(`${env.schema}.messages`)
  const claim = sql<{ id: bigint; payload: unknown }>`
    WITH picked AS (
      SELECT id FROM ${table}
      WHERE queue = ${QUEUE} AND state = 'ready' AND visible_at <= now()
      ORDER BY priority, visible_at, id
      LIMIT ${env.concurrency}
      FOR UPDATE SKIP LOCKED
    )
    UPDATE ${table} AS m
    SET visible_at = now() + interval '30 seconds', attempts = m.attempts + 1,
        lease_token = gen_random_uuid(), leased_by = 'raw', leased_at = now()
    FROM picked WHERE m.id = picked.id
    RETURNING m.id, m.payload`
  announceReady()
  while (true) {
    const rows = yield* claim
    if (rows.length === 0) {
      yield* Effect.raceFirst(Queue.take(wake), Effect.sleep("1 second"))
      yield* Queue.clear(wake)
      continue
    }
    yield* Effect.forEach(rows, (row) => Effect.sync(() => record(row.payload)), { concurrency: "unbounded", discard: true })
    yield* sql`DELETE FROM ${table} WHERE id = ANY(${`{${rows.map((r) => r.id).join(",")}}`}::bigint[])`
  }
})

const url = process.env["BENCH_DATABASE_URL"] ?? ""
const Pg = PgClient.layer({ url: Redacted.make(url), maxConnections: 4, applicationName: "bench-raw" })

// SIGTERM interrupts the loop: that is a normal end (exit 0).
NodeRuntime.runMain(Effect.scoped(program).pipe(Effect.provide(Pg)), {
  teardown: (exit, onExit) => onExit(Exit.isFailure(exit) && !Cause.hasInterruptsOnly(exit.cause) ? 1 : 0)
})
