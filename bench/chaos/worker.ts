/**
 * A chaos worker: one real consumer (`Consumer.layerFromEnv`) on the
 * PostgreSQL store, configured from `LEASEHOLD_*` variables, run with
 * `NodeRuntime.runMain` so SIGTERM drains it gracefully. Started (and
 * SIGKILLed) by bench/chaos/run.ts and bench/redelivery.ts; run it directly
 * with Node 22 (`node bench/chaos/worker.ts`), never through npm (npm's
 * `sh -c` does not pass signals on).
 *
 * Every execution of a handler writes one ledger row in `<schema>.ledger`
 * (created by the orchestrator): inserted when the handler starts, completed
 * (`ended_ms`, `outcome = 'ok'`) when its work is done. Times are this
 * process's wall clock in ms (same machine as the orchestrator, which records
 * kill times with the same clock). Ledger writes survive connection deaths:
 * they are idempotent (keyed by a per-execution uuid) and retried on
 * `ConnectionDead`. A ledger write that still fails makes the handler fail
 * (the queue retries the message), and says so on stdout.
 *
 * Stdout protocol (read by the orchestrator; stdout to a pipe is synchronous,
 * so lines written before a SIGKILL are not lost):
 *   READY <consumerId> <pid> liveness=<on|off|unset>
 *   CHAOS {"ev":"interrupted"|"interrupt-returned"|"abandoned"|"end-write-failed"|"poison-failed", ...}   journal of what the ledger may miss
 *   CHAOS {"ev":"log","kind":"double-run-at-ack"|"finish-failed"|"renewer-wedged", ...}   consumer log lines to explain
 *   CHAOS {"ev":"claims","lead":<n>,"beside":<n>}   messages claimed so far by each claim loop, when it changed (every 500 ms)
 *
 * Payload of every message: `{ n, ms, thenMs? }`: sleep `ms` on the first
 * attempt and `thenMs` (default `ms`) on later ones.
 *
 * The commit run (run.ts --commit, `CHAOS_COMMIT=1`): after the ledger end, a message of task `tx`
 * increments its counter row (`<schema>.counters`, key = n) inside `context.commit` (one transaction
 * with its fenced ack, on the store's own SqlClient: the store is built on this process's Pg layer),
 * a message of task `plain` increments it with a bare UPDATE (at-least-once). A payload with
 * `block: true` blocks the event loop for the lease + 1.5 s on its first attempt (renewals stall, the
 * lease expires, another worker reclaims the message, and with `LEASEHOLD_ON_LEASE_LOST=continue`
 * the stale run goes on to its increment). Journal: `effect-failed`, `commit-fenced`, `blocked` (written as the block
 * begins, `at` its end).
 *
 * Session liveness: `ConsumerPresence.layerFromEnv()` is provided to the
 * consumer, its mode from `LEASEHOLD_SESSION_LIVENESS=on|off|auto` (default
 * auto), which the orchestrators pass through.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Effect, Layer, Logger, Metric, References } from "effect"
import { SqlClient, type SqlError } from "effect/sql"
import { randomUUID } from "node:crypto"
import * as Consumer from "../../src/Consumer.ts"
import { Encoded } from "../../src/internal/attemptResult.ts"
import * as ConsumerPresence from "../../src/ConsumerPresence.ts"
import * as PgQueueStore from "../../src/PgQueueStore.ts"
import * as QueueConfig from "../../src/QueueConfig.ts"
import * as QueueMetrics from "../../src/QueueMetrics.ts"
import { classify } from "../../src/QueueError.ts"
import { type LogEvent, type LogKind, logKindOf, logPatterns } from "./lib.ts"

const schema = process.env["LEASEHOLD_SCHEMA"]
if (schema === undefined || !/^[a-z_][a-z0-9_]*$/.test(schema)) {
  console.error(`chaos worker: LEASEHOLD_SCHEMA must be a plain identifier, got ${JSON.stringify(schema)}`)
  process.exit(2)
}
const liveness = process.env["LEASEHOLD_SESSION_LIVENESS"] ?? "unset"

/**
 * Fault injection, to prove the checks can fail: `CHAOS_FAULT=block` makes
 * every 50th message block the event loop for the lease + 1.5 s (a CPU-bound
 * handler, which DESIGN.md warns against): renewals stall, the lease expires
 * while the handler still runs, and another worker starts the message.
 */
const fault = process.env["CHAOS_FAULT"]
const leaseMs = (() => {
  const m = /^(\d+)(ms|s)$/.exec(process.env["LEASEHOLD_LEASE"] ?? "")
  return m === null ? 30_000 : Number(m[1]) * (m[2] === "s" ? 1000 : 1)
})()

interface Payload {
  readonly n: number
  readonly ms: number
  readonly thenMs?: number
  /**
   * Poison (run.ts, CHAOS_POISON): `error` fails every run with a NUL in its error text, after
   * journaling `poison-failed`; `nul-result` and `surrogate-result` do the work and return a
   * result PostgreSQL's jsonb cannot store (a NUL, a lone surrogate).
   */
  readonly poison?: "error" | "nul-result" | "surrogate-result"
  /** The commit run: block the event loop past the lease on the first attempt (a forced lease loss). */
  readonly block?: boolean
}

