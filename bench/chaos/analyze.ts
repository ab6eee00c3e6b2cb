/**
 * The checks of the chaos suite, as a pure function of what a run recorded:
 * the ledger (one row per handler execution), the workers' stdout journal
 * (interruptions and ledger writes that failed), what is left in the
 * messages table, and the orchestrator's own record of kills.
 *
 * Words used below:
 * - execution: one run of a handler on a message (one ledger row, or a
 *   journal line when the ledger write itself was lost). An execution whose
 *   start could not be written did no work ("abandoned") and is left out.
 * - completed: a message with an execution that finished (`outcome = 'ok'`)
 *   and that is no longer in the messages table (acked).
 * - lost: a message sent that is neither completed nor still in the table.
 * - holder alive: the worker process running an execution had not been
 *   SIGKILLed (by the orchestrator) at the time in question.
 * - handler return: when the handler of an execution gave the message back
 *   to the consumer: the ledger end write committed (`done_ms`), the
 *   interruption plus the worker's bound on its interrupted write
 *   (INTERRUPTED_WRITE_BOUND_MS), or the journaled give-up of the end write.
 * - ack bound: the latest moment the finishing write (ack, retry, release)
 *   of an execution could land: handler return + `finishBoundMs` (the
 *   renewer's stop timeout, which `finish` may wait, + the lease, for which
 *   connection-dead writes are retried, + 1 s for the last attempt). A kill
 *   after the ack bound cannot be why the message ran again: its ack had
 *   landed or had been given up long before.
 */
import { type JournalEvent, judgedKinds, type LeaseRecord, type LedgerRow, type LogEvent, type LogKind } from "./lib.ts"

/** worker.ts bounds the ledger write of an interruption by 1.5 s; the handler returns after it. */
export const INTERRUPTED_WRITE_BOUND_MS = 1_500

/**
 * The commit run: a run that started at most this long after its worker's block ended counts as claimed before it
 * ended (a claim sent before or during the block is read after it, and its handler starts at once).
 */
export const CLAIMED_IN_BLOCK_MS = 1_000

/** Allowance between a log line and the runs or connection deaths it is matched with (clock reads, pipes). */
export const LOG_SLACK_MS = 500

/** The finishing-write bound of a worker configuration (see `ack bound` above). */
export const finishBound = (options: { readonly leaseMs: number; readonly renewerStopTimeoutMs: number }): number =>
  options.renewerStopTimeoutMs + options.leaseMs + 1_000

/** A connection of a worker that the orchestrator's storm cut: a terminated backend of one of its pools. */
export interface BackendTermination {
  readonly consumer: string
  /** main, lease, listen, presence, presence-pool */
  readonly pool: string
  readonly at: number
}

export interface Kill {
  readonly consumer: string
  readonly pid: number
  readonly at: number
}

export interface RemainingRow {
  readonly n: number
  readonly state: string
}

export interface AnalysisInput {
  /** Messages sent: payload `n` runs over 0..sent-1. */
  readonly sent: number
  readonly ledger: ReadonlyArray<LedgerRow>
  readonly journal: ReadonlyArray<JournalEvent>
  /** Rows still in the messages table at the end (ready or dead). */
  readonly remaining: ReadonlyArray<RemainingRow>
  readonly kills: ReadonlyArray<Kill>
  /** When the server was restarted (stop issued), for context on lease losses. */
  readonly restartAt?: number | undefined
  /** When the restarted server was accepting connections again (every connection died in between). */
  readonly restartUpAt?: number | undefined
  /** The ack bound after a handler return (see `finishBound`); a kill later than that explains no rerun. */
  readonly finishBoundMs: number
  /** The renewer stop timeout of the workers (the window of a wedged renewer). */
  readonly renewerStopTimeoutMs: number
  readonly leaseMs: number
  /** The judged consumer log lines the workers journaled. */
  readonly logEvents?: ReadonlyArray<LogEvent> | undefined
  readonly terminations?: ReadonlyArray<BackendTermination> | undefined
  /** Times in explanations are printed relative to this (the run's start); 0: absolute. */
  readonly origin?: number | undefined
  /** Messages whose every run fails on purpose (poison, CHAOS_POISON): expected in dead letters, not completed. */
  readonly poisoned?: ReadonlySet<number> | undefined
  /** A flow run (run.ts --flow): the limits set, each message's key, the leases the database recorded. */
  readonly flow?: FlowInput | undefined
  /** A commit run (run.ts --commit): the counter rows at the end. */
  readonly commit?: CommitInput | undefined
}

export interface Execution {
  readonly exec: string
  readonly n: number
  readonly messageId: string
  readonly consumer: string
  readonly pid: number
  /** The claim's attempt number: the order of a message's claims (a stalled claim's handler can start after the next claim's). */
  readonly attempt: number
  readonly startedMs: number
  /** Work finished and the ledger says so. */
  okMs: number | undefined
  /** Interrupted (lease lost, or shutdown) at this time. */
  interruptedMs: number | undefined
  /** Work finished but the end could not be written: the handler failed. */
  endWriteFailedMs: number | undefined
  /** When the holder was SIGKILLed, if it was at or after the start. */
  killedMs: number | undefined
  /** When the ledger end write committed (ok runs). */
  doneMs: number | undefined
  /** A poisoned run failed on purpose at this time (its handler returned the failure). */
  poisonFailedMs?: number | undefined
  /** An interrupted handler's finalizer was done at this time (journal `interrupt-returned`): the handler returned. */
  interruptReturnedMs?: number | undefined
  /** The end write was given up at this time (journal `end-write-failed`): the handler returned the failure. */
  endWriteGaveUpMs?: number | undefined
  /**
   * Its worker logged its lease lost at this time (journaled `lease-lost` line, after the run's start): from then on a
   * stale run, which runs on to its end under `LEASEHOLD_ON_LEASE_LOST=continue` (the commit run).
   */
  staleMs?: number | undefined
  /**
   * The commit run: its worker's event loop was blocked on purpose (journal `blocked`) from this time, while the run
   * was in progress or its finishing write could still be pending (before its ack bound): its lease ran out
   * under it, a stale run too.
   */
  stalledMs?: number | undefined
  /** The commit run: its commit step was refused by the fence at this time (journal `commit-fenced`). */
  fencedMs?: number | undefined
  /** The commit run: it blocked its worker's event loop until this time (journal `blocked`): the forced lease loss. */
  blockedMs?: number | undefined
}

/** When the handler of an execution returned (see the header); undefined: it never did (cut short, or unknown). */
export const handlerReturn = (e: Execution): number | undefined => {
  const times = [
    e.okMs === undefined ? undefined : Math.max(e.okMs, e.doneMs ?? e.okMs),
    e.interruptedMs === undefined ? undefined : e.interruptedMs + INTERRUPTED_WRITE_BOUND_MS,
    e.endWriteFailedMs,
    e.poisonFailedMs
  ].filter((x): x is number => x !== undefined)
  return times.length === 0 ? undefined : Math.min(...times)
}

