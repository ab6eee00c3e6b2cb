/**
 * The chaos suite (issue 5). Starts its own PostgreSQL, a pool of chaos
 * workers (bench/chaos/worker.ts) and sends messages (instant, 50 ms and 2 s
 * handlers) while it SIGKILLs a random worker every ~3 s (starting a new one),
 * terminates random worker backends every ~2 s and restarts the server once.
 * Then it drains the queue, stops the workers with SIGTERM, checks the ledger
 * (bench/chaos/analyze.ts), prints a table and PASS or FAIL, and exits
 * non-zero on any violation.
 *
 *   npm run chaos        full run: 20,000 messages
 *   npm run chaos:ci     short run: 1,000 messages, under a minute
 *
 * Knobs (environment): CHAOS_MESSAGES, CHAOS_RATE (messages/s), CHAOS_WORKERS,
 * CHAOS_LEASE, CHAOS_CONCURRENCY, CHAOS_BATCH, CHAOS_POLL, CHAOS_KILL_EVERY,
 * CHAOS_TERMINATE_EVERY, CHAOS_RESTART_DOWN (how long the server stays down,
 * default 1s), CHAOS_QUARANTINE_AFTER (default 100), CHAOS_DRAIN_TIMEOUT,
 * CHAOS_LOG_DIR; CHAOS_FAULT=block (see worker.ts: proves the checks can
 * fail); CHAOS_POISON=0 (turns off the poisoned 1% + 1%, see poisonOf); and
 * LEASEHOLD_SESSION_LIVENESS=on|off|auto, passed through to the workers.
 *
 *   npm run chaos -- --pooler transaction    the same through PgBouncer (or --pooler session)
 *
 *   npm run chaos -- --flow          the same with flow limits on the queue (full: 5,000 messages)
 *   node bench/chaos/run.ts --ci --flow   its short form (1,000 messages), also run by chaos:ci
 *
 * sends every message with a key (CHAOS_FLOW_KEYS keys, default 100 short / 200 full, sizes
 * skewed: log-uniform, the biggest key about 15%), sets limits on the queue through the store
 * (CHAOS_FLOW_CONCURRENCY, CHAOS_KEY_CONCURRENCY, CHAOS_FLOW_RATE and CHAOS_KEY_RATE as
 * COUNT/PERIOD, e.g. 300/5s; defaults below), records every lease the database gives with a
 * trigger (lib.ts, createLeaseRecorder) and checks the limits on the ledger and on that record
 * (analyze.ts, analyzeFlow): executions per key and per queue at any instant, live leases, and
 * claims in every sliding window of each rate.
 *
 *   npm run chaos -- --commit        the exactly-once run (issue 28; full: 10,000 messages)
 *   node bench/chaos/run.ts --ci --commit   its short form (1,000 messages), also run by chaos:ci
 *
 * sends messages of two tasks in the same queue with the same workload (message 2k is `tx`,
 * 2k+1 `plain`, both with the mix of pair k): each increments its own counter row
 * (`chaos.counters`, key n, pre-inserted at 0) after its work, `tx` inside `context.commit`
 * (with its fenced ack, one transaction), `plain` with a bare UPDATE. The workers run with
 * LEASEHOLD_ON_LEASE_LOST=continue, and one message in CHAOS_BLOCK_EVERY pairs (default 100
 * short / 250 full; tx and plain in turn) blocks its worker's event loop for the lease + 1.5 s on
 * its first attempt: the leases of that worker's messages expire, others reclaim them, and the
 * stale runs go on to their increment. At the end every tx counter must be exactly 1, the plain
 * ones show the duplicates (the full run fails without any), and every commit the fence refused
 * ("double run prevented") must match a reclaim of its message (analyze.ts, analyzeCommit).
 *
 * puts a real PgBouncer (CHAOS_POOL_SIZE server connections, default 10) between the
 * workers and the server (LEASEHOLD_POOLER set to match); CHAOS_DIRECT=1 also gives them
 * the server as LEASEHOLD_DIRECT_DATABASE_URL (presence and LISTEN); without it, through
 * transaction mode, claims of killed workers come back by lease expiry and idle workers poll.
 * Backend terminations then hit PgBouncer's server connections, and the restart is the
 * server's behind it. Every worker's output goes to CHAOS_LOG_DIR (default
 * .tmp/chaos/<time>). See bench/README.md.
 */
import { Effect } from "effect"
import { join } from "node:path"
import { startPostgres } from "../../dev/EmbeddedPostgres.ts"
import type { NewMessage } from "../../src/Message.ts"
import { QueueStore } from "../../src/QueueStore.ts"
import * as PgBouncer from "../../test/support/PgBouncer.ts"
import {
  analyze,
  type BackendTermination,
  type CommitAnalysis,
  commitViolations, finishBound, type FlowAnalysis, flowEnd, type FlowRate, type Kill } from "./analyze.ts"
import {
  closeLogs,
  createLeaseRecorder,
  type LeaseRecord,
  createLedger,
  type Db,
  envInt,
  envMs,
  formatMs,
  type JournalEvent,
  killWorker,
  logKindOf,
  type LogCounts,
  openDb,
  percentile,
  poll,
  readLeases,
  readLedger,
  repoRoot,
  sleep,
  spawnWorker,
  stopWorkers,
  table,
  type Worker,
  zeroLogCounts
} from "./lib.ts"

const ci = process.argv.includes("--ci")
const flowRun = process.argv.includes("--flow")
const commitRun = process.argv.includes("--commit")
if (commitRun && flowRun) {
  console.error("chaos: --commit and --flow are separate runs")
  process.exit(2)
}
const poolerArg = process.argv.indexOf("--pooler")
const pooler = poolerArg === -1 ? undefined : process.argv[poolerArg + 1]
if (pooler !== undefined && pooler !== "transaction" && pooler !== "session") {
  console.error(`chaos: --pooler takes transaction or session, not ${JSON.stringify(pooler)}`)
  process.exit(2)
}
const profile = commitRun
  ? (ci ? { messages: 1_000, rate: 75, drainTimeoutMs: 60_000 } : { messages: 10_000, rate: 150, drainTimeoutMs: 300_000 })
  : flowRun
  ? (ci ? { messages: 1_000, rate: 100, drainTimeoutMs: 60_000 } : { messages: 5_000, rate: 100, drainTimeoutMs: 300_000 })
  : ci
  ? { messages: 1_000, rate: 75, drainTimeoutMs: 40_000 }
  : { messages: 20_000, rate: 250, drainTimeoutMs: 240_000 }

/** COUNT/PERIOD (`300/5s`, `20/2000ms`) from the environment. */
const envRate = (name: string, fallback: FlowRate): FlowRate => {
  const text = process.env[name]
  if (text === undefined || text.trim() === "") return fallback
  const m = /^\s*(\d+)\s*\/\s*(\d+)\s*(ms|s|m)\s*$/.exec(text)
  if (m === null) throw new Error(`${name}: expected COUNT/PERIOD such as 300/5s, got ${JSON.stringify(text)}`)
  return { count: Number(m[1]), periodMs: Number(m[2]) * (m[3] === "m" ? 60_000 : m[3] === "s" ? 1_000 : 1) }
}

