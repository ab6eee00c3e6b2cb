/**
 * Plumbing shared by the chaos suite (bench/chaos/run.ts) and the redelivery
 * benchmark (bench/redelivery.ts): an embedded PostgreSQL, a client on it,
 * the ledger table, worker processes (bench/chaos/worker.ts) and small
 * statistics helpers.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { createWriteStream, mkdirSync, type WriteStream } from "node:fs"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { Effect, Layer, ManagedRuntime, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { PgClient } from "@effect/sql-pg"
import * as PgQueueStore from "../../src/PgQueueStore.ts"
import { QueueStore } from "../../src/QueueStore.ts"

export const here = dirname(fileURLToPath(import.meta.url))
export const repoRoot = resolve(here, "..", "..")
export const WORKER = join(here, "worker.ts")

/** Node >= 22 runs the .ts worker directly (type stripping): the orchestrators run on it through npm scripts. */
export const nodeBinary = (() => {
  const major = Number(process.versions.node.split(".")[0])
  if (major >= 22) return process.execPath
  return join(repoRoot, "node_modules", ".bin", "node")
})()

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, Math.max(0, ms)))

/** Poll `check` until it returns a value (not undefined); undefined after `timeoutMs`. */
export const poll = async <A>(
  check: () => Promise<A | undefined> | A | undefined,
  timeoutMs: number,
  intervalMs = 50
): Promise<A | undefined> => {
  const deadline = Date.now() + timeoutMs
  while (true) {
    const value = await check()
    if (value !== undefined) return value
    if (Date.now() > deadline) return undefined
    await sleep(intervalMs)
  }
}

// ---------------------------------------------------------------------------------------------
// Database access for the orchestrator
// ---------------------------------------------------------------------------------------------

export interface Db {
  readonly runtime: ManagedRuntime.ManagedRuntime<SqlClient.SqlClient | QueueStore, unknown>
  readonly query: <A extends object>(text: string, params?: ReadonlyArray<unknown>) => Promise<ReadonlyArray<A>>
  /** `query` retried (with a short pause) while the server restarts or a connection dies. */
  readonly queryRetrying: <A extends object>(text: string, params?: ReadonlyArray<unknown>, timeoutMs?: number) => Promise<ReadonlyArray<A>>
  readonly dispose: () => Promise<void>
}

/** A small pool for the orchestrator, with the store (migrating `schema` once, here). */
export const openDb = async (url: string, schema: string, applicationName: string): Promise<Db> => {
  const pg = PgClient.layer({ url: Redacted.make(url), maxConnections: 4, applicationName })
  const layer = PgQueueStore.layer({ schema, leasePool: false }).pipe(Layer.provideMerge(pg))
  const runtime = ManagedRuntime.make(layer)
  await runtime.runPromise(Effect.void)
  const query = <A extends object>(text: string, params: ReadonlyArray<unknown> = []) =>
    runtime.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe<A>(text, params)))
  const queryRetrying = async <A extends object>(text: string, params: ReadonlyArray<unknown> = [], timeoutMs = 60_000) => {
    const deadline = Date.now() + timeoutMs
    while (true) {
      try {
        return await query<A>(text, params)
      } catch (error) {
        if (Date.now() > deadline) throw error
        await sleep(200)
      }
    }
  }
  return { runtime, query, queryRetrying, dispose: () => runtime.dispose() }
}

/** The ledger the chaos workers write: one row per handler execution. */
export const createLedger = async (db: Db, schema: string): Promise<void> => {
  await db.query(`CREATE TABLE ${schema}.ledger (
    exec_id    uuid PRIMARY KEY,
    message_id bigint NOT NULL,
    n          integer NOT NULL,
    attempt    integer NOT NULL,
    consumer   text NOT NULL,
    pid        integer NOT NULL,
    task       text NOT NULL,
    started_ms float8 NOT NULL,
    ended_ms   float8,
    outcome    text,
    done_ms    float8,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp()
  )`)
  await db.query(`CREATE INDEX ledger_n_idx ON ${schema}.ledger (n)`)
}

export interface LedgerRow {
  readonly exec_id: string
  readonly message_id: string
  readonly n: number
  readonly attempt: number
  readonly consumer: string
  readonly pid: number
  readonly task: string
  readonly started_ms: number
  readonly ended_ms: number | null
  readonly outcome: string | null
  /** When the ledger end (`ok`) was last written (the database's clock, same machine): the handler returned right after. */
  readonly done_ms?: number | null
}