/** The order of a message's executions: by attempt, then by start. */
export const claimOrder = (a: Execution, b: Execution): number => a.attempt - b.attempt || a.startedMs - b.startedMs

/** Whether run `e` of a message came after run `own` in claim order. */
const claimedAfter = (e: Execution, own: Execution): boolean => e !== own && claimOrder(own, e) < 0

/** A stale run: its lease lost while it ran (logged), or its worker blocked past the lease on purpose (the commit run). */
export const isStale = (e: Execution): boolean => e.staleMs !== undefined || e.stalledMs !== undefined

/** When a stale run became one, for explanations. */
const staleSince = (e: Execution): number => Math.min(e.staleMs ?? Infinity, e.stalledMs ?? Infinity)

/** The kill of an execution's holder explains a later run only if it fell before the run's ack could have landed. */
export const killExplains = (e: Execution, finishBoundMs: number): boolean => {
  if (e.killedMs === undefined) return false
  const returned = handlerReturn(e)
  return returned === undefined || e.killedMs <= returned + finishBoundMs
}

/** How a judged log line was explained, or why not. */
export interface JudgedLog {
  readonly event: LogEvent
  /** The run the line is about (the worker's latest run of the message before the line), if any. */
  readonly execution: Execution | undefined
  readonly explained: boolean
  readonly why: string
}

/**
 * Why a message ran again, from how the run before it ended:
 * - `kill`: its holder was SIGKILLed before the run's ack bound (see the header), and before the next run started;
 * - `interrupted`: its handler was interrupted (lease or presence lost in the storm) before finishing;
 * - `interrupted-after-work`: its work was done (end row written), then the handler was interrupted before the ack;
 * - `handler-failed`: the handler failed (its ledger end could not be written), so the queue retried it;
 * - `poison`: a poisoned run failed on purpose, so the queue retried it (its retry policy);
 * - `finish-given-up`: its finishing write was given up after connection deaths (an explained `finish-failed` log line);
 * - `stale-past-lease`: its worker logged its lease lost while it ran, and it ran on to its end (onLeaseLost
 *   continue, the commit run): a stale run past its lease, the message reclaimed by the next run;
 * - `after-completion`: it finished, its holder lived and nothing interrupted it: a double run;
 * - `unexplained`: it never finished, was not interrupted and its holder was not killed.
 */
export type DuplicateCause =
  | "kill"
  | "interrupted"
  | "interrupted-after-work"
  | "handler-failed"
  | "poison"
  | "finish-given-up"
  | "stale-past-lease"
  | "after-completion"
  | "unexplained"

export interface Duplicate {
  readonly n: number
  readonly cause: DuplicateCause
  readonly previous: Execution
  readonly next: Execution
}

export interface Overlap {
  readonly n: number
  readonly first: Execution
  readonly second: Execution
}

export interface Analysis {
  readonly sent: number
  readonly executions: number
  readonly abandoned: number
  readonly completed: number
  readonly lost: ReadonlyArray<number>
  /** Dead-lettered messages that were not poisoned. */
  readonly dead: ReadonlyArray<number>
  /** Poisoned messages in dead letters, as expected. */
  readonly poisonDead: ReadonlyArray<number>
  /** Poisoned messages not in dead letters at the end (completed, lost or still queued). */
  readonly poisonNotDead: ReadonlyArray<number>
  readonly stillQueued: ReadonlyArray<number>
  readonly unknown: number
  readonly messagesWithSeveralIds: ReadonlyArray<number>
  readonly overlaps: ReadonlyArray<Overlap>
  /** Overlaps whose first run was stale (its lease lost while it ran, onLeaseLost continue): explained, not judged. */
  readonly staleOverlaps: ReadonlyArray<Overlap>
  readonly duplicates: ReadonlyArray<Duplicate>
  readonly duplicatesByCause: Record<DuplicateCause, number>
  /** Duplicates after an interruption that came more than 10 s from the server restart. */
  readonly interruptedAwayFromRestart: number
  /** kill -> next start of a message that was in progress on the killed worker, in ms. */
  readonly redeliveryMs: ReadonlyArray<number>
  /** Messages in progress on a killed worker that never started again (and were not completed). */
  readonly notRedelivered: number
  readonly killsWithWork: number
  /** Every judged log line (double run at ack, finishing write failed, renewer wedged) with its verdict. */
  readonly logs: ReadonlyArray<JudgedLog>
  readonly unexplainedLogs: Record<LogKind, number>
  readonly explainedLogs: Record<LogKind, number>
  /** The flow checks (a flow run only). */
  readonly flow: FlowAnalysis | undefined
  /** The commit checks (a commit run only). */
  readonly commit: CommitAnalysis | undefined
}

/** The end of an execution as far as overlap goes: work finished, interrupted, or holder killed. Infinity: unknown. */
export const effectiveEnd = (e: Execution): number =>
  Math.min(
    e.okMs ?? Infinity,
    e.interruptedMs ?? Infinity,
    e.endWriteFailedMs ?? Infinity,
    e.poisonFailedMs ?? Infinity,
    e.killedMs ?? Infinity
  )

