/**
 * Handling one message, the third step of a claim (claim, renew, handle,
 * complete): run its handler under the claim's renewer and watchdog, in a
 * `leasehold.handle` span with the message's log annotations, decide the
 * outcome (ack, retry, dead-letter, release) and hand it to the completer. The
 * consumer owns the bookkeeping (handler slots, the drain) through a
 * {@link Slot} per message.
 *
 * The hot path of a busy consumer: this module's steps are plain combinators
 * (no generators) with one context update per message. The handler it runs is
 * the dispatcher's (`Task.dispatcher`'s decodes and runs a task in an
 * `Effect.gen`): its cost is the handler's, not this step's.
 */
import { Cause, Clock, Context, Effect, Exit, type Fiber, Random, References, Tracer } from "effect"
import type { Dispatcher, HandlerContext } from "../Handler.ts"
import type * as LeaseRenewer from "./renew.ts"
import type { Claim } from "../Message.ts"
import type { ConsumerSettings } from "../QueueConfig.ts"
import * as QueueMetrics from "../QueueMetrics.ts"
import type { Completer } from "./complete.ts"
import type { QueueStoreShape } from "../QueueStore.ts"
import * as Backoff from "../internal/backoff.ts"
import * as Commit from "./commit.ts"
import * as Outcome from "./outcome.ts"
import * as Progress from "./progress.ts"
import * as AttemptResult from "../internal/attemptResult.ts"
import * as Span from "../internal/span.ts"

/** One message's place in the consumer: its handler slot, and its place in the drain. */
export interface Slot {
  /**
   * Give the handler slot back now (the count drops at the call) and answer the effect that wakes
   * the claim loop, to be run next; once per message, more calls do nothing (and answer `Effect.void`).
   */
  readonly free: () => Effect.Effect<void>
  /** Leave the drain (no longer in flight); runs once per message, more calls do nothing. */
  readonly settle: () => Effect.Effect<void>
  /** The handler ran for `ms`, ending at `endedAt` (Clock ms): what the lane's `auto` prefetch reads. */
  readonly ran: (ms: number, endedAt: number) => void
}

/** What handling needs from the consumer it works for. */
export interface HandleOptions<R> {
  readonly dispatcher: Dispatcher<R>
  readonly settings: ConsumerSettings
  readonly completer: Completer
  /** The store a commit step writes through (`HandlerContext.commit`). */
  readonly store: QueueStoreShape
  /** Before each message id in its idempotency key: the store's schema, where known. */
  readonly idempotencyPrefix: string
}

/** A message between its handler's start and its hand-over to the completer. */
interface Running extends Commit.Committing {
  readonly claim: Claim
  readonly renewer: LeaseRenewer.LeaseRenewer
  readonly slot: Slot
  startedAt: number
  /** Handed to the completer: from then on `settle` is the completer's to run. */
  submitted: boolean
  /** The handler's abort signal's controller, made when the handler first reads `signal`. */
  abort: AbortController | undefined
  /** The run's progress writer, made on its first report; stopped when the run ends. */
  progress: Progress.ProgressWriter | undefined
}

/** A run whose commit step committed: nothing more to write; a failure after the commit is said, not retried. */
const committed = (m: Running, exit: Exit.Exit<Outcome.RunResult>): Effect.Effect<void> => {
  m.submitted = true
  const failedAfter = Exit.isFailure(exit) || (exit.value._tag === "Handled" && Exit.isFailure(exit.value.exit))
  const said = failedAfter
    ? Effect.logWarning("the handler failed after its commit step committed: the commit (its writes and the ack) stands")
    : Effect.void
  return Effect.andThen(said, m.slot.settle())
}

/**
 * Make the message runner of one consumer: `run(renewer, claim, slot)` runs
 * the message on the current fiber and hands its outcome to the completer,
 * whatever happened; it never fails.
 */
