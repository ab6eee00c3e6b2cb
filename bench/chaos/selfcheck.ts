/**
 * Checks of the checker: bench/chaos/analyze.ts on hand-made runs, so a
 * chaos PASS means something. No database needed:
 *
 *   node bench/chaos/selfcheck.ts
 *
 * `npm run chaos` and `npm run chaos:ci` run it first.
 */
import assert from "node:assert/strict"
import { analyze, type AnalysisInput, commitViolations, type CounterRow, finishBound, type FlowLimitsSet, windowCounts } from "./analyze.ts"
import type { JournalEvent, LeaseRecord, LedgerRow, LogEvent, LogKind } from "./lib.ts"

let execs = 0
const row = (n: number, consumer: string, started: number, ended: number | null, outcome: string | null = ended === null ? null : "ok"): LedgerRow => ({
  exec_id: `e${++execs}`,
  message_id: String(1000 + n),
  n,
  attempt: 1,
  consumer,
  pid: 1,
  task: "t",
  started_ms: started,
  ended_ms: ended,
  outcome
})

// The chaos defaults: lease 3 s, renewer stop timeout 5 s, so the ack bound is 9 s after the handler returns.
const timing = { leaseMs: 3_000, renewerStopTimeoutMs: 5_000 }
const base: AnalysisInput = { sent: 0, ledger: [], journal: [], remaining: [], kills: [], ...timing, finishBoundMs: finishBound(timing) }

/** A judged log line of worker `consumer` about message n (message id 1000 + n, as `row` makes them). */
const logLine = (kind: LogKind, consumer: string, at: number, n: number | ReadonlyArray<number>, text: string): LogEvent => ({
  ev: "log",
  kind,
  consumer,
  pid: 1,
  at,
  messageIds: (typeof n === "number" ? [n] : n).map((x) => String(1000 + x)),
  text
})
const ACK_FAILED = "ack could not be written; the message runs again after its lease: ack: PgConnection: Connection closed: Connection closed"
const DOUBLE_RUN = "double run: the ack found the lease gone; another consumer has taken this message"
const WEDGED = "renewer wedged: did not stop within 5.0s; going on without it"
const cases: Array<[string, () => void]> = []
const check = (name: string, f: () => void) => cases.push([name, f])

check("a clean run: every message completed once", () => {
  const r = analyze({ ...base, sent: 2, ledger: [row(0, "a", 0, 10), row(1, "b", 5, 20)] })
  assert.equal(r.completed, 2)
  assert.deepEqual(r.lost, [])
  assert.equal(r.duplicates.length, 0)
  assert.equal(r.overlaps.length, 0)
})

check("a message with no execution and not in the table is lost", () => {
  const r = analyze({ ...base, sent: 3, ledger: [row(0, "a", 0, 10), row(2, "a", 0, 10)] })
  assert.deepEqual(r.lost, [1])
})

check("a message started but never finished and gone from the table is lost", () => {
  const r = analyze({ ...base, sent: 1, ledger: [row(0, "a", 0, null)] })
  assert.deepEqual(r.lost, [0])
})

check("still queued and dead-lettered are told apart from lost", () => {
  const r = analyze({ ...base, sent: 2, remaining: [{ n: 0, state: "ready" }, { n: 1, state: "dead" }] })
  assert.deepEqual(r.stillQueued, [0])
  assert.deepEqual(r.dead, [1])
  assert.deepEqual(r.lost, [])
})

check("a rerun after the holder was killed is a duplicate following a kill, and timed", () => {
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [row(0, "a", 0, null), row(0, "b", 3_500, 3_600)],
    kills: [{ consumer: "a", pid: 1, at: 1_000 }]
  })
  assert.equal(r.duplicatesByCause.kill, 1)
  assert.equal(r.overlaps.length, 0)
  assert.deepEqual(r.redeliveryMs, [2_500])
  assert.equal(r.completed, 1)
})

check("a second run while the first holder is alive and running is an overlap", () => {
  const r = analyze({ ...base, sent: 1, ledger: [row(0, "a", 0, 5_000), row(0, "b", 4_000, 4_100)] })
  assert.equal(r.overlaps.length, 1)
  assert.equal(r.duplicatesByCause["after-completion"], 1)
})

check("a second run before the first holder is killed is an overlap", () => {
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [row(0, "a", 0, null), row(0, "b", 4_000, 4_100)],
    kills: [{ consumer: "a", pid: 1, at: 6_000 }]
  })
  assert.equal(r.overlaps.length, 1)
})

check("a run with no end, a live holder and no interruption makes a later run an overlap and unexplained", () => {
  const r = analyze({ ...base, sent: 1, ledger: [row(0, "a", 0, null), row(0, "b", 4_000, 4_100)] })
  assert.equal(r.overlaps.length, 1)
  assert.equal(r.duplicatesByCause.unexplained, 1)
})