export const analyze = (input: AnalysisInput): Analysis => {
  // Kill time per consumer (a consumer id is used by one process only).
  const killOf = new Map<string, number>()
  for (const k of input.kills) killOf.set(k.consumer, k.at)

  const abandoned = new Set(input.journal.filter((j) => j.ev === "abandoned").map((j) => j.exec))
  const byExec = new Map<string, Execution>()
  const ensure = (fact: {
    exec: string
    n: number
    messageId: string
    consumer: string
    pid: number
    attempt: number
    startedMs: number
  }): Execution => {
    let e = byExec.get(fact.exec)
    if (e === undefined) {
      const killed = killOf.get(fact.consumer)
      e = {
        ...fact,
        okMs: undefined,
        interruptedMs: undefined,
        endWriteFailedMs: undefined,
        doneMs: undefined,
        killedMs: killed !== undefined && killed >= fact.startedMs ? killed : undefined
      }
      byExec.set(fact.exec, e)
    }
    return e
  }
  for (const row of input.ledger) {
    if (abandoned.has(row.exec_id)) continue
    const e = ensure({
      exec: row.exec_id,
      n: row.n,
      messageId: row.message_id,
      consumer: row.consumer,
      pid: row.pid,
      attempt: Number(row.attempt),
      startedMs: row.started_ms
    })
    if (row.outcome === "ok" && row.ended_ms !== null) {
      e.okMs = row.ended_ms
      if (row.done_ms !== undefined && row.done_ms !== null) e.doneMs = row.done_ms
    }
    if (row.outcome === "interrupted" && row.ended_ms !== null) e.interruptedMs = row.ended_ms
  }
  for (const j of input.journal) {
    if (j.ev === "abandoned") continue
    if (j.ev === "interrupt-returned") {
      const known = byExec.get(j.exec)
      if (known !== undefined) known.interruptReturnedMs = j.at
      continue
    }
    const e = ensure({ exec: j.exec, n: j.n, messageId: j.id, consumer: j.consumer, pid: j.pid, attempt: j.attempt, startedMs: j.startedMs })
    if (j.ev === "interrupted") e.interruptedMs = Math.min(e.interruptedMs ?? Infinity, j.at)
    if (j.ev === "end-write-failed") {
      e.endWriteFailedMs = j.endedMs ?? j.at
      e.endWriteGaveUpMs = j.at
    }
    if (j.ev === "poison-failed") e.poisonFailedMs = j.at
    // The counter's increment failed: the handler returned the failure (the queue retries), as a failed end write.
    if (j.ev === "effect-failed") {
      e.endWriteFailedMs = Math.min(e.endWriteFailedMs ?? Infinity, j.at)
      e.endWriteGaveUpMs = Math.min(e.endWriteGaveUpMs ?? Infinity, j.at)
    }
    if (j.ev === "commit-fenced") e.fencedMs = j.at
    if (j.ev === "blocked") e.blockedMs = j.at
  }

  const perMessage = new Map<number, Array<Execution>>()
  let unknown = 0
  for (const e of byExec.values()) {
    if (!Number.isInteger(e.n) || e.n < 0 || e.n >= input.sent) {
      unknown++
      continue
    }
    const list = perMessage.get(e.n) ?? []
    list.push(e)
    perMessage.set(e.n, list)
  }
  // In claim order: by attempt (each claim of a message counts one more), then by start. A claim read after a stall
  // of its worker starts its handler late, possibly after the next claim's (the commit run's blocks).
  for (const list of perMessage.values()) list.sort(claimOrder)

  // Stale runs: the worker's latest run of a message started before its `lease-lost` line.
  const runsById = new Map<string, Array<Execution>>()
  for (const list of perMessage.values()) {
    for (const e of list) runsById.set(e.messageId, [...(runsById.get(e.messageId) ?? []), e])
  }
  for (const event of input.logEvents ?? []) {
    if (event.kind !== "lease-lost") continue
    for (const id of event.messageIds) {
      const mine = (runsById.get(id) ?? []).filter((e) => e.consumer === event.consumer && e.startedMs <= event.at + LOG_SLACK_MS)
      const own = mine[mine.length - 1]
      if (own !== undefined) own.staleMs = Math.min(own.staleMs ?? Infinity, event.at)
    }
  }
  // Stalled runs: a worker blocked on purpose (worker.ts: the lease + 1.5 s, right after the blocking run's ledger start).
  const blockWindows = input.journal.filter((j) => j.ev === "blocked").map((j) => ({
    consumer: j.consumer,
    from: Math.max(j.startedMs, j.at - input.leaseMs - 1_500),
    to: j.at
  }))
  if (blockWindows.length > 0) {
    for (const e of byExec.values()) {
      const until = (handlerReturn(e) ?? Infinity) + input.finishBoundMs
      // A run that started just after the block may have been claimed before it (the claim's answer read after it).
      const w = blockWindows.find((b) => b.consumer === e.consumer && b.to >= e.startedMs - CLAIMED_IN_BLOCK_MS && b.from <= until)
      if (w !== undefined) e.stalledMs = Math.max(w.from, e.startedMs)
    }
  }

  const remaining = new Map<number, string>()
  for (const r of input.remaining) remaining.set(r.n, r.state)

  let completed = 0
  const lost: Array<number> = []
  const dead: Array<number> = []
  const poisonDead: Array<number> = []
  const poisonNotDead: Array<number> = []
  const stillQueued: Array<number> = []
  const messagesWithSeveralIds: Array<number> = []
  for (let n = 0; n < input.sent; n++) {
    const list = perMessage.get(n) ?? []
    if (new Set(list.map((e) => e.messageId)).size > 1) messagesWithSeveralIds.push(n)
    const state = remaining.get(n)
    if (input.poisoned?.has(n) === true) {
      if (state === "dead") poisonDead.push(n)
      else poisonNotDead.push(n)
      continue
    }
    if (state === "dead") dead.push(n)
    else if (state !== undefined) stillQueued.push(n)
    else if (list.some((e) => e.okMs !== undefined)) completed++
    else lost.push(n)
  }

  // Overlaps: a later execution starting while an earlier one of the same message still ran on a live holder.
  const overlaps: Array<Overlap> = []
  const staleOverlaps: Array<Overlap> = []
  for (const [n, list] of perMessage) {
    for (let j = 1; j < list.length; j++) {
      const second = list[j]!
      for (let i = 0; i < j; i++) {
        const first = list[i]!
        const holderAlive = first.killedMs === undefined || first.killedMs > second.startedMs
        // In claim order a later claim's run can have started first: the two overlap when their times intersect.
        if (second.startedMs < effectiveEnd(first) && first.startedMs < effectiveEnd(second) && holderAlive) (isStale(first) ? staleOverlaps : overlaps).push({ n, first, second })
      }
    }
  }

  const { logs, explainedLogs, unexplainedLogs } = judgeLogs(input, perMessage, remaining)
  const finishGivenUp = new Set(
    logs.filter((x) => x.explained && x.event.kind === "finish-failed" && x.execution !== undefined).map((x) => x.execution!)
  )

  // Duplicates: every execution after the first, explained by how the one before it ended.
  const duplicates: Array<Duplicate> = []
  const duplicatesByCause: Record<DuplicateCause, number> = {
    kill: 0,
    interrupted: 0,
    "interrupted-after-work": 0,
    "handler-failed": 0,
    poison: 0,
    "finish-given-up": 0,
    "stale-past-lease": 0,
    "after-completion": 0,
    unexplained: 0
  }
  let interruptedAwayFromRestart = 0
  for (const [n, list] of perMessage) {
    for (let j = 1; j < list.length; j++) {
      const previous = list[j - 1]!
      const next = list[j]!
      const cause: DuplicateCause = killExplains(previous, input.finishBoundMs) && previous.killedMs! <= next.startedMs
        ? "kill"
        : isStale(previous) && previous.interruptedMs === undefined
        ? "stale-past-lease"
        : previous.interruptedMs !== undefined
        ? (previous.okMs !== undefined ? "interrupted-after-work" : "interrupted")
        : previous.endWriteFailedMs !== undefined
        ? "handler-failed"
        : previous.poisonFailedMs !== undefined
        ? "poison"
        : finishGivenUp.has(previous)
        ? "finish-given-up"
        : previous.okMs !== undefined
        ? "after-completion"
        : "unexplained"
      duplicatesByCause[cause]++
      if (
        (cause === "interrupted" || cause === "interrupted-after-work") &&
        (input.restartAt === undefined || Math.abs(previous.interruptedMs! - input.restartAt) > 10_000)
      ) interruptedAwayFromRestart++
      duplicates.push({ n, cause, previous, next })
    }
  }

  // Redelivery after a kill: for each execution cut short by a kill (or finished but not acked before it, the
  // kill falling before its ack bound), the time from the kill to the next start of the message.
  const redeliveryMs: Array<number> = []
  let notRedelivered = 0
  const killsWithWork = new Set<string>()
  for (const [n, list] of perMessage) {
    for (let i = 0; i < list.length; i++) {
      const e = list[i]!
      if (e.killedMs === undefined) continue
      const next = list[i + 1]
      const cutShort = e.okMs === undefined && e.interruptedMs === undefined && e.endWriteFailedMs === undefined
      if (next === undefined) {
        if (cutShort && remaining.get(n) === undefined) notRedelivered++
        continue
      }
      if (next.startedMs < e.killedMs) continue // it had moved on before the kill (an overlap if anything)
      // Cut short by the kill, or finished just before it without its ack landing: either way the kill redelivers it.
      const finishedNotAcked = e.okMs !== undefined && e.interruptedMs === undefined && e.endWriteFailedMs === undefined
      if (!cutShort && !finishedNotAcked) continue
      if (!killExplains(e, input.finishBoundMs)) continue // killed long after its ack bound: not why it ran again
      killsWithWork.add(e.consumer)
      redeliveryMs.push(next.startedMs - e.killedMs)
    }
  }

  return {
    sent: input.sent,
    executions: [...perMessage.values()].reduce((sum, list) => sum + list.length, 0),
    abandoned: abandoned.size,
    completed,
    lost,
    dead,
    poisonDead,
    poisonNotDead,
    stillQueued,
    unknown,
    messagesWithSeveralIds,
    overlaps,
    staleOverlaps,
    duplicates,
    duplicatesByCause,
    interruptedAwayFromRestart,
    redeliveryMs,
    notRedelivered,
    killsWithWork: killsWithWork.size,
    logs,
    explainedLogs,
    unexplainedLogs,
    flow: input.flow === undefined ? undefined : analyzeFlow(input.flow, perMessage),
    commit: input.commit === undefined ? undefined : analyzeCommit(input, perMessage)
  }
}

