/**
 * The tables `npm run bench:bloat` prints: per run, its samples (condensed); per adapter, the
 * bloated run against the clean one by messages finished (the dead tuples grow with them) and
 * by elapsed minute, and the overall rates.
 */
import { table } from "../chaos/lib.ts"
import type { RunResult } from "./runOne.ts"
import type { Sample } from "./sample.ts"
import { settings } from "./settings.ts"

const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(0)}`
const int = (n: number | undefined) => (n === undefined || !Number.isFinite(n) ? "-" : Math.round(n).toLocaleString("en-US"))
const ratio = (a: number | undefined, b: number | undefined) => (a === undefined || b === undefined || b === 0 ? "-" : (a / b).toFixed(2))

/** The seconds at which `samples` first counted `n` finished (linear between samples). */
const timeAt = (samples: ReadonlyArray<Sample>, n: number): number | undefined => {
  const i = samples.findIndex((s) => s.finished >= n)
  if (i < 0) return undefined
  if (i === 0) return samples[0]!.t
  const a = samples[i - 1]!
  const b = samples[i]!
  return b.finished === a.finished ? b.t : a.t + ((n - a.finished) / (b.finished - a.finished)) * (b.t - a.t)
}

/** The sample closest to `n` finished, or to `t` seconds. */
const sampleAt = (samples: ReadonlyArray<Sample>, by: (s: Sample) => number, x: number): Sample | undefined =>
  samples.reduce<Sample | undefined>((best, s) => (best === undefined || Math.abs(by(s) - x) < Math.abs(by(best) - x) ? s : best), undefined)

/** The claim's scan of the queue table: IOS (index-only scan) or IS (index scan) and its index, or the node type. */
const scanOf = (c: Sample["claim"]) =>
  c.index === undefined ? c.node : `${c.node === "Index Only Scan" ? "IOS" : c.node === "Index Scan" ? "IS" : c.node} ${c.index}`

/** One run's samples, every `every`-th. */
export const runTable = (run: RunResult, every: number): string => {
  const rows = [[
    "t s", "finished", "msg/s", "queue live", "queue dead", "heap MB", "idx MB", "claim idx MB", "claim hit", "read", "ms", "index", "entries", "dead entries", "removed", "heap fetches", "autovac", "load"
  ]]
  run.samples.forEach((s, i) => {
    if (i % every !== 0 && i !== run.samples.length - 1) return
    const q = s.tables[0]!
    const c = s.claim
    rows.push([
      s.t.toFixed(0), int(s.finished), int(s.rate), int(q.live), int(q.dead), mb(q.heapBytes), mb(q.indexBytes), mb(s.claimIndexBytes),
      int(c.hit), int(c.read), c.ms.toFixed(2), scanOf(c), int(c.entriesRead), int(c.deadEntries), int(c.removedByFilter), int(c.heapFetches),
      String(q.autovacuums), s.load1.toFixed(1)
    ])
  })
  const history = run.samples.at(-1)?.tables.find((t) => t.role === "history")
  const tail = history === undefined ? "" : `\nhistory ${history.name} at the end: ${int(history.live)} live, ${int(history.dead)} dead, heap ${mb(history.heapBytes)} MB, indexes ${mb(history.indexBytes)} MB`
  return `${run.adapter} ${run.mode}${run.holderXmin === undefined ? "" : ` (idle snapshot xmin ${run.holderXmin})`}: ` +
    `${int(run.handled)} handled in ${run.seconds.toFixed(1)} s = ${int(run.handled / run.seconds)}/s${run.complete ? "" : " (duration ran out)"}\n${table(rows)}${tail}`
}

/** A tenth of `n`, rounded down to 1, 2 or 5 times a power of ten (10 to 25 steps over `n`). */
const tenthOf = (n: number) => {
  const raw = Math.max(1, n / 10)
  const power = 10 ** Math.floor(Math.log10(raw))
  return [5, 2, 1].map((m) => m * power).find((s) => s <= raw) ?? power
}

/**
 * Bloated against clean by messages finished: the rate over each tenth of what the bloated run
 * finished (rounded), and what a claim scanned at its end.
 */
export const progressTable = (clean: RunResult, bloated: RunResult): string => {
  const step = tenthOf(Math.min(settings.jobs, bloated.samples.at(-1)?.finished ?? settings.jobs))
  const rows = [["finished", "clean msg/s", "bloated msg/s", "ratio", "bloated queue dead", "claim buffers clean", "bloated", "claim ms clean", "bloated", "dead entries / claim"]]
  const last = Math.min(settings.jobs, bloated.samples.at(-1)?.finished ?? settings.jobs)
  for (let k = 1; k * step <= last; k++) {
    const rate = (r: RunResult) => {
      const a = timeAt(r.samples, (k - 1) * step)
      const b = timeAt(r.samples, k * step)
      return a === undefined || b === undefined || b <= a ? undefined : step / (b - a)
    }
    const cs = sampleAt(clean.samples, (s) => s.finished, k * step)
    const bs = bloated.samples.some((s) => s.finished >= k * step) ? sampleAt(bloated.samples, (s) => s.finished, k * step) : undefined
    rows.push([
      int(k * step), int(rate(clean)), int(rate(bloated)), ratio(rate(bloated), rate(clean)), int(bs?.tables[0]!.dead),
      int(cs === undefined ? undefined : cs.claim.hit + cs.claim.read), int(bs === undefined ? undefined : bs.claim.hit + bs.claim.read),
      cs?.claim.ms.toFixed(2) ?? "-", bs?.claim.ms.toFixed(2) ?? "-", int(bs?.claim.deadEntries)
    ])
  }
  return `${bloated.adapter}: bloated / clean by messages finished (the rate over each step; the claim sampled nearest its end)\n${table(rows)}`
}

/** Bloated against clean by elapsed minute, while both ran. */
export const minuteTable = (clean: RunResult, bloated: RunResult): string => {
  const rows = [["minute", "clean msg/s", "bloated msg/s", "ratio"]]
  const minuteRate = (r: RunResult, m: number) => {
    const a = sampleAt(r.samples, (s) => s.t, m * 60)
    const b = sampleAt(r.samples, (s) => s.t, (m + 1) * 60)
    return a === undefined || b === undefined || b.t <= a.t || b.t < (m + 1) * 60 - settings.sampleMs / 1000 ? undefined : (b.finished - a.finished) / (b.t - a.t)
  }
  const minutes = Math.ceil(Math.max(clean.seconds, bloated.seconds) / 60)
  for (let m = 0; m < minutes; m++) rows.push([String(m + 1), int(minuteRate(clean, m)), int(minuteRate(bloated, m)), ratio(minuteRate(bloated, m), minuteRate(clean, m))])
  return `${bloated.adapter}: by elapsed minute (a minute a run did not fill: -)\n${table(rows)}`
}

/** Every adapter's overall rates. */
export const summaryTable = (results: ReadonlyArray<RunResult>): string => {
  const rows = [["adapter", "clean msg/s", "bloated msg/s", "ratio", "bloated handled", "in s", "claim buffers at end clean", "bloated"]]
  for (const adapter of [...new Set(results.map((r) => r.adapter))]) {
    const c = results.find((r) => r.adapter === adapter && r.mode === "clean")
    const b = results.find((r) => r.adapter === adapter && r.mode === "bloated")
    const rate = (r: RunResult | undefined) => (r === undefined ? undefined : r.handled / r.seconds)
    const buffers = (r: RunResult | undefined) => {
      const s = r?.samples.at(-1)
      return s === undefined ? undefined : s.claim.hit + s.claim.read
    }
    rows.push([adapter, int(rate(c)), int(rate(b)), ratio(rate(b), rate(c)), `${int(b?.handled)}${b?.complete === false ? " +" : ""}`, b?.seconds.toFixed(0) ?? "-", int(buffers(c)), int(buffers(b))])
  }
  return `${table(rows)}\n+ the duration (${Math.round(settings.durationMs / 1000)} s) ran out first`
}
