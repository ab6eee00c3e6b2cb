/**
 * Test conveniences: finish one claim, as a test wants to say it ("ack this", "dead-letter
 * that"). The store has one finishing operation, `complete` (the batch the consumer finishes
 * everything through); each helper here is one `complete` of one completion, so it writes
 * what the consumer's finish would write, its history row included (`acked`, `retried`,
 * `dead-lettered`, `released`; `cancelled` when the message's cancel was asked for while it
 * ran; `lease-lost` when the lease was lost).
 *
 * The run a helper records is the claim's (its task, attempt and consumer) started at the
 * store's now, unless `run` says otherwise. Finishing the same claim twice with the same run
 * is a retried `complete` (its first commit landed, its answer lost): it answers as the first
 * did and records nothing more; a later run of a claim whose lease is gone finds nothing.
 */
import { Duration, Effect } from "effect"
import type { Claim, MessageId } from "../../src/Message.ts"
import type { StoreError } from "../../src/QueueError.ts"
import type { Completed, Completion, Finish, QueueStoreShape } from "../../src/QueueStore.ts"

/**
 * What finishing one claim did:
 * - `"written"`: the lease was held and the write landed;
 * - `"cancelled"`: the lease was held, but a cancel of the message had been asked for: the
 *   message was deleted instead, never to run again (history `cancelled`);
 * - `"lost"`: the lease was lost (reclaimed, finished or deleted): nothing was written.
 */
export type HandedBack = "written" | "cancelled" | "lost"

/** The run a finish records (by default the claim's, started at the store's now). */
export interface Run {
  readonly startedAt?: Date | undefined
  readonly consumer?: string | undefined
}

/** One completion of `claim`: its finishing write and the history record of its run. */
export const completion = (
  store: QueueStoreShape,
  claim: Claim,
  finish: Finish,
  outcome: Completion["outcome"],
  error: string | null,
  run: Run = {}
): Effect.Effect<Completion, StoreError> =>
  Effect.map(run.startedAt === undefined ? store.now : Effect.succeed(run.startedAt), (startedAt) => ({
    ref: { id: claim.id, leaseToken: claim.leaseToken },
    finish,
    queue: claim.queue,
    task: claim.task,
    attempt: claim.attempts,
    consumer: run.consumer ?? claim.consumer,
    startedAt,
    outcome,
    error
  }))

const finishOne = (store: QueueStoreShape, claim: Claim, finish: Finish, outcome: Completion["outcome"], error: string | null, run?: Run) =>
  Effect.flatMap(completion(store, claim, finish, outcome, error, run), (c) => store.complete([c]))

/** What `complete` answered for `id`, as a single finish says it. */
const handedBack = (id: MessageId, completed: Completed): HandedBack =>
  completed.cancelled.includes(id) ? "cancelled" : completed.held.includes(id) ? "written" : "lost"

/** Ack (delete) a finished message. `false`: the lease was lost, someone else holds or finished it. */
export const ack = (store: QueueStoreShape, claim: Claim, run?: Run): Effect.Effect<boolean, StoreError> =>
  Effect.map(finishOne(store, claim, { _tag: "Ack" }, "acked", null, run), (done) => done.held.includes(claim.id))

/** Make a failed message visible again after `delay`, recording `error`. */
export const retry = (
  store: QueueStoreShape,
  claim: Claim,
  options: { readonly delay: Duration.Input; readonly error: string },
  run?: Run
): Effect.Effect<HandedBack, StoreError> =>
  Effect.map(
    finishOne(store, claim, { _tag: "Retry", delayMs: Duration.toMillis(Duration.fromInputUnsafe(options.delay)), error: options.error }, "retried", options.error, run),
    (done) => handedBack(claim.id, done)
  )

/** Move a message out of the ready set with `reason` (and the last error, if given). */
export const deadLetter = (
  store: QueueStoreShape,
  claim: Claim,
  options: { readonly reason: string; readonly error?: string | undefined },
  run?: Run
): Effect.Effect<HandedBack, StoreError> =>
  Effect.map(
    finishOne(store, claim, { _tag: "DeadLetter", reason: options.reason, error: options.error }, "dead-lettered", options.error ?? null, run),
    (done) => handedBack(claim.id, done)
  )

/** Make a claimed message visible again now, giving the attempt back (shutdown, interruption). */
export const release = (store: QueueStoreShape, claim: Claim, run?: Run): Effect.Effect<HandedBack, StoreError> =>
  Effect.map(finishOne(store, claim, { _tag: "Release" }, "released", null, run), (done) => handedBack(claim.id, done))