check("a poisoned message failing each run on purpose, then dead-lettered: its reruns follow its policy, not lost, not dead by mistake", () => {
  const runs = [row(0, "a", 0, null), row(0, "a", 300, null), row(0, "b", 900, null)]
  const poisonFailed = (r: LedgerRow, at: number): JournalEvent => ({
    ev: "poison-failed", exec: r.exec_id, id: r.message_id, n: 0, attempt: 1, consumer: r.consumer, pid: 1, task: "t", startedMs: r.started_ms, at
  })
  const journal = runs.map((r) => poisonFailed(r, r.started_ms + 10))
  const r = analyze({ ...base, sent: 2, ledger: [...runs, row(1, "a", 0, 10)], journal, remaining: [{ n: 0, state: "dead" }], poisoned: new Set([0]) })
  assert.deepEqual([r.poisonDead, r.poisonNotDead, r.dead, r.lost], [[0], [], [], []])
  assert.equal(r.duplicatesByCause.poison, 2)
  assert.equal(r.overlaps.length, 0)
  assert.equal(r.completed, 1)
  // Without its journal lines the same runs are unexplained; a poisoned message that was not dead-lettered is reported.
  const unjournaled = analyze({ ...base, sent: 1, ledger: runs, remaining: [{ n: 0, state: "dead" }], poisoned: new Set([0]) })
  assert.equal(unjournaled.duplicatesByCause.unexplained, 2)
  const notDead = analyze({ ...base, sent: 1, ledger: runs, journal, remaining: [], poisoned: new Set([0]) })
  assert.deepEqual(notDead.poisonNotDead, [0])
})

check("a run after a completed run whose holder lived is a double run", () => {
  const r = analyze({ ...base, sent: 1, ledger: [row(0, "a", 0, 100), row(0, "b", 4_000, 4_100)] })
  assert.equal(r.overlaps.length, 0)
  assert.equal(r.duplicatesByCause["after-completion"], 1)
})

check("an interruption known only from the journal ends the run: lease loss, no overlap", () => {
  const first = row(0, "a", 0, null)
  const journal: Array<JournalEvent> = [{
    ev: "interrupted",
    exec: first.exec_id,
    id: first.message_id,
    n: 0,
    attempt: 1,
    consumer: "a",
    pid: 1,
    task: "t",
    startedMs: 0,
    at: 2_500
  }]
  const r = analyze({ ...base, sent: 1, ledger: [first, row(0, "b", 3_100, 3_200)], journal })
  assert.equal(r.overlaps.length, 0)
  assert.equal(r.duplicatesByCause.interrupted, 1)
})

check("an abandoned start (no work done) is not an execution", () => {
  const first = row(0, "a", 0, null)
  const journal: Array<JournalEvent> = [{
    ev: "abandoned",
    exec: first.exec_id,
    id: first.message_id,
    n: 0,
    attempt: 1,
    consumer: "a",
    pid: 1,
    task: "t",
    startedMs: 0,
    at: 10
  }]
  const r = analyze({ ...base, sent: 1, ledger: [first, row(0, "a", 200, 300)], journal })
  assert.equal(r.executions, 1)
  assert.equal(r.duplicates.length, 0)
  assert.equal(r.abandoned, 1)
})

check("a run whose end was written but whose ack was cut by a kill is redelivered because of the kill", () => {
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [row(0, "a", 0, 100), row(0, "b", 3_000, 3_100)],
    kills: [{ consumer: "a", pid: 1, at: 150 }]
  })
  assert.equal(r.duplicatesByCause.kill, 1)
  assert.deepEqual(r.redeliveryMs, [2_850])
})

check("a run cut by a kill and never run again, gone from the table, is lost and not redelivered", () => {
  const r = analyze({ ...base, sent: 1, ledger: [row(0, "a", 0, null)], kills: [{ consumer: "a", pid: 1, at: 50 }] })
  assert.deepEqual(r.lost, [0])
  assert.equal(r.notRedelivered, 1)
})

check("work done, then interrupted before the ack: told apart from a plain interruption", () => {
  const first = row(0, "a", 0, 100)
  const journal: Array<JournalEvent> = [{
    ev: "interrupted",
    exec: first.exec_id,
    id: first.message_id,
    n: 0,
    attempt: 1,
    consumer: "a",
    pid: 1,
    task: "t",
    startedMs: 0,
    at: 150
  }]
  const r = analyze({ ...base, sent: 1, ledger: [first, row(0, "b", 300, 400)], journal })
  assert.equal(r.duplicatesByCause["interrupted-after-work"], 1)
  assert.equal(r.overlaps.length, 0)
})

check("a message that ran under two ids was sent twice", () => {
  const second = { ...row(0, "b", 5_000, 5_100), message_id: "9999" }
  const r = analyze({ ...base, sent: 1, ledger: [row(0, "a", 0, 100), second] })
  assert.deepEqual(r.messagesWithSeveralIds, [0])
})

// ---- item 12: a kill explains a rerun only before the earlier run's ack bound --------------------------------

check("issue 8 item 12, as reproduced: work ended at 100 ms, holder killed at 9.9 s, rerun at 10 s: not caused by the kill", () => {
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [row(0, "a", 0, 100), row(0, "b", 10_000, 10_100)],
    kills: [{ consumer: "a", pid: 1, at: 9_900 }]
  })
  assert.equal(r.duplicatesByCause.kill, 0)
  assert.equal(r.duplicatesByCause["after-completion"], 1) // a double run with its holder alive: fails the run
  assert.deepEqual(r.redeliveryMs, []) // and no 100 ms redelivery sample
})

check("work ended at 100 ms, holder killed at 1 s (before the ack bound), rerun at 4 s: caused by the kill, timed from the kill", () => {
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [row(0, "a", 0, 100), row(0, "b", 4_000, 4_100)],
    kills: [{ consumer: "a", pid: 1, at: 1_000 }]
  })
  assert.equal(r.duplicatesByCause.kill, 1)
  assert.equal(r.duplicatesByCause["after-completion"], 0)
  assert.deepEqual(r.redeliveryMs, [3_000]) // not 3,900 (from the end of the work)
})

