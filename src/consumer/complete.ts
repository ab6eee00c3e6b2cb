/**
 * Completing a message: the last step of a claim, after its handler ended and
 * its renewer let go of it. The decided outcome (ack, retry, dead-letter,
 * release) is queued; a flusher takes everything queued (up to a bound) and
 * writes it with its attempt-history records in one fenced statement, one
 * commit, while the handler waits for its own answer. Each message still
 * learns whether its lease was held, and is reported on its own: metrics, one
 * log line. Connection-dead failures are retried, per message, only while
 * that message's lease still covers it; every attempt is bounded. A batch that
 * fails otherwise degrades per entry: statement-level failures (timeout, lock,
 * deadlock, serialization) are retried each entry alone; a refused value or a
 * defect has each entry written alone, and an entry that fails alone is written
 * plain (same kind, texts and result replaced): one entry never fails the others,
 * and an ack never becomes a retry. See docs/finishing-writes.md.
 */
import { Cause, Clock, Effect, Latch, Metric, Option, type Scope } from "effect"
import type { Claim } from "../Message.ts"
import * as QueueMetrics from "../QueueMetrics.ts"
import type { Completion, Finish, QueueStoreShape } from "../QueueStore.ts"
import * as Detached from "../internal/detached.ts"
import { seconds } from "../internal/format.ts"
import * as Backoff from "../internal/backoff.ts"
import * as Outcome from "./outcome.ts"
import * as Span from "../internal/span.ts"
import * as AttemptResult from "../internal/attemptResult.ts"
import * as Validate from "../internal/validate.ts"

/** What the completer needs to know about the consumer it works for. */
export interface CompleterOptions {
  readonly store: QueueStoreShape
  readonly consumerId: string
  /** The longest one attempt of a flush may take. */
  readonly attemptTimeoutMs: number
  /** Flushes in flight at once (the lease pool's size is a good choice). */
  readonly flushers: number
  /** Completions per flush, at most. */
  readonly maxBatch: number
  /**
   * Awaited before each flush takes its batch (the caller bounds it): the consumer holds a flush
   * while its claim statement is in flight, so the two do not compete for the server.
   */
  readonly beforeFlush?: Effect.Effect<void> | undefined
}

/** One finished run, ready to be written. */
export interface Finished {
  readonly claim: Claim
  readonly action: Outcome.Action
  /** Clock time the run started (for the history). */
  readonly startedAt: number
  /** When this consumer's lease of the message ends as far as it knows (Clock ms). */
  readonly leaseEndsAt: number
}

/** The outcome of a finishing write: the lease was held (`true`), was gone (`false`), or the write failed. */
export type Held = boolean | "failed"

/** The completer of one consumer. */
export interface Completer {
  /**
   * Queue the outcome of one finished run and return at once; the message is
   * written by the next flush and reported (metrics, a log line), then `done`
   * runs with whether its lease was held. Never fails and never dies; `done`
   * always runs, within the lease plus a few bounded attempts (a failing write
   * is given up when the lease runs out: the message then runs again elsewhere,
   * as after a crash), or when the consumer stops.
   */
  readonly complete: (finished: Finished, done: (held: Held) => Effect.Effect<void>) => Effect.Effect<void>
}

/**
 * An action the store will accept: a retry delay that is not a finite number
 * from 0 to the store's limit (a bad custom retry policy) is clamped, and said so.
 */
export const sanitize = (action: Outcome.Action): { readonly action: Outcome.Action; readonly problem?: string } => {
  if (action._tag !== "Retry") return { action }
  const delayMs = action.delayMs
  if (Number.isFinite(delayMs) && delayMs >= 0 && delayMs <= Validate.MAX_DELAY_MS) return { action }
  // NaN means "no sensible delay": retry now (bounding it to the maximum would park the message for years).
  const clamped = Backoff.boundedDelayMs(Number.isNaN(delayMs) ? 0 : delayMs, Validate.MAX_DELAY_MS)
  return {
    action: { ...action, delayMs: clamped },
    problem: `retry delay ${delayMs} ms is not a duration from 0 to ${Validate.MAX_DELAY_MS} ms; retrying in ${clamped} ms instead`
  }
}

