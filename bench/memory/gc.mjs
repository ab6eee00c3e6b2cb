// What a benchmark worker's collections did: preload it into a leasehold worker with
//   BENCH_NODE_ARGS=--import=$PWD/bench/memory/gc.mjs GC_DIR=/some/dir npm run bench:own
// (or NODE_OPTIONS=--import=... for `npm run bench`). In the leasehold worker only, it records
// every collection with v8.GCProfiler and at exit writes <GC_DIR>/<pid>.json: per kind the
// count and time; the bytes allocated (the heap's growth plus what every collection freed);
// the bytes the scavenges promoted (the old spaces' growth across each scavenge: what fills the
// old generation between mark-compacts); the largest old space and new space seen; and each
// mark-compact's old space before and after it (MB).
import { writeFileSync } from "node:fs"
import v8 from "node:v8"

if ((process.argv[1] ?? "").includes("leasehold-worker")) {
  const profiler = new v8.GCProfiler()
  profiler.start()
  const startUsed = v8.getHeapStatistics().used_heap_size
  process.on("exit", () => {
    const endUsed = v8.getHeapStatistics().used_heap_size
    const stats = profiler.stop()?.statistics ?? []
    const space = (s, name) => s.heapSpaceStatistics.find((x) => x.spaceName === name) ?? { spaceSize: 0, spaceUsedSize: 0 }
    const old = (s) => space(s, "old_space").spaceUsedSize + space(s, "large_object_space").spaceUsedSize
    const kinds = {}
    let freed = 0, promoted = 0, largestOld = 0, largestNew = 0
    const compactions = []
    for (const gc of stats) {
      const k = (kinds[gc.gcType] ??= { count: 0, ms: 0 })
      k.count += 1
      k.ms += gc.cost / 1000
      freed += gc.beforeGC.heapStatistics.usedHeapSize - gc.afterGC.heapStatistics.usedHeapSize
      if (gc.gcType === "Scavenge" || gc.gcType === "MinorMarkSweep") promoted += old(gc.afterGC) - old(gc.beforeGC)
      if (gc.gcType === "MarkSweepCompact") compactions.push([space(gc.beforeGC, "old_space").spaceSize, space(gc.afterGC, "old_space").spaceSize].map((b) => +(b / 2 ** 20).toFixed(1)))
      largestOld = Math.max(largestOld, space(gc.beforeGC, "old_space").spaceSize)
      largestNew = Math.max(largestNew, space(gc.beforeGC, "new_space").spaceSize)
    }
    const mb = (b) => +(b / 2 ** 20).toFixed(1)
    writeFileSync(`${process.env.GC_DIR ?? "."}/${process.pid}.json`, `${JSON.stringify({
      kinds, allocatedMb: mb(endUsed - startUsed + freed), promotedMb: mb(promoted), largestOldMb: mb(largestOld), largestNewMb: mb(largestNew), compactions
    })}\n`)
  })
}