check("the ack bound runs from the handler's return: end write committed at 8 s (retried through the restart), killed at 9.9 s", () => {
  const first = { ...row(0, "a", 0, 100), done_ms: 8_000 }
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [first, row(0, "b", 13_000, 13_100)],
    kills: [{ consumer: "a", pid: 1, at: 9_900 }]
  })
  assert.equal(r.duplicatesByCause.kill, 1)
  assert.deepEqual(r.redeliveryMs, [3_100])
})

check("a kill just past the ack bound (handler returned at 100 ms, bound 9.1 s, kill at 9.2 s) explains nothing", () => {
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [row(0, "a", 0, 100), row(0, "b", 9_300, 9_400)],
    kills: [{ consumer: "a", pid: 1, at: 9_200 }]
  })
  assert.equal(r.duplicatesByCause.kill, 0)
  assert.equal(r.duplicatesByCause["after-completion"], 1)
})

check("a run that never ended is explained by its holder's kill however late (the handler had not returned)", () => {
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [row(0, "a", 0, null), row(0, "b", 30_500, 30_600)],
    kills: [{ consumer: "a", pid: 1, at: 30_000 }]
  })
  assert.equal(r.duplicatesByCause.kill, 1)
  assert.deepEqual(r.redeliveryMs, [500])
})

// ---- item 11: double runs at ack, failed finishing writes and wedged renewers must be explained ----------------

check("double run at ack with a second run on another worker: unexplained (fails the run)", () => {
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [row(0, "a", 0, 100), row(0, "b", 3_400, 3_450)],
    logEvents: [logLine("double-run-at-ack", "a", 3_500, 0, DOUBLE_RUN)],
    terminations: [{ consumer: "a", pool: "lease", at: 200 }]
  })
  assert.equal(r.unexplainedLogs["double-run-at-ack"], 1)
  assert.equal(r.explainedLogs["double-run-at-ack"], 0)
})

check("double run at ack whose other run's holder was then SIGKILLed: still unexplained (a kill elsewhere takes no lease)", () => {
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [row(0, "a", 0, 100), row(0, "b", 3_400, null), row(0, "c", 7_000, 7_050)],
    kills: [{ consumer: "b", pid: 2, at: 3_450 }],
    logEvents: [logLine("double-run-at-ack", "a", 3_500, 0, DOUBLE_RUN)]
  })
  assert.equal(r.unexplainedLogs["double-run-at-ack"], 1)
})

check("double run at ack, nobody else ran it, its lease backend terminated during the ack: its own ack landed (explained)", () => {
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [row(0, "a", 0, 100)],
    logEvents: [logLine("double-run-at-ack", "a", 300, 0, DOUBLE_RUN)],
    terminations: [{ consumer: "a", pool: "lease", at: 150 }]
  })
  assert.equal(r.explainedLogs["double-run-at-ack"], 1)
  assert.equal(r.unexplainedLogs["double-run-at-ack"], 0)
})

check("double run at ack, nobody else ran it, but no connection of that worker died: unexplained (a false report)", () => {
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [row(0, "a", 0, 100)],
    logEvents: [logLine("double-run-at-ack", "a", 300, 0, DOUBLE_RUN)],
    terminations: [{ consumer: "b", pool: "lease", at: 150 }, { consumer: "a", pool: "presence", at: 150 }]
  })
  assert.equal(r.unexplainedLogs["double-run-at-ack"], 1)
})

check("finishing write given up after its worker's lease backend was terminated, rerun after it: explained, not a double run", () => {
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [row(0, "a", 0, 100), row(0, "b", 3_200, 3_250)],
    logEvents: [logLine("finish-failed", "a", 2_900, 0, ACK_FAILED)],
    terminations: [{ consumer: "a", pool: "lease", at: 150 }]
  })
  assert.equal(r.explainedLogs["finish-failed"], 1)
  assert.equal(r.duplicatesByCause["finish-given-up"], 1)
  assert.equal(r.duplicatesByCause["after-completion"], 0)
})

check("finishing write given up in the restart, message still queued when the drain ended: explained (still queued fails apart)", () => {
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [row(0, "a", 0, 100)],
    remaining: [{ n: 0, state: "ready" }],
    logEvents: [logLine("finish-failed", "a", 2_900, 0, ACK_FAILED)],
    restartAt: 500,
    restartUpAt: 1_800
  })
  assert.equal(r.explainedLogs["finish-failed"], 1)
  assert.deepEqual(r.stillQueued, [0])
})

check("finishing write given up, message dead-lettered and never run again: unexplained", () => {
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [row(0, "a", 0, 100)],
    remaining: [{ n: 0, state: "dead" }],
    logEvents: [logLine("finish-failed", "a", 2_900, 0, ACK_FAILED)],
    restartAt: 500,
    restartUpAt: 1_800
  })
  assert.equal(r.unexplainedLogs["finish-failed"], 1)
})

check("finishing write given up during the server restart: explained", () => {
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [row(0, "a", 0, 100), row(0, "b", 3_200, 3_250)],
    logEvents: [logLine("finish-failed", "a", 2_900, 0, ACK_FAILED)],
    restartAt: 500,
    restartUpAt: 1_800
  })
  assert.equal(r.explainedLogs["finish-failed"], 1)
})

