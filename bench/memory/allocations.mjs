// Where a benchmark worker allocates: preload it into a leasehold worker with
//   BENCH_NODE_ARGS=--import=$PWD/bench/memory/allocations.mjs ALLOC_DIR=/some/dir npm run bench:own
// (or NODE_OPTIONS=--import=... for `npm run bench`). In the leasehold worker only, it runs V8's
// sampling heap profiler from the start (every ALLOC_INTERVAL bytes, default 4096) keeping the
// objects both collectors freed, so the profile counts what was allocated, not what survived; at
// exit it writes <ALLOC_DIR>/<pid>.heapprofile. ALLOC_MINOR=0: the objects a scavenge freed are
// left out, so the profile counts what outlived the young generation (promoted, then freed by
// a mark-compact or still live): what fills the old space. Read it with
//   node bench/throughput/allocations.ts <file> <messages the worker ran>
import { writeFileSync } from "node:fs"
import { Session } from "node:inspector"

if ((process.argv[1] ?? "").includes("leasehold-worker")) {
  const session = new Session()
  session.connect()
  session.post("HeapProfiler.enable")
  session.post("HeapProfiler.startSampling", {
    samplingInterval: Number(process.env.ALLOC_INTERVAL ?? 4096),
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: process.env.ALLOC_MINOR !== "0"
  })
  process.on("exit", () => {
    // The inspector's calls answer synchronously on the session's own thread.
    session.post("HeapProfiler.stopSampling", (error, result) => {
      if (error === null) writeFileSync(`${process.env.ALLOC_DIR ?? "."}/${process.pid}.heapprofile`, JSON.stringify(result.profile))
    })
  })
}