/** The pools a finishing write or a renewal may use: the store's lease pool, or its main pool without one. */
const LEASE_TRAFFIC_POOLS = new Set(["main", "lease"])

/** Words of a connection death in a consumer's error text (the classifier's list, see DESIGN.md). */
const CONNECTION_DEATH =
  /ConnectionDead|Connection (closed|terminated)|Failed to connect|ECONNREFUSED|ECONNRESET|EPIPE|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|57P0[123]|terminating connection|shutting down|starting up|no answer within/i

/**
 * Item by item, whether a judged consumer log line is explained by the chaos the orchestrator recorded.
 * The rules (bench/README.md states them too):
 * - double run at ack, on worker C for message m at t: explained only when nobody else ran m after C's run
 *   began, m is acked (gone), and a connection of C (main or lease pool, or the server restart) died between the
 *   end of C's work and t: C's first ack landed and its answer was lost, so the retry matched nothing. Anything
 *   else is a real double run: a SIGKILL of another worker cannot take C's lease away, so no kill explains it.
 * - finishing write failed, on C for m at t: explained when its error is a connection death, a connection of C
 *   (main or lease pool, or the restart) died between the start of C's run and t, and m then ran again no
 *   earlier than t (the write gave up only when its lease ran out; a rerun before t started under C's lease) or
 *   was acked without another run (the last attempt landed, its answer lost).
 * - renewer wedged, on C at t: explained when a connection of C (main or lease pool, or the restart) died in
 *   [t - renewer stop timeout - lease, t]: the renew statement in flight when the stop began sat on it.
 */
