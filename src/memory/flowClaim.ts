/**
 * The claim of a queue with flow limits in the memory store, by the SQL store's rules
 * (pg/flowClaim.ts, docs/flow-control.md): the live slots counted, the candidates within every
 * limit (per key, then per task, then per queue; concurrency and rate windows; FIFO heads; fair
 * turns), a suspect claimed alone; then the rate windows and the served turn written.
 *
 * @since 0.4.0
 */
import type { FlowLimits, Rate } from "../FlowControl.ts"
import type { FlowLimitStage } from "../QueueMetrics.ts"
import { keyConcurrencyOf } from "../FlowControl.ts"
import { heads, inWindow, slots } from "./flow.ts"
import { flowBucket, live, type MemoryState, type Row } from "./state.ts"

const byId = (a: Row, b: Row) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)

/** Claim order: priority, then visibility and id; a fair queue's turn after the priority. */
const orderOf = (fair: boolean) => (a: Row, b: Row) =>
  a.priority - b.priority || (fair ? a.turn - b.turn : 0) || a.visibleAt - b.visibleAt || byId(a, b)

/** A queue's limits as the claim reads them: its own, and its tasks'. */
interface Limits {
  readonly own: FlowLimits
  readonly tasks: ReadonlyMap<string, FlowLimits>
}

const limitsOf = (state: MemoryState, queue: string): Limits => {
  const rows = state.flow.limits.get(queue) ?? new Map()
  const tasks = new Map<string, FlowLimits>()
  for (const [task, entry] of rows) if (task !== "") tasks.set(task, entry.limits)
  return { own: rows.get("")?.limits ?? {}, tasks }
}

/** Starts inside the window of `bucket` at `now` (0 without a rate). */
const used = (state: MemoryState, bucket: string, rate: Rate | null | undefined, now: number) =>
  rate == null ? 0 : inWindow(state.flow.rates.get(bucket), rate.periodMs, now).length

/** Count per name. */
const countBy = (rows: ReadonlyArray<Row>, by: (r: Row) => string | null) => {
  const counts = new Map<string, number>()
  for (const r of rows) {
    const name = by(r)
    if (name !== null) counts.set(name, (counts.get(name) ?? 0) + 1)
  }
  return counts
}

/** Whether `n` more fit under `max` with `taken` already taken (no limit: always). */
const fits = (n: number, taken: number, max: number | null | undefined) => max == null || n + taken <= max

/**
 * Of rows picked in claim order, those a claim leases: a suspect (its lease expired now or
 * before) first in line is claimed alone; otherwise the ones that are not suspects.
 */
export const suspectAlone = (picked: ReadonlyArray<Row>): ReadonlyArray<Row> => {
  const suspect = (r: Row) => r.leaseExpiries > 0 || r.leaseToken !== null
  return picked.length > 0 && suspect(picked[0]!) ? [picked[0]!] : picked.filter((r) => !suspect(r))
}

/**
 * What a limited claim picked: the cancelled candidates (to delete), the rows to lease in claim
 * order, and the stages that held a visible message back (for `QueueMetrics.claimsLimited`).
 */
export interface LimitedPick {
  readonly cancelled: ReadonlyArray<Row>
  readonly chosen: ReadonlyArray<Row>
  readonly heldBack: ReadonlySet<FlowLimitStage>
}

/**
 * Pick within every limit. The candidates are the visible rows whose key and task have a free
 * slot, under FIFO only a key's head; each is counted against its key (slots, window), then its
 * task, then the queue (the claim's own limit, slots, window), in claim order, so a candidate a
 * key turns away never takes a task's or the queue's room, and a key at its limit blocks no other.
 */
