/**
 * Where a program allocates: the top allocation sites of a V8 sampling heap
 * profile (`.heapprofile`, e.g. `npm run bench:overhead` with
 * BENCH_HEAP_PROFILE=<file>), as bytes per message. The profile is taken with
 * the objects both collectors freed kept in it, so its total is what was
 * allocated, not what survived.
 *
 *   node bench/throughput/allocations.ts <file.heapprofile> <messages> [top=25]
 *
 * Printed: the total, then the sites by self size (function, script, line), then by script.
 */
import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { shortUrl } from "./profile.ts"

interface SamplingNode {
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number }
  readonly selfSize: number
  readonly id: number
  readonly children: ReadonlyArray<SamplingNode>
}

interface SamplingProfile {
  readonly head: SamplingNode
  readonly samples: ReadonlyArray<{ readonly size: number; readonly nodeId: number }>
}

/** Bytes allocated per site and per script, largest first (the samples' sizes, which V8 scales to the whole). */
export const sites = (profile: SamplingProfile) => {
  const bySite = new Map<string, number>()
  const byScript = new Map<string, number>()
  let total = 0
  const visit = (node: SamplingNode) => {
    if (node.selfSize > 0) {
      const { functionName, url, lineNumber } = node.callFrame
      const script = url === "" ? "(native)" : shortUrl(url)
      const key = `${functionName === "" ? "(anonymous)" : functionName} ${script}:${lineNumber + 1}`
      bySite.set(key, (bySite.get(key) ?? 0) + node.selfSize)
      byScript.set(script, (byScript.get(script) ?? 0) + node.selfSize)
      total += node.selfSize
    }
    for (const child of node.children) visit(child)
  }
  visit(profile.head)
  const sorted = (m: Map<string, number>) => [...m.entries()].sort((a, b) => b[1] - a[1])
  return { total, bySite: sorted(bySite), byScript: sorted(byScript) }
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  const [file, messagesText, topText] = process.argv.slice(2)
  if (file === undefined || messagesText === undefined) {
    console.error("usage: node bench/throughput/allocations.ts <file.heapprofile> <messages> [top]")
    process.exit(2)
  }
  const messages = Number(messagesText)
  const top = Number(topText ?? "25")
  const result = sites(JSON.parse(readFileSync(file, "utf8")) as SamplingProfile)
  const perMessage = (bytes: number) => `${(bytes / messages).toFixed(0).padStart(6)} B/msg`
  console.log(`sampled allocations: ${perMessage(result.total)} in all (${(result.total / 1e6).toFixed(1)} MB over ${messages} messages)`)
  console.log("by site:")
  for (const [site, bytes] of result.bySite.slice(0, top)) console.log(`  ${perMessage(bytes)}  ${site}`)
  console.log("by script:")
  for (const [script, bytes] of result.byScript.slice(0, top)) console.log(`  ${perMessage(bytes)}  ${script}`)
}
