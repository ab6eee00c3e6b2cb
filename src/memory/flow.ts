/**
 * Flow control in the memory store: the limits, key weights and flow status, by the SQL
 * store's rules (docs/flow-control.md). The limited claim itself is `memory/flowClaim.ts`.
 *
 * @since 0.4.0
 */
import { Clock, Effect } from "effect"
import type { BlockedKey, FlowLimits, KeyAtLimit, StoredLimits, Throttle } from "../FlowControl.ts"
import { keyConcurrencyOf } from "../FlowControl.ts"
import type { QueueStoreShape } from "../QueueStore.ts"
import { flowBucket, live, type MemoryState, type Row, wake } from "./state.ts"

/** Text order, as the listings sort. */
const byText = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0)

/**
 * `setLimits`: write (or clear, for none) the row of a queue or task. A code declaration does
 * not overwrite an operator's row (answers `false`); a write wakes the queue's idle consumers.
 */
export const setLimits = (state: MemoryState): QueueStoreShape["setLimits"] => (target, limits, options) =>
  Effect.map(Clock.currentTimeMillis, (now) => {
    const task = target.task ?? ""
    const source = options?.source ?? "operator"
    const rows = state.flow.limits.get(target.queue) ?? new Map()
    if (limits === null) {
      rows.delete(task)
      // The served turn lives in the queue's own row: cleared with it.
      if (task === "") state.flow.servedTurn.delete(target.queue)
    } else {
      if (source === "code" && rows.get(task)?.source === "operator") return false
      rows.set(task, { limits: structuredClone(limits), source, updatedAt: now })
    }
    if (rows.size === 0) state.flow.limits.delete(target.queue)
    else state.flow.limits.set(target.queue, rows)
    wake(state, target.queue)
    return true
  })

/** The stored limits of `queue`, its own row first, then its tasks'. */
const storedOf = (state: MemoryState, queue: string): Array<StoredLimits> =>
  [...(state.flow.limits.get(queue) ?? new Map()).entries()]
    .sort(([a], [b]) => byText(a, b))
    .map(([task, entry]) => ({
      queue,
      task: task === "" ? null : task,
      limits: structuredClone(entry.limits),
      source: entry.source,
      updatedAt: new Date(entry.updatedAt)
    }))

/** `limits`: by queue, then task (the queue's own first). */
export const limits = (state: MemoryState): QueueStoreShape["limits"] => (queue) =>
  Effect.sync(() =>
    (queue === undefined ? [...state.flow.limits.keys()].sort(byText) : [queue]).flatMap((q) => storedOf(state, q))
  )

/** `setKeyWeight`: the key's weight, for the turns of messages sent from now on. */
export const setKeyWeight = (state: MemoryState): QueueStoreShape["setKeyWeight"] => (queue, key, weight) =>
  Effect.sync(() => {
    const bucket = flowBucket(queue, "", key)
    state.flow.keys.set(bucket, { nextTurn: state.flow.keys.get(bucket)?.nextTurn ?? 0, weight })
  })

/** The rate limit that times a window: the key rate for key windows, else its row's rate. */
const rateOf = (state: MemoryState, queue: string, task: string, key: string) => {
  const own = state.flow.limits.get(queue)
  return key !== "" ? own?.get("")?.limits.keyRate : own?.get(task)?.limits.rate
}

/** The starts of a window still inside it at `now`. */
export const inWindow = (starts: ReadonlyArray<number> | undefined, periodMs: number, now: number) =>
  (starts ?? []).filter((s) => s > now - periodMs)

/**
 * The full rate windows of `queue` and when each frees a start (its oldest start inside the
 * window, plus the period), soonest first: what `nextVisibleAt` and `flowStatus` read.
 */
export const fullWindows = (state: MemoryState, queue: string, now: number): Array<Throttle> => {
  const prefix = flowBucket(queue, "", "").slice(0, queue.length + 1)
  const out: Array<Throttle> = []
  for (const [bucket, starts] of state.flow.rates) {
    if (!bucket.startsWith(prefix)) continue
    const [task, key] = bucket.slice(prefix.length).split("\u0000") as [string, string]
    const rate = rateOf(state, queue, task, key)
    if (rate == null) continue
    const used = inWindow(starts, rate.periodMs, now)
    if (used.length < rate.count) continue
    out.push({ task: task === "" ? null : task, key: key === "" ? null : key, nextAt: new Date(Math.min(...used) + rate.periodMs) })
  }
  return out.sort((a, b) => a.nextAt.getTime() - b.nextAt.getTime())
}

/** The live leases of `queue` at `now` claimed under limits: the slots. */
export const slots = (state: MemoryState, queue: string, now: number): Array<Row> =>
  live(state, queue).filter((r) => r.leaseToken !== null && r.flowLimited && r.visibleAt > now)

/** Keys whose slots are all taken under `limits`, the fullest first. */
const keysAtLimit = (state: MemoryState, queue: string, limits: FlowLimits | undefined, now: number): Array<KeyAtLimit> => {
  const limit = limits === undefined ? undefined : keyConcurrencyOf(limits)
  if (limit === undefined) return []
  const counts = new Map<string, number>()
  for (const r of slots(state, queue, now)) if (r.key !== null) counts.set(r.key, (counts.get(r.key) ?? 0) + 1)
  return [...counts.entries()]
    .filter(([, n]) => n >= limit)
    .sort(([a, m], [b, n]) => n - m || byText(a, b))
    .map(([key, inFlight]) => ({ key, inFlight }))
}

/** Each key's head: its lowest-id ready message (leased or not). */
export const heads = (state: MemoryState, queue: string): Map<string, Row> => {
  const out = new Map<string, Row>()
  for (const r of live(state, queue)) {
    if (r.key === null) continue
    const head = out.get(r.key)
    if (head === undefined || r.id < head.id) out.set(r.key, r)
  }
  return out
}

/** FIFO keys whose head waits (not leased, not due yet), the soonest due first. */
const blockedKeys = (state: MemoryState, queue: string, now: number): Array<BlockedKey> =>
  [...heads(state, queue).values()]
    .filter((h) => h.leaseToken === null && h.visibleAt > now)
    .sort((a, b) => a.visibleAt - b.visibleAt || byText(a.key!, b.key!))
    .map((h) => ({ key: h.key!, headId: String(h.id), attempts: h.attempts, lastError: h.lastError, visibleAt: new Date(h.visibleAt) }))

/** `flowStatus`: what holds the queue back now, each list at most 100. */
export const flowStatus = (state: MemoryState): QueueStoreShape["flowStatus"] => (queue) =>
  Effect.map(Clock.currentTimeMillis, (now) => {
    const stored = storedOf(state, queue)
    const own = stored.find((s) => s.task === null)?.limits
    return {
      queue,
      limits: stored,
      inFlight: live(state, queue).filter((r) => r.leaseToken !== null && r.visibleAt > now).length,
      keysAtLimit: keysAtLimit(state, queue, own, now).slice(0, 100),
      blockedKeys: own?.fifo === true ? blockedKeys(state, queue, now).slice(0, 100) : [],
      throttles: fullWindows(state, queue, now).slice(0, 100)
    }
  })