const judgeLogs = (
  input: AnalysisInput,
  perMessage: ReadonlyMap<number, ReadonlyArray<Execution>>,
  remaining: ReadonlyMap<number, string>
) => {
  const byId = new Map<string, ReadonlyArray<Execution>>()
  for (const list of perMessage.values()) {
    for (const e of list) byId.set(e.messageId, [...(byId.get(e.messageId) ?? []), e])
  }
  const terminations = input.terminations ?? []
  /** A connection death of `consumer`'s lease traffic within [from, to] (with LOG_SLACK_MS either side), described. */
  const deathOf = (consumer: string, from: number, to: number): string | undefined => {
    const lo = from - LOG_SLACK_MS
    const hi = to + LOG_SLACK_MS
    // The server's down window first (it cuts every connection), else the latest termination in the window.
    if (input.restartAt !== undefined) {
      const up = input.restartUpAt ?? Infinity
      if (input.restartAt <= hi && up >= lo) return `the server was down ${ms(input.restartAt)}..${ms(input.restartUpAt)}`
    }
    const t = terminations.filter((x) => x.consumer === consumer && LEASE_TRAFFIC_POOLS.has(x.pool) && x.at >= lo && x.at <= hi)
      .sort((a, b) => b.at - a.at)[0]
    return t === undefined ? undefined : `its ${t.pool} pool backend was terminated at ${ms(t.at)}`
  }
  const o = input.origin ?? 0
  const ms = (t: number | undefined) => (t === undefined ? "?" : `${Math.round(t - o)} ms`)
  const staleWhy = (e: Execution) =>
    [e.staleMs === undefined ? "" : `lease lost at ${ms(e.staleMs)}`, e.stalledMs === undefined ? "" : `its worker blocked on purpose from ${ms(e.stalledMs)}`]
      .filter((x) => x !== "").join(", ")
  const fmt = (e: Execution) => `${e.consumer} ran it ${ms(e.startedMs)}..${ms(e.okMs ?? e.interruptedMs ?? e.endWriteFailedMs)}`

  const judge = (event: LogEvent): { explained: boolean; why: string; execution?: Execution | undefined } => {
    const window = input.renewerStopTimeoutMs + input.leaseMs
    if (event.kind === "renewer-wedged") {
      const death = deathOf(event.consumer, event.at - window, event.at)
      return death === undefined
        ? { explained: false, why: `no connection of ${event.consumer} died in the ${window} ms before` }
        : { explained: true, why: death }
    }
    const id = event.messageIds[0]
    if (id === undefined) return { explained: false, why: "no message id on the log line" }
    const runs = byId.get(id) ?? []
    const mine = runs.filter((e) => e.consumer === event.consumer && e.startedMs <= event.at + LOG_SLACK_MS)
    // A double run at ack is about a run whose handler had returned: not a newer run of the same worker still going
    // (a worker can reclaim a message whose lease ran out under its own stale run).
    const returned = event.kind === "double-run-at-ack"
      ? mine.filter((e) => (handlerReturn(e) ?? Infinity) <= event.at)
      : []
    const own = returned.length > 0 ? returned[returned.length - 1] : mine[mine.length - 1]
    if (own === undefined) return { explained: false, why: `no run of message ${id} on ${event.consumer} before the log line` }
    return { execution: own, ...judgeRun(event, id, runs, own) }
  }
  const judgeRun = (event: LogEvent, id: string, runs: ReadonlyArray<Execution>, own: Execution): { explained: boolean; why: string } => {
    const later = runs.filter((e) => claimedAfter(e, own))
    const acked = remaining.get(own.n) === undefined && runs.some((e) => e.okMs !== undefined)
    if (event.kind === "double-run-at-ack") {
      if (later.length > 0 && isStale(own) && staleSince(own) <= event.at + LOG_SLACK_MS) {
        return { explained: true, why: `a stale run past its lease (onLeaseLost continue): ${staleWhy(own)}, then ${fmt(later[0]!)}` }
      }
      if (later.length > 0) return { explained: false, why: `a real double run: ${fmt(own)}, then ${fmt(later[0]!)}` }
      if (!acked) return { explained: false, why: `message ${id} is not acked (${remaining.get(own.n) ?? "lost"})` }
      const death = deathOf(event.consumer, own.okMs ?? own.startedMs, event.at)
      return death === undefined
        ? { explained: false, why: `nobody else ran it, but no connection of ${event.consumer} died to lose its ack's answer` }
        : { explained: true, why: `its own ack landed, answer lost: ${death}; no second run` }
    }
    // finish-failed
    // A stale run's finishing write (the history record of a fenced commit, an ack) whose message another run took.
    if (later.length > 0 && isStale(own) && staleSince(own) <= event.at + LOG_SLACK_MS) {
      return { explained: true, why: `a stale run past its lease (onLeaseLost continue): ${staleWhy(own)}, then ${fmt(later[0]!)}` }
    }
    if (!CONNECTION_DEATH.test(event.text)) return { explained: false, why: `not a connection death: ${event.text}` }
    const death = deathOf(event.consumer, own.startedMs, event.at)
    if (death === undefined) return { explained: false, why: `no connection of ${event.consumer} died during ${fmt(own)} up to the log line` }
    const next = later[0]
    if (next !== undefined) {
      return next.startedMs >= event.at - LOG_SLACK_MS
        ? { explained: true, why: `${death}; ran again at ${ms(next.startedMs)}` }
        : { explained: false, why: `${fmt(next)}, before the write gave up (${ms(event.at)}) under ${event.consumer}'s lease` }
    }
    if (acked) return { explained: true, why: `${death}; acked without another run (the last attempt landed)` }
    // A poisoned message whose last finishing write was given up: dead-lettered by its next claim (no handler run).
    if (input.poisoned?.has(own.n) === true && remaining.get(own.n) === "dead") {
      return { explained: true, why: `${death}; poisoned, dead-lettered by its next claim` }
    }
    // Still waiting in the queue when the drain ended: the write gave it back; "still queued" fails the run on its own.
    if (remaining.get(own.n) === "ready") return { explained: true, why: `${death}; still queued at the end (not run again yet)` }
    return { explained: false, why: `${death}, but message ${id} never ran again (${remaining.get(own.n) ?? "lost"})` }
  }

  const zero = (): Record<LogKind, number> => ({
    "double-run-at-ack": 0,
    "finish-failed": 0,
    "renewer-wedged": 0,
    "lease-lost": 0,
    "double-run-prevented": 0
  })
  const explainedLogs = zero()
  const unexplainedLogs = zero()
  const logs: Array<JudgedLog> = []
  for (const event of input.logEvents ?? []) {
    if (!judgedKinds.includes(event.kind)) continue
    const verdict = judge(event)
    ;(verdict.explained ? explainedLogs : unexplainedLogs)[event.kind]++
    logs.push({ event, execution: verdict.execution, explained: verdict.explained, why: verdict.why })
  }
  return { logs, explainedLogs, unexplainedLogs }
}

// ---------------------------------------------------------------------------------------------
// Flow limits (run.ts --flow)
// ---------------------------------------------------------------------------------------------

export interface FlowRate {
  readonly count: number
  readonly periodMs: number
}

/** The limits a flow run set on its queue (the queue level: no task limits). */
export interface FlowLimitsSet {
  readonly concurrency?: number | undefined
  readonly keyConcurrency?: number | undefined
  readonly rate?: FlowRate | undefined
  readonly keyRate?: FlowRate | undefined
}

export interface FlowInput {
  readonly limits: FlowLimitsSet
  /** The key message n was sent with (every message of a flow run has one). */
  readonly keyOf: (n: number) => string
  /** Every lease the database gave, with its end (lib.ts, createLeaseRecorder). */
  readonly leases: ReadonlyArray<LeaseRecord>
}

/**
 * The end of an execution for the flow checks: when its handler returned (the ledger end write
 * committed, the interrupted handler's finalizer done, the end write given up, the poisoned
 * failure), or when its process was SIGKILLed (nothing runs after that), whichever came first.
 * An interruption without its `interrupt-returned` line counts up to its bound
 * (INTERRUPTED_WRITE_BOUND_MS). Infinity: never ended as far as the records go.
 */
export const flowEnd = (e: Execution): number =>
  Math.min(
    e.okMs === undefined ? Infinity : Math.max(e.okMs, e.doneMs ?? e.okMs),
    e.interruptedMs === undefined ? Infinity : e.interruptReturnedMs ?? e.interruptedMs + INTERRUPTED_WRITE_BOUND_MS,
    e.endWriteGaveUpMs ?? e.endWriteFailedMs ?? Infinity,
    e.poisonFailedMs ?? Infinity,
    e.killedMs ?? Infinity
  )

/** When a recorded lease stopped counting as a slot: ended by a write, or expired before that. */
export const leaseEnd = (l: LeaseRecord): number => Math.min(l.endedMs ?? Infinity, l.expiresMs ?? Infinity)

/** One instant (an execution's start) at which more executions of a scope ran than its limit. */
export interface FlowExcess {
  /** `queue`, or the key. */
  readonly scope: string
  readonly at: number
  readonly inFlight: number
  readonly limit: number
  /** The executions in flight then whose lease the database had already ended (lost, reaped, expired). */
  readonly pastLease: ReadonlyArray<Execution>
  /** Explained: without the executions past their lease, all being interrupted, the scope was within its limit. */
  readonly explained: boolean
  readonly why: string
}

