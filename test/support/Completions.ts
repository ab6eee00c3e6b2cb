/**
 * The finishing write of a claimed message that succeeded, as the consumer hands it to
 * `QueueStore.complete`: for tests that drive a store's claim and ack cycle by hand.
 */
import type { Claim } from "../../src/Message.ts"
import type { Completion } from "../../src/QueueStore.ts"

/** The ack of `claim` by `consumer`, started now, with its history record's outcome. */
export const ackOf = (claim: Claim, consumer = "c"): Completion => ({
  ref: claim,
  finish: { _tag: "Ack" },
  queue: claim.queue,
  task: claim.task,
  attempt: claim.attempts,
  consumer,
  startedAt: new Date(),
  outcome: "acked",
  error: null
})
