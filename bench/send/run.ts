/**
 * `node bench/send/run.ts` (issue 29): the bulk send of `npm run bench` on its own, before and
 * after a change. The sender scripts of bench/peers (leasehold-send.ts, raw-pg.ts, role `send`)
 * of one or more checkouts run one after another against one durable embedded PostgreSQL
 * (fsync, synchronous_commit, full_page_writes on; pg_stat_statements preloaded), a fresh
 * database per run, the order reversed every other round; leasehold is run from the checkout's
 * `src/` (`--conditions=leasehold-source`), not a packed tarball. Prints every run's rate, and
 * per round each leasehold's rate over the raw insert's of that round, and the server's mean
 * execution time of the send statement (pg_stat_statements); then the medians (rates, execution
 * times, WAL per statement) and their ratios to the raw insert's.
 *
 * Knobs (environment):
 *   SEND_CHECKOUTS   comma-separated checkout folders whose leasehold sender runs (default: this one)
 *   SEND_ROUNDS      rounds (default 5)
 *   SEND_JOBS        jobs per run (default 20000), sent PEERS_CHUNK (1000) per call
 */
import { spawn } from "node:child_process"
import { join, resolve } from "node:path"
import { startPostgres } from "../../dev/EmbeddedPostgres.ts"
import { repoRoot } from "../chaos/lib.ts"
import { connect, type PgClient } from "../peers/processes.ts"

const checkouts = (process.env["SEND_CHECKOUTS"] ?? repoRoot).split(",").map((dir) => resolve(dir))
const rounds = Number(process.env["SEND_ROUNDS"] ?? "5")
const jobs = Number(process.env["SEND_JOBS"] ?? "20000")

/** A sender: the raw insert (this checkout's raw-pg.ts) or a checkout's leasehold. */
interface Sender {
  readonly name: string
  readonly args: ReadonlyArray<string>
}
const senders: ReadonlyArray<Sender> = [
  { name: "raw", args: [join(repoRoot, "bench/peers/raw-pg.ts")] },
  ...checkouts.map((dir, k) => ({
    name: checkouts.length === 1 ? "leasehold" : `leasehold#${k + 1}`,
    args: ["--conditions=leasehold-source", join(dir, "bench/peers/leasehold-send.ts")]
  }))
]

/** One run: the rate, and the server's mean time and WAL per call of its send statement. */
interface Run {
  readonly rate: number
  readonly execMs: number
  readonly walKb: number
}

/** The send statement's server figures in `db` (its most expensive statement): mean execution ms and WAL kB per call. */
const serverFigures = async (admin: PgClient, db: string) => {
  const rows = (await admin.query(
    `SELECT total_exec_time / calls AS exec_ms, wal_bytes / calls / 1024 AS wal_kb FROM pg_stat_statements
     WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1) AND calls >= 10 ORDER BY total_exec_time DESC LIMIT 1`,
    [db]
  )).rows
  return { execMs: Number(rows[0]?.["exec_ms"] ?? NaN), walKb: Number(rows[0]?.["wal_kb"] ?? NaN) }
}

/** Run one sender to its end in a fresh database. */
const runSender = async (admin: PgClient, serverUrl: string, sender: Sender, tag: string): Promise<Run> => {
  const db = `send_${tag}`
  await admin.query(`CREATE DATABASE ${db}`)
  const url = new URL(serverUrl)
  url.pathname = `/${db}`
  try {
    const out = await new Promise<string>((ok, fail) => {
      const child = spawn(process.execPath, [...sender.args], {
        env: { ...process.env, PEERS_ROLE: "send", PEERS_URL: url.toString(), PEERS_JOBS: String(jobs), LEASEHOLD_SCHEMA: "leasehold" },
        stdio: ["ignore", "pipe", "inherit"]
      })
      let text = ""
      child.stdout.on("data", (chunk) => (text += String(chunk)))
      child.on("exit", (code) => (code === 0 ? ok(text) : fail(new Error(`${sender.name} exited ${code}: ${text}`))))
    })
    const sent = out.split("\n").find((line) => line.startsWith("SENT "))
    if (sent === undefined) throw new Error(`${sender.name}: no SENT line in ${out}`)
    return { rate: jobs / (Number(sent.split(" ")[1]) / 1000), ...await serverFigures(admin, db) }
  } finally {
    await admin.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`)
  }
}

const median = (values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

const server = await startPostgres({ settings: ["shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=top"] })
const admin = await connect(server.url)
try {
  await admin.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
  const runs = new Map<string, Array<Run>>(senders.map((s) => [s.name, []]))
  const of = (name: string, pick: (run: Run) => number) => runs.get(name)!.map(pick)
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? senders : [...senders].reverse()
    const line: Array<string> = []
    for (const [k, sender] of order.entries()) {
      const run = await runSender(admin, server.url, sender, `${round}_${k}`)
      runs.get(sender.name)!.push(run)
      line.push(`${sender.name} ${Math.round(run.rate)} (server ${run.execMs.toFixed(1)} ms)`)
    }
    const raw = runs.get("raw")![round]!
    const ratios = senders.slice(1).map((s) => {
      const run = runs.get(s.name)![round]!
      return `${s.name}/raw ${(run.rate / raw.rate).toFixed(2)} (server ${(run.execMs / raw.execMs).toFixed(2)}x)`
    })
    console.log(`round ${round + 1}: ${line.join(", ")} jobs/s; ${ratios.join(", ")}`)
  }
  const raw = median(of("raw", (r) => r.rate))
  const rawExec = median(of("raw", (r) => r.execMs))
  for (const sender of senders) {
    const rate = median(of(sender.name, (r) => r.rate))
    const exec = median(of(sender.name, (r) => r.execMs))
    console.log(
      `${sender.name}: median ${Math.round(rate)} jobs/s (${(rate / raw).toFixed(2)} of raw), server ${exec.toFixed(2)} ms ` +
        `(${(exec / rawExec).toFixed(2)}x raw) and ${median(of(sender.name, (r) => r.walKb)).toFixed(0)} kB WAL per 1,000; ` +
        `runs ${of(sender.name, (r) => r.rate).map(Math.round).join(", ")}`
    )
  }
} finally {
  await admin.end()
  await server.destroy()
}
