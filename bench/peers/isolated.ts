/**
 * `npm run bench:isolated`: what each queue's claim and completion cost the server per job, one
 * statement at a time. No worker process and no concurrency: one client drains the queue in
 * cycles of a claim of N jobs and the completion of the N, on an embedded PostgreSQL of its own
 * per adapter (durable settings, `pg_stat_statements` preloaded). In `npm run bench` the same
 * figures (PEERS_PG_STATS=1) are wall time on a machine the server shares with the workers, and
 * they inflate with the load; here they are the statements' own work (still wall time: compare
 * within one run, whose rounds interleave the adapters).
 *
 * Per adapter and repetition: ISOLATED_JOBS jobs bulk-sent, ANALYZE, the statistics reset, the
 * queue drained (a VACUUM of the queue table every ISOLATED_VACUUM_EVERY jobs, its time reported
 * apart: without it each claim steps over more dead index entries the longer the run), then the
 * claim's and the completion's execution time and WAL per job read back. The adapters run one
 * after the other, ISOLATED_ROUNDS times (the order reversed every other round); the table shows
 * medians over every repetition, the range beside them. The statements are the adapters' own:
 * - leasehold: `QueueStore.claim` and `QueueStore.complete` of acks, from src/ (fenced, with the
 *   history rows and the ended announcement); `leasehold-quiet`: the same without the
 *   announcement (`announceEnds: false`); `leasehold-prep`: the same after ISOLATED_LEASEHOLD_PREP
 *   (SQL run once after the migrations, statements split on `;`: e.g. dropping an index, to price it);
 * - graphile-worker 0.18: its batch `get_job` (src/sql/getJobs.ts, queue strategy 2, as its
 *   worker sends it for a batch) and `complete_jobs` (the DELETE over an id array);
 * - raw-pg: bench/peers/raw-pg.ts's claim and DELETE (the same text, from rawSql.ts).
 * graphile-worker and `pg` are loaded from `.tmp/peers` (installed by `npm run bench`; without
 * them graphile-worker is skipped and raw-pg uses the repository's `pg`).
 *
 * Knobs: ISOLATED_ADAPTERS (default leasehold,graphile-worker,raw-pg; also leasehold-quiet,
 * leasehold-prep), ISOLATED_BATCH (50), ISOLATED_JOBS (40000), ISOLATED_REPS (5),
 * ISOLATED_ROUNDS (1), ISOLATED_VACUUM_EVERY (1000; 0: never), ISOLATED_LEASEHOLD_PREP.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, ManagedRuntime, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { execFileSync } from "node:child_process"
import { existsSync } from "node:fs"
import { createRequire } from "node:module"
import { join } from "node:path"
import { pathToFileURL } from "node:url"
import { startPostgres } from "../../dev/EmbeddedPostgres.ts"
import * as PgQueueStore from "../../src/PgQueueStore.ts"
import { QueueStore } from "../../src/QueueStore.ts"
import { envInt, repoRoot } from "../chaos/lib.ts"
import { ackOf } from "../support/completions.ts"
import { median } from "../support/orchestrator.ts"
import { prefix } from "./config.ts"
import * as RawSql from "./rawSql.ts"

const ADAPTERS = ["leasehold", "leasehold-quiet", "leasehold-prep", "graphile-worker", "raw-pg"] as const
type Adapter = (typeof ADAPTERS)[number]
const adapters = (process.env["ISOLATED_ADAPTERS"] ?? "leasehold,graphile-worker,raw-pg").split(",").map((a) => a.trim()).filter((a) => a !== "")
for (const a of adapters) if (!(ADAPTERS as ReadonlyArray<string>).includes(a)) throw new Error(`ISOLATED_ADAPTERS: expected some of ${ADAPTERS.join(", ")}, got ${JSON.stringify(a)}`)
const batch = envInt("ISOLATED_BATCH", 50)
const jobs = envInt("ISOLATED_JOBS", 40_000)
const reps = envInt("ISOLATED_REPS", 5)
const rounds = envInt("ISOLATED_ROUNDS", 1)
const vacuumEvery = envInt("ISOLATED_VACUUM_EVERY", 1_000)
const prep = (process.env["ISOLATED_LEASEHOLD_PREP"] ?? "").split(";").map((s) => s.trim()).filter((s) => s !== "")
const SEND_CHUNK = 1_000

/** One repetition's figures, per job. */
interface Rep {
  readonly claimUs: number
  readonly completeUs: number
  readonly claimWal: number
  readonly completeWal: number
  readonly vacuumUs: number
}

