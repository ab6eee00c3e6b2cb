/**
 * `npm run bench:overhead`: what the consumer itself costs, without a database.
 *
 * Both sides run N no-op messages over the same in-process store that answers
 * at once (claims come from an array, every completion and renewal is held):
 *   - consumer: `Consumer.layer` with concurrency C, defaults otherwise;
 *   - baseline: the smallest Effect loop doing the same work: claim up to C,
 *     run the handlers concurrently, complete them in one call, repeat.
 * Printed: messages/s and CPU microseconds per message of each, and their
 * ratio, for C = 1 and 50 (`BENCH_CONCURRENCY`), N = `BENCH_MESSAGES`
 * (default 50,000). Alternating, `BENCH_REPS` times (default 3), medians.
 * After each consumer run it also prints the heap left after a forced GC (run
 * with `--expose-gc`, as the npm script does): flat across runs of 50,000
 * messages each means the consumer keeps nothing per message.
 * Bytes allocated per message (`B/msg`: the heap's growth over the run plus
 * what each collection freed, from `v8.GCProfiler`) are printed for both sides.
 * `BENCH_HEAP_PROFILE=<file>`: the last consumer run under V8's sampling heap
 * profiler (every `BENCH_HEAP_INTERVAL` bytes, default 512, objects freed by
 * either collector kept), written to <file>; `node bench/throughput/allocations.ts
 * <file> <messages>` names the sites.
 * `BENCH_TASK=1`: the consumer runs a `Task.dispatcher` of one task (its payload
 * decoded through a schema) instead of a plain handler: the dispatcher's cost too.
 * Use it to see whether a change to the per-message or per-claim path helps,
 * free of the database's noise; `npm run bench:own` says what it is worth end to end.
 */
import { execFileSync } from "node:child_process"
import { writeFileSync } from "node:fs"
import { Session } from "node:inspector/promises"
import v8 from "node:v8"
import { Context, Effect, Layer, Logger, Option, Schema } from "effect"
import * as Consumer from "../../src/Consumer.ts"
import * as Task from "../../src/Task.ts"
import type { Claim, MessageId } from "../../src/Message.ts"
import * as MemoryQueueStore from "../../src/MemoryQueueStore.ts"
import { QueueStore, type QueueStoreShape } from "../../src/QueueStore.ts"

const envInt = (name: string, fallback: number) => {
  const raw = process.env[name]
  if (raw === undefined || raw === "") return fallback
  if (!/^\d+$/.test(raw) || Number(raw) < 1) throw new Error(`${name}: expected a positive whole number, got ${JSON.stringify(raw)}`)
  return Number(raw)
}
const messages = envInt("BENCH_MESSAGES", 50_000)
const reps = envInt("BENCH_REPS", 3)
/** `BENCH_SIDES=consumer`: the consumer's runs only (no baseline), e.g. under `valgrind --tool=callgrind`. */
const consumerOnly = process.env["BENCH_SIDES"] === "consumer"
const concurrencies = (process.env["BENCH_CONCURRENCY"] ?? "1,50").split(",").map((c) => {
  if (!/^\d+$/.test(c.trim()) || Number(c) < 1) throw new Error(`BENCH_CONCURRENCY: expected whole numbers, got ${JSON.stringify(c)}`)
  return Number(c)
})

/** A store whose claims come from a counter and whose writes all land at once. */
const instantStore = (base: QueueStoreShape, total: number): QueueStoreShape => {
  let next = 0
  const claimOf = (i: number): Claim => ({
    id: String(i) as MessageId,
    queue: "q",
    task: "t",
    payload: { i },
    headers: {},
    priority: 0,
    attempts: 1,
    maxAttempts: 25,
    enqueuedAt: new Date(0),
    dedupKey: null,
    lastError: null,
    leaseExpiries: 0,
    leaseToken: "00000000-0000-4000-8000-000000000000" as Claim["leaseToken"],
    leaseExpiresAt: new Date(0),
    consumer: "c"
  })
  return {
    ...base,
    claim: (_queue, options) =>
      Effect.sync(() => {
        const out: Array<Claim> = []
        while (out.length < options.limit && next < total) out.push(claimOf(next++))
        return out
      }),
    complete: (completions) => Effect.succeed({ held: completions.map((c) => c.ref.id), cancelled: [] }),
    renew: (refs) => Effect.succeed({ held: refs.map((r) => r.id), cancelling: [] }),
    nextVisibleAt: () => Effect.succeed(Option.none())
  }
}