export const readLedger = (db: Db, schema: string) =>
  db.queryRetrying<LedgerRow>(
    `SELECT exec_id::text, message_id::text, n, attempt, consumer, pid, task, started_ms, ended_ms, outcome, done_ms
     FROM ${schema}.ledger ORDER BY started_ms`
  )

// ---------------------------------------------------------------------------------------------
// Worker processes
// ---------------------------------------------------------------------------------------------

/** A journal line of a worker about one execution (see worker.ts). */
/** A worker's claims so far, by claim loop (worker.ts `ClaimCounts`). */
interface ClaimsEvent {
  readonly ev: "claims"
  readonly lead: number
  readonly beside: number
}

export interface JournalEvent {
  /** `interrupt-returned`: the interrupted handler's finalizer (its ledger write, bounded) is done: the handler returns. */
  /**
   * The commit run (run.ts --commit): `effect-failed`: the counter's increment failed (a commit step not refused by
   * the fence, or the plain UPDATE): the handler fails, the queue retries; `commit-fenced`: the fence refused the
   * commit (CommitFenced lease-lost); `blocked`: the handler blocks the event loop (the forced lease loss) until `at` (written as the block begins).
   */
  readonly ev:
    | "interrupted"
    | "interrupt-returned"
    | "abandoned"
    | "end-write-failed"
    | "poison-failed"
    | "effect-failed"
    | "commit-fenced"
    | "blocked"
  readonly exec: string
  readonly id: string
  readonly n: number
  readonly attempt: number
  readonly consumer: string
  readonly pid: number
  readonly task: string
  readonly startedMs: number
  readonly endedMs?: number
  readonly at: number
  /** `effect-failed`: the error's tag and text. */
  readonly error?: string
}

/**
 * The consumer log lines the chaos run must explain (see analyze.ts), as the
 * worker's own logger journals them: `CHAOS {"ev":"log",...}` with the time
 * of the log, the worker, and the message ids it was annotated with.
 */
export type LogKind = "double-run-at-ack" | "finish-failed" | "renewer-wedged" | "lease-lost" | "double-run-prevented"

/**
 * The kinds judged one by one (analyze.ts, judgeLogs); `lease-lost` (the consumer saw a lease gone: a stale run
 * from then on) and `double-run-prevented` (a commit step the fence refused) are journaled for the commit run's
 * checks (analyze.ts, analyzeCommit).
 */
export const judgedKinds: ReadonlyArray<LogKind> = ["double-run-at-ack", "finish-failed", "renewer-wedged"]

export interface LogEvent {
  readonly ev: "log"
  readonly kind: LogKind
  readonly consumer: string
  readonly pid: number
  readonly at: number
  /** The `messageId` annotation, or the `messageIds` one (a whole claim) split on commas. */
  readonly messageIds: ReadonlyArray<string>
  readonly text: string
}

/** Which of the counted log lines (below) is which judged event. */
export const logKindOf: Partial<Record<keyof typeof logPatterns, LogKind>> = {
  doubleRun: "double-run-at-ack",
  finishFailed: "finish-failed",
  wedged: "renewer-wedged",
  leaseLost: "lease-lost",
  doubleRunPrevented: "double-run-prevented"
}

/** Worker log lines worth counting (the consumer's own words, see src/Consumer.ts and src/consumer/renew.ts). */
export const logPatterns = {
  doubleRun: /double run: the ack found the lease gone/,
  finishFailed: /could not be written; the message runs again/,
  leaseLost: /lease lost: |lease at risk: /,
  presenceLost: /presence lost: the presence session is gone/,
  wedged: /renewer wedged/,
  ledgerFailed: /ledger (start|end) (failed|still failing)/,
  doubleRunPrevented: /double run prevented: /
} as const

/** Every count at 0. */
export const zeroLogCounts = (): LogCounts => ({
  doubleRun: 0,
  finishFailed: 0,
  leaseLost: 0,
  presenceLost: 0,
  wedged: 0,
  ledgerFailed: 0,
  doubleRunPrevented: 0
})

export type LogCounts = Record<keyof typeof logPatterns, number>