/** The minimal client this file needs of node-postgres. */
interface PgPool {
  query(q: string | { name?: string; text: string; values?: ReadonlyArray<unknown> }, values?: ReadonlyArray<unknown>): Promise<{ rows: Array<any> }>
  end(): Promise<void>
}

/** A module installed under .tmp/peers (`npm run bench` installs them), or undefined. */
const peerModule = async (name: string): Promise<any> => {
  if (!existsSync(join(prefix, "node_modules", name))) return undefined
  const resolved = createRequire(join(prefix, "package.json")).resolve(name)
  return import(pathToFileURL(resolved).href)
}

/** node-postgres: the peers' install, else the repository's (a dependency of the dev tooling). */
const loadPg = async (): Promise<any> => {
  const peers = await peerModule("pg")
  if (peers !== undefined) return peers.default ?? peers
  const pgModule = "pg"
  return (await import(pgModule)).default
}

/** One adapter's statements on a fresh server: per repetition, `send` every job, then `cycle` until it claims nothing. */
interface Driver {
  readonly claimMatch: RegExp
  readonly completeMatch: RegExp
  readonly table: string
  readonly send: (from: number, count: number) => Promise<void>
  /** Claim up to `batch` and complete them; how many it claimed. */
  readonly cycle: () => Promise<number>
  readonly close: () => Promise<void>
}

/** What pg_stat_statements counted for the statements matching `match`: execution ms and WAL bytes. */
const counted = (rows: ReadonlyArray<{ query: string; t: number; w: number }>, match: RegExp) =>
  rows.filter((r) => match.test(r.query)).reduce((acc, r) => ({ ms: acc.ms + r.t, wal: acc.wal + r.w }), { ms: 0, wal: 0 })

/** Run every repetition of one driver; `pool` reads the statistics and vacuums. */
const measure = async (driver: Driver, pool: PgPool): Promise<ReadonlyArray<Rep>> => {
  const out: Array<Rep> = []
  for (let rep = 0; rep < reps; rep++) {
    for (let from = 0; from < jobs; from += SEND_CHUNK) await driver.send(from, Math.min(SEND_CHUNK, jobs - from))
    await pool.query("ANALYZE")
    await pool.query("SELECT pg_stat_statements_reset()")
    let done = 0, sinceVacuum = 0, vacuumMs = 0
    for (let n = await driver.cycle(); n > 0; n = await driver.cycle()) {
      done += n
      sinceVacuum += n
      if (vacuumEvery > 0 && sinceVacuum >= vacuumEvery) {
        const started = performance.now()
        await pool.query(`VACUUM ${driver.table}`)
        vacuumMs += performance.now() - started
        sinceVacuum = 0
      }
    }
    const { rows } = await pool.query(
      "SELECT query, total_exec_time::float8 AS t, wal_bytes::float8 AS w FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    const claim = counted(rows, driver.claimMatch)
    const complete = counted(rows, driver.completeMatch)
    out.push({
      claimUs: claim.ms * 1000 / done,
      completeUs: complete.ms * 1000 / done,
      claimWal: claim.wal / done,
      completeWal: complete.wal / done,
      vacuumUs: vacuumMs * 1000 / done
    })
  }
  return out
}

/**
 * leasehold from src/: its store's claim and acks, on @effect/sql-pg, in a runtime of their own
 * (disposed by `close`); `announce`: with the ended announcement (the store's default); `prepare`:
 * statements run after the migrations.
 */
const leaseholdDriver = async (url: string, announce: boolean, prepare: ReadonlyArray<string>): Promise<Driver> => {
  const runtime = ManagedRuntime.make(PgQueueStore.layer({ announceEnds: announce }).pipe(
    Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), maxConnections: 2, applicationName: "isolated" }))
  ))
  await runtime.runPromise(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    for (const statement of prepare) yield* sql.unsafe(statement)
  }))
  return {
    claimMatch: /picked AS/,
    completeMatch: /WITH items AS/,
    table: "leasehold.messages",
    send: (from, count) =>
      runtime.runPromise(Effect.gen(function*() {
        const store = yield* QueueStore
        yield* store.send("q", Array.from({ length: count }, (_, k) => ({ task: "noop", payload: { i: from + k } })))
      })),
    cycle: () =>
      runtime.runPromise(Effect.gen(function*() {
        const store = yield* QueueStore
        const claims = yield* store.claim("q", { lease: 30_000, limit: batch, consumer: "isolated" })
        if (claims.length > 0) yield* store.complete(claims.map((c) => ackOf(c, "isolated")))
        return claims.length
      })),
    close: () => runtime.dispose()
  }
}