/** The store's form of an action. */
const finishOf = (action: Outcome.Action): Finish => {
  switch (action._tag) {
    case "Ack":
      return ACK
    case "Retry":
      return { _tag: "Retry", delayMs: action.delayMs, error: action.error }
    case "DeadLetter":
      return { _tag: "DeadLetter", reason: action.reason, error: action.error }
    case "Release":
      return RELEASE
    case "Forget":
      return { _tag: "Forget" }
    case "Cancel":
      return { _tag: "Cancel" }
  }
}

const ACK: Finish = { _tag: "Ack" }
const RELEASE: Finish = { _tag: "Release" }

/** The history's error text of an action. */
const historyError = (action: Outcome.Action): string | null =>
  action._tag === "Forget" || action._tag === "Cancel"
    ? action.error
    : action._tag === "Retry"
    ? action.error
    : action._tag === "DeadLetter"
    ? (action.error ?? action.reason)
    : null

/** What the store call of an action is called, in logs and spans. */
const nameOf = (action: Outcome.Action): string => action._tag === "DeadLetter" ? "deadLetter" : action._tag.toLowerCase()

/** The action a plain write ({@link Completer}'s last resort) reports: the kind as asked, its texts as written. */
const plainAction = (action: Outcome.Action, plain: Completion): Outcome.Action => {
  const f = plain.finish
  if (action._tag === "Retry" && f._tag === "Retry") return { ...action, delayMs: f.delayMs, error: f.error }
  if (action._tag === "DeadLetter" && f._tag === "DeadLetter") return { ...action, reason: f.reason, error: undefined }
  return action
}

const FIRST_RETRY_MS = 100
const MAX_RETRY_MS = 2_000

/** A finished run and what to do once it is written. */
interface Answerable {
  readonly finished: Finished
  readonly done: (held: Held) => Effect.Effect<void>
}

/** A queued completion and what to do once it is written. */
interface Pending extends Answerable {
  readonly completion: Completion
  /** Backoff before this entry's next attempt, after a connection-dead failure. */
  retryMs: number
  /**
   * Written on its own, never batched again: its batch failed on something other than a dead
   * connection (a refused value, a defect, a statement timeout, a lock or deadlock), so it may
   * be the entry that failed it, and must not fail others again.
   */
  alone: boolean
}

/**
 * SQLSTATEs that fail one statement and leave the connection and the data as they were:
 * statement timeout, deadlock, serialization failure, lock not available, and insufficient
 * resources (class 53). Worth retrying, each entry alone, while its lease covers it.
 */
const isTransientStatementError = (code: string | undefined): boolean =>
  code === "57014" || code === "40P01" || code === "40001" || code === "55P03" || (code?.startsWith("53") ?? false)

/**
 * What the store wrote for a retry, release or dead letter it turned into a cancel (an
 * operator cancelled the message after its handler ended, before the write): it will not run again.
 */
const cancelledInstead = (p: Answerable): Outcome.Action => ({
  _tag: "Cancel",
  error: `cancelled by an operator after the handler ended; its ${nameOf(p.finished.action)} was not written, the message was deleted`
})

