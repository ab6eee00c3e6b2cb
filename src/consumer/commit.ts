/**
 * The commit step of a run (`HandlerContext.commit`): the handler's writes and the message's
 * fenced ack in one transaction of the store (`QueueStore.completeWith`). The renewer lets go of
 * the message first (interrupted and awaited when it was the claim's last, as before every ack),
 * so no renewal races the commit; the step is bounded by the lease the message had left, since it
 * holds the message locked. A commit that finds the lease gone is a double run prevented: counted,
 * logged, and the run then writes nothing more (another consumer holds the message).
 *
 * @since 0.5.0
 */
import { Clock, Effect, Exit, Metric } from "effect"
import type { Claim } from "../Message.ts"
import { CommitFenced, type InvalidInput, type StoreError } from "../QueueError.ts"
import * as QueueMetrics from "../QueueMetrics.ts"
import type { QueueStoreShape } from "../QueueStore.ts"
import { completionOf } from "./complete.ts"
import type * as LeaseRenewer from "./renew.ts"

/** Where a run's commit step stands: none yet, running, committed, refused by the fence. */
export type CommitState = "none" | "running" | "committed" | "fenced"

/** The run a commit step belongs to: what it reads, and the state it moves on. */
export interface Committing {
  readonly claim: Claim
  readonly renewer: LeaseRenewer.LeaseRenewer
  /** Clock time the handler started (the history record's start). */
  readonly startedAt: number
  commit: CommitState
}

const ACK = { _tag: "Ack" } as const

/** The shortest bound of a commit step, when the lease left is less. */
const MIN_COMMIT_MS = 1_000

const refused = (claim: Claim, reason: CommitFenced["reason"], message: string) =>
  new CommitFenced({ messageId: claim.id, reason, message })

/** A commit step that committed: the run writes nothing more; counted as a commit and an ack. */
const committed = (run: Committing): Effect.Effect<void> => {
  run.commit = "committed"
  const { queue, task } = run.claim
  return Effect.andThen(
    Effect.andThen(Metric.update(QueueMetrics.commits, 1), Metric.update(QueueMetrics.acked, 1)),
    Metric.update(QueueMetrics.forTask(queue, task).acked, 1)
  )
}

/** A commit step that failed: refused by the fence (a double run prevented), or free to be tried again. */
const failed = (run: Committing, error: unknown): Effect.Effect<void> => {
  if (error instanceof CommitFenced && error.reason === "lease-lost") {
    run.commit = "fenced"
    return Effect.andThen(
      Metric.update(QueueMetrics.doubleRunsPrevented, 1),
      Effect.logWarning(`double run prevented: the commit found the lease gone; its writes were rolled back (message ${run.claim.id})`)
    )
  }
  run.commit = "none"
  return Effect.void
}

/**
 * Make the commit step of one consumer: `commit(run, effect)` runs `effect` and the run's ack
 * in one transaction, at most once per run.
 */
export const make = (store: QueueStoreShape, consumerId: string) =>
<A, E, R>(run: Committing, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | CommitFenced | InvalidInput | StoreError, R> =>
  Effect.suspend(() => {
    const { claim, renewer } = run
    if (run.commit !== "none") {
      return Effect.fail(run.commit === "fenced"
        ? refused(claim, "lease-lost", `commit of message ${claim.id} refused: this run no longer holds it`)
        : refused(claim, "already-committed", `message ${claim.id}: this run has a commit step already (${run.commit}); a run commits once`))
    }
    run.commit = "running"
    return Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      const boundMs = Math.max(MIN_COMMIT_MS, renewer.expiresAt(claim.id) - now)
      yield* renewer.finish(claim.id)
      const value = yield* store.completeWith(completionOf({ claim, action: ACK, startedAt: run.startedAt, leaseEndsAt: now + boundMs }, consumerId), effect).pipe(
        Effect.timeoutOrElse({
          duration: boundMs,
          orElse: () => Effect.fail(refused(claim, "timed-out", `commit of message ${claim.id} ran past the ${boundMs} ms its lease had left; rolled back`))
        }),
        // On the step's own exit, so an interruption arriving just after the COMMIT still sees it committed.
        Effect.onExit((exit) => Exit.isSuccess(exit) ? committed(run) : Effect.void)
      )
      return value
    }).pipe(Effect.tapError((error) => failed(run, error)))
  })