export const make = <R>(options: HandleOptions<R>) => {
  const { dispatcher, settings, completer } = options
  const commitStep = Commit.make(options.store, settings.consumerId)
  const contextOf = (m: Running) => new MessageContext(m, settings.consumerId, options.idempotencyPrefix, commitStep, options.store)

  /** The rules for one message: the consumer's, with the task's retry policy where it has one. */
  const rulesFor = (claim: Claim, random: number): Outcome.Rules => {
    const policy = dispatcher.policy(claim)
    return {
      quarantineAfter: settings.quarantineAfter,
      unknownTaskAttempts: settings.unknownTaskAttempts,
      unknownTaskDelayMs: settings.unknownTaskDelayMs,
      retryDelayMs: (attempt) =>
        policy?.retryDelayMs?.(attempt, random) ??
          Backoff.backoffMs({ baseMs: settings.retryBaseMs, maxMs: settings.retryMaxMs, factor: 2, jitter: true }, attempt, random)
    }
  }

  /** What to do with a message whose run did not succeed; a rule that throws (a bug) retries it now. */
  const decide = (claim: Claim, result: Outcome.RunResult): Effect.Effect<Outcome.Action> =>
    Effect.flatMap(Random.next, (random) =>
      Effect.try({
        try: () => Outcome.decide(claim, result, rulesFor(claim, random)),
        catch: (error) => error
      }).pipe(
        Effect.catch((error) =>
          Effect.as(
            Effect.logError(`deciding the outcome failed (a bug): ${String(error)}; retrying the message now`),
            { _tag: "Retry", delayMs: 0, error: `deciding the outcome failed: ${String(error)}` } as Outcome.Action
          )
        )
      ))

  const submit = (m: Running, action: Outcome.Action) => {
    m.submitted = true
    return completer.complete(
      { claim: m.claim, action, startedAt: m.startedAt, leaseEndsAt: m.renewer.expiresAt(m.claim.id) },
      m.slot.settle
    )
  }

  /**
   * Finish one run: first the handler's signal, if it was read, is aborted when the run was
   * interrupted; then the slot goes to the next claim at once, the renewer lets go of the message
   * (the last message of a claim stops the renewer, bounded), then the decided outcome goes to
   * the completer, which writes and reports it and then settles the message.
   */
  const finish = (m: Running, exit: Exit.Exit<Outcome.RunResult>): Effect.Effect<void> => {
    // Read when the run has ended: a handler that never read its signal costs no step here.
    const abort = m.abort
    if (abort === undefined) return finishing(m, exit)
    return Effect.andThen(Effect.sync(() => abortIfInterrupted(abort, exit, m.renewer.stopped(m.claim.id))), finishing(m, exit))
  }

  /** {@link finish} after the signal. */
  const finishing = (m: Running, exit: Exit.Exit<Outcome.RunResult>): Effect.Effect<void> => {
    m.progress?.stop()
    const freed = m.slot.free()
    // `Effect.void` unless this was the claim's last message: then the renewer's bounded stop.
    const released = m.renewer.finish(m.claim.id)
    const next = Effect.suspend(() => outcome(m, exit))
    return Effect.andThen(released === Effect.void ? freed : Effect.andThen(freed, released), next)
  }

  /** What {@link finishing} hands the completer, once the slot is free and the renewer has let go. */
  const outcome = (m: Running, exit: Exit.Exit<Outcome.RunResult>): Effect.Effect<void> => {
    // A run that committed was acked in its commit's transaction; one the fence refused is the new holder's.
    if (m.commit === "committed") return committed(m, exit)
    if (m.commit === "fenced") return submit(m, FENCED)
    const result = runResult(exit, m.renewer.stopped(m.claim.id))
    // The common case needs no rules: a handler that succeeded is acked.
    // A task's encoded result rides along with the ack; any other value is not kept.
    if (result._tag === "Handled" && Exit.isSuccess(result.exit)) return submit(m, ackOf(result.exit.value))
    return Effect.flatMap(decide(m.claim, result), (action) => submit(m, action))
  }

  /**
   * Run the handler (unless the message is quarantined or out of attempts), timed, on `fiber`,
   * the message's own (the watchdog interrupts it). Built when it is to run: the start is read now.
   */
  const handled = (m: Running, fiber: Fiber.Fiber<unknown, unknown>): Effect.Effect<Outcome.RunResult, never, R> => {
    const { claim, renewer } = m
    const startedAt = fiber.getRef(Clock.Clock).currentTimeMillisUnsafe()
    m.startedAt = startedAt
    if (claim.leaseExpiries >= settings.quarantineAfter) return Effect.succeed(QUARANTINED)
    if (claim.attempts > claim.maxAttempts) return Effect.succeed(EXHAUSTED)
    // Stopped while it was held ahead of a slot (cancelled, its lease lost): its handler never
    // runs, and `runResult` reads why from the renewer, as for a handler stopped while running.
    if (renewer.stopped(claim.id) !== undefined) return Effect.succeed(STOPPED_BEFORE_START)
    // The claim's watchdog interrupts this fiber when the lease is lost or the max runtime is
    // over (`runResult` tells that from a shutdown).
    renewer.watch(claim.id, fiber, startedAt)
    return Effect.map(Effect.exit(handlerOf(dispatcher, claim, contextOf(m))), (exit): Outcome.RunResult => {
      // Both histograms in one step once the handler ended (no effect per metric).
      const metrics = QueueMetrics.forTask(claim.queue, claim.task)
      const now = fiber.getRef(Clock.Clock).currentTimeMillisUnsafe()
      metrics.handlerDuration.updateUnsafe(now - startedAt, fiber.context)
      m.slot.ran(now - startedAt, now)
      const waited = waitedMs(claim, renewer.claimLeaseMs, renewer.claimedAt, startedAt)
      if (waited !== undefined) metrics.waitTime.updateUnsafe(waited, fiber.context)
      return { _tag: "Handled", exit }
    })
  }

  /**
   * The run of one message on `fiber`, then its finish, whatever happened. `restore`: the context
   * `fiber` had before this run set its own, put back at the end.
   */
  const body = (m: Running, fiber: Fiber.Fiber<unknown, unknown>, restore?: Context.Context<never>): Effect.Effect<unknown, never, R> =>
    // `onExitPrimitive`, not `onExit` + `ensuring`: a finalizer with nothing to do answers
    // `undefined` and costs no step (issue 29: fewer objects per message).
    Effect.onExitPrimitive(handled(m, fiber), (exit) =>
      // Should `finish` have failed to hand the message over, it leaves the slot and the drain here.
      Effect.onExitPrimitive(orDie(finish, m, exit), () => leave(m, fiber, restore)))

  /**
   * Run one message of a claim, then finish it, whatever happened. Its span
   * (`leasehold.handle`) and log annotations (queue, task, message id,
   * attempt) go into the fiber's context in one update: the span parents what
   * the handler does, and every line logged for the message carries the
   * annotations. No stack frame is captured (the same for every message, and
   * not free): `useSpan` and one context update cost a third of `withSpan` plus
   * `annotateLogs`. Without a tracer installed no span is made (like a send,
   * which then records no `traceparent`): only the annotations, set on the
   * fiber directly (its context put back as the run ends), with no effect of their own.
   */
  const run = (renewer: LeaseRenewer.LeaseRenewer, claim: Claim, slot: Slot): Effect.Effect<unknown, never, R> =>
    Effect.withFiber((fiber) => {
      const m: Running = { claim, renewer, slot, startedAt: 0, submitted: false, abort: undefined, progress: undefined, commit: "none" }
      // No tracer installed: Effect's built-in one exports nothing, and its span cost a quarter of
      // the consumer's own time per message (measured with `npm run bench:overhead`).
      if (fiber.getRef(Tracer.Tracer) === Tracer.nativeTracer) {
        const before = fiber.context
        fiber.setContext(annotated(before, claim))
        return body(m, fiber, before)
      }
      const annotations = { queue: claim.queue, task: claim.task, messageId: claim.id, attempt: claim.attempts }
      return Effect.useSpan("leasehold.handle", spanOptions(claim, renewer.claimLeaseMs, annotations), (span) =>
        Effect.updateContext(
          Effect.suspend(() => body(m, fiber)),
          (context: Context.Context<R>) => annotated(Context.add(context, Tracer.ParentSpan, span), claim)
        ))
    })

  return { run }
}