/** Metrics and one log line for a written outcome. */
const announce = (claim: Claim, action: Outcome.Action, held: Held) =>
  Effect.gen(function*() {
    switch (action._tag) {
      case "Ack":
        // Acks that landed are counted by the flush.
        if (held === false) {
          yield* Metric.update(QueueMetrics.doubleRuns, 1)
          yield* Effect.logWarning("double run: the ack found the lease gone; another consumer has taken this message")
        }
        break
      case "Retry":
        if (held === true) {
          yield* Metric.update(QueueMetrics.retried, 1)
          yield* Metric.update(QueueMetrics.forTask(claim.queue, claim.task).retried, 1)
          yield* Effect.logWarning(`attempt ${claim.attempts} of ${action.limit ?? claim.maxAttempts} failed; retry in ${seconds(action.delayMs)}:\n${action.error}`)
        }
        break
      case "DeadLetter":
        if (held === true) {
          yield* Metric.update(QueueMetrics.deadLettered, 1)
          yield* Metric.update(QueueMetrics.forTask(claim.queue, claim.task).deadLettered, 1)
          yield* Effect.logWarning(`dead-lettered: ${action.reason}${action.error === undefined ? "" : `\n${action.error}`}`)
        }
        break
      case "Release":
        if (held === true) {
          yield* Metric.update(QueueMetrics.released, 1)
          yield* Metric.update(QueueMetrics.forTask(claim.queue, claim.task).released, 1)
          yield* action.unstarted === true ? Effect.logDebug("given back unstarted: held ahead too long") : Effect.logInfo("released on shutdown")
        }
        break
      case "Forget":
        yield* Effect.logError("handler stopped: another consumer holds the message now")
        break
      case "Cancel":
        if (held === true) {
          yield* Metric.update(QueueMetrics.cancelled, 1)
          yield* Metric.update(QueueMetrics.forTask(claim.queue, claim.task).cancelled, 1)
          yield* Effect.logWarning(`cancelled while running: ${action.error}`)
        }
        break
    }
  })

/** The completion to write for a finished run (`consumerId`: the consumer that ran it). */
export const completionOf = (f: Finished, consumerId: string): Completion => ({
  // The claim is the fencing reference (its id and token): no object of its own per message.
  ref: f.claim,
  finish: finishOf(f.action),
  queue: f.claim.queue,
  task: f.claim.task,
  // A claim beyond the last attempt (quarantined, exhausted) is not run: never numbered past the max.
  attempt: Math.min(f.claim.attempts, f.claim.maxAttempts),
  consumer: consumerId,
  startedAt: new Date(f.startedAt),
  outcome: Outcome.historyOutcome(f.action, true),
  error: historyError(f.action),
  result: f.action._tag === "Ack" ? f.action.result : undefined
})

/**
 * The plain form of an entry's write ({@link writePlain}): the same kind, its texts replaced
 * by `text`, its result (if any) by the unstorable marker. Built from the finished run alone,
 * so a defect in building the usual form cannot reach it.
 */
const plainOf = (f: Finished, consumerId: string, text: string): Completion => {
  const action = f.action
  const finish: Finish = action._tag === "Retry"
    ? { _tag: "Retry", delayMs: Backoff.boundedDelayMs(action.delayMs, Validate.MAX_DELAY_MS), error: text }
    : action._tag === "DeadLetter"
    ? { _tag: "DeadLetter", reason: text, error: undefined }
    : finishOf(action)
  return {
    ref: { id: f.claim.id, leaseToken: f.claim.leaseToken },
    finish,
    queue: f.claim.queue,
    task: f.claim.task,
    attempt: Math.min(f.claim.attempts, f.claim.maxAttempts),
    consumer: consumerId,
    startedAt: new Date(f.startedAt),
    outcome: Outcome.historyOutcome(action, true),
    error: historyError(action) === null ? null : text,
    result: action._tag === "Ack" && action.result !== undefined ? AttemptResult.unstorable("result", text) : undefined
  }
}

/** What the completer's functions share: its options, its queue and the latch its flushers wait on. */
interface Completing {
  readonly options: CompleterOptions
  readonly queue: Array<Pending>
  readonly work: Latch.Latch
  /**
   * Acks of the flush being reported, per (queue, task): reused, cleared once counted (a
   * flush counts what is there, so with several flushers every ack is still counted once).
   */
  readonly ackedBy: Map<QueueMetrics.TaskMetrics, number>
  /** Set once the completer closed (after the consumer's drain): nothing is queued any more. */
  closed: boolean
}