check("finishing write given up with no connection death of that worker: unexplained, and its rerun a double run", () => {
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [row(0, "a", 0, 100), row(0, "b", 3_200, 3_250)],
    logEvents: [logLine("finish-failed", "a", 2_900, 0, ACK_FAILED)],
    terminations: [{ consumer: "b", pool: "lease", at: 150 }]
  })
  assert.equal(r.unexplainedLogs["finish-failed"], 1)
  assert.equal(r.duplicatesByCause["after-completion"], 1)
})

check("finishing write failed with an error that is not a connection death: unexplained even in a storm", () => {
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [row(0, "a", 0, 100), row(0, "b", 3_200, 3_250)],
    logEvents: [logLine("finish-failed", "a", 150, 0, "ack could not be written; the message runs again after its lease: ack: relation \"chaos.messages\" does not exist")],
    terminations: [{ consumer: "a", pool: "lease", at: 120 }]
  })
  assert.equal(r.unexplainedLogs["finish-failed"], 1)
})

check("finishing write still retrying under its lease when another worker started the message: unexplained", () => {
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [row(0, "a", 0, 100), row(0, "b", 1_000, 1_050)],
    logEvents: [logLine("finish-failed", "a", 2_900, 0, ACK_FAILED)],
    terminations: [{ consumer: "a", pool: "lease", at: 150 }]
  })
  assert.equal(r.unexplainedLogs["finish-failed"], 1)
})

check("renewer wedged with a terminated lease backend of its worker just before: explained", () => {
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [row(0, "a", 0, 100)],
    logEvents: [logLine("renewer-wedged", "a", 6_000, [0], WEDGED)],
    terminations: [{ consumer: "a", pool: "lease", at: 900 }]
  })
  assert.equal(r.explainedLogs["renewer-wedged"], 1)
})

check("renewer wedged with no connection death of its worker in the lease + stop timeout before: unexplained", () => {
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [row(0, "a", 0, 100)],
    logEvents: [logLine("renewer-wedged", "a", 20_000, [0], WEDGED)],
    terminations: [{ consumer: "a", pool: "lease", at: 900 }],
    restartAt: 1_000,
    restartUpAt: 2_000
  })
  assert.equal(r.unexplainedLogs["renewer-wedged"], 1)
})

check("a judged log line about a message its worker never ran: unexplained", () => {
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [row(0, "a", 0, 100)],
    logEvents: [logLine("finish-failed", "b", 2_900, 0, ACK_FAILED)],
    terminations: [{ consumer: "b", pool: "lease", at: 150 }]
  })
  assert.equal(r.unexplainedLogs["finish-failed"], 1)
})

// ---- flow limits (run.ts --flow) ------------------------------------------------------------

/** The lease message n ran under on `consumer` (message id 1000 + n, as `row` makes them), claimed at `claimed`. */
let tokens = 0
const lease = (n: number, consumer: string, claimed: number, ended: number | null, options: { key?: string; expires?: number; leased?: number; attempt?: number } = {}): LeaseRecord => ({
  token: `t${++tokens}`,
  messageId: String(1000 + n),
  key: options.key ?? "k",
  consumer,
  attempt: options.attempt ?? 1,
  leasedMs: options.leased ?? claimed,
  claimedMs: claimed,
  endedMs: ended,
  expiresMs: options.expires ?? (ended === null ? null : ended + 3_000)
})
const flowInput = (limits: FlowLimitsSet, leases: ReadonlyArray<LeaseRecord>, keyOf: (n: number) => string = () => "k") => ({ limits, keyOf, leases })
/** The journal of an interrupted run (its ledger row `r`): interrupted at `at`, its handler returned at `returned`. */
const interrupted = (r: LedgerRow, at: number, returned?: number): Array<JournalEvent> => {
  const facts = { exec: r.exec_id, id: r.message_id, n: r.n, attempt: 1, consumer: r.consumer, pid: 1, task: "t", startedMs: r.started_ms }
  return [
    { ev: "interrupted", ...facts, at },
    ...(returned === undefined ? [] : [{ ev: "interrupt-returned" as const, ...facts, at: returned }])
  ]
}

check("flow: two runs of a key at once under key concurrency 2, a third after one ended: within, and the limit reached", () => {
  const r = analyze({
    ...base,
    sent: 3,
    ledger: [row(0, "a", 10, 500), row(1, "b", 20, 600), row(2, "a", 700, 800)],
    flow: flowInput({ keyConcurrency: 2, concurrency: 2 }, [lease(0, "a", 5, 510), lease(1, "b", 15, 610), lease(2, "a", 690, 810)])
  })
  const f = r.flow!
  assert.equal(f.keyConcurrency!.maxWithinLease, 2)
  assert.equal(f.keyConcurrency!.scopesAtLimit, 1)
  assert.equal(f.keyConcurrency!.unexplained.length, 0)
  assert.equal(f.keyConcurrency!.explained.length, 0)
  assert.equal(f.keyLeases!.over.length, 0)
  assert.equal(f.leases!.max, 2)
  assert.equal(f.unmatched.length, 0)
})

