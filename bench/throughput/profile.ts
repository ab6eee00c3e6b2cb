/**
 * The hottest self-time frames of a V8 CPU profile (`node --cpu-prof`), as
 * shares of the profile's whole duration (idle time included: a worker
 * waiting on the database shows as `(idle)`).
 *
 *   node bench/throughput/profile.ts <file.cpuprofile> [top=10]
 *
 * `npm run bench:own` with BENCH_CPU_PROF=1 profiles the leasehold worker at the
 * largest C and prints this table itself.
 */
import { readFileSync } from "node:fs"
import { relative } from "node:path"
import { fileURLToPath } from "node:url"

interface ProfileNode {
  readonly id: number
  readonly callFrame: {
    readonly functionName: string
    readonly url: string
    readonly lineNumber: number
  }
}

interface CpuProfile {
  readonly nodes: ReadonlyArray<ProfileNode>
  readonly samples: ReadonlyArray<number>
  readonly timeDeltas: ReadonlyArray<number>
}

export interface Frame {
  readonly frame: string
  readonly selfMs: number
  readonly share: number
}

/** A script's path as a profile names it, short: from node_modules/ or relative to the working directory. */
export const shortUrl = (url: string): string => {
  if (url === "") return ""
  const path = url.startsWith("file://") ? fileURLToPath(url) : url
  const nm = path.lastIndexOf("node_modules/")
  if (nm >= 0) return path.slice(nm + "node_modules/".length)
  return path.startsWith("/") ? relative(process.cwd(), path) : path
}

/** Self time per frame (function + script + line), largest first. */
export const hottest = (file: string, top = 10): { readonly totalMs: number; readonly frames: ReadonlyArray<Frame> } => {
  const profile = JSON.parse(readFileSync(file, "utf8")) as CpuProfile
  const byId = new Map(profile.nodes.map((n) => [n.id, n]))
  const self = new Map<string, number>()
  let total = 0
  for (let i = 0; i < profile.samples.length; i++) {
    // timeDeltas[i] is the time since the previous sample: charge the interval to the sample that ends it.
    const us = profile.timeDeltas[i] ?? 0
    const node = byId.get(profile.samples[i]!)
    if (node === undefined) continue
    const { functionName, url, lineNumber } = node.callFrame
    const where = shortUrl(url)
    const key = `${functionName === "" ? "(anonymous)" : functionName}${where === "" ? "" : ` ${where}:${lineNumber + 1}`}`
    self.set(key, (self.get(key) ?? 0) + us)
    total += us
  }
  const frames = [...self.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(([frame, us]) => ({ frame, selfMs: us / 1000, share: total === 0 ? 0 : us / total }))
  return { totalMs: total / 1000, frames }
}

export const format = (result: ReturnType<typeof hottest>): string =>
  [
    `profile: ${(result.totalMs / 1000).toFixed(1)} s sampled; hottest self time:`,
    ...result.frames.map((f) => `  ${(f.share * 100).toFixed(1).padStart(5)} %  ${f.selfMs.toFixed(0).padStart(6)} ms  ${f.frame}`)
  ].join("\n")

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  const file = process.argv[2]
  if (file === undefined) {
    console.error("usage: node bench/throughput/profile.ts <file.cpuprofile> [top]")
    process.exit(2)
  }
  console.log(format(hottest(file, Number(process.argv[3] ?? "10"))))
}