/** `f(a, b)`, or a defect should building it throw (as inside `Effect.suspend`, without a closure). */
const orDie = <A, B>(f: (a: A, b: B) => Effect.Effect<void>, a: A, b: B): Effect.Effect<void> => {
  try {
    return f(a, b)
  } catch (defect) {
    return Effect.die(defect)
  }
}

/**
 * The end of a run, whatever `finish` did: the fiber's context put back, the slot and (unless
 * handed over) the drain left. `undefined` when nothing is left to run (the common case).
 */
const leave = (m: Running, fiber: Fiber.Fiber<unknown, unknown>, restore: Context.Context<never> | undefined): Effect.Effect<void> | undefined => {
  if (restore !== undefined) fiber.setContext(restore)
  const freed = m.slot.free()
  if (!m.submitted) return Effect.andThen(freed, m.slot.settle())
  return freed === Effect.void ? undefined : freed
}

/** The dispatcher's handler of a message; one that throws as it is built fails as a defect, as it would running. */
const handlerOf = <R>(dispatcher: Dispatcher<R>, claim: Claim, context: HandlerContext): Effect.Effect<unknown, unknown, R> => {
  try {
    return dispatcher.handle(claim, context)
  } catch (defect) {
    return Effect.die(defect)
  }
}

/** `context` with the message's log annotations added (queue, task, message id, attempt). */
const annotated = <R>(context: Context.Context<R>, claim: Claim): Context.Context<R> =>
  Context.add(context, References.CurrentLogAnnotations, {
    ...Context.get(context, References.CurrentLogAnnotations),
    queue: claim.queue,
    task: claim.task,
    messageId: claim.id,
    attempt: claim.attempts
  })