check("flow: three runs of a key at once, all with live leases, key concurrency 2: an unexplained excess, in the leases too", () => {
  const r = analyze({
    ...base,
    sent: 3,
    ledger: [row(0, "a", 10, 500), row(1, "b", 20, 600), row(2, "c", 30, 700)],
    flow: flowInput({ keyConcurrency: 2 }, [lease(0, "a", 5, 510), lease(1, "b", 15, 610), lease(2, "c", 25, 710)])
  })
  const c = r.flow!.keyConcurrency!
  assert.equal(c.maxWithinLease, 3)
  assert.equal(c.unexplained.length, 1)
  assert.equal(r.flow!.keyLeases!.over.length, 1)
})

check("flow: keys are counted apart: two runs each of two keys at once, key concurrency 2, queue concurrency 4: within", () => {
  const r = analyze({
    ...base,
    sent: 4,
    ledger: [row(0, "a", 10, 500), row(1, "b", 20, 600), row(2, "c", 30, 700), row(3, "d", 40, 800)],
    flow: flowInput({ keyConcurrency: 2, concurrency: 4 }, [lease(0, "a", 5, 510), lease(1, "b", 15, 610), lease(2, "c", 25, 710), lease(3, "d", 35, 810)], (n) => (n < 2 ? "x" : "y"))
  })
  assert.equal(r.flow!.keyConcurrency!.unexplained.length, 0)
  assert.equal(r.flow!.concurrency!.maxWithinLease, 4)
  assert.equal(r.flow!.concurrency!.unexplained.length, 0)
  assert.equal(r.flow!.keys, 2)
})

check("flow: a run still being interrupted after the reaper gave its lease back, overlapping the next holder of the key: explained", () => {
  // n=0 on a: lease reaped at 1,000 (presence lost), interrupted at 1,100, returned at 1,300; n=2 claimed at 1,050 on c.
  const cut = row(0, "a", 10, 1_100, "interrupted")
  const r = analyze({
    ...base,
    sent: 3,
    ledger: [cut, row(1, "b", 20, 2_000), row(2, "c", 1_060, 1_500), row(0, "d", 1_600, 1_650)],
    journal: interrupted(cut, 1_100, 1_300),
    flow: flowInput({ keyConcurrency: 2 }, [
      lease(0, "a", 5, 1_000), lease(1, "b", 15, 2_010), lease(2, "c", 1_050, 1_510), lease(0, "d", 1_550, 1_660, { attempt: 2 })
    ])
  })
  const c = r.flow!.keyConcurrency!
  assert.equal(c.maxObserved, 3)
  assert.equal(c.maxWithinLease, 2)
  assert.equal(c.explained.length, 1)
  assert.equal(c.unexplained.length, 0)
  assert.equal(r.flow!.keyLeases!.over.length, 0)
  assert.equal(r.flow!.redeliveryClaims, 1)
})

check("flow: the interrupted run ends at its interrupt-returned line, not at the bound: a start after it is no excess", () => {
  const cut = row(0, "a", 10, 1_100, "interrupted")
  const r = analyze({
    ...base,
    sent: 3,
    ledger: [cut, row(1, "b", 20, 3_000), row(2, "c", 1_400, 1_500)],
    journal: interrupted(cut, 1_100, 1_200),
    flow: flowInput({ keyConcurrency: 2 }, [lease(0, "a", 5, 1_000), lease(1, "b", 15, 3_010), lease(2, "c", 1_350, 1_510)])
  })
  assert.equal(r.flow!.keyConcurrency!.maxObserved, 2)
  assert.equal(r.flow!.keyConcurrency!.explained.length, 0)
})

check("flow: a run past its lease that was not interrupted (ran on to its end) over the limit: unexplained", () => {
  const r = analyze({
    ...base,
    sent: 3,
    ledger: [row(0, "a", 10, 1_500), row(1, "b", 20, 2_000), row(2, "c", 1_060, 1_400)],
    flow: flowInput({ keyConcurrency: 2 }, [lease(0, "a", 5, 1_000), lease(1, "b", 15, 2_010), lease(2, "c", 1_050, 1_410)])
  })
  assert.equal(r.flow!.keyConcurrency!.unexplained.length, 1)
  assert.equal(r.flow!.keyConcurrency!.explained.length, 0)
})

check("flow: a SIGKILLed run ends at the kill; its lease, held until reaped, still counts in the leases", () => {
  // a killed at 100 (lease reaped at 2,000); b and c claimed after the reap: within on both counts.
  const ok = analyze({
    ...base,
    sent: 4,
    ledger: [row(0, "a", 10, null), row(1, "b", 20, 3_000), row(2, "c", 2_100, 2_500), row(0, "d", 2_600, 2_700)],
    kills: [{ consumer: "a", pid: 1, at: 100 }],
    flow: flowInput({ keyConcurrency: 2 }, [lease(0, "a", 5, 2_000), lease(1, "b", 15, 3_010), lease(2, "c", 2_050, 2_510), lease(0, "d", 2_550, 2_710, { attempt: 2 })])
  })
  assert.equal(ok.flow!.keyConcurrency!.unexplained.length, 0)
  assert.equal(ok.flow!.keyLeases!.over.length, 0)
  // c claimed while the killed holder's lease was still live: the executions are within (a is gone), the leases are not.
  const over = analyze({
    ...base,
    sent: 3,
    ledger: [row(0, "a", 10, null), row(1, "b", 20, 3_000), row(2, "c", 500, 800)],
    kills: [{ consumer: "a", pid: 1, at: 100 }],
    flow: flowInput({ keyConcurrency: 2 }, [lease(0, "a", 5, 2_000), lease(1, "b", 15, 3_010), lease(2, "c", 450, 810)])
  })
  assert.equal(over.flow!.keyConcurrency!.unexplained.length, 0)
  assert.equal(over.flow!.keyLeases!.over.length, 1)
})