export interface Worker {
  readonly name: string
  readonly consumerId: string
  readonly proc: ChildProcess
  readonly pid: number
  readonly spawnedAt: number
  readyAt: number | undefined
  /** Set just before this process was sent SIGKILL by the orchestrator. */
  killedAt: number | undefined
  /** Set when SIGTERM was sent for the final shutdown. */
  terminatedAt: number | undefined
  exit: { readonly code: number | null; readonly signal: NodeJS.Signals | null; readonly at: number } | undefined
  /** Resolves when the process exited and its output was read to the end. */
  readonly closed: Promise<void>
  readonly journal: Array<JournalEvent>
  /** The judged log events this worker journaled (see LogEvent). */
  readonly logEvents: Array<LogEvent>
  /** Messages its claim loops had claimed when it last said (`CHAOS {"ev":"claims"}`): the lead's, the second loop's. */
  claimedByLoop: { readonly lead: number; readonly beside: number }
  readonly logCounts: LogCounts
  /** The last lines of output, for failure reports. */
  readonly tail: Array<string>
}

export interface SpawnOptions {
  readonly name: string
  readonly consumerId: string
  readonly env: Record<string, string>
  /** Folder for `<name>.log` with everything the worker printed; none when undefined. */
  readonly logDir?: string | undefined
  readonly onReady?: ((worker: Worker) => void) | undefined
  readonly onExit?: ((worker: Worker) => void) | undefined
}

const logStreams = new Map<string, WriteStream>()

const logStream = (dir: string | undefined, name: string): WriteStream | undefined => {
  if (dir === undefined) return undefined
  const file = join(dir, `${name}.log`)
  let stream = logStreams.get(file)
  if (stream === undefined) {
    mkdirSync(dir, { recursive: true })
    stream = createWriteStream(file, { flags: "a" })
    logStreams.set(file, stream)
  }
  return stream
}

/** Close every worker log file (at the end of a run). */
export const closeLogs = async (): Promise<void> => {
  await Promise.all([...logStreams.values()].map((s) => new Promise<void>((r) => s.end(r))))
  logStreams.clear()
}

const allWorkers = new Set<Worker>()

// A crashing or interrupted orchestrator must not leave workers behind.
process.on("exit", () => {
  for (const w of allWorkers) {
    if (w.exit === undefined) {
      try {
        w.proc.kill("SIGKILL")
      } catch {
        // already gone
      }
    }
  }
})

export const spawnWorker = (options: SpawnOptions): Worker => {
  const proc = spawn(nodeBinary, [WORKER], {
    cwd: repoRoot,
    env: { ...process.env, ...options.env, LEASEHOLD_CONSUMER_ID: options.consumerId },
    stdio: ["ignore", "pipe", "pipe"]
  })
  const log = logStream(options.logDir, options.name.replace(/-g\d+$/, ""))
  let resolveClosed!: () => void
  const closed = new Promise<void>((r) => {
    resolveClosed = r
  })
  const worker: Worker = {
    name: options.name,
    consumerId: options.consumerId,
    proc,
    pid: proc.pid ?? -1,
    spawnedAt: Date.now(),
    readyAt: undefined,
    killedAt: undefined,
    terminatedAt: undefined,
    exit: undefined,
    closed,
    journal: [],
    logEvents: [],
    claimedByLoop: { lead: 0, beside: 0 },
    logCounts: zeroLogCounts(),
    tail: []
  }
  allWorkers.add(worker)
  log?.write(`=== ${new Date().toISOString()} spawned ${options.name} (${options.consumerId}) pid ${worker.pid}\n`)
  const reader = (stream: "out" | "err") => {
    let pending = ""
    return (chunk: Buffer) => {
      pending += chunk.toString("utf8")
      const lines = pending.split("\n")
      pending = lines.pop() ?? ""
      for (const line of lines) {
        if (line.startsWith("CHAOS ")) {
          try {
            const event = JSON.parse(line.slice(6)) as JournalEvent | LogEvent | ClaimsEvent
            if (event.ev === "log") worker.logEvents.push(event)
            else if (event.ev === "claims") worker.claimedByLoop = { lead: event.lead, beside: event.beside }
            else worker.journal.push(event)
          } catch {
            // a torn line cannot happen on a pipe below PIPE_BUF; ignore anything else
          }
        } else if (stream === "out" && line.startsWith(`READY ${options.consumerId} `)) {
          worker.readyAt ??= Date.now()
          options.onReady?.(worker)
        }
        // Counted from the consumer's own output (journal lines quote it: not counted twice).
        if (!line.startsWith("CHAOS ")) {
          for (const key of Object.keys(logPatterns) as Array<keyof typeof logPatterns>) {
            if (logPatterns[key].test(line)) worker.logCounts[key]++
          }
        }
        worker.tail.push(line)
        if (worker.tail.length > 40) worker.tail.shift()
        log?.write(`[${options.name} ${stream}] ${line}\n`)
      }
    }
  }
  proc.stdout!.on("data", reader("out"))
  proc.stderr!.on("data", reader("err"))
  proc.on("exit", (code, signal) => {
    worker.exit = { code, signal, at: Date.now() }
    log?.write(`=== ${new Date().toISOString()} ${options.name} exited: code ${code}, signal ${signal}\n`)
    options.onExit?.(worker)
  })
  proc.on("close", () => resolveClosed())
  proc.on("error", (error) => {
    log?.write(`=== ${options.name} spawn error: ${error.message}\n`)
    resolveClosed()
  })
  return worker
}