export interface ConcurrencyCheck {
  readonly limit: number
  /** Executions in flight at once at the busiest instant (of the busiest scope), as the ledger shows them. */
  readonly maxObserved: number
  /** The same, counting only executions whose lease was live (the database's record): what the limit counts. */
  readonly maxWithinLease: number
  /** Scopes (keys) whose executions reached the limit at some instant. */
  readonly scopesAtLimit: number
  readonly scopes: number
  readonly explained: ReadonlyArray<FlowExcess>
  readonly unexplained: ReadonlyArray<FlowExcess>
}

export interface LeaseCheck {
  readonly limit: number
  /** Live leases at once (of the busiest scope), from the database's own record. */
  readonly max: number
  /** Instants (lease starts) at which a scope held more live leases than its limit. */
  readonly over: ReadonlyArray<{ readonly scope: string; readonly at: number; readonly live: number }>
}

export interface RateCheck {
  readonly limit: FlowRate
  /** The most starts in any window of the period (of the busiest scope), on the claims' recorded times (`leased_at`). */
  readonly maxRecorded: number
  /** Windows over the count on the recorded times: scope, the window's last start, its starts, the claims in it. */
  readonly over: ReadonlyArray<{ readonly scope: string; readonly at: number; readonly starts: number; readonly claims: ReadonlyArray<LeaseRecord> }>
  /** The same on `clock_timestamp()` in the claim statement (informative). */
  readonly maxClock: number
  /** The same on the ledger's handler starts (informative: a handler starts after its claim committed). */
  readonly maxLedger: number
  /** Scopes whose recorded windows reached the count. */
  readonly scopesAtLimit: number
}

export interface FlowAnalysis {
  /** Leases recorded (claims), and how many of them were redeliveries (attempt > 1). */
  readonly claims: number
  readonly redeliveryClaims: number
  /** Leases never ended by the end of the run. */
  readonly leasesOpen: number
  /** Executions matched to no recorded lease of their message and worker (claimed at or before their start). */
  readonly unmatched: ReadonlyArray<Execution>
  readonly keys: number
  readonly keyConcurrency: ConcurrencyCheck | undefined
  readonly concurrency: ConcurrencyCheck | undefined
  readonly keyLeases: LeaseCheck | undefined
  readonly leases: LeaseCheck | undefined
  readonly rate: RateCheck | undefined
  readonly keyRate: RateCheck | undefined
}

/** Sweep one scope's executions in start order; at each start, what is in flight. */
const sweepExecutions = (
  scope: string,
  list: ReadonlyArray<Execution>,
  limit: number,
  leaseEndOf: (e: Execution) => number
) => {
  const sorted = [...list].sort((a, b) => a.startedMs - b.startedMs)
  let active: Array<Execution> = []
  let maxObserved = 0
  let maxWithinLease = 0
  const explained: Array<FlowExcess> = []
  const unexplained: Array<FlowExcess> = []
  for (const e of sorted) {
    const t = e.startedMs
    active = active.filter((x) => flowEnd(x) > t)
    active.push(e)
    const pastLease = active.filter((x) => leaseEndOf(x) <= t)
    const within = active.length - pastLease.length
    maxObserved = Math.max(maxObserved, active.length)
    maxWithinLease = Math.max(maxWithinLease, within)
    if (active.length <= limit) continue
    const interrupted = pastLease.filter((x) => x.interruptedMs !== undefined)
    const ok = within <= limit && interrupted.length === pastLease.length
    const why = within > limit
      ? `${within} executions with a live lease, limit ${limit}`
      : `${pastLease.length} past their lease, ${pastLease.length - interrupted.length} of them not interrupted`
    ;(ok ? explained : unexplained).push({ scope, at: t, inFlight: active.length, limit, pastLease, explained: ok, why: ok ? "past their lease, being interrupted" : why })
  }
  return { maxObserved, maxWithinLease, explained, unexplained }
}

/** Max live leases of one scope at once, checked at every lease start: [claimed_ms, leaseEnd). */
const sweepLeases = (scope: string, list: ReadonlyArray<LeaseRecord>, limit: number) => {
  const sorted = [...list].sort((a, b) => a.claimedMs - b.claimedMs)
  let active: Array<LeaseRecord> = []
  let max = 0
  const over: Array<{ scope: string; at: number; live: number }> = []
  for (const l of sorted) {
    active = active.filter((x) => leaseEnd(x) > l.claimedMs)
    active.push(l)
    max = Math.max(max, active.length)
    if (active.length > limit) over.push({ scope, at: l.claimedMs, live: active.length })
  }
  return { max, over }
}

/** The most starts in any window (t - period, t] of sorted times, and the windows over `count`. */
export const windowCounts = (times: ReadonlyArray<number>, periodMs: number, count: number) => {
  const s = [...times].sort((a, b) => a - b)
  let max = 0
  const over: Array<{ at: number; starts: number }> = []
  let lo = 0
  for (let j = 0; j < s.length; j++) {
    if (j + 1 < s.length && s[j + 1] === s[j]) continue // the last of equal times closes the window
    while (s[lo]! <= s[j]! - periodMs) lo++
    const n = j - lo + 1
    max = Math.max(max, n)
    if (n > count) over.push({ at: s[j]!, starts: n })
  }
  return { max, over }
}

const groupBy = <A>(items: ReadonlyArray<A>, key: (a: A) => string | null): Map<string, Array<A>> => {
  const map = new Map<string, Array<A>>()
  for (const item of items) {
    const k = key(item)
    if (k === null) continue
    const list = map.get(k)
    if (list === undefined) map.set(k, [item])
    else list.push(item)
  }
  return map
}

const rateCheck = (
  limit: FlowRate,
  leasesBy: ReadonlyMap<string, ReadonlyArray<LeaseRecord>>,
  execsBy: ReadonlyMap<string, ReadonlyArray<Execution>>
): RateCheck => {
  let maxRecorded = 0
  let maxClock = 0
  let maxLedger = 0
  let scopesAtLimit = 0
  const over: Array<{ scope: string; at: number; starts: number; claims: ReadonlyArray<LeaseRecord> }> = []
  for (const [scope, list] of leasesBy) {
    const recorded = windowCounts(list.map((l) => l.leasedMs), limit.periodMs, limit.count)
    maxRecorded = Math.max(maxRecorded, recorded.max)
    if (recorded.max >= limit.count) scopesAtLimit++
    over.push(...recorded.over.map((o) => ({
      scope,
      ...o,
      claims: list.filter((l) => l.leasedMs > o.at - limit.periodMs && l.leasedMs <= o.at).sort((a, b) => a.claimedMs - b.claimedMs)
    })))
    maxClock = Math.max(maxClock, windowCounts(list.map((l) => l.claimedMs), limit.periodMs, limit.count).max)
  }
  for (const list of execsBy.values()) {
    maxLedger = Math.max(maxLedger, windowCounts(list.map((e) => e.startedMs), limit.periodMs, limit.count).max)
  }
  return { limit, maxRecorded, over, maxClock, maxLedger, scopesAtLimit }
}