/**
 * Make the completer of one consumer. Its flushers run in the current scope:
 * build it before the consumer's shutdown finalizer, so they outlive the drain.
 */
export const make = (options: CompleterOptions): Effect.Effect<Completer, never, Scope.Scope> =>
  Effect.gen(function*() {
    const s: Completing = { options, queue: [], work: yield* Latch.make(false), ackedBy: new Map(), closed: false }

    // Closing (after the consumer's drain): nothing queued is left waiting.
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        s.closed = true
        return giveUp(s.queue.splice(0), "the consumer has stopped")
      })
    )

    for (let i = 0; i < options.flushers; i++) yield* Effect.forkScoped(flusher(s))

    return {
      // The hot path of a busy consumer: no generator, one effect per message. What is built
      // here is synchronous: a defect before the entry is queued (a throw) is caught as it is
      // thrown and the entry written plain, alone (an ack stays an ack).
      complete: (finished, done) =>
        Effect.suspend(() => {
          let entry: Pending
          let problem: string | undefined
          try {
            const sane = finished.action._tag === "Retry" ? sanitize(finished.action) : undefined
            problem = sane?.problem
            const f = problem === undefined ? finished : { ...finished, action: sane!.action }
            entry = { finished: f, completion: completionOf(f, options.consumerId), done, retryMs: FIRST_RETRY_MS, alone: false }
          } catch (defect) {
            return writePlain(s, { finished, done }, `a defect: ${Cause.pretty(Cause.die(defect))}`)
          }
          if (problem === undefined) return enqueue(s, entry)
          return Effect.andThen(Effect.logError(`bad retry policy: ${problem}`), Effect.suspend(() => enqueue(s, entry)))
        })
    }
  })

/**
 * Report an entry's outcome (a line only for what is not a landed ack) and hand it back. `as`
 * is what the store wrote when it differs from the action asked for.
 */
const answer = (p: Answerable, held: Held, as: Outcome.Action = p.finished.action): Effect.Effect<void> =>
  held === true && as._tag === "Ack"
    ? p.done(held)
    : announce(p.finished.claim, as, held).pipe(annotate(p.finished.claim), Effect.andThen(p.done(held)))

/**
 * One flush: one statement for the whole batch, bounded. On a dead connection
 * (or no answer in time: it may or may not have landed, and a retry is safe since
 * every row is fenced, and a retry recognises its own landed write) each entry is
 * retried after its backoff while its lease still covers it, and given up otherwise.
 * A statement-level failure (timeout, lock, deadlock, serialization) is retried the
 * same way, each entry alone. Any other failure, or a defect, degrades the batch per
 * entry ({@link degrade}): one entry can never fail the others.
 */