export const pickLimited = (state: MemoryState, queue: string, limit: number, now: number): LimitedPick => {
  const { own, tasks } = limitsOf(state, queue)
  const keyLimit = keyConcurrencyOf(own) ?? null
  const held = slots(state, queue, now)
  const heldKey = countBy(held, (r) => r.key)
  const heldTask = countBy(held, (r) => r.task)
  const fifoHeads = own.fifo === true ? heads(state, queue) : undefined
  const heldBack = new Set<FlowLimitStage>()
  const candidates = live(state, queue).filter((r) => {
    if (r.visibleAt > now || state.committing.has(r.id)) return false
    // As SQL: a full key or task is never a candidate (a FIFO key's later messages neither).
    if (r.key !== null && !fits(1, heldKey.get(r.key) ?? 0, keyLimit)) {
      heldBack.add("key")
      return false
    }
    if (!fits(1, heldTask.get(r.task) ?? 0, tasks.get(r.task)?.concurrency)) {
      heldBack.add("task")
      return false
    }
    return fifoHeads === undefined || r.key === null || fifoHeads.get(r.key) === r
  })
  const cancelled = candidates.filter((r) => r.cancelRequestedAt !== null)
  const ordered = candidates.filter((r) => r.cancelRequestedAt === null).sort(orderOf(own.fair === true))
  const kn = new Map<string, number>()
  const tn = new Map<string, number>()
  const queueUsed = used(state, flowBucket(queue, "", ""), own.rate, now)
  const picked: Array<Row> = []
  for (const r of ordered) {
    if (r.key !== null) {
      const n = (kn.get(r.key) ?? 0) + 1
      kn.set(r.key, n)
      const keyUsed = used(state, flowBucket(queue, "", r.key), own.keyRate, now)
      if (!fits(n, heldKey.get(r.key) ?? 0, keyLimit) || !fits(n, keyUsed, own.keyRate?.count)) {
        heldBack.add("key")
        continue
      }
    }
    const task = tasks.get(r.task)
    const n = (tn.get(r.task) ?? 0) + 1
    tn.set(r.task, n)
    const taskUsed = used(state, flowBucket(queue, r.task, ""), task?.rate, now)
    if (!fits(n, heldTask.get(r.task) ?? 0, task?.concurrency) || !fits(n, taskUsed, task?.rate?.count)) {
      heldBack.add("task")
      continue
    }
    const qn = picked.length + 1
    if (qn > limit) break
    if (!fits(qn, held.length, own.concurrency) || !fits(qn, queueUsed, own.rate?.count)) {
      heldBack.add("queue")
      break
    }
    picked.push(r)
  }
  const chosen = suspectAlone(picked)
  return { cancelled, chosen, heldBack: chosen.length < limit ? heldBack : new Set() }
}

/** Add `n` starts at `now` to the window of `bucket`, dropping the starts that left it. */
const addStarts = (state: MemoryState, bucket: string, rate: Rate, n: number, now: number) => {
  if (n === 0) return
  state.flow.rates.set(bucket, [...inWindow(state.flow.rates.get(bucket), rate.periodMs, now), ...Array<number>(n).fill(now)])
}

/**
 * After a limited claim leased `claimed`: one start per claim in each rate window it counts
 * against (the queue's, its task's, its key's), and a fair queue's served turn moved up to the
 * highest turn claimed (a key back from idling starts there, not ahead).
 */
export const recordClaims = (state: MemoryState, queue: string, claimed: ReadonlyArray<Row>, now: number) => {
  const { own, tasks } = limitsOf(state, queue)
  if (own.rate != null) addStarts(state, flowBucket(queue, "", ""), own.rate, claimed.length, now)
  for (const [task, n] of countBy(claimed, (r) => r.task)) {
    const rate = tasks.get(task)?.rate
    if (rate != null) addStarts(state, flowBucket(queue, task, ""), rate, n, now)
  }
  if (own.keyRate != null) {
    for (const [key, n] of countBy(claimed, (r) => r.key)) addStarts(state, flowBucket(queue, "", key), own.keyRate, n, now)
  }
  const keyed = claimed.filter((r) => r.key !== null)
  if (own.fair === true && keyed.length > 0) {
    const top = Math.max(...keyed.map((r) => r.turn))
    if (top > (state.flow.servedTurn.get(queue) ?? 0)) state.flow.servedTurn.set(queue, top)
  }
}
