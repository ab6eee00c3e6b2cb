/**
 * Checks of the workflow chaos run's write audit (bench/workflow/audit.ts) on hand-made logs, so its
 * PASS means something. No database needed (the run itself also probes the trigger on the database
 * before it starts, `Audit.probe`):
 *
 *   node bench/workflow/selfcheck.ts
 */
import assert from "node:assert/strict"
import { analyse, type Attempt, type AuditInput, type Recorded } from "./audit.ts"
import { activityValue } from "./chaosWorkflow.ts"

let seq = 0
const attempt = (activity: string, token: string, pid: number, existed = false, sameResult: boolean | null = null): Attempt => ({
  seq: ++seq,
  workflow: "Chaos",
  executionId: "e1",
  activity,
  attempt: 1,
  leaseToken: token,
  backendPid: pid,
  existed,
  sameResult
})
const recorded = (activity: string, value: unknown, success = true): Recorded => ({
  workflow: "Chaos",
  executionId: "e1",
  activity,
  attempt: 1,
  success,
  value
})
// Execution e1 has n = 3: a = 4, b0 = 0, b1 = 3, b2 = 6.
const run = (over: Partial<AuditInput>) =>
  analyse({
    recorded: [recorded("a", 4), recorded("b1", 3)],
    attempts: [attempt("a", "t1", 100), attempt("b1", "t2", 101)],
    expected: (r) => activityValue(3, r.activity),
    terminatedPids: new Set(),
    ...over
  })

// A clean run passes.
const clean = run({})
assert.ok(clean.ok)
assert.equal(clean.recordedOnce, 2)
assert.equal(clean.repeats.length, 0)

// A replay by a later claim that did not read the recorded result: unexplained.
const replay = run({ attempts: [attempt("a", "t1", 100), attempt("b1", "t2", 101), attempt("a", "t3", 102, true, true)] })
assert.ok(!replay.ok)
assert.equal(replay.unexplained, 1)
assert.equal(replay.recordedOnce, 1)

// The same claim retrying after its first write's backend was terminated, same result: explained.
const retry = { attempts: [attempt("a", "t1", 100), attempt("b1", "t2", 101), attempt("a", "t1", 103, true, true)] }
assert.ok(run({ ...retry, terminatedPids: new Set([100]) }).ok)
// ... but not if that backend was never terminated, nor with another result.
assert.equal(run(retry).unexplained, 1)
const otherResult = [attempt("a", "t1", 100), attempt("b1", "t2", 101), attempt("a", "t1", 103, true, false)]
assert.equal(run({ attempts: otherResult, terminatedPids: new Set([100]) }).unexplained, 1)

// Two writes racing (neither saw the other's row): still a repeat.
assert.equal(run({ attempts: [attempt("a", "t1", 100), attempt("a", "t4", 104), attempt("b1", "t2", 101)] }).unexplained, 1)

// A wrong value, a failure, an activity the workflow has not: each wrong.
assert.equal(run({ recorded: [recorded("a", 5), recorded("b1", 3)] }).wrong.length, 1)
assert.equal(run({ recorded: [recorded("a", 4), recorded("b1", { _tag: "Failure" }, false)] }).wrong.length, 1)
const stranger = run({ recorded: [recorded("a", 4), recorded("b1", 3), recorded("c", 1)], attempts: [attempt("a", "t1", 100), attempt("b1", "t2", 101), attempt("c", "t1", 100)] })
assert.equal(stranger.wrong.length, 1)
assert.ok(!stranger.ok)

// A recorded row the trigger never saw, and a logged write with no row: each fails.
assert.equal(run({ attempts: [attempt("a", "t1", 100)] }).unaudited, 1)
assert.ok(!run({ attempts: [attempt("a", "t1", 100)] }).ok)
assert.equal(run({ attempts: [attempt("a", "t1", 100), attempt("b1", "t2", 101), attempt("b2", "t2", 101)] }).orphans, 1)

console.log("bench/workflow selfcheck: the write audit passes a clean log and fails each hand-made fault")
