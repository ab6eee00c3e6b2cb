/**
 * `node bench/send/run.ts` (issue 29): the bulk send of `npm run bench` on its own, before and
 * after a change. The sender scripts of bench/peers (leasehold-send.ts, raw-pg.ts, role `send`)
 * of one or more checkouts run one after another against one durable embedded PostgreSQL
 * (fsync, synchronous_commit, full_page_writes on; pg_stat_statements preloaded), a fresh
 * database per run, the order reversed every other round; leasehold is run from the checkout's
 * `src/` (`--conditions=leasehold-source`), not a packed tarball. Prints every run's rate, and
 * per round each leasehold's rate over the raw insert's of that round; then the medians, and
 * the server's time per 1,000-row statement (pg_stat_statements: execution, WAL).
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

/** Run one sender to its end in a fresh database: its rate in jobs/s. */
const runSender = async (admin: PgClient, serverUrl: string, sender: Sender, tag: string): Promise<number> => {
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
    return jobs / (Number(sent.split(" ")[1]) / 1000)
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
  const rates = new Map<string, Array<number>>(senders.map((s) => [s.name, []]))
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? senders : [...senders].reverse()
    const line: Array<string> = []
    for (const [k, sender] of order.entries()) {
      const rate = await runSender(admin, server.url, sender, `${round}_${k}`)
      rates.get(sender.name)!.push(rate)
      line.push(`${sender.name} ${Math.round(rate)}`)
    }
    const raw = rates.get("raw")![round]!
    const ratios = senders.slice(1).map((s) => `${s.name}/raw ${(rates.get(s.name)![round]! / raw).toFixed(2)}`)
    console.log(`round ${round + 1}: ${line.join(", ")} jobs/s; ${ratios.join(", ")}`)
  }
  const raw = median(rates.get("raw")!)
  for (const sender of senders) {
    const m = median(rates.get(sender.name)!)
    console.log(`${sender.name}: median ${Math.round(m)} jobs/s (${(m / raw).toFixed(2)} of raw); runs ${rates.get(sender.name)!.map(Math.round).join(", ")}`)
  }
} finally {
  await admin.end()
  await server.destroy()
}
