/**
 * graphile-worker in `npm run bench`, at its best documented throughput
 * settings (https://worker.graphile.org/docs/performance#batching):
 * `concurrency: C`, `localQueue: { size: C + 1 }`, `completeJobBatchDelay: 0`
 * (and `failJobBatchDelay: 0`), every other setting its default (pool of 10,
 * poll interval 2 s, LISTEN/NOTIFY on). Its per-job "Completed task" info line
 * is dropped by a logger that keeps warnings and errors, as leasehold logs
 * nothing per message. Installed for the benchmark only under `.tmp/peers`
 * and imported from there by path (common.ts). Send role: `makeWorkerUtils`,
 * `migrate()`, then `addJobs` PEERS_CHUNK jobs per call; single role: `addJob`. Roles and stdout
 * protocol: common.ts.
 */
import { announceReady, makeRecorder, workerEnv } from "../throughput/protocol.ts"
import { exitOnSignal, importPeer, payloads, peerEnv, runJob, timedSend, timedSingles } from "./common.ts"

const env = peerEnv()
const gw = await importPeer(env.prefix, "graphile-worker")
const logger = new gw.Logger(() => (level: string, message: string) => {
  if (level === "error" || level === "warning") console.error(`graphile-worker ${level}: ${message}`)
})

if (env.role === "send") {
  const utils = await gw.makeWorkerUtils({ connectionString: env.url, logger })
  await utils.migrate()
  await timedSend(env, (from, count) => utils.addJobs(payloads(from, count).map((payload) => ({ identifier: "noop", payload }))))
  await utils.release()
  process.exit(0)
} else if (env.role === "single") {
  const utils = await gw.makeWorkerUtils({ connectionString: env.url, logger })
  await timedSingles((payload) => utils.addJob("noop", payload))
  await utils.release()
  process.exit(0)
} else {
  const job = runJob(makeRecorder(workerEnv("graphile-worker worker")))
  const runner = await gw.run({
    connectionString: env.url,
    concurrency: env.concurrency,
    noHandleSignals: true,
    logger,
    taskList: { noop: (payload: unknown) => job(payload) },
    preset: { worker: { localQueue: { size: env.concurrency + 1 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } }
  })
  exitOnSignal(() => runner.stop())
  announceReady()
}
