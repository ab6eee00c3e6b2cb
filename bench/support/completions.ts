/**
 * The ack of a claimed message as the consumer hands it to `QueueStore.complete`, for the
 * benchmarks that drive a store's claim and ack cycle by hand (bench:statements, bench:flow,
 * bench:isolated).
 */
import type { Claim } from "../../src/Message.ts"
import type { Completion } from "../../src/QueueStore.ts"

/** The ack of `claim` by `consumer`, started now, with its history record's outcome. */
export const ackOf = (claim: Claim, consumer = "bench"): Completion => ({
  ref: { id: claim.id, leaseToken: claim.leaseToken },
  finish: { _tag: "Ack" },
  queue: claim.queue,
  task: claim.task,
  attempt: claim.attempts,
  consumer,
  startedAt: new Date(),
  outcome: "acked",
  error: null
})