const flush = (s: Completing, batch: ReadonlyArray<Pending>): Effect.Effect<void> =>
  Effect.gen(function*() {
    const { store, attemptTimeoutMs } = s.options
    const result = yield* Detached.within(store.complete(batch.map((p) => p.completion)), attemptTimeoutMs).pipe(
      Effect.map(Option.match({
        onNone: () => ({ _tag: "Timeout" as const }),
        onSome: (completed) => ({
          _tag: "Held" as const,
          held: new Set(completed.held),
          cancelled: completed.cancelled.length === 0 ? undefined : new Set(completed.cancelled)
        })
      })),
      Effect.catchTag("ConnectionDead", (error) => Effect.succeed({ _tag: "Dead" as const, error })),
      Effect.catchTag("QueryFailed", (error) => Effect.succeed({ _tag: "Failed" as const, error })),
      Effect.catchCause((cause) => Effect.succeed({ _tag: "Defect" as const, cause }))
    )
    switch (result._tag) {
      case "Held": {
        let acked = 0
        for (const p of batch) {
          const held = result.held.has(p.completion.ref.id)
          if (held && p.completion.finish._tag === "Ack") {
            // The common case: nothing to report.
            acked += 1
            const metrics = QueueMetrics.forTask(p.completion.queue, p.completion.task)
            s.ackedBy.set(metrics, (s.ackedBy.get(metrics) ?? 0) + 1)
            yield* p.done(true)
          } else if (held && result.cancelled?.has(p.completion.ref.id) === true && p.finished.action._tag !== "Cancel") {
            // Cancelled after the handler ended, before this write: the store deleted it instead.
            yield* answer(p, true, cancelledInstead(p))
          } else yield* answer(p, held)
        }
        // Counted per flush and per (queue, task), not per message: the hot path of a busy consumer.
        if (acked > 0) {
          yield* Effect.withFiberSucceed((fiber) => {
            QueueMetrics.acked.updateUnsafe(acked, fiber.context)
            for (const [metrics, n] of s.ackedBy) metrics.acked.updateUnsafe(n, fiber.context)
            s.ackedBy.clear()
          })
        }
        return
      }
      case "Failed":
        // A statement-level failure (a timeout, a lock, a deadlock): retried like a dead
        // connection, but each entry alone. Any other failure (a value the server refused):
        // each entry alone now, so the others land; one that fails alone is written plain.
        if (isTransientStatementError(result.error.code)) break
        yield* degrade(s, batch, result.error.message)
        return
      case "Defect":
        // A bug: each entry alone; one that dies alone is written plain (an ack stays an ack).
        yield* degrade(s, batch, `a defect: ${Cause.pretty(result.cause)}`)
        return
    }
    const why = result._tag === "Timeout" ? `no answer within ${seconds(attemptTimeoutMs)}` : result.error.message
    const alone = result._tag === "Failed"
    const now = yield* Clock.currentTimeMillis
    for (const p of batch) {
      const name = nameOf(p.finished.action)
      if (now + p.retryMs >= p.finished.leaseEndsAt) {
        yield* Metric.update(QueueMetrics.finishFailures, 1)
        yield* Effect.logError(`${name} could not be written; the message runs again after its lease: ${why}`).pipe(
          annotate(p.finished.claim)
        )
        yield* answer(p, "failed")
      } else {
        const kind = alone ? "statement failed" : "connection dead"
        yield* Effect.logWarning(`${name} failed, ${kind}; retrying in ${p.retryMs}ms: ${why}`).pipe(annotate(p.finished.claim))
        const delay = p.retryMs
        p.retryMs = Math.min(p.retryMs * 2, MAX_RETRY_MS)
        if (alone) p.alone = true
        yield* Effect.forkDetach(Effect.sleep(delay).pipe(Effect.andThen(p.alone ? writeAlone(s, [p]) : Effect.suspend(() => enqueue(s, p)))))
      }
    }
  })

/**
 * A batch that failed on something other than a dead connection, degraded per entry: a
 * batch of several is written again entry by entry (as many at once as there are
 * flushers), so every entry that can land does; an entry that fails on its own is written
 * in its plain form ({@link writePlain}).
 */
const degrade = (s: Completing, batch: ReadonlyArray<Pending>, why: string): Effect.Effect<void> =>
  Effect.gen(function*() {
    // One entry failed on its own: written again as it was, it would fail again.
    if (batch.length === 1) return yield* Effect.forkDetach(writePlain(s, batch[0]!, why))
    yield* Effect.logWarning(`a finishing batch of ${batch.length} failed; writing each entry on its own: ${why}`)
    for (const p of batch) p.alone = true
    yield* Effect.forkDetach(writeAlone(s, batch))
  }).pipe(Effect.asVoid)

/** Write each entry in its own statement, a few at once; each is answered as a flush answers it. */
const writeAlone = (s: Completing, entries: ReadonlyArray<Pending>): Effect.Effect<void> =>
  Effect.forEach(entries, (p) => flush(s, [p]).pipe(Span.within("leasehold.complete", { count: 1 })), {
    concurrency: s.options.flushers,
    discard: true
  }).pipe(Effect.uninterruptible)

