/**
 * The markdown result of `npm run bench` (bench/peers/run.ts): one file per run with the header
 * (date, commit, machine, server, knobs, load during the run, the busiest processes at start and
 * end), the README's table, the tables per C, every run's rates, pickup latency and
 * SIGKILL-to-rerun. A full run writes it to bench/results/<date>-<commit>.md (committed: the
 * README's table is copied from it, and test/Readme.test.ts checks the copy); a quick run, or one
 * with PEERS_ADAPTERS or PEERS_CONCURRENCY set, writes it to its log directory unless
 * PEERS_RESULTS names a path (`0`: no file).
 */
import { writeFileSync } from "node:fs"
import { loadavg } from "node:os"
import { join, relative } from "node:path"
import { repoRoot } from "../chaos/lib.ts"
import { config } from "./config.ts"
import { codeAtStart, markdown, type Table } from "./report.ts"

/** The 1-minute load average, sampled every 10 s while the benchmark runs. */
export const loadSampler = () => {
  const samples: Array<number> = [loadavg()[0]!]
  const timer = setInterval(() => samples.push(loadavg()[0]!), 10_000)
  timer.unref()
  return {
    stop: () => clearInterval(timer),
    line: () => {
      const sorted = [...samples].sort((a, b) => a - b)
      const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!.toFixed(2)
      return `1-minute load average during the run (${samples.length} samples, every 10 s): min ${at(0)}, median ${at(0.5)}, max ${at(1)}`
    }
  }
}

/** Where this run's markdown goes, or undefined for none. */
export const resultsPath = (): string | undefined => {
  if (config.results === "0") return undefined
  if (config.results !== undefined && config.results !== "") return config.results
  const partial = config.quick || process.env["PEERS_ADAPTERS"] !== undefined || process.env["PEERS_CONCURRENCY"] !== undefined
  const stamp = config.startedAt.toISOString().slice(0, 16).replace(/:/g, "")
  const name = `${stamp}Z-${codeAtStart.head}.md`
  return partial ? join(config.logDir, name) : join(repoRoot, "bench", "results", name)
}

/** Write the run's markdown to `path`; the path relative to the repository. */
export const writeResults = (path: string, header: ReadonlyArray<string>, readme: Table, tables: ReadonlyArray<Table>, failures: ReadonlyArray<string>) => {
  const text = [
    `# npm run bench, ${config.startedAt.toISOString().slice(0, 16).replace("T", " ")} UTC`,
    "",
    "What each figure measures: [docs/benchmarks.md](../../docs/benchmarks.md#against-the-peers); the knobs:",
    "[bench/README.md](../README.md#npm-run-bench). Written by the run itself (bench/peers/results.ts).",
    "",
    ...header.map((h) => `- ${h}`),
    "",
    "## The README's table",
    "",
    markdown(readme),
    "## Per concurrency",
    "",
    ...tables.map(markdown),
    failures.length === 0 ? "Every run finished." : `Failed: ${failures.join("; ")}`,
    ""
  ].join("\n")
  writeFileSync(path, text)
  return relative(repoRoot, path)
}
