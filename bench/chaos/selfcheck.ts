/**
 * Checks of the checker: bench/chaos/analyze.ts on hand-made runs, so a
 * chaos PASS means something. No database needed:
 *
 *   node bench/chaos/selfcheck.ts
 *
 * `npm run chaos` and `npm run chaos:ci` run it first.
 */
import assert from "node:assert/strict"
import { analyze, type AnalysisInput, finishBound } from "./analyze.ts"
import type { JournalEvent, LedgerRow, LogEvent, LogKind } from "./lib.ts"

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