/** graphile-worker's batch get_job (queue strategy 2, as getJobs.ts builds it for a batch) and complete_jobs. */
const graphileDriver = async (url: string, pool: PgPool, worker: any): Promise<Driver> => {
  const utils = await worker.makeWorkerUtils({ connectionString: url })
  await utils.migrate()
  await utils.addJobs([{ identifier: "noop", payload: {} }])
  const S = `"graphile_worker"`
  const taskId = (await pool.query(`SELECT id FROM ${S}._private_tasks WHERE identifier = 'noop'`)).rows[0].id
  await pool.query(`DELETE FROM ${S}._private_jobs`)
  const getJob = `with j_raw as (
  select jobs.job_queue_id, jobs.priority, jobs.run_at, jobs.id from ${S}._private_jobs as jobs
    where jobs.is_available = true and run_at <= now() and task_id = any($2::int[])
    and (jobs.job_queue_id is null or jobs.job_queue_id in (
      select id from ${S}._private_job_queues as job_queues where job_queues.is_available = true for update skip locked))
    order by priority asc, run_at asc limit ${batch} for update skip locked
), j as (
  select distinct on (job_queue_id, case when job_queue_id is null then id end) job_queue_id, priority, run_at, id from j_raw
    order by job_queue_id, case when job_queue_id is null then id end, priority asc, run_at asc
), q as (
  update ${S}._private_job_queues as job_queues set locked_by = $1::text, locked_at = now() from j where job_queues.id = j.job_queue_id
)
update ${S}._private_jobs as jobs set attempts = jobs.attempts + 1, locked_by = $1::text, locked_at = now() from j where jobs.id = j.id returning *`
  return {
    claimMatch: /update "graphile_worker"\._private_jobs as jobs set attempts/,
    completeMatch: /delete from "graphile_worker"\._private_jobs as jobs using unnest/,
    table: `${S}._private_jobs`,
    send: (from, count) => utils.addJobs(Array.from({ length: count }, (_, k) => ({ identifier: "noop", payload: { i: from + k } }))),
    cycle: async () => {
      const { rows } = await pool.query({ name: "get_job", text: getJob, values: ["isolated", [taskId]] })
      if (rows.length > 0) {
        await pool.query({ name: "complete_jobs", text: `delete from ${S}._private_jobs as jobs using unnest($1::bigint[]) n(n) where id = n`, values: [rows.map((r) => r.id)] })
      }
      return rows.length
    },
    close: () => utils.release()
  }
}

/** bench/peers/raw-pg.ts's table, claim and DELETE (rawSql.ts), as its worker sends them. */
const rawDriver = async (pool: PgPool): Promise<Driver> => {
  await pool.query(RawSql.createTable)
  return {
    claimMatch: /^UPDATE q SET vt/,
    completeMatch: /^DELETE FROM q WHERE id = ANY/,
    table: "q",
    send: (from, count) =>
      pool.query({ name: "send", text: RawSql.bulkInsert, values: [Array.from({ length: count }, (_, k) => JSON.stringify({ i: from + k }))] })
        .then(() => undefined),
    cycle: async () => {
      const { rows } = await pool.query({ name: "claim", text: RawSql.claim, values: [batch] })
      if (rows.length > 0) await pool.query({ name: "delete", text: RawSql.deleteClaimed, values: [rows.map((r) => r.id)] })
      return rows.length
    },
    close: async () => {}
  }
}