const commitRun = process.env["CHAOS_COMMIT"] === "1"

/** The result a poisoned run returns: what a task's success schema would have encoded. */
const poisonResult = (payload: Payload): Encoded | undefined =>
  payload.poison === "nul-result"
    ? new Encoded(JSON.stringify({ n: payload.n, text: "upstream said \u0000" }))
    : payload.poison === "surrogate-result"
    ? new Encoded(JSON.stringify({ n: payload.n, list: ["ok", "\ud800"] }))
    : undefined

/** One line of the stdout journal. */
const journal = (event: Record<string, unknown>) => {
  process.stdout.write(`CHAOS ${JSON.stringify(event)}\n`)
}

/**
 * Run a ledger statement until it succeeds, retrying connection deaths with
 * backoff for at most `budgetMs`. Every ledger statement is idempotent, so a
 * retry after an ambiguous failure (committed, answer lost) is harmless.
 */
const persist = (what: string, statement: Effect.Effect<unknown, SqlError.SqlError>, budgetMs: number) =>
  Effect.gen(function*() {
    const deadline = Date.now() + budgetMs
    let delay = 25
    while (true) {
      const result = yield* Effect.result(classify(`ledger ${what}`)(statement))
      if (result._tag === "Success") return true
      const error = result.failure
      if (error._tag !== "ConnectionDead") {
        yield* Effect.logError(`ledger ${what} failed: ${error.message}`)
        return false
      }
      if (Date.now() + delay > deadline) {
        yield* Effect.logError(`ledger ${what} still failing after ${budgetMs}ms: ${error.message}`)
        return false
      }
      yield* Effect.sleep(delay)
      delay = Math.min(delay * 2, 500)
    }
  })

const handler: Consumer.Handler<SqlClient.SqlClient> = (message, context) =>
  Effect.suspend(() => {
    const exec = randomUUID()
    const startedMs = Date.now()
    const payload = message.payload as Payload
    const ms = context.attempt > 1 && payload.thenMs !== undefined ? payload.thenMs : payload.ms
    const facts = {
      exec,
      id: message.id,
      n: payload.n,
      attempt: context.attempt,
      consumer: context.consumerId,
      pid: process.pid,
      task: message.task,
      startedMs
    }
    return Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const ledger = sql(`${schema}.ledger`)
      const started = yield* persist(
        "start",
        sql`INSERT INTO ${ledger} (exec_id, message_id, n, attempt, consumer, pid, task, started_ms)
            VALUES (${exec}::uuid, ${message.id}::bigint, ${payload.n}, ${context.attempt}, ${context.consumerId},
                    ${process.pid}, ${message.task}, ${startedMs})
            ON CONFLICT (exec_id) DO NOTHING`,
        5_000
      )
      if (!started) {
        // No work done: the queue retries the message. The row may exist (ambiguous commit): the journal says to ignore it.
        journal({ ev: "abandoned", ...facts, at: Date.now() })
        return yield* Effect.fail(new Error("ledger start could not be written"))
      }
      if ((fault === "block" && payload.n % 50 === 25 || payload.block === true) && context.attempt === 1) {
        yield* Effect.sync(() => {
          const until = Date.now() + leaseMs + 1_500
          // Journaled before the block, with its end: a SIGKILL during the block must not hide it.
          if (payload.block === true) journal({ ev: "blocked", ...facts, at: until })
          while (Date.now() < until) {
            // blocking the event loop on purpose
          }
        })
      }
      if (ms > 0) yield* Effect.sleep(ms)
      if (payload.poison === "error") {
        // Journaled first (cannot fail): the analyzer explains the rerun by it.
        journal({ ev: "poison-failed", ...facts, at: Date.now() })
        return yield* Effect.fail(new Error(`upstream said \u0000 (message ${payload.n})`))
      }
      const endedMs = Date.now()
      // done_ms: when this write committed (rewritten by a retry after an ambiguous commit), i.e. just before the
      // handler returns; the analyzer bounds when the ack could land from it.
      const ended = yield* persist(
        "end",
        sql`UPDATE ${ledger}
            SET ended_ms = coalesce(ended_ms, ${endedMs}), outcome = 'ok',
                done_ms = extract(epoch FROM clock_timestamp()) * 1000
            WHERE exec_id = ${exec}::uuid AND (outcome IS NULL OR outcome = 'ok')`,
        15_000
      )
      if (!ended) {
        journal({ ev: "end-write-failed", ...facts, endedMs, at: Date.now() })
        return yield* Effect.fail(new Error("ledger end could not be written"))
      }
      if (commitRun) {
        // The counter of this message: inside the commit step (tx), or on its own (plain). One try: a failure fails
        // the handler (journaled first), and the queue runs the message again.
        const increment = sql`UPDATE ${sql(`${schema}.counters`)} SET n = n + 1 WHERE key = ${payload.n}`
        const result = yield* Effect.result(message.task === "tx" ? context.commit(increment) : increment)
        if (result._tag === "Failure") {
          const error = result.failure as { readonly _tag?: string; readonly reason?: unknown; readonly message?: string }
          const fenced = error._tag === "CommitFenced" && error.reason === "lease-lost"
          journal({
            ev: fenced ? "commit-fenced" : "effect-failed",
            ...facts,
            at: Date.now(),
            error: `${error._tag ?? "Error"}${typeof error.reason === "string" ? ` (${error.reason})` : ""}: ${String(error.message ?? "").slice(0, 200)}`
          })
          return yield* Effect.fail(result.failure)
        }
      }
      return poisonResult(payload)
    }).pipe(
      // Interrupted: lease lost (local deadline, reclaimed) or shutdown. Journal first (cannot fail), then the ledger, bounded.
      Effect.onInterrupt(() =>
        Effect.gen(function*() {
          const at = Date.now()
          journal({ ev: "interrupted", ...facts, at })
          const sql = yield* SqlClient.SqlClient
          yield* persist(
            "interrupted",
            sql`UPDATE ${sql(`${schema}.ledger`)} SET ended_ms = ${at}, outcome = 'interrupted'
                WHERE exec_id = ${exec}::uuid AND ended_ms IS NULL`,
            1_000
          ).pipe(Effect.timeoutOption(1_500), Effect.ignore)
          // The handler returns now: the end of this execution for the flow checks (analyze.ts, flow).
          journal({ ev: "interrupt-returned", ...facts, at: Date.now() })
        })
      )
    )
  })

