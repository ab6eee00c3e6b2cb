/**
 * What `npm run bench:bloat` needs to know of each adapter of bench/peers (used as they are):
 * the compiled script of each role and its environment (common.ts's PEERS_* protocol, leasehold's
 * LEASEHOLD_*), the tables to watch (queue, history), the messages finished so far as the
 * server's cumulative statistics count them, and the SELECT part of the adapter's claim, run
 * read-only (no FOR UPDATE SKIP LOCKED: it takes nothing) to see what a claim scans.
 */
import { join } from "node:path"
import { QUEUE } from "../throughput/protocol.ts"
import { type PgSession } from "./pg.ts"
import { type Adapter, settings } from "./settings.ts"

/** A table the sampler watches: its role and its qualified name. */
export interface Watched {
  readonly role: "queue" | "history"
  readonly name: string
}

/** The read-only SELECT part of an adapter's claim, with its parameters. */
export interface ClaimSelect {
  readonly text: string
  readonly values: ReadonlyArray<unknown>
}

/** One adapter, as the benchmark drives and watches it. */
export interface AdapterSpec {
  /** The compiled script of the send and work roles, under the build folder. */
  readonly script: (buildDir: string, role: "send" | "work") => string
  /** The tables to watch, once the adapter has set up its schema. */
  readonly tables: (session: PgSession) => Promise<ReadonlyArray<Watched>>
  /**
   * Messages finished, from pg_stat_user_tables of the queue table (cumulative, flushed by each
   * backend at most once a second while it works).
   */
  readonly finishedSql: (queueTable: string) => string
  /** The claim's SELECT part (its scan), for EXPLAIN. */
  readonly claimSelect: (session: PgSession, queueTable: string) => Promise<ClaimSelect>
}

const peerScript = (name: string) => (buildDir: string) => join(buildDir, "bench", "peers", `${name}.js`)

/** A cumulative count of the table's row in pg_stat_user_tables (`expression` over its columns). */
const statOf = (table: string, expression: string) =>
  `SELECT coalesce(sum(${expression}), 0)::bigint AS n FROM pg_stat_user_tables WHERE relid = '${table}'::regclass`

const specs: Record<Adapter, AdapterSpec> = {
  "leasehold": {
    script: (buildDir, role) =>
      role === "send" ? join(buildDir, "bench", "peers", "leasehold-send.js") : join(buildDir, "bench", "peers", "leasehold-worker.js"),
    tables: async () => [{ role: "queue", name: "leasehold.messages" }, { role: "history", name: "leasehold.attempts" }],
    // An ack deletes the message (and inserts its history row).
    finishedSql: (table) => statOf(table, "n_tup_del"),
    // src/pg/claim.ts's `picked` (its columns, its filters, its order; no FOR UPDATE SKIP LOCKED).
    claimSelect: async () => ({
      text: `SELECT id, priority, visible_at, lease_token IS NOT NULL AS expired,
               lease_token IS NOT NULL OR lease_expiries > 0 AS suspect,
               cancel_requested_at IS NOT NULL AS cancelled, leased_by AS prev_consumer, leased_at AS prev_leased_at
        FROM leasehold.messages
        WHERE queue = $1 AND state = 'ready' AND visible_at <= now()
          AND NOT EXISTS (SELECT 1 FROM leasehold.queues WHERE name = $1 AND paused)
          AND NOT EXISTS (SELECT 1 FROM leasehold.flow_limits WHERE queue = $1)
        ORDER BY priority, visible_at, id LIMIT (SELECT $2::int)`,
      values: [QUEUE, settings.concurrency]
    })
  },
  "raw-pg": {
    script: peerScript("raw-pg"),
    tables: async () => [{ role: "queue", name: "public.q" }],
    finishedSql: (table) => statOf(table, "n_tup_del"),
    claimSelect: async () => ({ text: "SELECT id FROM q WHERE vt <= now() ORDER BY id LIMIT $1", values: [settings.concurrency] })
  },
  "graphile-worker": {
    script: peerScript("graphile-worker"),
    tables: async () => [{ role: "queue", name: "graphile_worker._private_jobs" }],
    // completeJobs deletes the job.
    finishedSql: (table) => statOf(table, "n_tup_del"),
    // graphile-worker 0.18's getJobs.js (queue strategy 2), its job-queue sub-select without its lock.
    claimSelect: async () => ({
      text: `SELECT jobs.job_queue_id, jobs.priority, jobs.run_at, jobs.id FROM graphile_worker._private_jobs AS jobs
        WHERE jobs.is_available = true AND run_at <= now()
          AND task_id = ANY(ARRAY(SELECT id FROM graphile_worker._private_tasks WHERE identifier = 'noop'))
          AND (jobs.job_queue_id IS NULL OR jobs.job_queue_id IN (
            SELECT id FROM graphile_worker._private_job_queues AS job_queues WHERE job_queues.is_available = true))
        ORDER BY priority ASC, run_at ASC LIMIT ${settings.concurrency}`,
      values: []
    })
  },
  "pg-boss": {
    script: peerScript("pg-boss"),
    // pg-boss 12 keeps each queue's jobs in a table of its own (pgboss.queue.table_name).
    tables: async (session) => {
      const row = (await session.query("SELECT table_name FROM pgboss.queue WHERE name = $1", [QUEUE])).rows[0]
      return [{ role: "queue", name: `pgboss.${String(row?.["table_name"] ?? "job")}` }]
    },
    // The fetch and the completion each update the job once.
    finishedSql: (table) => statOf(table, "n_tup_upd / 2"),
    // plans.js's fetchNextJob, its `next` CTE, for a plain queue.
    claimSelect: async (_session, table) => ({
      text: `SELECT j.id FROM ${table} j
        WHERE j.name = $1 AND j.state < 'active' AND NOT j.blocked AND j.start_after <= pgboss.job_now()
        ORDER BY j.priority DESC, j.created_on LIMIT ${settings.concurrency}`,
      values: [QUEUE]
    })
  }
}

/** The spec of `adapter`. */
export const specOf = (adapter: Adapter): AdapterSpec => specs[adapter]

/** The environment of an adapter's role for a run of `jobs` messages at C, on `url`. */
export const roleEnv = (adapter: Adapter, url: string, role: "send" | "work", jobs: number): Record<string, string> => {
  const c = String(settings.concurrency)
  const common = {
    PEERS_ROLE: role,
    PEERS_URL: url,
    PEERS_JOBS: String(jobs),
    PEERS_CHUNK: String(settings.chunk),
    PEERS_CONCURRENCY: c,
    PEERS_PREFIX: settings.peersPrefix,
    BENCH_SCHEMA: "bloat",
    BENCH_MODE: "throughput",
    BENCH_EXPECT: String(jobs),
    BENCH_WARMUP: "0",
    BENCH_CONCURRENCY: c
  }
  return adapter === "leasehold"
    ? { ...common, LEASEHOLD_DATABASE_URL: url, LEASEHOLD_SCHEMA: "leasehold", LEASEHOLD_QUEUES: QUEUE, LEASEHOLD_CONCURRENCY: c }
    : common
}