/** One adapter on a server of its own; undefined when it is not installed. */
const runAdapter = async (adapter: Adapter): Promise<ReadonlyArray<Rep> | undefined> => {
  const worker = adapter === "graphile-worker" ? await peerModule("graphile-worker") : undefined
  if (adapter === "graphile-worker" && worker === undefined) {
    console.log(`skipping graphile-worker: not installed under ${prefix} (npm run bench installs it)`)
    return undefined
  }
  const pg = await loadPg()
  const server = await startPostgres({ settings: ["shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=top"] })
  // One connection: the cycles run one statement at a time, and the statistics are read on it too.
  const pool: PgPool = new pg.Pool({ connectionString: server.url, max: 1 })
  // An idle client's error (the server shutting down at the end) is no failure of the run.
  ;(pool as unknown as { on: (event: string, f: (e: unknown) => void) => void }).on("error", () => undefined)
  try {
    await pool.query("CREATE EXTENSION pg_stat_statements")
    const driver = adapter === "raw-pg"
      ? await rawDriver(pool)
      : adapter === "graphile-worker"
      ? await graphileDriver(server.url, pool, worker)
      : await leaseholdDriver(server.url, adapter !== "leasehold-quiet", adapter === "leasehold-prep" ? prep : [])
    try {
      return await measure(driver, pool)
    } finally {
      await driver.close()
    }
  } finally {
    await pool.end().catch(() => undefined)
    await server.destroy()
  }
}

/** The median of a column, its range beside it. */
const cell = (xs: ReadonlyArray<number>, digits = 1) =>
  `${median(xs)!.toFixed(digits)} (${Math.min(...xs).toFixed(digits)}-${Math.max(...xs).toFixed(digits)})`

console.log(`isolated statements: ${reps} x ${jobs.toLocaleString("en-US")} jobs per adapter and round, ${rounds} round(s) (the order reversed ` +
  `every other round), claims of ${batch}, one client, VACUUM every ${vacuumEvery > 0 ? vacuumEvery.toLocaleString("en-US") + " jobs" : "(never)"}` +
  `${prep.length > 0 ? `; leasehold-prep prepared with: ${prep.join("; ")}` : ""}`)
const commit = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: repoRoot, encoding: "utf8" }).trim()
const dirty = execFileSync("git", ["status", "--porcelain", "src"], { cwd: repoRoot, encoding: "utf8" }).trim() !== ""
console.log(`code: ${commit}${dirty ? " (src/ changed)" : ""}; medians (range) over every repetition, per job`)
const results = new Map<Adapter, Array<Rep>>()
for (let round = 0; round < rounds; round++) {
  const order = (round % 2 === 0 ? adapters : [...adapters].reverse()) as ReadonlyArray<Adapter>
  for (const adapter of order) {
    const result = await runAdapter(adapter)
    if (result === undefined) continue
    results.set(adapter, [...(results.get(adapter) ?? []), ...result])
    console.log(`round ${round + 1}: ${adapter} claim ${cell(result.map((r) => r.claimUs))} + completion ${cell(result.map((r) => r.completeUs))} us a job`)
  }
}
const table = [...results]
console.log("\n| adapter | claim us | completion us | both us | claim WAL B | completion WAL B | VACUUM us |")
console.log("|---|---|---|---|---|---|---|")
for (const [adapter, rs] of table) {
  const both = rs.map((r) => r.claimUs + r.completeUs)
  console.log(`| ${adapter} | ${cell(rs.map((r) => r.claimUs))} | ${cell(rs.map((r) => r.completeUs))} | ${cell(both)} | ` +
    `${cell(rs.map((r) => r.claimWal), 0)} | ${cell(rs.map((r) => r.completeWal), 0)} | ${cell(rs.map((r) => r.vacuumUs))} |`)
}
process.exit(0)
