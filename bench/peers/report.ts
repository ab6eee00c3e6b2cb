/**
 * What `npm run bench` (bench/peers/run.ts) prints and writes: the run's header (code, machine,
 * server, load), per C a table of medians with each adapter's ratio to the raw worker and to the
 * best peer, every run's rates, pickup latency, SIGKILL-to-rerun, and the README's table. The same
 * rows go to the console (plain columns) and to a markdown file (bench/results/).
 */
import { execFileSync } from "node:child_process"
import { availableParallelism, cpus, loadavg, totalmem } from "node:os"
import { percentile, repoRoot, table } from "../chaos/lib.ts"
import { fmtMb, fmtMs, fmtPct, fmtRate, median, ratio } from "../support/orchestrator.ts"
import { type Adapter, config, PEERS, steadyJobs } from "./config.ts"
import { fmtS, type KillKind, type KillResult, killBound, type LatencyResult } from "./probes.ts"
import type { Result } from "./throughput.ts"

/** A table: its title line and rows (the first row the column names). */
export interface Table {
  readonly title: string
  readonly rows: ReadonlyArray<ReadonlyArray<string>>
}

const git = (...args: ReadonlyArray<string>) => execFileSync("git", args, { cwd: repoRoot, encoding: "utf8" }).trim()

/** The checkout's commit, and whether src/ or bench/ differ from it. */
export const commit = (): { readonly head: string; readonly dirty: boolean } => {
  try {
    return { head: git("rev-parse", "--short", "HEAD"), dirty: git("status", "--porcelain", "--", "src", "bench", "package.json") !== "" }
  } catch {
    return { head: "unknown", dirty: false }
  }
}

/** The checkout's commit when the run starts (what it packs and measures), not when it ends. */
export const codeAtStart = commit()

/** The 1, 5 and 15 minute load averages and the cores. */
export const loadLine = () => `load average ${loadavg().map((l) => l.toFixed(2)).join(", ")} (1, 5, 15 min) on ${availableParallelism()} cores`

/** The busiest other processes now (by CPU share since they started), as `name pcpu%`. */
export const busiest = (): string => {
  try {
    return execFileSync("ps", ["-eo", "pcpu=,comm=", "--sort=-pcpu"], { encoding: "utf8" }).split("\n").map((l) => l.trim()).filter((l) => l !== "")
      .slice(0, 6).map((l) => l.replace(/^(\S+)\s+(.*)$/, "$2 $1%")).join(", ")
  } catch {
    return "(ps failed)"
  }
}

/** The machine line. */
export const machineLine = () =>
  `machine: ${availableParallelism()} cores (${(cpus()[0]?.model ?? "?").trim()}), ${Math.round(totalmem() / 2 ** 30)} GB RAM, Node ${process.versions.node}`

/** The PEERS_* knobs set for this run, as `NAME=value` (none: the defaults). */
export const knobsLine = () => {
  const set = Object.entries(process.env).filter(([k]) => k.startsWith("PEERS_")).map(([k, v]) => `${k}=${v}`).sort()
  return `knobs: ${set.length === 0 ? "none (the defaults)" : set.join(" ")}`
}

const byAdapter = (results: ReadonlyArray<Result>, c: number) => (a: Adapter, f: (r: Result) => number | undefined) =>
  median(results.filter((r) => r.adapter === a && r.c === c).map(f).filter((v): v is number => v !== undefined))

