/**
 * Completing in the memory store: each completion's fenced write by its kind, then its
 * history record, as one step; a retried write whose first one landed answers as its record says.
 *
 * @since 0.1.0
 */
import { Clock, Effect } from "effect"
import type { Attempt, ClaimRef, MessageId } from "../Message.ts"
import type { CompletionOutcome } from "../Lifecycle.ts"
import type { Completion, Finish, QueueStoreShape } from "../QueueStore.ts"
import * as Validate from "../internal/validate.ts"
import { pushAttempt } from "./history.ts"
import { announce, hasLimits, held, type MemoryState, type Row, wake } from "./state.ts"

/** The completion event a landed finish announces (a release or a forget announces none). */
const outcomeOf = (f: Finish, cancelled: boolean): CompletionOutcome | undefined =>
  cancelled ? "cancelled" : f._tag === "Ack" ? "completed" : f._tag === "Retry" ? "retried" : f._tag === "DeadLetter" ? "dead-lettered" : undefined

/**
 * The fenced write of a retry, release or dead letter of a held message (one flagged for
 * cancel never gets here: `complete` deletes it instead): `write` sets its columns, the
 * lease is cleared. `false` when the lease was lost.
 */
const handBack = (state: MemoryState, ref: ClaimRef, write: (row: Row, now: number) => void) =>
  Effect.map(Clock.currentTimeMillis, (now) => {
    const row = held(state, ref.id, ref.leaseToken)
    if (row === undefined) return false
    write(row, now)
    row.leaseToken = null
    row.leasedBy = null
    row.leasedAt = null
    return true
  })

/** Delete a held message (an ack, or a cancel); `false` when the lease was lost. */
const deleteHeld = (state: MemoryState, ref: ClaimRef) =>
  Effect.sync(() => held(state, ref.id, ref.leaseToken) !== undefined && state.rows.delete(BigInt(ref.id)))

/** The fenced write of one completion's finish (not a cancel): whether it landed. */
const finishWrite = (state: MemoryState, ref: ClaimRef, f: Finish): Effect.Effect<boolean> => {
  switch (f._tag) {
    case "Ack":
    case "Cancel":
      return deleteHeld(state, ref)
    case "Retry":
      return Effect.flatMap(Validate.durationMs("delay", f.delayMs, { min: 0 }).pipe(Effect.orDie), (delayMs) =>
        handBack(state, ref, (row, now) => {
          row.visibleAt = now + delayMs
          row.lastError = Validate.boundedText(f.error)
        }))
    case "Release":
      return handBack(state, ref, (row, now) => {
        // The attempt is given back: a release is not a failure of the handler.
        row.visibleAt = now
        row.attempts = Math.max(row.attempts - 1, 0)
        // Ready again now: idle consumers hear of it as of a send (a peer claims it at once).
        wake(state, row.queue)
      })
    case "DeadLetter":
      return handBack(state, ref, (row, now) => {
        row.state = "dead"
        // A claim beyond the last attempt (quarantined, exhausted) ran nothing: never shown past the max.
        row.attempts = Math.min(row.attempts, row.maxAttempts)
        row.deadReason = Validate.boundedText(f.reason)
        row.deadAt = now
        if (f.error !== undefined) row.lastError = Validate.boundedText(f.error)
      })
    case "Forget":
      return Effect.succeed(false)
  }
}

/**
 * The history record an earlier write of this same completion left (as SQL finds it): same
 * message, consumer, start and error, its outcome, `cancelled` or `lease-lost`.
 */
const ownRecord = (state: MemoryState, c: Completion): Attempt | undefined => {
  const error = c.error === null ? null : Validate.boundedText(c.error)
  return state.history.find((a) =>
    a.messageId === c.ref.id && a.consumer === c.consumer && a.startedAt.getTime() === c.startedAt.getTime() &&
    a.error === error && (a.outcome === c.outcome || a.outcome === "cancelled" || a.outcome === "lease-lost")
  )
}

/** `complete`: each completion's fenced write, by its kind, then its history record; as one step. */
export const complete = (state: MemoryState): QueueStoreShape["complete"] => (completions) =>
  Effect.gen(function*() {
    // One time for the whole batch, read before any write: no step between a write and its record yields.
    const endedAt = yield* Clock.currentTimeMillis
    const landedIds: Array<MessageId> = []
    const cancelledIds: Array<MessageId> = []
    for (const c of completions) {
      const f = c.finish
      // Read before the write (an ack deletes the row).
      const base = state.rows.get(BigInt(c.ref.id))?.attemptBase ?? 0
      // Same rule as SQL: a retry, release or dead letter of a message flagged for cancel is a cancel.
      const flagged = held(state, c.ref.id, c.ref.leaseToken)?.cancelRequestedAt != null &&
        (f._tag === "Retry" || f._tag === "DeadLetter" || f._tag === "Release")
      const cancelled = flagged || f._tag === "Cancel"
      const landed = yield* (cancelled ? deleteHeld(state, c.ref) : finishWrite(state, c.ref, f))
      if (!landed) {
        // A retried write whose first one landed (its answer lost) answers as its record says, recording nothing more.
        const earlier = ownRecord(state, c)
        if (earlier !== undefined) {
          if (earlier.outcome !== "lease-lost") landedIds.push(c.ref.id)
          if (earlier.outcome === "cancelled") cancelledIds.push(c.ref.id)
          continue
        }
      }
      if (landed) landedIds.push(c.ref.id)
      // A finished message of a queue with flow limits gave its slot back: idle consumers hear of it.
      if (landed && hasLimits(state, c.queue)) wake(state, c.queue)
      if (landed && cancelled) cancelledIds.push(c.ref.id)
      pushAttempt(state, {
        messageId: c.ref.id,
        queue: c.queue,
        task: c.task,
        attempt: base + c.attempt,
        consumer: c.consumer,
        startedAt: c.startedAt,
        endedAt: new Date(endedAt),
        outcome: !landed ? "lease-lost" : cancelled ? "cancelled" : c.outcome,
        error: c.error,
        ...(c.result === undefined ? {} : { result: JSON.parse(c.result) })
      })
      // After the history record: an awaiter woken by it finds the record (as SQL's statement is one).
      const outcome = landed ? outcomeOf(f, cancelled) : undefined
      if (outcome !== undefined) announce(state, { id: c.ref.id, queue: c.queue, task: c.task }, outcome, endedAt)
    }
    return { held: landedIds, cancelled: cancelledIds }
  })