/**
 * The limits of a flow run, chosen to bind: the short run sends 100/s against 120 starts per 5 s
 * (24/s), the full one (5,000 messages: 20,000 would take long under the rate) 100/s against 250
 * per 5 s (50/s); the biggest keys get more than their key rate and key concurrency let through,
 * and the 2 s messages (and the slots of killed workers, held until the reaper frees them) fill
 * the queue's concurrency.
 */
const flowLimits = {
  concurrency: envInt("CHAOS_FLOW_CONCURRENCY", ci ? 16 : 32),
  keyConcurrency: envInt("CHAOS_KEY_CONCURRENCY", 2),
  rate: envRate("CHAOS_FLOW_RATE", ci ? { count: 120, periodMs: 5_000 } : { count: 250, periodMs: 5_000 }),
  keyRate: envRate("CHAOS_KEY_RATE", ci ? { count: 5, periodMs: 1_000 } : { count: 10, periodMs: 1_000 })
}
const flowKeys = envInt("CHAOS_FLOW_KEYS", ci ? 100 : 200)

/**
 * The key of message n in a flow run: log-uniform over the keys (key i with probability
 * ln((i+2)/(i+1)) / ln(keys+1)), from a fixed hash of n, so the sizes are skewed and every run
 * sends the same keys.
 */
const keyOf = (n: number): string => {
  const u = (Math.imul(n + 1, 2654435761) >>> 0) / 2 ** 32
  return `k${Math.min(flowKeys - 1, Math.floor(Math.exp(u * Math.log(flowKeys + 1))) - 1)}`
}

const config = {
  messages: envInt("CHAOS_MESSAGES", profile.messages),
  rate: envInt("CHAOS_RATE", profile.rate),
  workers: envInt("CHAOS_WORKERS", 4),
  leaseMs: envMs("CHAOS_LEASE", 3_000),
  // 32 slots: a lane's second claim loop runs while claims come back full (the report says what it claimed).
  concurrency: envInt("CHAOS_CONCURRENCY", flowRun || commitRun ? 16 : 32),
  batch: envInt("CHAOS_BATCH", 5),
  pollMs: envMs("CHAOS_POLL", 100),
  killEveryMs: envMs("CHAOS_KILL_EVERY", 3_000),
  terminateEveryMs: envMs("CHAOS_TERMINATE_EVERY", 2_000),
  drainTimeoutMs: envMs("CHAOS_DRAIN_TIMEOUT", profile.drainTimeoutMs),
  restartDownMs: envMs("CHAOS_RESTART_DOWN", 1_000),
  quarantineAfter: envInt("CHAOS_QUARANTINE_AFTER", 100),
  renewerStopTimeoutMs: envMs("CHAOS_RENEWER_STOP_TIMEOUT", 5_000),
  logDir: process.env["CHAOS_LOG_DIR"] ??
    join(repoRoot, ".tmp", "chaos", new Date().toISOString().replace(/[:.]/g, "-")),
  liveness: process.env["LEASEHOLD_SESSION_LIVENESS"],
  poolSize: envInt("CHAOS_POOL_SIZE", 10),
  direct: process.env["CHAOS_DIRECT"] === "1",
  // The commit run's counters expect every message to land once: no poison there.
  poison: process.env["CHAOS_POISON"] !== "0" && !commitRun,
  blockEvery: envInt("CHAOS_BLOCK_EVERY", ci ? 100 : 250)
}

const SCHEMA = "chaos"
const QUEUE = "chaos"
const MAX_ATTEMPTS = 100

/**
 * Poison (CHAOS_POISON, on unless 0), by message number: 1% fail every run with a NUL in the
 * error text (3 attempts, then dead letters), 1% return a result jsonb cannot store (a NUL, or
 * a lone surrogate): acked, the result kept as the unstorable marker. Neither may fail the
 * finishing batch it shares with good messages.
 */
const poisonOf = (n: number): "error" | "nul-result" | "surrogate-result" | undefined =>
  !config.poison ? undefined : n % 100 === 37 ? "error" : n % 100 === 73 ? (Math.floor(n / 100) % 2 === 0 ? "nul-result" : "surrogate-result") : undefined
const POISON_ATTEMPTS = 3

/** The task mix, by message number: 5% 2 s, 35% 50 ms, 60% instant. */
const taskOf = (n: number): { readonly task: string; readonly ms: number } => {
  if (commitRun) return { task: commitTaskOf(n), ms: mixOf(Math.floor(n / 2)).ms }
  return mixOf(n)
}

/** The commit run: message 2k is `tx`, 2k+1 its `plain` twin (the same workload: pair k's mix). */
const commitTaskOf = (n: number): "tx" | "plain" => (n % 2 === 0 ? "tx" : "plain")

/**
 * The commit run's forced lease losses: in pair k with k % blockEvery = blockEvery / 2, one message
 * blocks its worker past the lease on its first attempt: the tx one and the plain one in turn.
 */
const blocks = (n: number): boolean => {
  const k = Math.floor(n / 2)
  if (config.blockEvery <= 0 || k % config.blockEvery !== Math.floor(config.blockEvery / 2)) return false
  return n % 2 === Math.floor(k / config.blockEvery) % 2
}

const mixOf = (n: number): { readonly task: string; readonly ms: number } => {
  const k = n % 20
  return k === 0 ? { task: "slow-2s", ms: 2_000 } : k <= 7 ? { task: "short-50ms", ms: 50 } : { task: "instant", ms: 0 }
}

const workerEnv: Record<string, string> = {
  LEASEHOLD_SCHEMA: SCHEMA,
  LEASEHOLD_QUEUES: QUEUE,
  LEASEHOLD_LEASE: `${config.leaseMs}ms`,
  LEASEHOLD_CONCURRENCY: String(config.concurrency),
  LEASEHOLD_BATCH_SIZE: String(config.batch),
  LEASEHOLD_POLL_INTERVAL: `${config.pollMs}ms`,
  LEASEHOLD_BACKOFF_MAX: "1s",
  LEASEHOLD_RETRY_BASE: "100ms",
  LEASEHOLD_RETRY_MAX: "2s",
  LEASEHOLD_SHUTDOWN_GRACE: "10s",
  // Set here, not left to the default: the checker's ack bound (analyze.ts, finishBound) is derived from it.
  LEASEHOLD_RENEWER_STOP_TIMEOUT: `${config.renewerStopTimeoutMs}ms`,
  // Random SIGKILLs hit innocent messages: do not let them quarantine (dead-letter) as suspected worker-killers.
  LEASEHOLD_QUARANTINE_AFTER: String(config.quarantineAfter),
  ...(config.liveness === undefined ? {} : { LEASEHOLD_SESSION_LIVENESS: config.liveness }),
  // The commit run: counters, and stale runs that go on past their lease to their increment.
  ...(commitRun ? { CHAOS_COMMIT: "1", LEASEHOLD_ON_LEASE_LOST: "continue" } : {})
}

const jitter = (ms: number) => ms * (0.6 + Math.random() * 0.8)

/** A one-permit lock: sends and the server restart never interleave (a send cut by the restart is ambiguous). */
const makeLock = () => {
  let tail: Promise<unknown> = Promise.resolve()
  return <A>(f: () => Promise<A>): Promise<A> => {
    const run = tail.then(f, f)
    tail = run.catch(() => undefined)
    return run
  }
}

