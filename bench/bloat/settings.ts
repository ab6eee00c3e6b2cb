/**
 * The knobs of `npm run bench:bloat` (environment), read once.
 *
 *   BLOAT_QUICK=1        a smoke check: 20,000 messages, 60 s at most per run, samples every 2 s
 *   BLOAT_JOBS           messages enqueued per run (default 1,000,000)
 *   BLOAT_DURATION       longest worker run (default 10 min); a run ends at all messages or this
 *   BLOAT_SAMPLE         time between samples (default 5 s)
 *   BLOAT_CONCURRENCY    the worker's C (default 50)
 *   BLOAT_ADAPTERS       which, in order (default "leasehold,raw-pg,graphile-worker,pg-boss";
 *                        a peer not installed under .tmp/peers is skipped)
 *   BLOAT_MODES          "clean,bloated" (default), or one of them
 *   BLOAT_CHUNK          messages per bulk send call (default 1,000)
 *   PEERS_SKIP_INSTALL=1 use .tmp/peers as it is (else leasehold's tarball and the peers are
 *                        installed first, as `npm run bench` does)
 *   BLOAT_LOG_DIR        worker output and results.json (default .tmp/bench-bloat/<time>)
 *   BLOAT_REPORT         a results.json: print its tables and exit (a long run stopped early too;
 *                        with the BLOAT_JOBS, BLOAT_DURATION and BLOAT_SAMPLE that run had)
 */
import { join } from "node:path"
import { envInt, envMs, repoRoot } from "../chaos/lib.ts"

/** The adapters the benchmark knows. */
export const ADAPTERS = ["leasehold", "raw-pg", "graphile-worker", "pg-boss"] as const
/** One of {@link ADAPTERS}. */
export type Adapter = (typeof ADAPTERS)[number]
/** A run without (clean) or with (bloated) the idle REPEATABLE READ transaction. */
export type Mode = "clean" | "bloated"

const quick = process.env["BLOAT_QUICK"] === "1"

const list = (name: string, fallback: string): Array<string> =>
  (process.env[name] ?? fallback).split(",").map((s) => s.trim()).filter((s) => s !== "")

const checked = <A extends string>(name: string, values: Array<string>, allowed: ReadonlyArray<A>): Array<A> =>
  values.map((v) => {
    if (!(allowed as ReadonlyArray<string>).includes(v)) throw new Error(`${name}: expected some of ${allowed.join(", ")}, got ${JSON.stringify(v)}`)
    return v as A
  })

/** The settings of this run. */
export const settings = {
  quick,
  jobs: envInt("BLOAT_JOBS", quick ? 20_000 : 1_000_000),
  durationMs: envMs("BLOAT_DURATION", quick ? 60_000 : 600_000),
  sampleMs: envMs("BLOAT_SAMPLE", quick ? 2_000 : 5_000),
  concurrency: Math.max(1, envInt("BLOAT_CONCURRENCY", 50)),
  adapters: checked("BLOAT_ADAPTERS", list("BLOAT_ADAPTERS", ADAPTERS.join(",")), ADAPTERS),
  modes: checked<Mode>("BLOAT_MODES", list("BLOAT_MODES", "clean,bloated"), ["clean", "bloated"]),
  chunk: Math.max(1, envInt("BLOAT_CHUNK", 1_000)),
  peersPrefix: join(repoRoot, ".tmp", "peers"),
  logDir: process.env["BLOAT_LOG_DIR"] ?? join(repoRoot, ".tmp", "bench-bloat", new Date().toISOString().replace(/[:.]/g, "-"))
}