/**
 * The flow checks. What is measured:
 * - concurrency (queue, per key) on the ledger: an execution is in flight from its handler's start
 *   to its end (flowEnd: handler return, or the SIGKILL). At each start, the executions in flight
 *   of the scope are counted; above the limit, those whose lease the database had already ended
 *   (lost: reaped, expired, replaced; leaseEnd of the lease the execution ran under) are set
 *   apart: if what is left is within the limit and every one set apart was interrupted (the
 *   consumer was stopping a handler whose lease it had lost), the excess is explained; any other
 *   excess is unexplained;
 * - live leases (queue, per key) on the database's own record: a lease from its claim statement's
 *   clock to its end (leaseEnd); this is what the limits count, so it must never be above them;
 * - rate (queue, per key): the starts in every sliding window (t - period, t] on the claims'
 *   recorded `leased_at` (the start each claim wrote into the rate window, the claim
 *   transaction's time; redeliveries consume a start too), must be <= count; the same on the
 *   claim statement's clock and on the ledger's handler starts is shown, not judged.
 */
export const analyzeFlow = (flow: FlowInput, perMessage: ReadonlyMap<number, ReadonlyArray<Execution>>): FlowAnalysis => {
  const { limits } = flow
  const leasesOf = groupBy(flow.leases, (l) => l.messageId)
  const unmatched: Array<Execution> = []
  const leaseOf = new Map<Execution, LeaseRecord>()
  for (const list of perMessage.values()) {
    for (const e of list) {
      // The ledger's start is a whole millisecond (Date.now() in the worker), the claim's clock a microsecond one.
      const candidates = (leasesOf.get(e.messageId) ?? []).filter((l) => Math.floor(l.claimedMs) <= e.startedMs)
      const mine = candidates.filter((l) => l.consumer === e.consumer)
      const lease = (mine.length > 0 ? mine : candidates).reduce<LeaseRecord | undefined>(
        (best, l) => (best === undefined || l.claimedMs > best.claimedMs ? l : best),
        undefined
      )
      if (lease === undefined || mine.length === 0) unmatched.push(e)
      if (lease !== undefined) leaseOf.set(e, lease)
    }
  }
  // An execution matched to no lease: as if its lease were live throughout (no excess is explained by it).
  const leaseEndOf = (e: Execution) => {
    const l = leaseOf.get(e)
    return l === undefined ? Infinity : leaseEnd(l)
  }
  const executions = [...perMessage.values()].flat()
  const execsByKey = groupBy(executions, (e) => flow.keyOf(e.n))
  const keyOfLease = (l: LeaseRecord) => l.key
  const leasesByKey = groupBy(flow.leases, keyOfLease)

  const concurrencyOver = (groups: ReadonlyMap<string, ReadonlyArray<Execution>>, limit: number): ConcurrencyCheck => {
    let maxObserved = 0
    let maxWithinLease = 0
    let scopesAtLimit = 0
    const explained: Array<FlowExcess> = []
    const unexplained: Array<FlowExcess> = []
    for (const [scope, list] of groups) {
      const r = sweepExecutions(scope, list, limit, leaseEndOf)
      maxObserved = Math.max(maxObserved, r.maxObserved)
      maxWithinLease = Math.max(maxWithinLease, r.maxWithinLease)
      if (r.maxWithinLease >= limit) scopesAtLimit++
      explained.push(...r.explained)
      unexplained.push(...r.unexplained)
    }
    return { limit, maxObserved, maxWithinLease, scopesAtLimit, scopes: groups.size, explained, unexplained }
  }
  const leasesOver = (groups: ReadonlyMap<string, ReadonlyArray<LeaseRecord>>, limit: number): LeaseCheck => {
    let max = 0
    const over: Array<{ scope: string; at: number; live: number }> = []
    for (const [scope, list] of groups) {
      const r = sweepLeases(scope, list, limit)
      max = Math.max(max, r.max)
      over.push(...r.over)
    }
    return { limit, max, over }
  }
  const all = new Map([["queue", executions]])
  const allLeases = new Map([["queue", [...flow.leases]]])
  return {
    claims: flow.leases.length,
    redeliveryClaims: flow.leases.filter((l) => l.attempt > 1).length,
    leasesOpen: flow.leases.filter((l) => l.endedMs === null).length,
    unmatched,
    keys: execsByKey.size,
    keyConcurrency: limits.keyConcurrency === undefined ? undefined : concurrencyOver(execsByKey, limits.keyConcurrency),
    concurrency: limits.concurrency === undefined ? undefined : concurrencyOver(all, limits.concurrency),
    keyLeases: limits.keyConcurrency === undefined ? undefined : leasesOver(leasesByKey, limits.keyConcurrency),
    leases: limits.concurrency === undefined ? undefined : leasesOver(allLeases, limits.concurrency),
    rate: limits.rate === undefined ? undefined : rateCheck(limits.rate, allLeases, all),
    keyRate: limits.keyRate === undefined ? undefined : rateCheck(limits.keyRate, leasesByKey, execsByKey)
  }
}

// ---------------------------------------------------------------------------------------------
// The commit step (run.ts --commit)
// ---------------------------------------------------------------------------------------------

/** A counter row at the end of a commit run: message n's (key n), of task `tx` or `plain`, and its value. */
export interface CounterRow {
  readonly key: number
  readonly task: string
  readonly n: number
}

export interface CommitInput {
  readonly counters: ReadonlyArray<CounterRow>
  /** The task message n was sent as (`tx`: increments inside `context.commit`; `plain`: outside). */
  readonly taskOf: (n: number) => "tx" | "plain"
}

/** The counters of one task: each must be 1 for `tx`; `plain` may show more (at-least-once). */
export interface CounterCheck {
  readonly counters: number
  readonly exactlyOne: number
  /** Keys at 0: the effect never landed (lost). */
  readonly zero: ReadonlyArray<number>
  /** Keys above 1, with their value: the effect landed more than once. */
  readonly over: ReadonlyArray<{ readonly key: number; readonly n: number }>
  /** Increments beyond one, summed over the keys above 1. */
  readonly extra: number
}

/** A commit step refused by the fence ("double run prevented"), matched to the run that reclaimed its message. */
export interface FencedCommit {
  readonly event: LogEvent
  readonly execution: Execution | undefined
  readonly reclaimedBy: Execution | undefined
  readonly explained: boolean
  readonly why: string
}