const log = (text: string) => console.log(`[chaos +${((Date.now() - t0) / 1000).toFixed(1)}s] ${text}`)
let t0 = Date.now()

const main = async (): Promise<number> => {
  console.log(
    `chaos ${ci ? "(short, CI)" : "(full)"}${flowRun ? " with flow limits" : ""}${commitRun ? " of the commit step (exactly-once)" : ""}: ${config.messages} messages at ${config.rate}/s, ${config.workers} workers ` +
      `(concurrency ${config.concurrency}, batch ${config.batch}, lease ${formatMs(config.leaseMs)}, poll ${config.pollMs} ms), ` +
      `SIGKILL every ~${formatMs(config.killEveryMs)}, backend terminations every ~${formatMs(config.terminateEveryMs)}, ` +
      `one server restart (${formatMs(config.restartDownMs)} down); session liveness: ${config.liveness ?? "(unset: consumer default)"}` +
      (pooler === undefined
        ? ""
        : `; through PgBouncer ${pooler} mode (pool ${config.poolSize})${config.direct ? ", direct URL for presence and LISTEN" : ", no direct URL"}`)
  )
  if (flowRun) {
    console.log(
      `flow limits on queue ${QUEUE}: concurrency ${flowLimits.concurrency}, key concurrency ${flowLimits.keyConcurrency}, ` +
        `rate ${formatRate(flowLimits.rate)}, key rate ${formatRate(flowLimits.keyRate)}; ${flowKeys} keys (log-uniform sizes)`
    )
  }
  if (commitRun) {
    console.log(
      `commit run: tasks tx (increment inside context.commit) and plain (outside), same workload; onLeaseLost continue; ` +
        `one message in ${config.blockEvery} pairs blocks its worker's event loop for the lease + 1.5 s (first attempt)`
    )
  }
  console.log(`worker logs: ${config.logDir}`)
  t0 = Date.now()
  const server = await startPostgres({ forTests: true })
  // The workers' way to the server: straight, or through PgBouncer (the orchestrator always goes straight).
  const bouncer = pooler === undefined
    ? undefined
    : await PgBouncer.start({ mode: pooler, serverUrl: server.url, poolSize: config.poolSize }).catch(async (error) => {
      await server.destroy()
      throw error
    })
  const workerDb: Record<string, string> = bouncer === undefined ? { LEASEHOLD_DATABASE_URL: server.url } : {
    LEASEHOLD_DATABASE_URL: bouncer.url,
    LEASEHOLD_POOLER: bouncer.mode,
    ...(config.direct ? { LEASEHOLD_DIRECT_DATABASE_URL: server.url } : {})
  }
  let db: Db | undefined
  const workers: Array<Worker> = []
  let shuttingDown = false
  const cleanup = async () => {
    shuttingDown = true
    await stopWorkers(workers, 5_000).catch(() => [])
    await db?.dispose().catch(() => undefined)
    await bouncer?.stop().catch(() => undefined)
    await server.destroy().catch(() => undefined)
    await closeLogs()
  }
  const onSignal = () => {
    console.error("chaos: interrupted; stopping workers and the server")
    void cleanup().finally(() => process.exit(130))
  }
  process.once("SIGINT", onSignal)
  process.once("SIGTERM", onSignal)

  try {
    db = await openDb(server.url, SCHEMA, "chaos-orchestrator")
    await createLedger(db, SCHEMA)
    const database = db
    log(`PostgreSQL ready on port ${server.port}; schema ${SCHEMA} migrated, ledger created`)
    if (flowRun) {
      await createLeaseRecorder(database, SCHEMA)
      await database.runtime.runPromise(Effect.flatMap(QueueStore, (store) => store.setLimits({ queue: QUEUE }, flowLimits)))
      log(`flow limits set; lease recorder on`)
    }
    if (commitRun) {
      await database.query(`CREATE TABLE ${SCHEMA}.counters (key integer PRIMARY KEY, task text NOT NULL, n integer NOT NULL DEFAULT 0)`)
      await database.query(
        `INSERT INTO ${SCHEMA}.counters (key, task, n)
         SELECT k, CASE WHEN k % 2 = 0 THEN 'tx' ELSE 'plain' END, 0 FROM generate_series(0, $1::int - 1) AS k`,
        [config.messages]
      )
      log(`${config.messages} counter rows at 0`)
    }

    // ---- workers --------------------------------------------------------------------------
    const slots: Array<Worker | undefined> = []
    const crashes: Array<Worker> = []
    const startFailures: Array<Worker> = []
    let generation = 0
    const spawnSlot = (slot: number): Worker => {
      const g = ++generation
      const worker = spawnWorker({
        name: `w${slot}-g${g}`,
        consumerId: `chaos-w${slot}-g${g}`,
        env: { ...workerEnv, ...workerDb },
        logDir: config.logDir,
        onExit: (w) => {
          if (w.killedAt !== undefined || w.terminatedAt !== undefined || shuttingDown) return
          // Died on its own: a crash once it was running, else a start that failed (e.g. during the restart).
          ;(w.readyAt !== undefined ? crashes : startFailures).push(w)
          log(`${w.name} exited on its own (code ${w.exit?.code}, ${w.readyAt !== undefined ? "after" : "before"} READY); starting another`)
          setTimeout(() => {
            if (!shuttingDown && slots[slot] === w) slots[slot] = spawnSlot(slot)
          }, 500)
        }
      })
      workers.push(worker)
      return worker
    }
    for (let slot = 1; slot <= config.workers; slot++) slots[slot] = spawnSlot(slot)
    const allReady = await poll(() => slots.slice(1).every((w) => w?.readyAt !== undefined) ? true : undefined, 60_000, 100)
    if (allReady === undefined) throw new Error("workers did not become ready within 60 s")
    log(`${config.workers} workers ready`)

    // ---- sending ---------------------------------------------------------------------------
    const lock = makeLock()
    const store = await database.runtime.runPromise(Effect.gen(function*() {
      return yield* QueueStore
    }))
    let sentCount = 0
    let sendRetries = 0

    /** n in [from, from+count) present in the queue or the ledger (a message leaves the table only after its ledger rows). */
    const presentAmong = async (from: number, count: number): Promise<Set<number>> => {
      const rows = await database.queryRetrying<{ n: number }>(
        `SELECT (payload->>'n')::int AS n FROM ${SCHEMA}.messages
           WHERE queue = $1 AND (payload->>'n')::int >= $2 AND (payload->>'n')::int < $3
         UNION SELECT n FROM ${SCHEMA}.ledger WHERE n >= $2 AND n < $3`,
        [QUEUE, from, from + count]
      )
      return new Set(rows.map((r) => Number(r.n)))
    }

    const sendRange = async (from: number, count: number) => {
      let todo = Array.from({ length: count }, (_, i) => from + i)
      const deadline = Date.now() + 60_000
      while (todo.length > 0) {
        const messages: Array<NewMessage> = todo.map((n) => {
          const { task, ms } = taskOf(n)
          const poison = poisonOf(n)
          const key = flowRun ? { key: keyOf(n) } : {}
          return poison === undefined
            ? { task, payload: { n, ms, ...(commitRun && blocks(n) ? { block: true } : {}) }, maxAttempts: MAX_ATTEMPTS, ...key }
            : { task, payload: { n, ms, poison }, maxAttempts: poison === "error" ? POISON_ATTEMPTS : MAX_ATTEMPTS, ...key }
        })
        try {
          await lock(() => database.runtime.runPromise(store.send(QUEUE, messages)))
          return
        } catch (error) {
          // Ambiguous (a connection death can hide a commit): send again only what is not there.
          if (Date.now() > deadline) throw new Error(`could not send messages ${from}..${from + count - 1}: ${String(error)}`)
          sendRetries++
          await sleep(200)
          const present = await presentAmong(from, count)
          todo = todo.filter((n) => !present.has(n))
        }
      }
    }

    let sendingDone = false
    const sendStartedAt = Date.now()
    const sender = (async () => {
      while (sentCount < config.messages) {
        const due = Math.min(config.messages, Math.floor(((Date.now() - sendStartedAt) / 1000) * config.rate) + 1)
        if (due <= sentCount) {
          await sleep(50)
          continue
        }
        const count = Math.min(due - sentCount, 500)
        await sendRange(sentCount, count)
        sentCount += count
      }
      sendingDone = true
      log(`all ${config.messages} messages sent (${sendRetries} ambiguous sends checked and completed)`)
    })()

    // ---- chaos -----------------------------------------------------------------------------
    let chaosOn = true
    const kills: Array<Kill> = []
    let killsSkipped = 0
    const terminations: Array<{ readonly at: number; readonly count: number }> = []
    /** Backends terminated, by application name (main pool, lease pool, presence session...). */
    const terminatedBy = new Map<string, number>()
    /** Every terminated backend, with its worker (the application name carries the consumer id, see worker.ts). */
    const terminated: Array<BackendTermination> = []
    let terminateErrors = 0
    let restartAt: number | undefined
    let restartDownMs: number | undefined
    let restartUpAt: number | undefined

    const killer = (async () => {
      while (chaosOn) {
        await sleep(jitter(config.killEveryMs))
        if (!chaosOn) break
        const candidates = slots.map((w, slot) => ({ w, slot })).filter(({ w }) => w?.readyAt !== undefined && w.exit === undefined)
        // Never the last running worker: on a loaded machine a replacement can take 20 s to start, and a run with
        // nobody left to redeliver measures the machine, not the consumer.
        if (candidates.length < 2) {
          killsSkipped++
          continue
        }
        const { w, slot } = candidates[Math.floor(Math.random() * candidates.length)]!
        const at = killWorker(w!)
        kills.push({ consumer: w!.consumerId, pid: w!.pid, at })
        slots[slot] = spawnSlot(slot)
      }
    })()

    const terminator = (async () => {
      while (chaosOn) {
        await sleep(jitter(config.terminateEveryMs))
        if (!chaosOn) break
        try {
          const rows = await database.query<{ pid: number; application_name: string }>(
            `SELECT pid, application_name FROM pg_stat_activity
             WHERE application_name LIKE 'chaos-worker%' AND pid <> pg_backend_pid()`
          )
          if (rows.length === 0) continue
          const shuffled = [...rows].sort(() => Math.random() - 0.5)
          const victims = shuffled.slice(0, 1 + Math.floor(Math.random() * Math.max(1, Math.ceil(rows.length / 6))))
          const at = Date.now()
          const done = await database.query<{ pid: number }>(
            `SELECT pid FROM unnest($1::int[]) AS pid WHERE pg_terminate_backend(pid)`,
            [`{${victims.map((v) => Number(v.pid)).join(",")}}`]
          )
          terminations.push({ at, count: done.length })
          const hit = new Set(done.map((r) => Number(r.pid)))
          for (const v of victims) {
            if (!hit.has(Number(v.pid))) continue
            const m = /^chaos-worker@(.+?)(?:-(lease|listen|presence-pool|presence))?$/.exec(v.application_name)
            const pool = m?.[2] ?? "main"
            terminatedBy.set(pool, (terminatedBy.get(pool) ?? 0) + 1)
            terminated.push({ consumer: m?.[1] ?? v.application_name, pool, at })
          }
        } catch {
          terminateErrors++ // the server is restarting
        }
      }
    })()

    const restartAfterMs = Math.max(2_000, (config.messages / config.rate) * 1000 * 0.45)
    const restarter = (async () => {
      await sleep(restartAfterMs)
      await lock(async () => {
        log(`restarting PostgreSQL (fast shutdown, ${formatMs(config.restartDownMs)} down, start)`)
        restartAt = Date.now()
        await server.stop()
        await sleep(config.restartDownMs)
        await server.start()
        restartUpAt = Date.now()
        restartDownMs = restartUpAt - restartAt
        log(`PostgreSQL back after ${formatMs(restartDownMs)}`)
      })
    })()

    // Chaos runs while messages are sent and until the backlog is nearly gone (and after the restart).
    const tail = Math.max(20, Math.round(config.messages * 0.02))
    const drainDeadline = () => Date.now() + config.drainTimeoutMs
    let hardDeadline = Infinity
    let backlog = Infinity
    while (true) {
      await sleep(500)
      if (sendingDone && hardDeadline === Infinity) hardDeadline = drainDeadline()
      const [row] = await database.queryRetrying<{ ready: string }>(
        `SELECT count(*)::text AS ready FROM ${SCHEMA}.messages WHERE state = 'ready'`
      )
      backlog = Number(row?.ready ?? 0)
      if (sendingDone && restartDownMs !== undefined && backlog <= tail) break
      if (Date.now() > hardDeadline) break
      if (Math.round((Date.now() - t0) / 500) % 20 === 0) {
        log(`sent ${sentCount}, in queue ${backlog}, kills ${kills.length}, backend terminations ${terminations.length}`)
      }
    }
    chaosOn = false
    await Promise.all([sender, killer, terminator, restarter])
    log(`chaos stopped (${kills.length} kills, ${terminations.length} backend terminations); draining ${backlog} messages`)

    // ---- drain -----------------------------------------------------------------------------
    const drained = await poll(async () => {
      const [row] = await database.queryRetrying<{ ready: string }>(
        `SELECT count(*)::text AS ready FROM ${SCHEMA}.messages WHERE state = 'ready'`
      )
      return Number(row?.ready ?? 0) === 0 ? true : undefined
    }, Math.max(5_000, hardDeadline - Date.now()), 250)
    log(drained ? "queue drained; stopping workers (SIGTERM)" : "drain timed out; stopping workers (SIGTERM)")
    // A worker still starting (no READY yet) has no signal handler: SIGTERM would kill it, which says nothing of
    // its drain. Give starters time to come up first; those that still did not are reported apart.
    await poll(() => workers.every((w) => w.exit !== undefined || w.readyAt !== undefined) ? true : undefined, 30_000, 100)
    shuttingDown = true
    const live = workers.filter((w) => w.exit === undefined)
    const notStarted = live.filter((w) => w.readyAt === undefined)
    const stuck = await stopWorkers(live, 15_000)
    const uncleanExits = live.filter((w) => !stuck.includes(w) && !notStarted.includes(w) && w.exit?.code !== 0)
    const finishedAt = Date.now()

    // ---- checks ----------------------------------------------------------------------------
    const ledger = await readLedger(database, SCHEMA)
    const flowLeases = flowRun ? await readLeases(database, SCHEMA) : []
    const counters = !commitRun ? [] : (await database.queryRetrying<{ key: number; task: string; n: number }>(
      `SELECT key, task, n FROM ${SCHEMA}.counters ORDER BY key`
    )).map((r) => ({ key: Number(r.key), task: r.task, n: Number(r.n) }))
    const remaining = await database.queryRetrying<{ n: number; state: string }>(
      `SELECT (payload->>'n')::int AS n, state FROM ${SCHEMA}.messages`
    )
    const journal: Array<JournalEvent> = workers.flatMap((w) => w.journal)
    // Poisoned on purpose: expected in dead letters, not completed.
    const poisoned = new Set(Array.from({ length: sentCount }, (_, n) => n).filter((n) => poisonOf(n) === "error"))
    const result = analyze({
      sent: sentCount,
      ledger: ledger.map((r) => ({
        ...r,
        n: Number(r.n),
        started_ms: Number(r.started_ms),
        ended_ms: r.ended_ms === null ? null : Number(r.ended_ms)
      })),
      journal,
      remaining: remaining.map((r) => ({ n: Number(r.n), state: r.state })),
      kills,
      restartAt,
      restartUpAt,
      finishBoundMs: finishBound(config),
      renewerStopTimeoutMs: config.renewerStopTimeoutMs,
      leaseMs: config.leaseMs,
      logEvents: workers.flatMap((w) => w.logEvents),
      terminations: terminated,
      origin: t0,
      poisoned,
      flow: flowRun ? { limits: flowLimits, keyOf, leases: flowLeases } : undefined,
      commit: commitRun ? { counters, taskOf: commitTaskOf } : undefined
    })
    // Poison: each dead letter with a readable reason (the NUL shown as the escape \u0000), each unstorable result marked.
    const poisonDeadReadable = await database.queryRetrying<{ n: number }>(
      `SELECT (payload->>'n')::int AS n FROM ${SCHEMA}.messages
       WHERE state = 'dead' AND payload ? 'poison' AND last_error LIKE $1`,
      [`%upstream said \\\\u0000 (message %`]
    )
    const poisonResults = Array.from({ length: sentCount }, (_, n) => n).filter((n) => poisonOf(n)?.endsWith("-result") === true)
    const markedResults = await database.queryRetrying<{ n: number }>(
      `SELECT DISTINCT l.n FROM ${SCHEMA}.attempts AS a JOIN ${SCHEMA}.ledger AS l ON l.message_id = a.message_id
       WHERE l.n = ANY($1::int[]) AND a.outcome = 'acked' AND a.result->>'leasehold' = 'result-unstorable'`,
      [poisonResults]
    )
    const logs: LogCounts = zeroLogCounts()
    for (const w of workers) for (const k of Object.keys(logs) as Array<keyof LogCounts>) logs[k] += w.logCounts[k]

    // What the workers' claim loops claimed, as each last said (a SIGKILLed worker's last 500 ms are missing).
    const claimedLead = workers.reduce((sum, w) => sum + w.claimedByLoop.lead, 0)
    const claimedBeside = workers.reduce((sum, w) => sum + w.claimedByLoop.beside, 0)
    const violations: Array<string> = []
    const check = (ok: boolean, what: string) => {
      if (!ok) violations.push(what)
      return ok ? "ok" : "VIOLATION"
    }
    // Consumer log lines that must be explained by the chaos (analyze.ts, judgeLogs); their journaled count must match
    // the count read from the plain output, or the checker missed some.
    const logLabel = { "double-run-at-ack": "double runs at ack", "finish-failed": "finishing writes failed", "renewer-wedged": "renewers wedged" } as const
    const logRows: Array<Array<string>> = (Object.keys(logKindOf) as Array<keyof typeof logKindOf>).flatMap((key) => {
      const kind = logKindOf[key]!
      if (kind !== "double-run-at-ack" && kind !== "finish-failed" && kind !== "renewer-wedged") return []
      const journaled = result.explainedLogs[kind] + result.unexplainedLogs[kind]
      return [
        [`worker log: ${logLabel[kind]}, unexplained`, String(result.unexplainedLogs[kind]), check(result.unexplainedLogs[kind] === 0, `${result.unexplainedLogs[kind]} ${logLabel[kind]} not explained by the chaos (see below)`)],
        [`  explained by the chaos`, String(result.explainedLogs[kind]), check(journaled === logs[key], `${logLabel[kind]}: ${logs[key]} in the output, ${journaled} journaled (the checker missed some)`)]
      ]
    })
    const d = result.duplicatesByCause
    const totalDuplicates = result.duplicates.length
    const p50 = percentile(result.redeliveryMs, 50)
    const p95 = percentile(result.redeliveryMs, 95)
    const rows: Array<Array<string>> = [
      ["check", "value", "verdict"],
      ["messages sent", String(result.sent), check(result.sent === config.messages, `sent ${result.sent} of ${config.messages}`)],
      ["messages completed", String(result.completed), check(result.completed === result.sent - poisoned.size, `${result.sent - poisoned.size - result.completed} messages not completed`)],
      ["messages lost", String(result.lost.length), check(result.lost.length === 0, `${result.lost.length} messages lost (e.g. n=${result.lost.slice(0, 5).join(",")})`)],
      ["messages dead-lettered", String(result.dead.length), check(result.dead.length === 0, `${result.dead.length} messages dead-lettered (e.g. n=${result.dead.slice(0, 5).join(",")})`)],
      ...(!config.poison ? [] : [
        ["poison: NUL in the error, dead-lettered", `${result.poisonDead.length}`, check(result.poisonNotDead.length === 0, `${result.poisonNotDead.length} poisoned messages not dead-lettered (e.g. n=${result.poisonNotDead.slice(0, 5).join(",")})`)],
        ["  with the NUL readable in the last error", String(poisonDeadReadable.length), check(poisonDeadReadable.length === result.poisonDead.length, `${result.poisonDead.length - poisonDeadReadable.length} poison dead letters without the error text`)],
        ["  runs after a poisoned failure (retry policy)", String(result.duplicatesByCause.poison), ""],
        ["poison: unstorable result, acked with the marker", `${markedResults.length} of ${poisonResults.length}`, check(markedResults.length === poisonResults.length, `${poisonResults.length - markedResults.length} unstorable results not kept as the marker`)]
      ]),
      ["messages still queued", String(result.stillQueued.length), check(result.stillQueued.length === 0, `${result.stillQueued.length} messages still in the queue after the drain`)],
      ["executions (handler runs)", String(result.executions), ""],
      ["  claimed by a lane's second claim loop", `${claimedBeside} of ${claimedBeside + claimedLead}`, config.concurrency >= 32 ? "" : "(lanes under 32 slots have one loop)"],
      ["overlapping executions, both holders alive", String(result.overlaps.length), check(result.overlaps.length === 0, `${result.overlaps.length} overlapping executions with both holders alive`)],
      ...(!commitRun ? [] : [["  explained: stale run past its lease (onLeaseLost continue)", String(result.staleOverlaps.length), result.staleOverlaps.length === 0 ? "" : "allowed (lease lost logged)"]]),
      ["duplicate executions", String(totalDuplicates), ""],
      ["  following a SIGKILL", String(d.kill), ""],
      ["  following an interruption (lease/presence lost)", String(d.interrupted), d.interrupted === 0 ? "" : "allowed (storm)"],
      ["  following work done, interrupted before ack", String(d["interrupted-after-work"]), d["interrupted-after-work"] === 0 ? "" : "allowed (storm)"],
      [commitRun ? "  following a failed ledger write or increment (a commit step failed)" : "  following a failed ledger write", String(d["handler-failed"]), d["handler-failed"] === 0 ? "" : "allowed (handler failed)"],
      ["  following a finishing write given up (connection deaths)", String(d["finish-given-up"]), d["finish-given-up"] === 0 ? "" : "allowed (explained below)"],
      ...(!commitRun && d["stale-past-lease"] === 0 ? [] : [["  following a stale run past its lease (onLeaseLost continue)", String(d["stale-past-lease"]), d["stale-past-lease"] === 0 ? "" : "allowed (lease lost logged)"]]),
      ["  after a completed run, holder alive", String(d["after-completion"]), check(d["after-completion"] === 0, `${d["after-completion"]} duplicates after a completed run whose holder was alive (double runs not caused by a kill)`)],
      ["  unexplained", String(d.unexplained), check(d.unexplained === 0, `${d.unexplained} duplicates whose earlier run neither finished, nor was interrupted, nor was killed`)],
      ["redelivery after kill, p50", formatMs(p50), `${result.redeliveryMs.length} samples`],
      ["redelivery after kill, p95", formatMs(p95), `max ${formatMs(percentile(result.redeliveryMs, 100))}`],
      ["in progress at a kill, never redelivered", String(result.notRedelivered), check(result.notRedelivered === 0, `${result.notRedelivered} messages in progress at a kill never ran again`)],
      ["ledger rows of unknown messages", String(result.unknown), check(result.unknown === 0, `${result.unknown} ledger rows for messages never sent`)],
      ["messages sent twice", String(result.messagesWithSeveralIds.length), check(result.messagesWithSeveralIds.length === 0, `${result.messagesWithSeveralIds.length} messages ran under two ids (sent twice)`)],
      ["workers crashed (not killed)", String(crashes.length), check(crashes.length === 0, `${crashes.length} running workers exited on their own: ${crashes.map((w) => `${w.name} code ${w.exit?.code}`).join(", ")}`)],
      ["workers unclean on SIGTERM", String(uncleanExits.length + stuck.length), check(uncleanExits.length + stuck.length === 0, `${uncleanExits.length} workers exited non-zero and ${stuck.length} did not exit on SIGTERM`)],
      ["workers not started 30 s after the drain", String(notStarted.length), check(notStarted.length === 0, `${notStarted.length} workers never printed READY: ${notStarted.map((w) => w.name).join(", ")}`)],
      ...logRows,
      ...(result.flow === undefined ? [] : flowRows(result.flow, check, sentCount)),
      ...(result.commit === undefined ? [] : commitRows(result.commit, check, !ci, logs.doubleRunPrevented))
    ]
    console.log("")
    console.log(table(rows))
    console.log("")
    console.log(table([
      ["chaos", "count"],
      ["workers SIGKILLed", `${kills.length} (${result.killsWithWork} had a message in progress; ${killsSkipped} skipped: fewer than 2 running)`],
      ["workers started", `${workers.length} (${startFailures.length} failed to start, e.g. during the restart)`],
      ["backend terminations", `${terminations.length} rounds, ${terminations.reduce((s, t) => s + t.count, 0)} backends (${terminateErrors} rounds failed)`],
      ["  by pool", [...terminatedBy].map(([k, v]) => `${k} ${v}`).join(", ") || "-"],
      ["server restarts", restartDownMs === undefined ? "0" : `1 (down ${formatMs(restartDownMs)})`],
      ["ledger starts abandoned (no work done)", String(result.abandoned)],
      ["interruptions > 10 s from the restart", String(result.interruptedAwayFromRestart)],
      ["worker log: leases lost / at risk", String(logs.leaseLost)],
      ["worker log: presence lost, handlers stopped", String(logs.presenceLost)],
      ["worker log: ledger writes failed", String(logs.ledgerFailed)],
      ["duration", formatMs(finishedAt - t0)]
    ]))
    if (result.overlaps.length > 0) {
      console.log("\noverlaps (first 5):")
      for (const o of result.overlaps.slice(0, 5)) {
        console.log(`  n=${o.n}: ${o.first.consumer} ${o.first.startedMs}..${o.first.okMs ?? o.first.interruptedMs ?? "?"} vs ${o.second.consumer} from ${o.second.startedMs}`)
      }
    }
    const suspicious = result.duplicates.filter((x) => x.cause !== "kill" && x.cause !== "poison" && x.cause !== "stale-past-lease")
    if (suspicious.length > 0) {
      console.log("\nduplicates not following a kill (first 10):")
      for (const x of suspicious.slice(0, 10)) {
        const p = x.previous
        console.log(
          `  n=${x.n} (${x.cause}): ${p.consumer} started ${p.startedMs - t0} ms, ` +
            [
              p.okMs === undefined ? "" : `work done at ${p.okMs - t0} ms`,
              p.interruptedMs === undefined ? "" : `interrupted at ${p.interruptedMs - t0} ms`,
              p.endWriteFailedMs === undefined ? "" : `end write failed at ${p.endWriteFailedMs - t0} ms`,
              p.poisonFailedMs === undefined ? "" : `failed on purpose (poison) at ${p.poisonFailedMs - t0} ms`
            ].filter((x) => x !== "").join(", ") + "; " +
            `then ${x.next.consumer} started ${x.next.startedMs - t0} ms (restart at ${restartAt === undefined ? "-" : restartAt - t0} ms)`
        )
      }
    }
    // The commit run: the history the store wrote, and the ledger, of the first messages in an unexplained overlap or duplicate.
    const puzzling = [...new Set([
      ...result.overlaps.map((o) => o.n),
      ...result.duplicates.filter((x) => x.cause === "unexplained" || x.cause === "after-completion").map((x) => x.n),
      ...result.logs.filter((x) => !x.explained && x.execution !== undefined).map((x) => x.execution!.n)
    ])].slice(0, 3)
    if (commitRun && puzzling.length > 0) {
      for (const n of puzzling) {
        const history = await database.queryRetrying<{ attempt: number; consumer: string; started_at: Date; ended_at: Date; outcome: string; error: string | null }>(
          `SELECT a.attempt, a.consumer, a.started_at, a.ended_at, a.outcome, left(a.error, 160) AS error FROM ${SCHEMA}.attempts AS a
           WHERE a.message_id = (SELECT message_id FROM ${SCHEMA}.ledger WHERE n = $1 LIMIT 1) ORDER BY a.id`,
          [n]
        )
        console.log(`\nn=${n}: its history (the store's attempts records):`)
        for (const h of history) {
          console.log(`  attempt ${h.attempt} ${h.consumer} ${new Date(h.started_at).getTime() - t0}..${new Date(h.ended_at).getTime() - t0} ms ${h.outcome}${h.error === null ? "" : `: ${h.error}`}`)
        }
        console.log(`  its ledger:`)
        for (const r of ledger.filter((r) => Number(r.n) === n)) {
          console.log(
            `  attempt ${r.attempt} ${r.consumer} ${Number(r.started_ms) - t0}..${r.ended_ms === null ? "-" : Number(r.ended_ms) - t0} ms ${r.outcome ?? "-"}` +
              (r.done_ms === undefined || r.done_ms === null ? "" : ` (end written ${Math.round(Number(r.done_ms) - t0)} ms)`)
          )
        }
      }
    }
    if (result.flow !== undefined) printFlowDetails(result.flow, flowLeases)
    if (result.commit !== undefined) printCommitDetails(result.commit)
    if (result.logs.length > 0) {
      console.log("\njudged worker log lines (first 10 unexplained, then first 5 explained):")
      const shown = [...result.logs.filter((x) => !x.explained).slice(0, 10), ...result.logs.filter((x) => x.explained).slice(0, 5)]
      for (const x of shown) {
        console.log(
          `  ${x.explained ? "explained  " : "UNEXPLAINED"} ${x.event.kind} on ${x.event.consumer} at ${x.event.at - t0} ms, ` +
            `message ${x.event.messageIds.join(",") || "-"}: ${x.why}\n      "${x.event.text.split("\n")[0]}"`
        )
      }
    }
    if (result.dead.length > 0) {
      const dead = await database.queryRetrying<{ n: number; attempts: number; max_attempts: number; dead_reason: string; last_error: string | null }>(
        `SELECT (payload->>'n')::int AS n, attempts, max_attempts, dead_reason, left(last_error, 400) AS last_error
         FROM ${SCHEMA}.messages WHERE state = 'dead' ORDER BY id LIMIT 5`
      )
      console.log("\ndead letters (first 5):")
      for (const x of dead) {
        console.log(`  n=${x.n}: attempts ${x.attempts}/${x.max_attempts}, ${x.dead_reason}; last error: ${x.last_error ?? "-"}`)
      }
    }
    if (violations.length > 0) {
      console.log("\nviolations:")
      for (const v of violations) console.log(`  - ${v}`)
      for (const w of crashes) console.log(`\n${w.name} last output:\n  ${w.tail.join("\n  ")}`)
    }
    console.log(`\n${violations.length === 0 ? "PASS" : "FAIL"}: chaos ${ci ? "short" : "full"} run${flowRun ? " with flow limits" : ""}${commitRun ? " of the commit step" : ""}${pooler === undefined ? "" : ` through PgBouncer ${pooler} mode`}, ${result.sent} messages, ${kills.length} kills, ${violations.length} violation(s)`)
    return violations.length === 0 ? 0 : 1
  } finally {
    await cleanup()
  }
}

