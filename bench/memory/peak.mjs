// Where a benchmark worker's peak RSS goes: preload it into `npm run bench`'s leasehold worker with
//   NODE_OPTIONS=--import=$PWD/bench/memory/peak.mjs PEAK_DIR=/some/dir npm run bench
// (the orchestrator passes NODE_OPTIONS on to every process; this acts in the leasehold worker
// only). Every 25 ms it samples the RSS and the committed size of each of V8's heap spaces; at
// exit it writes <PEAK_DIR>/<pid>.json: VmHWM, the sample at the highest RSS (with the heap
// committed, used, external, malloced and each space then), and each space's largest size.
import { readFileSync, writeFileSync } from "node:fs"
import v8 from "node:v8"

if ((process.argv[1] ?? "").includes("leasehold-worker")) {
  const mb = (bytes) => +(bytes / 2 ** 20).toFixed(1)
  let peak
  const largest = {}
  const sample = () => {
    const rss = process.memoryUsage.rss()
    const spaces = {}
    for (const space of v8.getHeapSpaceStatistics()) {
      spaces[space.space_name] = mb(space.space_size)
      largest[space.space_name] = Math.max(largest[space.space_name] ?? 0, mb(space.space_size))
    }
    if (peak === undefined || mb(rss) > peak.rss) {
      const heap = v8.getHeapStatistics()
      peak = { rss: mb(rss), heapCommitted: mb(heap.total_heap_size), heapUsed: mb(heap.used_heap_size), external: mb(heap.external_memory), malloced: mb(heap.malloced_memory), spaces }
    }
  }
  setInterval(sample, 25).unref()
  process.on("exit", () => {
    sample()
    const hwm = Number(/VmHWM:\s+(\d+)/.exec(readFileSync("/proc/self/status", "utf8"))?.[1] ?? 0)
    writeFileSync(`${process.env.PEAK_DIR ?? "."}/${process.pid}.json`, `${JSON.stringify({ hwm: mb(hwm * 1024), peak, largest })}\n`)
  })
}
