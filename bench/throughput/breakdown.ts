/**
 * Where one pickup's time goes (`BENCH_LATENCY_BREAKDOWN=1 npm run bench:own`): the producer
 * prints each send's start and the moment its commit was acknowledged, the leasehold worker the
 * span of each claim statement that took messages (a tracer on `leasehold.claim`), and the handler
 * its start with the message's send time. Joined by the send time, each pickup splits into
 * send (the producer's `send`, its commit's flush included), wake (commit acknowledged to the claim
 * that took the message being sent: NOTIFY delivery, the claim loop's wake-up; negative when the
 * worker heard the NOTIFY before the producer heard its commit), claim (the claim statement, as its
 * span measures it) and dispatch (the claim's answer to the handler's start). All times are wall
 * clock ms, `performance.timeOrigin + performance.now()`, comparable across processes on one machine.
 */
import { percentile } from "../chaos/lib.ts"

/** A send as the producer saw it: when it began (the payload's `sentAt`) and when its commit was acknowledged. */
export interface SendTiming {
  readonly sentAt: number
  readonly ackedAt: number
}

/** A claim statement that took messages, as its span saw it. */
export interface ClaimTiming {
  readonly startAt: number
  readonly endAt: number
}

/** A handler's start, with its message's send time. */
export interface StartTiming {
  readonly sentAt: number
  readonly startAt: number
}

/** One pickup split into its segments (ms). */
export interface Pickup {
  readonly total: number
  readonly send: number
  readonly wake: number
  readonly claim: number
  readonly dispatch: number
}

/** The segments in the order a pickup passes them, with their labels. */
export const segments = [
  ["total", "total (handler start - send start)"],
  ["send", "send (the producer's send, to its commit acknowledged)"],
  ["wake", "wake (commit acknowledged -> the claim that took it sent)"],
  ["claim", "claim (the claim statement's span)"],
  ["dispatch", "dispatch (claim answered -> handler start)"]
] as const

/**
 * Split each handler start into its segments: its send by send time, its claim the last claim
 * statement that answered before the handler started and began after the send did. Starts
 * whose send or claim is missing are left out.
 */
export const pickups = (
  sends: ReadonlyArray<SendTiming>,
  claims: ReadonlyArray<ClaimTiming>,
  starts: ReadonlyArray<StartTiming>
): ReadonlyArray<Pickup> => {
  const ackedAt = new Map(sends.map((s) => [s.sentAt, s.ackedAt]))
  const byEnd = [...claims].sort((a, b) => a.endAt - b.endAt)
  const out: Array<Pickup> = []
  for (const start of starts) {
    const acked = ackedAt.get(start.sentAt)
    let claim: ClaimTiming | undefined
    for (const c of byEnd) {
      if (c.endAt > start.startAt) break
      if (c.endAt >= start.sentAt) claim = c
    }
    if (acked === undefined || claim === undefined) continue
    out.push({
      total: start.startAt - start.sentAt,
      send: acked - start.sentAt,
      wake: claim.startAt - acked,
      claim: claim.endAt - claim.startAt,
      dispatch: start.startAt - claim.endAt
    })
  }
  return out
}

/** Rows of p50, p95, p99 and max per segment (ms, two decimals). */
export const breakdownRows = (all: ReadonlyArray<Pickup>): Array<Array<string>> =>
  segments.map(([key, label]) => {
    const values = all.map((p) => p[key])
    const at = (q: number) => percentile(values, q)?.toFixed(2) ?? "-"
    return [label, at(50), at(95), at(99), at(100)]
  })