interface Measure {
  readonly perSecond: number
  readonly cpuUsPerMessage: number
  readonly bytesPerMessage: number
}

/** Bytes allocated on V8's heap while `run` runs: its growth plus what every collection meanwhile freed. */
const allocated = <A>(run: Effect.Effect<A>): Effect.Effect<[A, number]> =>
  Effect.gen(function*() {
    const profiler = new v8.GCProfiler()
    profiler.start()
    const before = v8.getHeapStatistics().used_heap_size
    const a = yield* run
    const after = v8.getHeapStatistics().used_heap_size
    let freed = 0
    for (const gc of profiler.stop()?.statistics ?? []) {
      freed += gc.beforeGC.heapStatistics.usedHeapSize - gc.afterGC.heapStatistics.usedHeapSize
    }
    return [a, after - before + freed]
  })

/** `BENCH_HEAP_PROFILE=<file>`: the last consumer run under the sampling heap profiler, written there. */
const heapProfileFile = process.env["BENCH_HEAP_PROFILE"]
const heapInterval = envInt("BENCH_HEAP_INTERVAL", 512)
const heapProfiled = <A>(run: Effect.Effect<A>): Effect.Effect<A> =>
  Effect.gen(function*() {
    const session = new Session()
    session.connect()
    yield* Effect.promise(() => session.post("HeapProfiler.enable"))
    yield* Effect.promise(() =>
      session.post("HeapProfiler.startSampling", {
        samplingInterval: heapInterval,
        includeObjectsCollectedByMajorGC: true,
        includeObjectsCollectedByMinorGC: true
      })
    )
    const a = yield* run
    const { profile } = yield* Effect.promise(() => session.post("HeapProfiler.stopSampling"))
    writeFileSync(heapProfileFile!, JSON.stringify(profile))
    session.disconnect()
    return a
  })

/** Heap in use after a forced GC, in MB (`undefined` without `--expose-gc`). */
const heapAfterGc = (): number | undefined => {
  const gc = (globalThis as { gc?: () => void }).gc
  if (gc === undefined) return undefined
  gc()
  gc()
  return process.memoryUsage().heapUsed / 1e6
}

/**
 * `BENCH_CALLGRIND=1` (under `valgrind --tool=callgrind --instr-atstart=no`): instructions are
 * counted during the last consumer run only (its earlier runs warm the JIT up), switched on and
 * off with `callgrind_control`: a count per message that does not move with the machine's load.
 */
const callgrind = process.env["BENCH_CALLGRIND"] === "1"
const instrument = (on: boolean) => {
  if (callgrind) execFileSync("callgrind_control", ["-i", on ? "on" : "off", String(process.pid)], { stdio: "ignore" })
}

const measure = (run: Effect.Effect<void>, counted = false): Effect.Effect<Measure> =>
  Effect.gen(function*() {
    if (counted) {
      // From a collected heap: a run's count then holds the collections its own garbage costs.
      ;(globalThis as { gc?: () => void }).gc?.()
      instrument(true)
    }
    const t0 = performance.now()
    const c0 = process.cpuUsage()
    const [, bytes] = yield* allocated(counted && heapProfileFile !== undefined ? heapProfiled(run) : run)
    const ms = performance.now() - t0
    const cpu = process.cpuUsage(c0)
    if (counted) instrument(false)
    return { perSecond: messages / ms * 1000, cpuUsPerMessage: (cpu.user + cpu.system) / messages, bytesPerMessage: bytes / messages }
  })