/** Per C: medians and ratios to the raw worker and to the best peer, for steady, cold and send. */
export const rateTable = (results: ReadonlyArray<Result>, adapters: ReadonlyArray<Adapter>, c: number): Table => {
  const med = byAdapter(results, c)
  const best = (f: (r: Result) => number | undefined) => {
    const values = PEERS.map((p) => med(p, f)).filter((v): v is number => v !== undefined)
    return values.length === 0 ? undefined : Math.max(...values)
  }
  const columns = [(r: Result) => r.steadyRate, (r: Result) => r.coldRate, (r: Result) => r.sendRate]
  const rows: Array<Array<string>> = [[`C=${c}`, "steady jobs/s", "/ raw", "/ best peer", "cold jobs/s", "/ raw", "/ best peer", "send jobs/s", "/ raw", "/ best peer", "peak RSS", "CPU"]]
  for (const a of adapters) {
    const mine = results.filter((r) => r.adapter === a && r.c === c)
    if (mine.length === 0) continue
    const marks = [mine.some((r) => r.steadyDone < steadyJobs) ? " +" : "", mine.some((r) => r.coldPartial === true) ? " +" : "", ""]
    rows.push([
      a,
      ...columns.flatMap((f, i) => [`${fmtRate(med(a, f))}${marks[i]}`, ratio(med(a, f), med("raw-pg", f)), ratio(med(a, f), best(f))]),
      fmtMb(med(a, (r) => r.rssKb)),
      fmtPct(med(a, (r) => r.cpuShare))
    ])
  }
  const title = `C=${c}: ${config.reps > 1 ? `medians of ${config.reps} repetitions` : "one repetition"}; best peer: the faster of ${PEERS.join(" and ")} in that column`
  return { title, rows }
}

/** Every run's steady and cold rate, to show the noise. */
export const everyRunTable = (results: ReadonlyArray<Result>, adapters: ReadonlyArray<Adapter>): Table => {
  const rows: Array<Array<string>> = [["C", "adapter", ...Array.from({ length: config.reps }, (_, i) => `run ${i + 1}: steady / cold / send`)]]
  for (const c of config.concurrencies) {
    for (const a of adapters) {
      const mine = results.filter((r) => r.adapter === a && r.c === c).sort((x, y) => x.rep - y.rep)
      if (mine.length > 0) rows.push([String(c), a, ...mine.map((r) => `${fmtRate(r.steadyRate)} / ${fmtRate(r.coldRate)} / ${fmtRate(r.sendRate)}`)])
    }
  }
  return { title: "every run, jobs/s (adapters alternating: the listed order in odd repetitions, reversed in even ones)", rows }
}

/** PEERS_PG_STATS=1: per C, each adapter's server time and WAL per job in its steady windows (medians), beside its rate. */
export const serverTable = (results: ReadonlyArray<Result>, adapters: ReadonlyArray<Adapter>): Table => {
  const rows: Array<Array<string>> = [["C", "adapter", "steady jobs/s", "server exec us/job", "WAL B/job", "/ leasehold's exec"]]
  for (const c of config.concurrencies) {
    const med = byAdapter(results, c)
    const ours = med("leasehold", (r) => r.server?.execUs)
    for (const a of adapters) {
      const exec = med(a, (r) => r.server?.execUs)
      if (exec === undefined) continue
      const wal = med(a, (r) => r.server?.walBytes)
      rows.push([
        String(c),
        a,
        fmtRate(med(a, (r) => r.steadyRate)),
        exec.toFixed(1),
        wal === undefined ? "-" : String(Math.round(wal)),
        ours === undefined || ours === 0 ? "-" : (exec / ours).toFixed(2)
      ])
    }
  }
  return {
    title: "on the server in the steady windows (pg_stat_statements: statement execution time and WAL per job finished, " +
      "commits' flushes not included; medians)",
    rows
  }
}

/** Pickup latency per adapter: every repetition's samples together, and each repetition's p50. */
export const latencyTable = (latencies: ReadonlyArray<LatencyResult>): Table => ({
  title: `pickup latency across processes (handler start - send time; idle worker at C=10, single sends ${config.latencyIntervalMs} ms apart; ` +
    `${config.latencyReps} repetition(s), adapters in turn, a fresh worker each: percentiles over all their samples)`,
  rows: [
    ["pickup latency", "p50", "p95", "p99", "max", "n", "p50 of each run"],
    ...[...new Set(latencies.map((l) => l.adapter))].map((adapter) => {
      const runs = latencies.filter((l) => l.adapter === adapter).sort((x, y) => x.rep - y.rep)
      const values = runs.flatMap((l) => l.values)
      const expected = runs.reduce((n, l) => n + l.expected, 0)
      return [adapter, ...[50, 95, 99, 100].map((p) => fmtMs(percentile(values, p))), `${values.length}/${expected}`, runs.map((l) => fmtMs(percentile(l.values, 50))).join(", ")]
    })
  ]
})