/**
 * The consumer's log lines the orchestrator must explain (double run at ack, finishing write given up, renewer
 * wedged), journaled with their time and message ids by a logger next to the default one.
 */
const judged: ReadonlyArray<readonly [RegExp, LogKind]> = (Object.keys(logKindOf) as Array<keyof typeof logPatterns>)
  .map((key) => [logPatterns[key], logKindOf[key]!] as const)
const consumerIdOfEnv = process.env["LEASEHOLD_CONSUMER_ID"] ?? "unknown"
const JournalLogger = Logger.layer([
  Logger.make((options) => {
    const parts = Array.isArray(options.message) ? options.message : [options.message]
    const text = parts.map((p) => (typeof p === "string" ? p : String(p))).join(" ")
    const kind = judged.find(([pattern]) => pattern.test(text))?.[1]
    if (kind === undefined) return
    const annotations = options.fiber.getRef(References.CurrentLogAnnotations) as Record<string, unknown>
    const ids = annotations["messageId"] !== undefined
      ? [String(annotations["messageId"])]
      : String(annotations["messageIds"] ?? "").split(",").filter((x) => x !== "")
    const event: LogEvent = {
      ev: "log",
      kind,
      consumer: String(annotations["consumer"] ?? consumerIdOfEnv),
      pid: process.pid,
      at: options.date.getTime(),
      messageIds: ids,
      text: text.slice(0, 300)
    }
    process.stdout.write(`CHAOS ${JSON.stringify(event)}\n`)
  })
], { mergeWithExisting: true })

// The application name carries the consumer id, so the orchestrator knows whose backends it terminated
// (the store and presence append -lease, -listen, -presence, -presence-pool).
const Pg = QueueConfig.pgLayerFromEnv({ applicationName: `chaos-worker@${consumerIdOfEnv}`, maxConnections: 6 })

const Store = PgQueueStore.layer({ schema })

/** Announces readiness once the consumer is built (it is already claiming by then). */
const Ready = Layer.effectDiscard(Effect.gen(function*() {
  const consumer = yield* Consumer.Consumer
  yield* Effect.sync(() =>
    process.stdout.write(
      `READY ${consumer.settings.consumerId} ${process.pid} liveness=${liveness}\n`
    )
  )
}))

/**
 * Journals what each claim loop has claimed (`leasehold_loop_messages_claimed`) whenever it
 * changed, every 500 ms: the orchestrator reports how much the lanes' second loops claimed.
 */
const ClaimCounts = Layer.effectDiscard(Effect.forkScoped(Effect.gen(function*() {
  let last = ""
  while (true) {
    const lead = (yield* Metric.value(QueueMetrics.claimedByLead)).count
    const beside = (yield* Metric.value(QueueMetrics.claimedBeside)).count
    const line = JSON.stringify({ ev: "claims", lead, beside })
    if (line !== last) process.stdout.write(`CHAOS ${line}\n`)
    last = line
    yield* Effect.sleep(500)
  }
})))

const WorkerLayer = Layer.merge(Ready, ClaimCounts).pipe(
  Layer.provideMerge(Consumer.layerFromEnv(handler).pipe(Layer.provide(ConsumerPresence.layerFromEnv()))),
  Layer.provide(Store),
  Layer.provide(Pg),
  Layer.provide(JournalLogger)
)

// A signal-driven shutdown that drained cleanly is a success: exit 0. A claim loop that failed on
// something other than a dead connection shuts down the same way, then fails the program: exit 1.
Consumer.launch(WorkerLayer).pipe(NodeRuntime.runMain({ teardown: Consumer.teardown }))
