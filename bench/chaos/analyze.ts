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
 */
import type { JournalEvent, LedgerRow } from "./lib.ts"

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
}

export interface Execution {
  readonly exec: string
  readonly n: number
  readonly messageId: string
  readonly consumer: string
  readonly pid: number
  readonly startedMs: number
  /** Work finished and the ledger says so. */
  okMs: number | undefined
  /** Interrupted (lease lost, or shutdown) at this time. */
  interruptedMs: number | undefined
  /** Work finished but the end could not be written: the handler failed. */
  endWriteFailedMs: number | undefined
  /** When the holder was SIGKILLed, if it was at or after the start. */
  killedMs: number | undefined
}

/**
 * Why a message ran again, from how the run before it ended:
 * - `kill`: its holder was SIGKILLed;
 * - `interrupted`: its handler was interrupted (lease or presence lost in the storm) before finishing;
 * - `interrupted-after-work`: its work was done (end row written), then the handler was interrupted before the ack;
 * - `handler-failed`: the handler failed (its ledger end could not be written), so the queue retried it;
 * - `after-completion`: it finished, its holder lived and nothing interrupted it: a double run;
 * - `unexplained`: it never finished, was not interrupted and its holder was not killed.
 */
export type DuplicateCause =
  | "kill"
  | "interrupted"
  | "interrupted-after-work"
  | "handler-failed"
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
  readonly dead: ReadonlyArray<number>
  readonly stillQueued: ReadonlyArray<number>
  readonly unknown: number
  readonly messagesWithSeveralIds: ReadonlyArray<number>
  readonly overlaps: ReadonlyArray<Overlap>
  readonly duplicates: ReadonlyArray<Duplicate>
  readonly duplicatesByCause: Record<DuplicateCause, number>
  /** Duplicates after an interruption that came more than 10 s from the server restart. */
  readonly interruptedAwayFromRestart: number
  /** kill -> next start of a message that was in progress on the killed worker, in ms. */
  readonly redeliveryMs: ReadonlyArray<number>
  /** Messages in progress on a killed worker that never started again (and were not completed). */
  readonly notRedelivered: number
  readonly killsWithWork: number
}

/** The end of an execution as far as overlap goes: work finished, interrupted, or holder killed. Infinity: unknown. */
export const effectiveEnd = (e: Execution): number =>
  Math.min(
    e.okMs ?? Infinity,
    e.interruptedMs ?? Infinity,
    e.endWriteFailedMs ?? Infinity,
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
      startedMs: row.started_ms
    })
    if (row.outcome === "ok" && row.ended_ms !== null) e.okMs = row.ended_ms
    if (row.outcome === "interrupted" && row.ended_ms !== null) e.interruptedMs = row.ended_ms
  }
  for (const j of input.journal) {
    if (j.ev === "abandoned") continue
    const e = ensure({ exec: j.exec, n: j.n, messageId: j.id, consumer: j.consumer, pid: j.pid, startedMs: j.startedMs })
    if (j.ev === "interrupted") e.interruptedMs = Math.min(e.interruptedMs ?? Infinity, j.at)
    if (j.ev === "end-write-failed") e.endWriteFailedMs = j.endedMs ?? j.at
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
  for (const list of perMessage.values()) list.sort((a, b) => a.startedMs - b.startedMs)

  const remaining = new Map<number, string>()
  for (const r of input.remaining) remaining.set(r.n, r.state)

  let completed = 0
  const lost: Array<number> = []
  const dead: Array<number> = []
  const stillQueued: Array<number> = []
  const messagesWithSeveralIds: Array<number> = []
  for (let n = 0; n < input.sent; n++) {
    const list = perMessage.get(n) ?? []
    if (new Set(list.map((e) => e.messageId)).size > 1) messagesWithSeveralIds.push(n)
    const state = remaining.get(n)
    if (state === "dead") dead.push(n)
    else if (state !== undefined) stillQueued.push(n)
    else if (list.some((e) => e.okMs !== undefined)) completed++
    else lost.push(n)
  }

  // Overlaps: a later execution starting while an earlier one of the same message still ran on a live holder.
  const overlaps: Array<Overlap> = []
  for (const [n, list] of perMessage) {
    for (let j = 1; j < list.length; j++) {
      const second = list[j]!
      for (let i = 0; i < j; i++) {
        const first = list[i]!
        const holderAlive = first.killedMs === undefined || first.killedMs > second.startedMs
        if (second.startedMs < effectiveEnd(first) && holderAlive) overlaps.push({ n, first, second })
      }
    }
  }

  // Duplicates: every execution after the first, explained by how the one before it ended.
  const duplicates: Array<Duplicate> = []
  const duplicatesByCause: Record<DuplicateCause, number> = {
    kill: 0,
    interrupted: 0,
    "interrupted-after-work": 0,
    "handler-failed": 0,
    "after-completion": 0,
    unexplained: 0
  }
  let interruptedAwayFromRestart = 0
  for (const [n, list] of perMessage) {
    for (let j = 1; j < list.length; j++) {
      const previous = list[j - 1]!
      const next = list[j]!
      const cause: DuplicateCause = previous.killedMs !== undefined && previous.killedMs <= next.startedMs
        ? "kill"
        : previous.interruptedMs !== undefined
        ? (previous.okMs !== undefined ? "interrupted-after-work" : "interrupted")
        : previous.endWriteFailedMs !== undefined
        ? "handler-failed"
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

  // Redelivery after a kill: for each execution cut short by a kill (or finished but not acked before it),
  // the time from the kill to the next start of the message.
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
    stillQueued,
    unknown,
    messagesWithSeveralIds,
    overlaps,
    duplicates,
    duplicatesByCause,
    interruptedAwayFromRestart,
    redeliveryMs,
    notRedelivered,
    killsWithWork: killsWithWork.size
  }
}