/**
 * The last resort for one entry that failed on its own (a value refused, a defect): the same
 * write without what may have caused it. Its texts are replaced by a plain account of the
 * failure, its result by the unstorable marker; the kind is kept (an ack stays an ack: a
 * handler that succeeded never runs again for it; a retry keeps its delay; a dead letter
 * stays one). Should that fail too, it is logged and the message runs again after its
 * lease, as after a crash.
 */
const writePlain = (s: Completing, p: Answerable, why: string): Effect.Effect<void> =>
  Effect.gen(function*() {
    const name = nameOf(p.finished.action)
    const plain = plainOf(
      p.finished,
      s.options.consumerId,
      Validate.boundedText(`the ${name} could not be written as it was; written without its texts and result: ${why}`)
    )
    const written = yield* Detached.within(s.options.store.complete([plain]), s.options.attemptTimeoutMs).pipe(
      Effect.map(Option.getOrUndefined),
      Effect.catchCause((cause) => Effect.as(Effect.logError(`the plain ${name} failed:\n${Cause.pretty(cause)}`), undefined))
    )
    const held: Held = written === undefined ? "failed" : written.held.includes(plain.ref.id)
    if (held === "failed") {
      yield* Metric.update(QueueMetrics.finishFailures, 1)
      yield* Effect.logError(`${name} could not be written; the message runs again after its lease (its plain form failed too): ${why}`)
    } else yield* Effect.logError(`${name} could not be written as it was; written plain, without its texts and result: ${why}`)
    const cancelled = written?.cancelled.includes(plain.ref.id) === true && p.finished.action._tag !== "Cancel"
    yield* answer(p, held, cancelled ? cancelledInstead(p) : held === true ? plainAction(p.finished.action, plain) : p.finished.action)
  }).pipe(annotate(p.finished.claim), Effect.uninterruptible)

/** Queue an entry for the next flush, or give it up if the completer has closed (at the call: run the answer next). */
const enqueue = (s: Completing, p: Pending): Effect.Effect<void> => {
  if (s.closed) return Effect.asVoid(giveUp([p], "the consumer has stopped"))
  s.queue.push(p)
  return s.work.open
}

/** Answer entries that will not be written (the completer closed): they run again after their leases. */
const giveUp = (entries: ReadonlyArray<Pending>, why: string) =>
  Effect.gen(function*() {
    if (entries.length === 0) return
    yield* Metric.update(QueueMetrics.finishFailures, entries.length)
    yield* Effect.logError(`${entries.length} finishing write(s) not written (${why}); those messages run again after their leases`)
    for (const p of entries) yield* answer(p, "failed")
  })

/**
 * One turn of a flusher: wait for work, take up to a batch, write it. A turn of its own (not a
 * local of a looping generator, whose frame would keep the last batch, and every claim and
 * payload in it, for as long as the consumer then sits idle): once written, nothing of the
 * batch is left reachable.
 */
const flushNext = (s: Completing): Effect.Effect<void> =>
  Effect.andThen(
    s.work.await,
    // Completions queued meanwhile join this batch.
    Effect.andThen(
      s.options.beforeFlush ?? Effect.void,
      Effect.suspend(() => {
        if (s.queue.length === 0) return s.work.close
        const batch = s.queue.splice(0, s.options.maxBatch)
        // Uninterruptible: every entry taken is answered (the flush is bounded by the attempt timeout).
        const written = flush(s, batch).pipe(Span.within("leasehold.complete", { count: batch.length }), Effect.uninterruptible)
        return s.queue.length === 0 ? Effect.andThen(s.work.close, written) : written
      })
    )
  )

/** A flusher: {@link flushNext}, forever. */
const flusher = (s: Completing): Effect.Effect<never> => Effect.forever(flushNext(s))

const annotate = (claim: Claim) =>
  Effect.annotateLogs({ queue: claim.queue, task: claim.task, messageId: claim.id, attempt: claim.attempts })