/** When the store claimed the message, on the store's clock: its lease end counted back (`leaseMs`: the lease the claim gave). */
const claimedOnStoreAt = (claim: Claim, leaseMs: number): number => claim.leaseExpiresAt.getTime() - leaseMs

/**
 * How long the message waited: from ready (on the store's clock) to its claim (the lease it
 * was given, counted back from its end: the same clock, so no skew between the two), then
 * from the claim to the handler's start (this process's clock).
 */
const waitedMs = (claim: Claim, leaseMs: number, claimedAt: number, startedAt: number): number | undefined => {
  if (claim.readyAt === undefined) return undefined
  return Math.max(0, claimedOnStoreAt(claim, leaseMs) - claim.readyAt.getTime()) + Math.max(0, startedAt - claimedAt)
}

/**
 * The options of a message's `leasehold.handle` span. A message sent under a span carries
 * it as a W3C `traceparent` header; the handler's span continues that trace as its child
 * when the message is claimed within {@link Span.PARENT_WITHIN_MS} of its send, and
 * otherwise starts a trace of its own with a link to the sender (a send delayed by hours, a
 * retry after a long backoff or a redrive would stretch the sender's trace over all that time).
 */
const spanOptions = (claim: Claim, leaseMs: number, attributes: Record<string, unknown>): Tracer.SpanOptionsNoTrace => {
  const traceparent = claim.headers["traceparent"]
  const sender = traceparent === undefined ? undefined : Span.fromTraceparent(traceparent)
  if (sender === undefined) return { attributes, kind: "consumer" }
  const sinceSendMs = claimedOnStoreAt(claim, leaseMs) - claim.enqueuedAt.getTime()
  return sinceSendMs <= Span.PARENT_WITHIN_MS
    ? { attributes, kind: "consumer", parent: sender }
    : { attributes, kind: "consumer", root: true, links: [{ span: sender, attributes: { "leasehold.link": "sent-by" } }] }
}

/**
 * What a handler gets besides its message. `signal` is a getter on the prototype, made on first
 * read (most handlers never read it, and an AbortController per message is not free); a class,
 * since an object literal with a getter costs about a microsecond to create.
 */
