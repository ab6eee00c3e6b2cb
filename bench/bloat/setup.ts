/**
 * What `npm run bench:bloat` does before its runs: the peers installed under .tmp/peers (as
 * bench/peers does, with BLOAT_INSTALL=1; for the benchmark only), the adapter scripts compiled
 * with bench/peers/tsconfig.json (leasehold with the src/ it imports, as an application runs
 * dist/), and the header: code, machine, server settings, and what else was running.
 */
import { execFileSync } from "node:child_process"
import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs"
import { availableParallelism, cpus, loadavg, totalmem } from "node:os"
import { join, relative } from "node:path"
import { nodeBinary, repoRoot } from "../chaos/lib.ts"
import { peerVersion } from "../peers/common.ts"
import type { PgSession } from "./pg.ts"
import { type Adapter, settings } from "./settings.ts"

const peerSpecs: Partial<Record<Adapter, string>> = { "graphile-worker": "graphile-worker@0.18", "pg-boss": "pg-boss@12" }

/** The adapters to run: leasehold and raw-pg always, a peer when installed under .tmp/peers. */
export const availableAdapters = (log: (text: string) => void): Array<Adapter> => {
  const peers = settings.adapters.filter((a) => peerSpecs[a] !== undefined)
  if (settings.install && peers.length > 0) {
    mkdirSync(settings.peersPrefix, { recursive: true })
    const manifest = join(settings.peersPrefix, "package.json")
    if (!existsSync(manifest)) writeFileSync(manifest, `${JSON.stringify({ name: "leasehold-bench-peers", private: true })}\n`)
    execFileSync("npm", ["install", "--prefix", settings.peersPrefix, "--no-audit", "--no-fund", "--loglevel=error", ...peers.map((a) => peerSpecs[a]!)], {
      cwd: settings.peersPrefix,
      stdio: ["ignore", "inherit", "inherit"]
    })
  }
  return settings.adapters.filter((a) => {
    if (peerSpecs[a] === undefined || peerVersion(settings.peersPrefix, a) !== undefined) return true
    log(`skipping ${a}: not installed under ${relative(repoRoot, settings.peersPrefix)} (npm install --prefix .tmp/peers ${peerSpecs[a]}, or BLOAT_INSTALL=1)`)
    return false
  })
}

/** Compile the adapter scripts into `<log dir>/build`; the folder. */
export const compileAdapters = (log: (text: string) => void): string => {
  const buildDir = join(settings.logDir, "build")
  rmSync(buildDir, { recursive: true, force: true })
  mkdirSync(buildDir, { recursive: true })
  try {
    execFileSync(nodeBinary, [join(repoRoot, "node_modules", ".bin", "tsc"), "-p", join(repoRoot, "bench", "peers", "tsconfig.json"), "--outDir", buildDir], {
      cwd: repoRoot,
      stdio: ["ignore", "pipe", "pipe"]
    })
  } catch (error) {
    const e = error as { stdout?: Buffer; stderr?: Buffer }
    log(`tsc reported errors; the emitted JavaScript runs anyway:\n${`${e.stdout ?? ""}${e.stderr ?? ""}`.trimEnd()}`)
  }
  writeFileSync(join(buildDir, "package.json"), `${JSON.stringify({ type: "module", private: true })}\n`)
  return buildDir
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
    `adapters: ${adapters.map((a) => (peerSpecs[a] === undefined ? a : `${a} ${peerVersion(settings.peersPrefix, a)}`)).join(", ")}`,
    `per run: ${settings.jobs.toLocaleString("en-US")} messages bulk-sent, VACUUM ANALYZE, CHECKPOINT, then one worker at C=${settings.concurrency} until all ran ` +
      `or ${Math.round(settings.durationMs / 1000)} s; a sample every ${settings.sampleMs / 1000} s; bloated: a REPEATABLE READ transaction idle for the whole run ` +
      `(its snapshot taken by SELECT 1 FROM the queue table); clean and bloated alternate (the order flips per adapter)`
  ]
}
