/**
 * What the adapter scripts of `npm run bench` share (bench/peers/run.ts
 * starts them): their settings from the environment, a loose import of a peer
 * installed for the benchmark only (under `.tmp/peers`, never a dependency of
 * the package, so not known to tsc), and the sender's timing line.
 *
 * Every adapter script has two roles (PEERS_ROLE):
 *   send    set up (migrate, create the queue), print SETUP, then enqueue PEERS_JOBS
 *           no-op jobs PEERS_CHUNK per call, one call after another, print SENT <ms> <calls>, exit 0
 *   single  (pickup latency) PEERS_WARM then PEERS_SENDS single jobs PEERS_INTERVAL_MS apart,
 *           each carrying its send time (`{ sentAt, warm }`), print SENT, exit 0
 *   work    one worker process at concurrency PEERS_CONCURRENCY with a no-op handler that counts
 *           and times its runs (../throughput/protocol.ts: READY, FIRST, WARM, HANDLED, COUNT lines;
 *           with BENCH_MODE=latency, a LAT line per job: handler start - sentAt)
 */
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { pathToFileURL } from "node:url"
import { wallMs } from "../throughput/protocol.ts"

export interface PeerEnv {
  readonly role: "send" | "single" | "work"
  readonly url: string
  readonly jobs: number
  readonly chunk: number
  readonly concurrency: number
  readonly prefix: string
}

export const peerEnv = (): PeerEnv => ({
  role: process.env["PEERS_ROLE"] === "send" ? "send" : process.env["PEERS_ROLE"] === "single" ? "single" : "work",
  url: process.env["PEERS_URL"] ?? "",
  jobs: Number(process.env["PEERS_JOBS"] ?? "0"),
  chunk: Number(process.env["PEERS_CHUNK"] ?? "1000"),
  concurrency: Number(process.env["PEERS_CONCURRENCY"] ?? "10"),
  prefix: process.env["PEERS_PREFIX"] ?? ""
})

/**
 * The ES module of a package installed under `<prefix>/node_modules` (its `exports` string or
 * `main`), imported by path: typed `any` on purpose, the peers' types are not in this project.
 */
export const importPeer = async (prefix: string, name: string): Promise<any> => {
  const dir = join(prefix, "node_modules", name)
  const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as { exports?: unknown; main?: string }
  const entry = typeof pkg.exports === "string" ? pkg.exports : pkg.main ?? "index.js"
  return import(pathToFileURL(join(dir, entry)).href)
}

/** The installed version of a peer (printed in the header). */
export const peerVersion = (prefix: string, name: string): string | undefined => {
  try {
    return (JSON.parse(readFileSync(join(prefix, "node_modules", name, "package.json"), "utf8")) as { version?: string }).version
  } catch {
    return undefined
  }
}

/** The send role's loop: `sendChunk(from, count)` PEERS_CHUNK jobs at a time, timed; prints SENT. */
export const timedSend = async (env: PeerEnv, sendChunk: (from: number, count: number) => Promise<unknown>): Promise<void> => {
  console.log("SETUP")
  const started = wallMs()
  let calls = 0
  for (let from = 0; from < env.jobs; from += env.chunk) {
    await sendChunk(from, Math.min(env.chunk, env.jobs - from))
    calls++
  }
  console.log(`SENT ${(wallMs() - started).toFixed(3)} ${calls}`)
}

/** The single role's loop: one job at a time on a fixed schedule, each carrying its send time; prints SENT. */
export const timedSingles = async (sendOne: (payload: { readonly sentAt: number; readonly warm: boolean }) => Promise<unknown>): Promise<void> => {
  const sends = Number(process.env["PEERS_SENDS"] ?? "200")
  const warm = Number(process.env["PEERS_WARM"] ?? "10")
  const intervalMs = Number(process.env["PEERS_INTERVAL_MS"] ?? "20")
  console.log("SETUP")
  const start = wallMs()
  for (let k = 0; k < warm + sends; k++) {
    const wait = start + k * intervalMs - wallMs()
    if (wait > 0) await new Promise((r) => setTimeout(r, Math.ceil(wait)))
    await sendOne({ sentAt: wallMs(), warm: k < warm })
  }
  console.log(`SENT ${sends}`)
}

export const payloads = (from: number, count: number): Array<{ readonly i: number }> =>
  Array.from({ length: count }, (_, k) => ({ i: from + k }))

/**
 * The job body of every adapter's worker: `record` (count and time it), or, with PEERS_HANG=1 (the
 * SIGKILL-to-rerun run), print `RUN <wallMs> <pid>` and never finish, as a handler still busy when
 * its worker is killed.
 */
export const runJob = (record: (payload: unknown) => void) =>
  process.env["PEERS_HANG"] === "1"
    ? (_payload: unknown): Promise<void> => {
      console.log(`RUN ${wallMs().toFixed(3)} ${process.pid}`)
      return new Promise<void>(() => undefined)
    }
    : async (payload: unknown): Promise<void> => record(payload)

/** SIGTERM/SIGINT end a worker with exit 0 (the COUNT line is printed on exit). */
export const exitOnSignal = (stop: () => Promise<unknown> = () => Promise.resolve()) => {
  let stopping = false
  const onSignal = () => {
    if (stopping) return
    stopping = true
    const timer = setTimeout(() => process.exit(0), 5_000)
    void stop().catch(() => undefined).finally(() => {
      clearTimeout(timer)
      process.exit(0)
    })
  }
  process.on("SIGTERM", onSignal)
  process.on("SIGINT", onSignal)
}
