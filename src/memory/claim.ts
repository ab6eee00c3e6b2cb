/**
 * Claiming in the memory store, by the SQL store's rules: claim order, cancelled messages
 * deleted instead of run, a suspect claimed alone; within the flow limits of a queue that has them.
 *
 * @since 0.1.0
 */
import { Clock, Effect } from "effect"
import type { Claim } from "../Message.ts"
import * as QueueMetrics from "../QueueMetrics.ts"
import { defaults, historyErrors, type QueueStoreShape } from "../QueueStore.ts"
import * as FlowControl from "../FlowControl.ts"
import * as Validate from "../internal/validate.ts"
import { pushAttempt, unfinished } from "./history.ts"
import { pickLimited, recordClaims, suspectAlone } from "./flowClaim.ts"
import { hasLimits, live, type MemoryState, message, type Row } from "./state.ts"

/** Claim order: lowest priority number, then earliest visibility, then id. */
const claimOrder = (a: Row, b: Row) =>
  a.priority - b.priority || a.visibleAt - b.visibleAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)

/** Delete the cancelled ones of `picked` (their holders stopped before finishing them), recording it. */
const dropCancelled = (state: MemoryState, picked: ReadonlyArray<Row>, now: number) => {
  for (const row of picked.filter((r) => r.cancelRequestedAt !== null)) {
    state.rows.delete(row.id)
    pushAttempt(state, unfinished(row, now, "cancelled", historyErrors.cancelledUnfinished))
  }
}

/** The plain claim's pick: the first `limit` visible rows in claim order; a suspect alone. */
const pickPlain = (state: MemoryState, queue: string, limit: number, now: number): ReadonlyArray<Row> => {
  // As SQL: a pick of only cancelled messages (deleted below) picks again, never answering
  // nothing while ready messages wait behind them.
  const pick = () => live(state, queue).filter((r) => r.visibleAt <= now && !state.committing.has(r.id)).sort(claimOrder).slice(0, limit)
  let all = pick()
  while (all.length > 0 && all.every((r) => r.cancelRequestedAt !== null)) {
    dropCancelled(state, all, now)
    all = pick()
  }
  // Same rules as SQL: a message whose cancel was asked for while it ran, and whose holder
  // stopped before finishing it, is deleted (never run again); a suspect (lease expired now
  // or before) is claimed alone.
  dropCancelled(state, all, now)
  return suspectAlone(all.filter((r) => r.cancelRequestedAt === null))
}

/** The limited claim's pick (memory/flowClaim.ts), its cancelled candidates deleted, a short claim counted by the stages that cut it. */
const pickLimitedDropping = (state: MemoryState, queue: string, limit: number, now: number) =>
  Effect.gen(function*() {
    const { cancelled, chosen, heldBack } = pickLimited(state, queue, limit, now)
    dropCancelled(state, cancelled, now)
    yield* QueueMetrics.recordLimitedClaim(queue, [...heldBack])
    return chosen
  })

/**
 * `claim`: lease up to `limit` ready messages of a queue to a consumer; a queue with flow
 * limits is claimed within them (memory/flowClaim.ts).
 */
export const claim = (state: MemoryState): QueueStoreShape["claim"] => (queue, options) =>
  Effect.gen(function*() {
    yield* Validate.name("queue", queue)
    yield* Validate.name("consumer", options.consumer)
    const limit = yield* Validate.positiveInt("limit", options.limit, 10_000)
    const limitedLimit = yield* FlowControl.limitedClaimSize(options.ahead, limit)
    const leaseMs = yield* Validate.durationMs("lease", options.lease, { min: defaults.minLeaseMs })
    const now = yield* Clock.currentTimeMillis
    if (state.pauses.get(queue)?.paused === true) return []
    const limited = hasLimits(state, queue)
    // A limited queue is claimed for what can start now: nothing when all of it would be held ahead.
    const chosen = !limited
      ? pickPlain(state, queue, limit, now)
      : limitedLimit === 0
      ? []
      : yield* pickLimitedDropping(state, queue, limitedLimit, now)
    const claims = chosen.map((row): Claim => {
      if (row.leaseToken !== null) {
        row.leaseExpiries += 1
        state.history.push(unfinished(row, row.visibleAt, "lease-expired", historyErrors.leaseExpired))
      }
      const readyAt = row.visibleAt
      row.visibleAt = now + leaseMs
      row.attempts += 1
      row.leaseToken = crypto.randomUUID()
      row.leasedBy = options.consumer
      row.leasedAt = now
      // A lease claimed under limits is a slot (never renewed once expired); a plain one is not.
      row.flowLimited = limited
      return {
        ...message(row),
        leaseToken: row.leaseToken as Claim["leaseToken"],
        leaseExpiresAt: new Date(row.visibleAt),
        consumer: options.consumer,
        readyAt: new Date(readyAt)
      }
    })
    if (limited) recordClaims(state, queue, chosen, now)
    return claims
  })