class MessageContext implements HandlerContext {
  readonly messageId: Claim["id"]
  readonly queue: string
  readonly attempt: number
  readonly consumerId: string
  readonly #running: Commit.Committing & { abort: AbortController | undefined; progress: Progress.ProgressWriter | undefined }
  readonly #prefix: string
  readonly #commit: ReturnType<typeof Commit.make>
  readonly #store: QueueStoreShape
  constructor(
    m: Commit.Committing & { abort: AbortController | undefined; progress: Progress.ProgressWriter | undefined },
    consumerId: string,
    prefix: string,
    commit: ReturnType<typeof Commit.make>,
    store: QueueStoreShape
  ) {
    const { claim } = m
    this.messageId = claim.id
    this.queue = claim.queue
    this.attempt = claim.attempts
    this.consumerId = consumerId
    this.#running = m
    this.#prefix = prefix
    this.#commit = commit
    this.#store = store
  }
  /** Made on read, as `signal`: an effect per message that most handlers never run is not free. */
  get leaseDeadline(): Effect.Effect<Date> {
    const { claim, renewer } = this.#running
    return Effect.sync(() => new Date(renewer.expiresAt(claim.id)))
  }
  get signal(): AbortSignal {
    return (this.#running.abort ??= new AbortController()).signal
  }
  get idempotencyKey(): string {
    return `${this.#prefix}${this.messageId}`
  }
  /** Made on first read, as `signal`: a handler that never commits pays nothing. */
  get commit(): HandlerContext["commit"] {
    return (effect) => this.#commit(this.#running, effect)
  }
  /** Made on first read, as `signal`; its writer on the first report. */
  get progress(): HandlerContext["progress"] {
    return (value) => (this.#running.progress ??= Progress.make(this.#store, this.#running.claim)).report(value)
  }
}

/**
 * How a run ended, from the message fiber's exit and what the watchdog did: an
 * interruption is a lost lease, an overrun max runtime or a cancel when the
 * renewer stopped the handler, and otherwise came from outside (a shutdown).
 */
const runResult = (exit: Exit.Exit<Outcome.RunResult>, stopped: LeaseRenewer.Stopped | undefined): Outcome.RunResult => {
  // A cancelled message is never retried or dead-lettered: however its handler ended (interrupted,
  // failed in a finalizer, or shut down meanwhile), it is cancelled, unless it had succeeded.
  if (stopped?._tag === "MessageCancelled") {
    const succeeded = Exit.isSuccess(exit) && exit.value._tag === "Handled" && Exit.isSuccess(exit.value.exit)
    return succeeded ? exit.value : { _tag: "Cancelled", error: stopped }
  }
  if (Exit.isSuccess(exit)) {
    const result = exit.value
    // A handler stopped by the watchdog ends in an interruption of its own: say why.
    if (stopped === undefined || result._tag !== "Handled" || !Exit.isFailure(result.exit) || !Cause.hasInterruptsOnly(result.exit.cause)) {
      return result
    }
  } else if (stopped === undefined || !Cause.hasInterruptsOnly(exit.cause)) {
    return { _tag: "Interrupted" }
  }
  return stopped._tag === "LeaseLost"
    ? { _tag: "LeaseLost", error: stopped }
    : { _tag: "Handled", exit: Exit.fail(stopped) }
}

/**
 * Abort a handler's signal when its run ended in an interruption (it stays as it is when the
 * handler succeeded or failed): with the watchdog's reason, or an `AbortError` for a shutdown.
 */
const abortIfInterrupted = (
  controller: AbortController,
  exit: Exit.Exit<Outcome.RunResult>,
  stopped: LeaseRenewer.Stopped | undefined
): void => {
  const interrupted = Exit.isFailure(exit)
    ? Cause.hasInterrupts(exit.cause)
    : exit.value._tag === "Handled" && Exit.isFailure(exit.value.exit) && Cause.hasInterruptsOnly(exit.value.exit.cause)
  if (!interrupted) return
  controller.abort(stopped ?? new DOMException("the handler was interrupted: the consumer is shutting down", "AbortError"))
}

const ACK: Outcome.Action = { _tag: "Ack" }
const ackOf = (value: unknown): Outcome.Action => {
  const result = AttemptResult.jsonOf(value)
  return result === undefined ? ACK : { _tag: "Ack", result }
}
/** A run whose commit the fence refused: another consumer holds the message; only the history record. */
const FENCED: Outcome.Action = { _tag: "Forget", error: "commit refused: this run no longer held the message; its writes were rolled back (double run prevented)" }
const QUARANTINED: Outcome.RunResult = { _tag: "Quarantined" }
const EXHAUSTED: Outcome.RunResult = { _tag: "Exhausted" }
/** A run the renewer stopped before its handler started: an interruption, as if stopped at once. */
const STOPPED_BEFORE_START: Outcome.RunResult = { _tag: "Handled", exit: Exit.interrupt() }
