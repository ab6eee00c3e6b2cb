/**
 * Checks of the checker: bench/chaos/analyze.ts on hand-made runs, so a
 * chaos PASS means something. No database needed:
 *
 *   node bench/chaos/selfcheck.ts
 *
 * `npm run chaos` and `npm run chaos:ci` run it first.
 */
import assert from "node:assert/strict"
import { analyze, type AnalysisInput } from "./analyze.ts"
import type { JournalEvent, LedgerRow } from "./lib.ts"

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

const base: AnalysisInput = { sent: 0, ledger: [], journal: [], remaining: [], kills: [] }
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