/** The rows of the commit checks (a commit run); `full`: plain duplicates are required. */
const commitRows = (
  c: CommitAnalysis,
  check: (ok: boolean, what: string) => string,
  full: boolean,
  preventedInOutput: number
): Array<Array<string>> => {
  const judged = new Set(commitViolations(c, { requirePlainDuplicates: full }))
  // Marks only: the judged violations, with their text, are recorded below (commitViolations).
  const verdict = (ok: boolean) => (ok ? "ok" : "VIOLATION")
  const unmatched = c.fenced.filter((f) => !f.explained).length
  const rows: Array<Array<string>> = [
    ["commit: tx counters (increment inside context.commit)", String(c.tx.counters), ""],
    ["  exactly 1", String(c.tx.exactlyOne), verdict(c.tx.exactlyOne === c.tx.counters)],
    ["  at 0 (effect lost)", String(c.tx.zero.length), verdict(c.tx.zero.length === 0)],
    ["  above 1 (double effect)", String(c.tx.over.length), verdict(c.tx.over.length === 0)],
    ["  tx commit steps failed otherwise (connection death, bound), retried", String(c.commitFailures), ""],
    ["commit: plain counters (the twin, outside any commit)", String(c.plain.counters), ""],
    ["  exactly 1", String(c.plain.exactlyOne), ""],
    ["  at 0 (effect lost)", String(c.plain.zero.length), verdict(c.plain.zero.length === 0)],
    [
      "  above 1 (duplicate effects the faults caused)",
      `${c.plain.over.length} (${c.plain.extra} extra increments, max ${Math.max(1, ...c.plain.over.map((o) => o.n))})`,
      full ? verdict(c.plain.over.length > 0) : c.plain.over.length > 0 ? "shown (the check can fail)" : "shown, not judged (short run)"
    ],
    ["commits refused by the fence (double run prevented)", String(c.fenced.length), verdict(c.fencedJournaled === c.fenced.length && preventedInOutput === c.fenced.length)],
    ["  matched to a reclaim of their message", String(c.fenced.length - unmatched), verdict(unmatched === 0)],
    ["  as the handlers saw them (CommitFenced lease-lost)", String(c.fencedJournaled), ""],
    ["stale runs (lease lost logged, or worker blocked), then reclaimed: tx / plain", `${c.staleRuns.tx} / ${c.staleRuns.plain}`, ""],
    ["  on a worker blocked on purpose (forced lease loss)", `${c.staleByBlock} (${c.blocks} blocks)`, ""]
  ]
  for (const v of judged) check(false, v)
  if (preventedInOutput !== c.fenced.length) check(false, `double runs prevented: ${preventedInOutput} in the output, ${c.fenced.length} journaled (the checker missed some)`)
  return rows
}