const consumerRun = (concurrency: number) =>
  Effect.scoped(Effect.gen(function*() {
    const base = Context.get(yield* Layer.build(MemoryQueueStore.layer()), QueueStore)
    const store = instantStore(base, messages)
    let done = 0
    const finished = Promise.withResolvers<void>()
    const count = Effect.sync(() => { if (++done === messages) finished.resolve() })
    const handler = process.env["BENCH_TASK"] === "1"
      ? Task.dispatcher(Task.make({ name: "t", queue: "q", payload: Schema.Struct({ i: Schema.Number }), handler: () => count }))
      : () => count
    yield* Layer.build(
      Consumer.layer(handler, { queues: ["q"], concurrency }).pipe(
        Layer.provide(Layer.succeed(QueueStore, store)),
        // Its start and stop lines only: not part of what is measured.
        Layer.provide(Logger.layer([]))
      )
    ).pipe(Effect.orDie)
    yield* Effect.promise(() => finished.promise)
  }))

const baselineRun = (concurrency: number) =>
  Effect.scoped(Effect.gen(function*() {
    const base = Context.get(yield* Layer.build(MemoryQueueStore.layer()), QueueStore)
    const store = instantStore(base, messages)
    let done = 0
    while (true) {
      const claims = yield* store.claim("q", { lease: 30_000, limit: concurrency, consumer: "c" }).pipe(Effect.orDie)
      if (claims.length === 0) break
      yield* Effect.forEach(claims, () => Effect.sync(() => { done++ }), { concurrency: "unbounded", discard: true })
      yield* store.complete(claims.map((c) => ({
        ref: c,
        finish: { _tag: "Ack" as const },
        queue: c.queue,
        task: c.task,
        attempt: c.attempts,
        consumer: "c",
        startedAt: new Date(0),
        outcome: "acked" as const,
        error: null
      }))).pipe(Effect.orDie)
    }
    if (done !== messages) throw new Error(`baseline ran ${done} of ${messages}`)
  }))

const median = (xs: ReadonlyArray<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

const main = Effect.gen(function*() {
  console.log(`consumer overhead: ${messages.toLocaleString("en-US")} no-op messages, a store that answers at once, median of ${reps}`)
  console.log("C   consumer msg/s  consumer us/msg  consumer B/msg  baseline msg/s  baseline us/msg  baseline B/msg  CPU ratio")
  const heaps: Array<string> = []
  for (const c of concurrencies) {
    const ours: Array<Measure> = []
    const theirs: Array<Measure> = []
    for (let r = 0; r < reps; r++) {
      if (!consumerOnly) theirs.push(yield* measure(baselineRun(c)))
      ours.push(yield* measure(consumerRun(c), r === reps - 1))
      const heap = heapAfterGc()
      if (heap !== undefined) heaps.push(`${heap.toFixed(1)}`)
    }
    const ourCpu = median(ours.map((m) => m.cpuUsPerMessage))
    const theirCpu = consumerOnly ? Number.NaN : median(theirs.map((m) => m.cpuUsPerMessage))
    console.log(
      [
        String(c).padEnd(3),
        Math.round(median(ours.map((m) => m.perSecond))).toLocaleString("en-US").padStart(14),
        ourCpu.toFixed(1).padStart(15),
        Math.round(median(ours.map((m) => m.bytesPerMessage))).toLocaleString("en-US").padStart(14),
        (consumerOnly ? "-" : Math.round(median(theirs.map((m) => m.perSecond))).toLocaleString("en-US")).padStart(14),
        theirCpu.toFixed(1).padStart(15),
        (consumerOnly ? "-" : Math.round(median(theirs.map((m) => m.bytesPerMessage))).toLocaleString("en-US")).padStart(14),
        `${(ourCpu / theirCpu).toFixed(1)}x`.padStart(10)
      ].join("  ")
    )
  }
  console.log(heaps.length === 0 ? "heap after GC: run with --expose-gc to see it" : `heap after GC after each consumer run (MB): ${heaps.join(", ")}`)
})

Effect.runPromise(main).then(() => process.exit(0), (error) => {
  console.error(error)
  process.exit(1)
})