check("flow: an expired lease is a free slot from its expiry, even if the write that ended it came later", () => {
  const r = analyze({
    ...base,
    sent: 3,
    ledger: [row(1, "b", 20, 9_000), row(2, "c", 3_100, 3_200)],
    flow: flowInput({ keyConcurrency: 2 }, [lease(0, "a", 5, 6_000, { expires: 3_005 }), lease(1, "b", 15, 9_010), lease(2, "c", 3_050, 3_210)])
  })
  assert.equal(r.flow!.keyLeases!.over.length, 0)
})

check("flow: sliding windows (t - period, t]: count starts are within, one more is caught, the window's edge is outside", () => {
  assert.equal(windowCounts([0, 100, 200, 300, 999], 1_000, 5).over.length, 0)
  assert.equal(windowCounts([0, 100, 200, 300, 999], 1_000, 5).max, 5)
  const over = windowCounts([0, 100, 200, 300, 400, 999], 1_000, 5)
  assert.equal(over.max, 6)
  assert.equal(over.over.length, 1)
  // a start exactly one period after another is in a window of its own
  assert.equal(windowCounts([0, 1_000, 2_000, 3_000], 1_000, 1).over.length, 0)
  // starts of one claim statement share a time: all in the window
  assert.equal(windowCounts([0, 500, 500, 500], 1_000, 3).max, 4)
})

check("flow: the queue rate is judged on the claims' recorded leased_at, redeliveries included; a key rate per key", () => {
  const leases = [0, 1, 2].map((n) => lease(n, "a", 100 + n * 10, 200 + n * 10, { key: "x" }))
  const redelivery = lease(0, "b", 400, 450, { key: "x", attempt: 2 })
  const r = analyze({
    ...base,
    sent: 4,
    ledger: [row(0, "a", 105, 150), row(1, "a", 115, 160), row(2, "a", 125, 170), row(0, "b", 405, 440), row(3, "c", 2_000, 2_100)],
    flow: flowInput({ rate: { count: 3, periodMs: 1_000 }, keyRate: { count: 3, periodMs: 1_000 } }, [...leases, redelivery, lease(3, "c", 1_990, 2_110, { key: "y" })], (n) => (n === 3 ? "y" : "x"))
  })
  assert.equal(r.flow!.rate!.maxRecorded, 4)
  assert.equal(r.flow!.rate!.over.length, 1)
  assert.equal(r.flow!.keyRate!.over.length, 1)
  assert.equal(r.flow!.keyRate!.over[0]!.scope, "x")
  // judged on leased_at: a claim that waited for the lock is recorded at its transaction's start
  const late = analyze({
    ...base,
    sent: 3,
    ledger: [],
    flow: flowInput({ rate: { count: 2, periodMs: 1_000 } }, [lease(0, "a", 150, 200, { leased: 50 }), lease(1, "a", 1_100, 1_200), lease(2, "a", 1_120, 1_300)])
  })
  assert.equal(late.flow!.rate!.over.length, 0)
  assert.equal(late.flow!.rate!.maxClock, 3)
})

check("flow: an execution with no lease of its worker recorded is counted as unmatched", () => {
  const r = analyze({ ...base, sent: 1, ledger: [row(0, "a", 10, 20)], flow: flowInput({ keyConcurrency: 2 }, [lease(0, "b", 5, 30)]) })
  assert.equal(r.flow!.unmatched.length, 1)
})

check("flow: a lease claimed within the ledger start's millisecond matches (the ledger's start is a whole ms)", () => {
  const r = analyze({ ...base, sent: 1, ledger: [row(0, "a", 10, 20)], flow: flowInput({ keyConcurrency: 2 }, [lease(0, "a", 10.6, 30)]) })
  assert.equal(r.flow!.unmatched.length, 0)
})

// ---- the commit step (run.ts --commit) ------------------------------------------------------

/** Message 2k is tx, 2k+1 plain (as run.ts sends them). */
const commitTask = (n: number): "tx" | "plain" => (n % 2 === 0 ? "tx" : "plain")
const counters = (values: ReadonlyArray<number>): Array<CounterRow> => values.map((n, key) => ({ key, task: commitTask(key), n }))
const commitInput = (values: ReadonlyArray<number>) => ({ counters: counters(values), taskOf: commitTask })
/** A journal line of the run `r` (its ledger row). */
const journaled = (r: LedgerRow, ev: JournalEvent["ev"], at: number): JournalEvent => ({
  ev, exec: r.exec_id, id: r.message_id, n: r.n, attempt: r.attempt, consumer: r.consumer, pid: 1, task: commitTask(r.n), startedMs: r.started_ms, at
})
const PREVENTED = "double run prevented: the commit found the lease gone; its writes were rolled back (message 1000)"
const LEASE_LOST = "lease lost: renewal did not return 1000; another consumer holds or finished them (double run)"
const violationsOf = (r: ReturnType<typeof analyze>, full = true) => commitViolations(r.commit!, { requirePlainDuplicates: full })