/** SIGKILL, recording the time first (the process is gone a moment later). */
export const killWorker = (worker: Worker): number => {
  const at = Date.now()
  worker.killedAt = at
  worker.proc.kill("SIGKILL")
  return at
}

/** SIGTERM every live worker and wait for them to exit (SIGKILL after `graceMs`). Returns those that needed the SIGKILL. */
export const stopWorkers = async (workers: ReadonlyArray<Worker>, graceMs: number): Promise<Array<Worker>> => {
  const live = workers.filter((w) => w.exit === undefined)
  for (const w of live) {
    w.terminatedAt = Date.now()
    w.proc.kill("SIGTERM")
  }
  const stuck: Array<Worker> = []
  await Promise.all(live.map(async (w) => {
    const done = await Promise.race([w.closed.then(() => true), sleep(graceMs).then(() => false)])
    if (!done) {
      stuck.push(w)
      w.proc.kill("SIGKILL")
      await Promise.race([w.closed, sleep(5_000)])
    }
  }))
  return stuck
}

// ---------------------------------------------------------------------------------------------
// Statistics and printing
// ---------------------------------------------------------------------------------------------

/** Nearest-rank percentile of `values` (p in 0..100); undefined when empty. */
export const percentile = (values: ReadonlyArray<number>, p: number): number | undefined => {
  if (values.length === 0) return undefined
  const sorted = [...values].sort((a, b) => a - b)
  const rank = Math.ceil((p / 100) * sorted.length)
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]
}

