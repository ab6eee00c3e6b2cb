/**
 * pg-boss 12 in `npm run bench`, at its best documented throughput
 * settings (https://timgit.github.io/pg-boss/#/api/workers): `work(queue,
 * { batchSize: C, burstWhenBatchFull: true, pollingIntervalSeconds: 0.5 })`:
 * a batch of up to C jobs per fetch handed to the handler as an array and
 * completed together, the next fetch at once while fetches come back full
 * (without the burst, each fetch waits the polling interval, 2 s by default,
 * 0.5 s at least). Every other setting its default (pool of 10, maintenance
 * on). pg-boss ignores `burstWhenBatchFull` at batchSize 1, so at C = 1 the worker uses the
 * other documented burst trigger, `burstWhenReadyExceeds: 1` (fetch continuously while the queue's
 * cached ready count exceeds 1 and fetches come back full), with the stats it reads refreshed every
 * second (`superviseIntervalSeconds`, `monitorIntervalSeconds`, `queueCacheIntervalSeconds: 1`, the
 * minimum; their default, 60 s, is the bound the docs give on its reaction): without it a worker at
 * batchSize 1 waits the polling interval after every fetch (2 jobs/s at 0.5 s).
 * Installed for the benchmark only under `.tmp/peers` and imported from there
 * by path (common.ts). Send role: `start()` (migrates), `createQueue`, then
 * `insert` PEERS_CHUNK jobs per call. Pickup latency (BENCH_MODE=latency): the
 * send role (run first, with no jobs) creates the queue with `notify: true`, and all sides run with
 * `useListenNotify: true` (its documented way to wake workers at once); the
 * single role `send`s one job at a time. Roles and stdout protocol: common.ts.
 */
import { announceReady, makeRecorder, QUEUE, workerEnv } from "../throughput/protocol.ts"
import { exitOnSignal, importPeer, payloads, peerEnv, runJob, timedSend, timedSingles } from "./common.ts"

const env = peerEnv()
const mod = await importPeer(env.prefix, "pg-boss")
const PgBoss = mod.PgBoss ?? mod.default
const latency = process.env["BENCH_MODE"] === "latency" || env.role === "single"
const single = env.role === "work" && env.concurrency === 1
/** At C = 1 the queue's cached ready count, which `burstWhenReadyExceeds` reads, refreshed every second. */
const statsEverySecond = { superviseIntervalSeconds: 1, monitorIntervalSeconds: 1, queueCacheIntervalSeconds: 1 }
const boss = new PgBoss({
  connectionString: env.url,
  application_name: `peers-pg-boss-${env.role}`,
  ...(latency ? { useListenNotify: true } : {}),
  ...(single ? statsEverySecond : {})
})
boss.on("error", (error: unknown) => console.error(`pg-boss error: ${String(error)}`))
await boss.start()

if (env.role === "send") {
  await boss.createQueue(QUEUE, latency ? { notify: true } : {})
  await timedSend(env, (from, count) => boss.insert(QUEUE, payloads(from, count).map((data) => ({ data }))))
  await boss.stop({ graceful: false, wait: true })
  process.exit(0)
} else if (env.role === "single") {
  await timedSingles((payload) => boss.send(QUEUE, payload))
  await boss.stop({ graceful: false, wait: true })
  process.exit(0)
} else {
  const record = makeRecorder(workerEnv("pg-boss worker"))
  const hang = process.env["PEERS_HANG"] === "1" ? runJob(record) : undefined
  await boss.work(
    QUEUE,
    { batchSize: env.concurrency, pollingIntervalSeconds: 0.5, ...(single ? { burstWhenReadyExceeds: 1 } : { burstWhenBatchFull: true }) },
    async (jobs: ReadonlyArray<{ readonly data: unknown }>) => {
      if (hang !== undefined) await Promise.all(jobs.map((j) => hang(j.data)))
      for (const job of jobs) record(job.data)
    }
  )
  exitOnSignal(() => boss.stop({ graceful: false, wait: false }))
  announceReady()
}