check("commit: a clean run, every tx and plain counter at 1, one plain duplicate: no violation", () => {
  const r = analyze({ ...base, sent: 4, ledger: [row(0, "a", 0, 10), row(1, "a", 0, 10), row(2, "b", 5, 20), row(3, "b", 5, 20)], commit: commitInput([1, 1, 1, 2]) })
  assert.equal(r.commit!.tx.exactlyOne, 2)
  assert.equal(r.commit!.tx.counters, 2)
  assert.deepEqual(violationsOf(r), [])
})

check("commit: a tx counter of 2 is a double effect: fails", () => {
  const r = analyze({ ...base, sent: 4, ledger: [], commit: commitInput([2, 2, 1, 1]) })
  assert.deepEqual(r.commit!.tx.over, [{ key: 0, n: 2 }])
  const v = violationsOf(r)
  assert.equal(v.length, 1)
  assert.match(v[0]!, /tx counters above 1: a double effect/)
})

check("commit: a tx counter at 0 is a lost effect: fails; a plain one at 0 too", () => {
  const r = analyze({ ...base, sent: 4, ledger: [], commit: commitInput([0, 1, 1, 0]) })
  assert.deepEqual(r.commit!.tx.zero, [0])
  assert.deepEqual(r.commit!.plain.zero, [3])
  const v = violationsOf(r, false)
  assert.equal(v.length, 2)
  assert.match(v[0]!, /tx counters at 0/)
  assert.match(v[1]!, /plain counters at 0/)
})

check("commit: plain duplicates are counted (extra increments); none fails the full run only (the check proved nothing)", () => {
  const dup = analyze({ ...base, sent: 6, ledger: [], commit: commitInput([1, 3, 1, 2, 1, 1]) })
  assert.deepEqual(dup.commit!.plain.over, [{ key: 1, n: 3 }, { key: 3, n: 2 }])
  assert.equal(dup.commit!.plain.extra, 3)
  assert.deepEqual(violationsOf(dup), [])
  const none = analyze({ ...base, sent: 2, ledger: [], commit: commitInput([1, 1]) })
  assert.match(violationsOf(none, true)[0]!, /no plain counter above 1/)
  assert.deepEqual(violationsOf(none, false), [])
})

check("commit: a message without its counter row (or a row of the other task) fails", () => {
  const r = analyze({ ...base, sent: 3, ledger: [], commit: { counters: [{ key: 0, task: "tx", n: 1 }, { key: 1, task: "tx", n: 1 }], taskOf: commitTask } })
  assert.deepEqual(r.commit!.missing, [1, 2])
  assert.match(violationsOf(r, false)[0]!, /without their counter row/)
})

check("commit: a stale run (lease lost logged, ran on) refused by the fence, the message reclaimed: explained overlap, duplicate and refusal", () => {
  const stale = row(0, "a", 0, 4_500)
  const next = row(0, "b", 3_200, 3_300)
  const r = analyze({
    ...base,
    sent: 2,
    ledger: [stale, next, row(1, "c", 0, 10)],
    journal: [journaled(stale, "commit-fenced", 4_510)],
    logEvents: [logLine("lease-lost", "a", 4_400, 0, LEASE_LOST), logLine("double-run-prevented", "a", 4_505, 0, PREVENTED)],
    commit: commitInput([1, 2])
  })
  assert.equal(r.overlaps.length, 0)
  assert.equal(r.staleOverlaps.length, 1)
  assert.equal(r.duplicatesByCause["stale-past-lease"], 1)
  assert.equal(r.duplicatesByCause["after-completion"], 0)
  assert.equal(r.commit!.fenced.length, 1)
  assert.equal(r.commit!.fenced[0]!.explained, true)
  assert.equal(r.commit!.fenced[0]!.reclaimedBy, r.duplicates[0]!.next)
  assert.deepEqual(violationsOf(r), [])
})

check("commit: the same without the lease-lost line: an overlap with both holders alive, a double run after completion", () => {
  const r = analyze({ ...base, sent: 1, ledger: [row(0, "a", 0, 4_500), row(0, "b", 3_200, 3_300)], commit: commitInput([1]) })
  assert.equal(r.overlaps.length, 1)
  assert.equal(r.staleOverlaps.length, 0)
  assert.equal(r.duplicatesByCause["after-completion"], 1)
})

check("commit: a commit refused by the fence with no later run of its message: unmatched, fails", () => {
  const only = row(0, "a", 0, 100)
  const r = analyze({
    ...base,
    sent: 2,
    ledger: [only, row(1, "a", 0, 100)],
    journal: [journaled(only, "commit-fenced", 105)],
    logEvents: [logLine("double-run-prevented", "a", 102, 0, PREVENTED)],
    commit: commitInput([1, 2])
  })
  assert.equal(r.commit!.fenced[0]!.explained, false)
  assert.match(violationsOf(r)[0]!, /matched to no reclaim/)
})

check("commit: a refusal logged but not seen by a handler (or the reverse): the checker missed some, fails", () => {
  const stale = row(0, "a", 0, 4_500)
  const r = analyze({
    ...base,
    sent: 2,
    ledger: [stale, row(0, "b", 3_200, 3_300), row(1, "c", 0, 10)],
    logEvents: [logLine("double-run-prevented", "a", 4_505, 0, PREVENTED)],
    commit: commitInput([1, 2])
  })
  assert.match(violationsOf(r)[0]!, /1 log lines, 0 seen by the handlers/)
})

