/**
 * What `npm run bench:bloat` does before its runs: leasehold's tarball and the peers installed
 * under .tmp/peers and the adapter scripts compiled into .tmp/peers/app, both as `npm run bench`
 * does (bench/peers/install.ts; for the benchmark only), and the header: code, machine, server settings, and what else was running.
 */
import { execFileSync } from "node:child_process"
import { availableParallelism, cpus, loadavg, totalmem } from "node:os"
import { relative } from "node:path"
import { repoRoot } from "../chaos/lib.ts"
import { peerVersion } from "../peers/common.ts"
import { appDir, prefix } from "../peers/config.ts"
import { compile, install, leaseholdEntry } from "../peers/install.ts"
import type { PgSession } from "./pg.ts"
import { type Adapter, settings } from "./settings.ts"

/**
 * The adapters to run, installed as `npm run bench` installs them (bench/peers/install.ts):
 * leasehold's packed tarball with its Effect peers always, and the peers asked for (skipped with
 * a message when their install fails). PEERS_SKIP_INSTALL=1 uses .tmp/peers as it is.
 */
export const availableAdapters = (log: (text: string) => void): Array<Adapter> => {
  const present = install(settings.adapters)
  return settings.adapters.filter((a) => {
    if (present.has(a)) return true
    log(`skipping ${a}: not installed under ${relative(repoRoot, prefix)}`)
    return false
  })
}

/**
 * The adapter scripts compiled as `npm run bench` compiles them, into .tmp/peers/app (leasehold
 * imported by name from its tarball's dist/, never from src/); the folder.
 */
export const compileAdapters = (log: (text: string) => void): string => {
  const ms = compile()
  log(`compiled the adapters into ${relative(repoRoot, appDir)} in ${(ms / 1000).toFixed(1)} s; leasehold is ${leaseholdEntry()}`)
  return appDir
}

const git = (args: ReadonlyArray<string>) => execFileSync("git", args, { cwd: repoRoot, encoding: "utf8" }).trim()

/** The busiest processes of the machine over one second (what ran beside the benchmark), from `top`. */
export const besideLines = (): Array<string> => {
  const load = `load average ${loadavg().map((l) => l.toFixed(2)).join(", ")}`
  try {
    const out = execFileSync("top", ["-b", "-c", "-n", "2", "-d", "1", "-w", "160"], { encoding: "utf8" })
    const second = out.slice(out.lastIndexOf("\ntop - ") + 1).split("\n")
    const head = second.findIndex((l) => l.trimStart().startsWith("PID"))
    const busy = second.slice(head + 1).filter((l) => Number(l.trim().split(/\s+/)[8] ?? 0) >= 5).slice(0, 8)
    return [`${load}; processes at 5 % CPU or more over one second (top: pid, user, ..., %CPU, %MEM, time, command):`, ...busy.map((l) => `  ${l.trim()}`)]
  } catch {
    return [load]
  }
}

/** The header of the run: code, machine, server and its settings. */
export const headerLines = async (admin: PgSession, adapters: ReadonlyArray<Adapter>): Promise<Array<string>> => {
  const names = ["server_version", "fsync", "synchronous_commit", "full_page_writes", "shared_buffers", "autovacuum", "autovacuum_naptime", "autovacuum_vacuum_scale_factor"]
  const rows = (await admin.query("SELECT name, setting FROM pg_settings WHERE name = ANY($1)", [names])).rows
  const setting = (name: string) => String(rows.find((r) => r["name"] === name)?.["setting"] ?? "?")
  const dirty = git(["status", "--porcelain", "--", "src", "bench"]) !== ""
  return [
    `code: ${git(["rev-parse", "--short", "HEAD"])}${dirty ? " with uncommitted changes in src/ or bench/" : ""}`,
    `machine: ${availableParallelism()} cores (${(cpus()[0]?.model ?? "?").trim()}), ${Math.round(totalmem() / 2 ** 30)} GB RAM, Node ${process.versions.node}`,
    `PostgreSQL ${setting("server_version")} (embedded, durable): fsync=${setting("fsync")}, synchronous_commit=${setting("synchronous_commit")}, ` +
      `full_page_writes=${setting("full_page_writes")}, shared_buffers=${Math.round(Number(setting("shared_buffers")) * 8 / 1024)} MB, ` +
      `autovacuum=${setting("autovacuum")} (naptime ${setting("autovacuum_naptime")} s, scale factor ${setting("autovacuum_vacuum_scale_factor")})`,
    `adapters: ${adapters.map((a) => `${a} ${peerVersion(prefix, a) ?? ""}`.trim()).join(", ")}`,
    `per run: ${settings.jobs.toLocaleString("en-US")} messages bulk-sent, VACUUM ANALYZE, CHECKPOINT, then one worker at C=${settings.concurrency} until all ran ` +
      `or ${Math.round(settings.durationMs / 1000)} s; a sample every ${settings.sampleMs / 1000} s; bloated: a REPEATABLE READ transaction idle for the whole run ` +
      `(its snapshot taken by SELECT 1 FROM the queue table); clean and bloated alternate (the order flips per adapter)`
  ]
}