export interface CommitAnalysis {
  readonly tx: CounterCheck
  readonly plain: CounterCheck
  /** Messages sent with no counter row, or a row of another task (a setup fault). */
  readonly missing: ReadonlyArray<number>
  /** Every "double run prevented" log line, matched. */
  readonly fenced: ReadonlyArray<FencedCommit>
  /** `commit-fenced` journal lines of the handlers (each refused commit as the handler saw it). */
  readonly fencedJournaled: number
  /** Stale runs (isStale: lease lost logged while they ran, or their worker blocked on purpose) followed by another run of their message, by task. */
  readonly staleRuns: { readonly tx: number; readonly plain: number }
  /** Of the stale runs, those whose worker was blocked on purpose (the forced lease loss). */
  readonly staleByBlock: number
  /** Runs that blocked their worker's event loop (journal `blocked`). */
  readonly blocks: number
  /** tx runs whose commit step failed otherwise (a connection death, the commit's bound), by error. */
  readonly commitFailures: number
}

/** The checks of a commit run that must hold; `full`: the plain twin must show duplicates (the check can fail). */
export const commitViolations = (c: CommitAnalysis, options: { readonly requirePlainDuplicates: boolean }): Array<string> => {
  const v: Array<string> = []
  if (c.missing.length > 0) v.push(`${c.missing.length} messages without their counter row (e.g. n=${c.missing.slice(0, 5).join(",")})`)
  if (c.tx.zero.length > 0) v.push(`${c.tx.zero.length} tx counters at 0: the effect was lost (e.g. n=${c.tx.zero.slice(0, 5).join(",")})`)
  if (c.tx.over.length > 0) v.push(`${c.tx.over.length} tx counters above 1: a double effect (e.g. ${c.tx.over.slice(0, 5).map((o) => `n=${o.key}: ${o.n}`).join(", ")})`)
  if (c.plain.zero.length > 0) v.push(`${c.plain.zero.length} plain counters at 0: the effect was lost (e.g. n=${c.plain.zero.slice(0, 5).join(",")})`)
  const unmatched = c.fenced.filter((f) => !f.explained)
  if (unmatched.length > 0) v.push(`${unmatched.length} commits refused by the fence matched to no reclaim of their message`)
  if (c.fencedJournaled !== c.fenced.length) v.push(`commits refused by the fence: ${c.fenced.length} log lines, ${c.fencedJournaled} seen by the handlers (the checker missed some)`)
  if (options.requirePlainDuplicates && c.plain.over.length === 0) {
    v.push("no plain counter above 1: the faults caused no duplicate effect, so the tx check proved nothing (make the faults stronger)")
  }
  return v
}

const counterCheck = (rows: ReadonlyArray<CounterRow>): CounterCheck => {
  const over = rows.filter((r) => r.n > 1).map((r) => ({ key: r.key, n: r.n }))
  return {
    counters: rows.length,
    exactlyOne: rows.filter((r) => r.n === 1).length,
    zero: rows.filter((r) => r.n === 0).map((r) => r.key),
    over,
    extra: over.reduce((sum, o) => sum + o.n - 1, 0)
  }
}

/**
 * The commit checks. tx counters: all exactly 1. plain counters: counted above 1 (the duplicates the
 * faults caused; none at 0). Every "double run prevented" line (worker C, message m, at t) is matched
 * to C's run of m (its latest started by t) and to a later run of m (the reclaim that took the lease):
 * explained when both exist; none later means the fence refused a run that still held the message.
 */
export const analyzeCommit = (input: AnalysisInput, perMessage: ReadonlyMap<number, ReadonlyArray<Execution>>): CommitAnalysis => {
  const commit = input.commit!
  const rowOf = new Map<number, CounterRow>()
  for (const r of commit.counters) rowOf.set(r.key, r)
  const missing: Array<number> = []
  const tx: Array<CounterRow> = []
  const plain: Array<CounterRow> = []
  for (let n = 0; n < input.sent; n++) {
    const row = rowOf.get(n)
    const task = commit.taskOf(n)
    if (row === undefined || row.task !== task) {
      missing.push(n)
      continue
    }
    ;(task === "tx" ? tx : plain).push(row)
  }
  const byId = new Map<string, ReadonlyArray<Execution>>()
  for (const list of perMessage.values()) for (const e of list) byId.set(e.messageId, [...(byId.get(e.messageId) ?? []), e])
  const o = input.origin ?? 0
  const ms = (t: number) => `${Math.round(t - o)} ms`
  const fenced: Array<FencedCommit> = []
  for (const event of input.logEvents ?? []) {
    if (event.kind !== "double-run-prevented") continue
    const id = event.messageIds[0]
    const runs = id === undefined ? [] : byId.get(id) ?? []
    const mine = runs.filter((e) => e.consumer === event.consumer && e.startedMs <= event.at + LOG_SLACK_MS)
    // The run whose handler saw the refusal (journal `commit-fenced`, just after the log line), else the latest.
    const seen = mine.filter((e) => e.fencedMs !== undefined && Math.abs(e.fencedMs - event.at) <= LOG_SLACK_MS)
    const own = seen.length > 0 ? seen[seen.length - 1] : mine[mine.length - 1]
    const reclaimedBy = own === undefined ? undefined : runs.find((e) => claimedAfter(e, own))
    const why = id === undefined
      ? "no message id on the log line"
      : own === undefined
      ? `no run of message ${id} on ${event.consumer} before the log line`
      : reclaimedBy === undefined
      ? `${own.consumer}'s run of message ${id} (from ${ms(own.startedMs)}) was refused, but nobody ran the message after it`
      : `reclaimed by ${reclaimedBy.consumer} at ${ms(reclaimedBy.startedMs)}` +
        (own.staleMs === undefined ? "" : `; lease lost at ${ms(own.staleMs)}`) +
        (own.blockedMs === undefined ? "" : `; its worker blocked until ${ms(own.blockedMs)}`)
    fenced.push({ event, execution: own, reclaimedBy, explained: own !== undefined && reclaimedBy !== undefined, why })
  }
  // Block windows per worker: [end - (lease + 1.5 s), end] (worker.ts blocks for the lease + 1.5 s).
  const executions = [...perMessage.values()].flat()
  const blocks = executions.filter((e) => e.blockedMs !== undefined)
  // Stale runs that mattered: another run of their message started after them (the reclaim).
  const stale = [...perMessage.values()].flatMap((list) => list.filter((e, i) => isStale(e) && i < list.length - 1))
  const staleByBlock = stale.filter((e) => e.stalledMs !== undefined).length
  return {
    tx: counterCheck(tx),
    plain: counterCheck(plain),
    missing,
    fenced,
    fencedJournaled: input.journal.filter((j) => j.ev === "commit-fenced").length,
    staleRuns: {
      tx: stale.filter((e) => commit.taskOf(e.n) === "tx").length,
      plain: stale.filter((e) => commit.taskOf(e.n) === "plain").length
    },
    staleByBlock,
    blocks: blocks.length,
    commitFailures: input.journal.filter((j) => j.ev === "effect-failed" && j.task === "tx").length
  }
}