check("commit: a worker blocked on purpose: its finished run whose ack was pending is stale; reclaimed by that same worker, its double run at ack is explained", () => {
  // Worker a: run 1 of message 0 done at 110 (ack pending), the event loop blocked 120..4,620 by another run (message 1);
  // a itself claims message 0 again at 4,640 (its lease ran out) and the stale ack then finds the lease gone.
  const done = row(0, "a", 100, 110)
  const blocker = row(1, "a", 120, 4_700)
  const again = row(0, "a", 4_640, 4_650)
  const r = analyze({
    ...base,
    sent: 2,
    ledger: [done, blocker, again],
    journal: [journaled(blocker, "blocked", 4_620)],
    logEvents: [logLine("double-run-at-ack", "a", 4_645, 0, DOUBLE_RUN)],
    commit: commitInput([1, 2])
  })
  assert.equal(r.unexplainedLogs["double-run-at-ack"], 0)
  assert.equal(r.explainedLogs["double-run-at-ack"], 1)
  assert.equal(r.duplicatesByCause["stale-past-lease"], 1)
  assert.equal(r.commit!.staleByBlock >= 1, true)
  assert.equal(r.commit!.blocks, 1)
})

check("commit: a commit step that failed otherwise (effect-failed) is a failed handler: its rerun is explained", () => {
  const first = row(0, "a", 0, 100)
  const r = analyze({
    ...base,
    sent: 1,
    ledger: [first, row(0, "b", 3_500, 3_600)],
    journal: [{ ...journaled(first, "effect-failed", 120), error: "ConnectionDead: commit: Connection closed" }],
    commit: commitInput([1])
  })
  assert.equal(r.duplicatesByCause["handler-failed"], 1)
  assert.equal(r.commit!.commitFailures, 1)
  assert.deepEqual(violationsOf(r, false), [])
})

check("commit: a run started just after its worker's block (claimed during it) is stale; one started 1.5 s after is not", () => {
  const blocker = row(1, "a", 100, 4_700)
  const justAfter = row(0, "a", 4_650, 4_700)
  const next = row(0, "b", 7_000, 7_100)
  const r = analyze({
    ...base,
    sent: 4,
    ledger: [blocker, justAfter, next, row(2, "a", 6_200, 6_300), row(2, "c", 9_000, 9_100)],
    journal: [journaled(blocker, "blocked", 4_600)],
    logEvents: [logLine("double-run-at-ack", "a", 7_200, 0, DOUBLE_RUN), logLine("double-run-at-ack", "a", 9_200, 2, DOUBLE_RUN)],
    commit: commitInput([1, 2, 2, 0])
  })
  assert.equal(r.explainedLogs["double-run-at-ack"], 1)
  assert.equal(r.unexplainedLogs["double-run-at-ack"], 1)
  assert.equal(r.logs.find((x) => !x.explained)!.event.messageIds[0], "1002")
})

check("commit: a claim read after its worker's block starts its handler after the reclaim's run (as seen): claim order, stale, explained", () => {
  // As in a short run (f8ae080): worker a claimed message 0 at 16.5 s (attempt 1) and blocked until 21.0 s; b reclaimed it
  // at 19.5 s (attempt 2), ran and acked it; a's handler of attempt 1 started at 21.05 s, its commit refused, its ack gone.
  const blocker = row(1, "a", 16_500, 21_100)
  const reclaim = { ...row(0, "b", 19_540, 19_561), attempt: 2 }
  const stale = row(0, "a", 21_046, 21_064)
  const r = analyze({
    ...base,
    sent: 2,
    ledger: [blocker, reclaim, stale],
    journal: [journaled(blocker, "blocked", 21_037), journaled(stale, "commit-fenced", 21_085)],
    logEvents: [logLine("double-run-prevented", "a", 21_082, 0, PREVENTED)],
    commit: commitInput([1, 2])
  })
  assert.equal(r.overlaps.length, 0)
  assert.equal(r.duplicates.length, 1)
  assert.equal(r.duplicates[0]!.previous.consumer, "a")
  assert.equal(r.duplicatesByCause["stale-past-lease"], 1)
  assert.equal(r.commit!.fenced[0]!.explained, true)
  assert.equal(r.commit!.fenced[0]!.reclaimedBy!.consumer, "b")
  assert.deepEqual(violationsOf(r), [])
  // Without the block it is a double run after completion (attempt 2 completed, then attempt 1 ran).
  const plain = analyze({ ...base, sent: 1, ledger: [{ ...row(0, "b", 19_540, 19_561), attempt: 2 }, row(0, "a", 21_046, 21_064)] })
  assert.equal(plain.duplicatesByCause["after-completion"] + plain.duplicatesByCause.unexplained, 1)
})

let failed = 0
for (const [name, f] of cases) {
  try {
    f()
    if (process.env["CHAOS_SELFCHECK_VERBOSE"] === "1") console.log(`ok    ${name}`)
  } catch (error) {
    failed++
    console.log(`FAIL  ${name}\n      ${error instanceof Error ? error.message.split("\n").join("\n      ") : String(error)}`)
  }
}
console.log(`chaos checker self-check: ${failed === 0 ? "all" : `${failed} of`} ${cases.length} cases ${failed === 0 ? "passed" : "FAILED"}`)
process.exit(failed === 0 ? 0 : 1)