/** One kind of SIGKILL-to-rerun for one adapter: its p50 and each run (`> budget` for a miss). */
const killCells = (runs: ReadonlyArray<KillResult>): [string, string] => {
  if (runs.length === 0) return ["-", "not tried (missed the budget with a standing worker)"]
  const each = runs.map((k) => (k.rerunMs === undefined ? `> ${fmtS(config.killBudgetMs)}` : fmtS(k.rerunMs)))
  const p50 = runs.every((k) => k.rerunMs !== undefined) ? fmtS(median(runs.map((k) => k.rerunMs!))!) : `> ${fmtS(config.killBudgetMs)}`
  return [p50, each.join(", ")]
}

/** SIGKILL-to-rerun per adapter: with a worker already running (what a fleet sees), and with a fresh one (start-up included). */
export const killTable = (kills: ReadonlyArray<KillResult>): Table => ({
  title: "SIGKILL-to-rerun (one job whose handler never finishes, its worker A SIGKILLed): B standing = a second worker already " +
    "running and idle when A is killed; B fresh = B started at once after the kill, its start-up included",
  rows: [
    ["SIGKILL-to-rerun", "B standing: kill -> rerun (p50)", "each run", "B fresh: kill -> rerun (p50)", "each run", "B fresh: kill -> B ready (p50)", "the adapter's bound"],
    ...[...new Set(kills.map((k) => k.adapter))].map((adapter) => {
      const of = (kind: KillKind) => kills.filter((k) => k.adapter === adapter && k.kind === kind)
      const ready = of("fresh").flatMap((k) => (k.readyMs === undefined ? [] : [k.readyMs]))
      return [adapter, ...killCells(of("standing")), ...killCells(of("fresh")), ready.length === 0 ? "-" : fmtS(median(ready)!), killBound[adapter]]
    })
  ]
})

/** The README's table ("Against other queues"): steady medians per C, leasehold's ratios, peak RSS. */
export const readmeTable = (results: ReadonlyArray<Result>, versions: Record<string, string | undefined>): Table => {
  const label = (a: Adapter) => (versions[a] === undefined ? a : `${a} ${versions[a]}`)
  const rows: Array<Array<string>> = [[
    "C",
    "leasehold",
    label("graphile-worker"),
    label("pg-boss"),
    "raw SKIP LOCKED on `pg`",
    "leasehold / best peer",
    "leasehold / raw",
    "cold: leasehold / best peer",
    "peak RSS: leasehold, graphile-worker, pg-boss, raw"
  ]]
  for (const c of config.concurrencies) {
    const med = byAdapter(results, c)
    const steady = (a: Adapter) => med(a, (r) => r.steadyRate)
    const cold = (a: Adapter) => med(a, (r) => r.coldRate)
    const bestOf = (f: (a: Adapter) => number | undefined) => Math.max(...PEERS.map((p) => f(p) ?? 0))
    const rss = (["leasehold", "graphile-worker", "pg-boss", "raw-pg"] as const).map((a) => med(a, (r) => r.rssKb))
    rows.push([
      String(c),
      fmtRate(steady("leasehold")),
      fmtRate(steady("graphile-worker")),
      fmtRate(steady("pg-boss")),
      fmtRate(steady("raw-pg")),
      ratio(steady("leasehold"), bestOf(steady)),
      ratio(steady("leasehold"), steady("raw-pg")),
      ratio(cold("leasehold"), bestOf(cold)),
      `${rss.map((kb) => (kb === undefined ? "-" : String(Math.round(kb / 1024)))).join(", ")} MB`
    ])
  }
  return { title: "steady jobs/s (medians), leasehold's ratios, worker peak RSS", rows }
}

/** A table as plain columns, for the console. */
export const plain = (t: Table) => `${t.title}\n${table(t.rows)}\n`

/** A table as markdown. */
export const markdown = (t: Table) => {
  const line = (row: ReadonlyArray<string>) => `| ${row.map((cell) => cell.replaceAll("|", "\\|")).join(" | ")} |`
  return [`${t.title}:`, "", line(t.rows[0]!), `|${t.rows[0]!.map(() => "---").join("|")}|`, ...t.rows.slice(1).map(line), ""].join("\n")
}