const printCommitDetails = (c: CommitAnalysis) => {
  const rel = (t: number | undefined) => (t === undefined ? "-" : `${Math.round(t - t0)} ms`)
  const shown = [...c.fenced.filter((f) => !f.explained).slice(0, 10), ...c.fenced.filter((f) => f.explained).slice(0, 5)]
  if (shown.length > 0) {
    console.log("\ncommits refused by the fence (first 10 unmatched, then first 5 matched):")
    for (const f of shown) {
      console.log(`  ${f.explained ? "matched  " : "UNMATCHED"} on ${f.event.consumer} at ${rel(f.event.at)}, message ${f.event.messageIds.join(",") || "-"}: ${f.why}`)
    }
  }
  if (c.tx.over.length + c.tx.zero.length > 0) {
    console.log(`\ntx counters not 1 (first 10): ${[...c.tx.zero.map((k) => `n=${k}: 0`), ...c.tx.over.map((o) => `n=${o.key}: ${o.n}`)].slice(0, 10).join(", ")}`)
  }
  if (c.plain.over.length > 0) console.log(`\nplain counters above 1 (first 10): ${c.plain.over.slice(0, 10).map((o) => `n=${o.key}: ${o.n}`).join(", ")}`)
}

const formatRate = (r: FlowRate) => `${r.count}/${formatMs(r.periodMs)}`