export const formatMs = (ms: number | undefined): string =>
  ms === undefined ? "-" : ms >= 10_000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms)} ms`

/** A plain two-or-more-column table. */
export const table = (rows: ReadonlyArray<ReadonlyArray<string>>): string => {
  const widths: Array<number> = []
  for (const row of rows) row.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, cell.length)))
  const line = (row: ReadonlyArray<string>) => row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]!))).join("  ")
  const rule = widths.map((w) => "-".repeat(w)).join("  ")
  return [line(rows[0]!), rule, ...rows.slice(1).map(line)].join("\n")
}

/** Milliseconds or a duration such as `3s`, `500ms`, `2m` from the environment. */
export const envMs = (name: string, fallback: number): number => {
  const text = process.env[name]
  if (text === undefined || text.trim() === "") return fallback
  const match = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$/.exec(text)
  if (match === null) throw new Error(`${name}: expected a duration such as 500ms, 3s or 2m, got ${JSON.stringify(text)}`)
  const factor = match[2] === "s" ? 1000 : match[2] === "m" ? 60_000 : 1
  return Math.round(Number(match[1]) * factor)
}

/** The space-separated words of a variable (none when unset): node flags such as BENCH_NODE_ARGS. */
export const envWords = (name: string): Array<string> => (process.env[name] ?? "").split(/\s+/).filter((word) => word !== "")

export const envInt = (name: string, fallback: number): number => {
  const text = process.env[name]
  if (text === undefined || text.trim() === "") return fallback
  if (!/^\s*\d+\s*$/.test(text)) throw new Error(`${name}: expected a whole number, got ${JSON.stringify(text)}`)
  return Number(text)
}

// ---------------------------------------------------------------------------------------------
// Flow runs: the leases the database gave, as it recorded them
// ---------------------------------------------------------------------------------------------

/**
 * A row trigger on `<schema>.messages` that records every lease the store gives and when it
 * ended, in `<schema>.leases`, inside the transaction of the write (so only committed claims and
 * ends are there). The flow chaos run (run.ts --flow) judges the limits on it:
 * - a claim (a new `lease_token`) inserts a row: `leased_ms` is the claim's own `leased_at`, the
 *   very time the claim wrote into the rate window (`flow_rates`: the claim transaction's `now()`),
 *   and `claimed_ms` is `clock_timestamp()` in the claim statement (after the queue's claim lock
 *   and the statement's snapshot: every lease end the claim saw had been written before it);
 * - the write that ends a lease (ack: delete; retry, release, dead letter, cancel: token cleared;
 *   reaper: token cleared; a new claim after expiry: token replaced) sets `ended_ms`
 *   (`clock_timestamp()`) and `expires_ms` (`visible_at` as it was: the lease's expiry then). The
 *   lease ended at the earlier of the two: a lease that had expired was a free slot from its expiry.
 * Times are epoch milliseconds of the server's clock (the same machine as the workers').
 */
export const createLeaseRecorder = async (db: Db, schema: string): Promise<void> => {
  await db.query(`CREATE TABLE ${schema}.leases (
    token      uuid PRIMARY KEY,
    message_id bigint NOT NULL,
    flow_key   text,
    consumer   text,
    attempt    integer NOT NULL,
    leased_ms  float8 NOT NULL,
    claimed_ms float8 NOT NULL,
    ended_ms   float8,
    expires_ms float8,
    end_kind   text
  )`)
  await db.query(`CREATE FUNCTION ${schema}.record_lease() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
      clock float8 := extract(epoch FROM clock_timestamp())::float8 * 1000;
    BEGIN
      IF TG_OP = 'DELETE' THEN
        IF OLD.lease_token IS NOT NULL THEN
          UPDATE ${schema}.leases SET ended_ms = clock, expires_ms = extract(epoch FROM OLD.visible_at)::float8 * 1000,
            end_kind = 'deleted' WHERE token = OLD.lease_token AND ended_ms IS NULL;
        END IF;
        RETURN OLD;
      END IF;
      IF NEW.lease_token IS NOT DISTINCT FROM OLD.lease_token THEN
        RETURN NEW;
      END IF;
      IF OLD.lease_token IS NOT NULL THEN
        UPDATE ${schema}.leases SET ended_ms = clock, expires_ms = extract(epoch FROM OLD.visible_at)::float8 * 1000,
          end_kind = CASE WHEN NEW.lease_token IS NULL THEN 'cleared' ELSE 'replaced' END
        WHERE token = OLD.lease_token AND ended_ms IS NULL;
      END IF;
      IF NEW.lease_token IS NOT NULL THEN
        INSERT INTO ${schema}.leases (token, message_id, flow_key, consumer, attempt, leased_ms, claimed_ms)
        VALUES (NEW.lease_token, NEW.id, NEW.flow_key, NEW.leased_by, NEW.attempts,
                extract(epoch FROM NEW.leased_at)::float8 * 1000, clock);
      END IF;
      RETURN NEW;
    END $$`)
  await db.query(`CREATE TRIGGER record_lease AFTER UPDATE OR DELETE ON ${schema}.messages
    FOR EACH ROW EXECUTE FUNCTION ${schema}.record_lease()`)
}

/** A lease as `createLeaseRecorder` recorded it (times: epoch ms, the server's clock). */
export interface LeaseRecord {
  readonly token: string
  readonly messageId: string
  readonly key: string | null
  readonly consumer: string | null
  readonly attempt: number
  /** The claim's `leased_at`: the start it wrote into the rate windows. */
  readonly leasedMs: number
  /** `clock_timestamp()` in the claim statement. */
  readonly claimedMs: number
  readonly endedMs: number | null
  readonly expiresMs: number | null
}

export const readLeases = async (db: Db, schema: string): Promise<Array<LeaseRecord>> => {
  const rows = await db.queryRetrying<{
    token: string
    message_id: string
    flow_key: string | null
    consumer: string | null
    attempt: number
    leased_ms: number
    claimed_ms: number
    ended_ms: number | null
    expires_ms: number | null
  }>(
    `SELECT token::text, message_id::text, flow_key, consumer, attempt, leased_ms, claimed_ms, ended_ms, expires_ms
     FROM ${schema}.leases ORDER BY claimed_ms`
  )
  return rows.map((r) => ({
    token: r.token,
    messageId: r.message_id,
    key: r.flow_key,
    consumer: r.consumer,
    attempt: Number(r.attempt),
    leasedMs: Number(r.leased_ms),
    claimedMs: Number(r.claimed_ms),
    endedMs: r.ended_ms === null ? null : Number(r.ended_ms),
    expiresMs: r.expires_ms === null ? null : Number(r.expires_ms)
  }))
}