/** Whether an observed maximum reached its limit (the run is not trivially under it). */
const reached = (max: number, limit: number) => (max >= limit ? `${max} (limit ${limit}: reached)` : `${max} (limit ${limit}: NOT reached)`)

/** The rows of the flow checks (a flow run). */
const flowRows = (
  f: FlowAnalysis,
  check: (ok: boolean, what: string) => string,
  sent: number
): Array<Array<string>> => {
  const sizes = new Map<string, number>()
  for (let n = 0; n < sent; n++) sizes.set(keyOf(n), (sizes.get(keyOf(n)) ?? 0) + 1)
  const sorted = [...sizes.values()].sort((a, b) => b - a)
  const rows: Array<Array<string>> = [
    ["flow: keys (messages of the biggest / median key)", `${sizes.size} (${sorted[0] ?? 0} / ${sorted[Math.floor(sorted.length / 2)] ?? 0})`, ""],
    ["flow: claims the database recorded (leases)", `${f.claims} (${f.redeliveryClaims} redeliveries)`, ""],
    ["  leases still open after the drain", String(f.leasesOpen), check(f.leasesOpen === 0, `${f.leasesOpen} leases never ended`)],
    ["  executions matched to no lease of their worker", String(f.unmatched.length), check(f.unmatched.length === 0, `${f.unmatched.length} executions with no recorded lease of their worker (see below)`)]
  ]
  const concurrency = (label: string, c: FlowAnalysis["concurrency"], l: FlowAnalysis["leases"], perKey: boolean) => {
    if (c === undefined || l === undefined) return
    rows.push(
      [`${label}: executions in flight at an instant, max (lease live)`, reached(c.maxWithinLease, c.limit), check(c.maxWithinLease <= c.limit, `${label}: ${c.maxWithinLease} executions with a live lease at once, limit ${c.limit}`)],
      ...(perKey ? [[`  keys that reached the limit`, `${c.scopesAtLimit} of ${c.scopes}`, ""]] : []),
      [`  max counting every execution still running`, String(c.maxObserved), ""],
      [`  instants above the limit, unexplained`, String(c.unexplained.length), check(c.unexplained.length === 0, `${label}: ${c.unexplained.length} instants above the limit not explained by a lost lease (see below)`)],
      [`  above, explained: lease lost, handler being interrupted`, String(c.explained.length), c.explained.length === 0 ? "" : "allowed (limits count leases)"],
      [`  live leases at an instant, max (database record)`, reached(l.max, l.limit), check(l.over.length === 0, `${label}: ${l.over.length} lease starts above the limit on the database's own record (max ${l.max})`)]
    )
  }
  concurrency("per key", f.keyConcurrency, f.keyLeases, true)
  concurrency("queue", f.concurrency, f.leases, false)
  const rate = (label: string, r: FlowAnalysis["rate"], perKey: boolean) => {
    if (r === undefined) return
    rows.push(
      [`${label} ${formatRate(r.limit)}: claims in a sliding window, max (leased_at)`, reached(r.maxRecorded, r.limit.count), check(r.over.length === 0, `${label}: ${r.over.length} windows above ${r.limit.count} claims on the recorded claim times (max ${r.maxRecorded})`)],
      ...(perKey ? [[`  keys that reached the count`, String(r.scopesAtLimit), ""]] : []),
      [`  same on the claim statement's clock`, String(r.maxClock), r.maxClock > r.limit.count ? "shown, not judged: above the count (bench/README.md)" : "shown, not judged"],
      [`  same on the ledger's handler starts`, String(r.maxLedger), "shown, not judged"]
    )
  }
  rate("queue rate", f.rate, false)
  rate("key rate", f.keyRate, true)
  return rows
}

const printFlowDetails = (f: FlowAnalysis, leases: ReadonlyArray<LeaseRecord>) => {
  const rel = (t: number) => `${Math.round(t - t0)} ms`
  if (f.unmatched.length > 0) {
    console.log("\nexecutions matched to no lease of their worker (first 5), with the leases of their message:")
    for (const e of f.unmatched.slice(0, 5)) {
      console.log(`  n=${e.n} (message ${e.messageId}) on ${e.consumer} started ${(e.startedMs - t0).toFixed(3)} ms`)
      for (const l of leases.filter((l) => l.messageId === e.messageId)) {
        console.log(`      lease of ${l.consumer ?? "?"} attempt ${l.attempt}: claimed ${(l.claimedMs - t0).toFixed(3)} ms, ended ${l.endedMs === null ? "-" : (l.endedMs - t0).toFixed(3)} ms`)
      }
    }
  }
  for (const [label, c] of [["per key", f.keyConcurrency], ["queue", f.concurrency]] as const) {
    if (c === undefined) continue
    const shown = [...c.unexplained.slice(0, 5), ...c.explained.slice(0, 3)]
    if (shown.length === 0) continue
    console.log(`\n${label} concurrency above the limit (first 5 unexplained, first 3 explained):`)
    for (const x of shown) {
      console.log(
        `  ${x.explained ? "explained  " : "UNEXPLAINED"} ${x.scope} at ${rel(x.at)}: ${x.inFlight} in flight, limit ${x.limit}: ${x.why}` +
          x.pastLease.map((e) => `\n      n=${e.n} on ${e.consumer} from ${rel(e.startedMs)}, interrupted ${e.interruptedMs === undefined ? "no" : rel(e.interruptedMs)}, ended ${rel(flowEnd(e))}`).join("")
      )
    }
  }
  for (const [label, l] of [["per key", f.keyLeases], ["queue", f.leases]] as const) {
    if (l === undefined || l.over.length === 0) continue
    console.log(`\n${label}: live leases above the limit on the database's record (first 5):`)
    for (const o of l.over.slice(0, 5)) console.log(`  ${o.scope} at ${rel(o.at)}: ${o.live} live, limit ${l.limit}`)
  }
  for (const [label, r] of [["queue rate", f.rate], ["key rate", f.keyRate]] as const) {
    if (r === undefined || r.over.length === 0) continue
    console.log(`\n${label}: windows above the count (first 5):`)
    for (const o of r.over.slice(0, 5)) {
      console.log(`  ${o.scope}: ${o.starts} claims in the ${formatMs(r.limit.periodMs)} up to ${rel(o.at)} (leased_at), in claim order:`)
      for (const c of o.claims.slice(0, 12)) {
        console.log(
          `      message ${c.messageId} attempt ${c.attempt} by ${c.consumer ?? "?"}: leased_at ${(c.leasedMs - t0).toFixed(3)} ms, ` +
            `claim statement ${(c.claimedMs - t0).toFixed(3)} ms (+${(c.claimedMs - c.leasedMs).toFixed(1)} ms after its transaction began)`
        )
      }
    }
  }
  console.log(
    "\nflow checks, what is measured: executions from the ledger's start to the handler's return (or the SIGKILL); " +
      "leases from the database's record (claim statement to the write that ended them, or their expiry); " +
      "rate windows on each claim's leased_at, the start the claim wrote into flow_rates (redeliveries included)."
  )
}

main().then(
  (code) => process.exit(code),
  (error) => {
    console.error(`chaos: ${error instanceof Error ? error.stack ?? error.message : String(error)}`)
    console.log("\nFAIL: chaos run could not complete")
    process.exit(1)
  }
)
