/**
 * The consumer: claims messages in batches, runs a handler for each with a
 * renewer keeping the claim's leases alive, and finishes every message with a
 * fenced write (ack, retry, dead-letter or release). On shutdown it stops
 * claiming, lets handlers finish within a grace period, then releases the rest.
 *
 * @since 0.1.0
 */
import { Cause, Clock, Context, Effect, Exit, Fiber, Latch, Layer, Metric, Random, Runtime, Scope } from "effect"
import * as EventLoopLag from "./internal/eventLoopLag.ts"
import * as IdleWake from "./internal/idleWake.ts"
import * as PresenceWatch from "./internal/presenceWatch.ts"
import { ConsumerPresence } from "./ConsumerPresence.ts"
import * as LeaseRenewer from "./LeaseRenewer.ts"
import type { Claim } from "./Message.ts"
import * as QueueConfig from "./QueueConfig.ts"
import * as Outcome from "./internal/outcome.ts"
import { type ConfigInvalid, MaxRuntimeExceeded, type StoreError } from "./QueueError.ts"
import * as QueueMetrics from "./QueueMetrics.ts"
import { QueueStore, type QueueStoreShape } from "./QueueStore.ts"
import { seconds } from "./internal/format.ts"

/** What a handler gets besides the message. */
export interface HandlerContext {
  readonly messageId: Claim["id"]
  readonly queue: string
  /** 1 on the first run, counting every claim of the message. */
  readonly attempt: number
  readonly consumerId: string
  /** When the current lease ends as far as this consumer knows (it moves with every renewal). */
  readonly leaseDeadline: Effect.Effect<Date>
}

/**
 * Runs one message. Succeed to ack it; fail or die to retry it with backoff
 * (dead-lettered once its attempts are used up). Fail with `Unrecoverable` or
 * `DecodeFailed` to dead-letter at once, with `UnknownTask` to have it tried
 * again later (perhaps by a newer worker). Interruption comes from shutdown,
 * max runtime or a lost lease: make handlers interruptible.
 */
export type Handler<R = never> = (message: Claim, context: HandlerContext) => Effect.Effect<unknown, unknown, R>

/** Settings of one message that differ from the consumer's: what a task definition carries. */
export interface MessagePolicy {
  readonly maxRuntimeMs?: number | undefined
  /** Delay before retry number `attempt + 1`; `random` is uniform in [0, 1) for jitter. */
  readonly retryDelayMs?: ((attempt: number, random: number) => number) | undefined
}

/** A handler with per-message policies: build one from tasks with `Task.dispatcher`. */
export interface Dispatcher<R = never> {
  readonly handle: Handler<R>
  readonly policy: (message: Claim) => MessagePolicy | undefined
}

const toDispatcher = <R>(handler: Handler<R> | Dispatcher<R>): Dispatcher<R> =>
  typeof handler === "function" ? { handle: handler, policy: () => undefined } : handler

/** The consumer's view of its own liveness, for an orchestrator's health check. */
export interface Health {
  /** False when the claim loop has made no progress for longer than the configured bound. */
  readonly healthy: boolean
  readonly lastProgressAt: Date
  readonly inFlight: number
  readonly stopping: boolean
}

/** A running consumer. */
export interface ConsumerShape {
  readonly settings: QueueConfig.ConsumerSettings
  /** Healthy, or stale once the loop has made no progress for `healthStale`. */
  readonly health: Effect.Effect<Health>
}

/** The consumer service: present while the consumer runs (its layer's scope). */
export class Consumer extends Context.Service<Consumer, ConsumerShape>()("leasehold/Consumer") {}


/**
 * Start a consumer in the current scope. Closing the scope shuts it down
 * gracefully. Most programs use {@link layer} or {@link layerFromEnv} instead.
 */
export const make = <R>(
  handler: Handler<R> | Dispatcher<R>,
  configured: QueueConfig.ConsumerSettings
): Effect.Effect<ConsumerShape, never, QueueStore | Scope.Scope | R> =>
  Effect.gen(function*() {
    const dispatcher = toDispatcher(handler)
    const store = yield* QueueStore
    const context = yield* Effect.context<R | QueueStore>()
    const settings = yield* clampLease(configured)
    const { consumerId, concurrency, leaseMs } = settings
    const annotations = { module: "Consumer", consumer: consumerId }
    // Session liveness, when provided: registered before the first claim and kept until after the
    // drain (its finalizer runs after the shutdown's), so no claim of this consumer goes unprotected.
    const presence = yield* Effect.serviceOption(ConsumerPresence)
    const registration = presence._tag === "Some" ? yield* presence.value.register(consumerId) : undefined
    // Idle: sleep until the poll interval or the earliest delay/lease end of our queues, whichever
    // comes first; the reaper releasing a dead consumer's claims wakes us at once, and so does a send.
    // A send to one of our queues (LISTEN/NOTIFY on PostgreSQL) wakes us too: new work runs at once.
    const sent = yield* store.sends(settings.queues)
    const idle = IdleWake.make({
      store,
      queues: settings.queues,
      pollIntervalMs: settings.pollIntervalMs,
      wake: registration === undefined ? sent : Effect.raceFirst(registration.reaped, sent)
    })

    // How long before it could be reaped a consumer stops its handlers, and stops claiming.
    const presenceSafetyMs = Math.min(500, settings.leaseMarginMs)
    const atRisk: Effect.Effect<boolean> = registration === undefined
      ? Effect.succeed(false)
      : Effect.gen(function*() {
        const reapableAt = yield* registration.reapableAt
        return reapableAt._tag === "Some" && (yield* Clock.currentTimeMillis) >= reapableAt.value - presenceSafetyMs
      })

    const handlers = yield* Scope.make()
    const slotFreed = yield* Latch.make(false)
    let inFlight = 0
    let stopping = false
    let lastProgress = yield* Clock.currentTimeMillis
    const progress = Effect.map(Clock.currentTimeMillis, (now) => {
      lastProgress = now
    })

    /** The rules for one message: the consumer's, with the task's retry policy where it has one. */
    const rulesFor = (claim: Claim, random: number): Outcome.Rules => {
      const policy = dispatcher.policy(claim)
      return {
        quarantineAfter: settings.quarantineAfter,
        unknownTaskAttempts: settings.unknownTaskAttempts,
        unknownTaskDelayMs: settings.unknownTaskDelayMs,
        retryDelayMs: (attempt) =>
          policy?.retryDelayMs?.(attempt, random) ??
            Outcome.backoffMs({ baseMs: settings.retryBaseMs, maxMs: settings.retryMaxMs, factor: 2, jitter: true }, attempt, random)
      }
    }

    /**
     * A finishing write, fenced by the lease token. Connection-dead failures are
     * retried with backoff while this consumer's lease still covers the message:
     * until then nobody else can run it, so waiting is safe and a backend-kill
     * storm does not turn into duplicate runs.
     */
    const fencedWrite = (
      renewer: LeaseRenewer.LeaseRenewer,
      claim: Claim,
      name: string,
      write: (store: QueueStoreShape) => Effect.Effect<boolean, StoreError>
    ): Effect.Effect<boolean | "failed"> => {
      const attempt = (delay: number): Effect.Effect<boolean | "failed"> =>
        write(store).pipe(
          Effect.catchTag("ConnectionDead", (error) =>
            Effect.gen(function*() {
              const now = yield* Clock.currentTimeMillis
              if (now + delay >= renewer.expiresAt(claim.id)) return yield* error
              yield* Effect.logWarning(`${name} failed, connection dead; retrying in ${delay}ms: ${error.message}`)
              yield* Effect.sleep(delay)
              return yield* attempt(Math.min(delay * 2, 2_000))
            })),
          Effect.catch((error) =>
            Effect.gen(function*() {
              yield* Metric.update(QueueMetrics.finishFailures, 1)
              yield* Effect.logError(`${name} could not be written; the message runs again after its lease: ${error.message}`)
              return "failed" as const
            })
          ),
          Effect.withSpan(`leasehold.${name}`)
        )
      return attempt(100)
    }

    /** The fenced write of an action; `true` when the lease was still held. */
    const write = (renewer: LeaseRenewer.LeaseRenewer, claim: Claim, action: Outcome.Action) => {
      switch (action._tag) {
        case "Ack":
          return fencedWrite(renewer, claim, "ack", (s) => s.ack(claim))
        case "Retry":
          return fencedWrite(renewer, claim, "retry", (s) => s.retry(claim, { delay: action.delayMs, error: action.error }))
        case "DeadLetter":
          return fencedWrite(renewer, claim, "deadLetter", (s) =>
            s.deadLetter(claim, { reason: action.reason, error: action.error }))
        case "Release":
          return fencedWrite(renewer, claim, "release", (s) => s.release(claim))
        case "Abandon":
          return Effect.succeed(false)
      }
    }

    /** Report a finished message: metrics, one log line, and its record in the attempt history. */
    const report = (claim: Claim, action: Outcome.Action, held: boolean | "failed", startedAt: number) =>
      Effect.gen(function*() {
        switch (action._tag) {
          case "Ack":
            if (held === true) yield* Metric.update(QueueMetrics.acked, 1)
            if (held === false) {
              yield* Metric.update(QueueMetrics.doubleRuns, 1)
              yield* Effect.logWarning("double run: the ack found the lease gone; another consumer has taken this message")
            }
            break
          case "Retry":
            if (held === true) {
              yield* Metric.update(QueueMetrics.retried, 1)
              yield* Effect.logWarning(`retry in ${seconds(action.delayMs)}:\n${action.error}`)
            }
            break
          case "DeadLetter":
            if (held === true) {
              yield* Metric.update(QueueMetrics.deadLettered, 1)
              yield* Effect.logWarning(`dead-lettered: ${action.reason}${action.error === undefined ? "" : `\n${action.error}`}`)
            }
            break
          case "Release":
            if (held === true) {
              yield* Metric.update(QueueMetrics.released, 1)
              yield* Effect.logInfo("released on shutdown")
            }
            break
          case "Abandon":
            yield* Effect.logError("handler stopped: another consumer holds the message now")
            break
        }
        const endedAt = yield* Clock.currentTimeMillis
        const error = action._tag === "Abandon"
          ? action.error
          : action._tag === "Retry" || action._tag === "DeadLetter"
          ? (action.error ?? (action._tag === "DeadLetter" ? action.reason : null))
          : held === "failed"
          ? "the finishing write failed"
          : null
        yield* store.recordAttempt({
          messageId: claim.id,
          queue: claim.queue,
          task: claim.task,
          attempt: claim.attempts,
          consumer: consumerId,
          startedAt: new Date(startedAt),
          endedAt: new Date(endedAt),
          outcome: Outcome.historyOutcome(action, held === true),
          error
        }).pipe(
          Effect.catch((e) => Effect.logWarning(`attempt history not recorded: ${e.message}`))
        )
      })

    /** Write the outcome of one message. Runs uninterruptibly, after the renewer let go of the message. */
    const finish = (renewer: LeaseRenewer.LeaseRenewer, claim: Claim, exit: Exit.Exit<Outcome.RunResult>, startedAt: number) =>
      Effect.gen(function*() {
        yield* renewer.finish(claim.id)
        const result: Outcome.RunResult = Exit.isSuccess(exit) ? exit.value : { _tag: "Interrupted" }
        const action = Outcome.decide(claim, result, rulesFor(claim, yield* Random.next))
        const held = yield* write(renewer, claim, action)
        yield* report(claim, action, held, startedAt)
      })

    /** Run one message of a claim, then finish it, whatever happened. */
    const runMessage = (renewer: LeaseRenewer.LeaseRenewer, claim: Claim) =>
      Effect.suspend(() => {
        let startedAt = 0
        return Effect.gen(function*() {
          startedAt = yield* Clock.currentTimeMillis
          if (claim.leaseExpiries >= settings.quarantineAfter) return { _tag: "Quarantined" } as Outcome.RunResult
          if (claim.attempts > claim.maxAttempts) return { _tag: "Exhausted" } as Outcome.RunResult
          const maxRuntimeMs = dispatcher.policy(claim)?.maxRuntimeMs ?? settings.maxRuntimeMs
          const handled = dispatcher.handle(claim, {
            messageId: claim.id,
            queue: claim.queue,
            attempt: claim.attempts,
            consumerId,
            leaseDeadline: Effect.sync(() => new Date(renewer.expiresAt(claim.id)))
          }).pipe(
            Effect.timeoutOrElse({
              duration: maxRuntimeMs,
              orElse: () =>
                Effect.fail(
                  new MaxRuntimeExceeded({
                    messageId: claim.id,
                    maxRuntimeMs,
                    message: `handler ran past its max runtime of ${seconds(maxRuntimeMs)} and was interrupted`
                  })
                )
            }),
            Effect.exit,
            Effect.map((exit): Outcome.RunResult => ({ _tag: "Handled", exit })),
            Effect.withSpan("leasehold.handle", {
              attributes: { queue: claim.queue, task: claim.task, messageId: claim.id, attempt: claim.attempts }
            })
          )
          const result = settings.onLeaseLost === "interrupt"
            ? yield* Effect.raceFirst(
              handled,
              Effect.map(renewer.lost(claim.id), (error): Outcome.RunResult => ({ _tag: "LeaseLost", error }))
            )
            : yield* handled
          yield* Metric.update(QueueMetrics.handlerDuration, (yield* Clock.currentTimeMillis) - startedAt)
          return result
        }).pipe(
          Effect.onExit((exit) => finish(renewer, claim, exit, startedAt)),
          Effect.ensuring(Effect.gen(function*() {
            inFlight -= 1
            yield* Metric.update(QueueMetrics.inFlight, inFlight)
            yield* slotFreed.open
          })),
          Effect.annotateLogs({ queue: claim.queue, task: claim.task, messageId: claim.id, attempt: claim.attempts })
        )
      })

    /** The renewers of the claims in progress, so a presence watchdog can stop them all. */
    const renewers = new Set<LeaseRenewer.LeaseRenewer>()

    /** Process one claim: its renewer lives exactly as long as the claim's scope. */
    const processClaim = (claims: ReadonlyArray<Claim>, claimedAt: number) =>
      Effect.scoped(Effect.gen(function*() {
        const renewer = yield* LeaseRenewer.start(claims, {
          leaseMs,
          marginMs: settings.leaseMarginMs,
          stopTimeoutMs: settings.renewerStopTimeoutMs,
          claimedAt
        })
        renewers.add(renewer)
        yield* Effect.addFinalizer(() => Effect.sync(() => renewers.delete(renewer)))
        yield* Effect.forEach(claims, (claim) => runMessage(renewer, claim), { concurrency: "unbounded", discard: true })
      }))

    /** The claim loop: round-robin over the queues, never more claims than free slots. */
    const loop = Effect.gen(function*() {
      let next = 0
      let emptyInARow = 0
      let backoff = settings.pollIntervalMs
      while (true) {
        yield* progress
        if (inFlight >= concurrency) {
          yield* slotFreed.close
          if (inFlight >= concurrency) yield* Effect.timeoutOption(slotFreed.await, settings.pollIntervalMs)
          continue
        }
        if (yield* atRisk) {
          // Cut off long enough to look dead to the others: whatever we claimed now would be stopped at once.
          yield* Effect.sleep(settings.pollIntervalMs)
          continue
        }
        const queue = settings.queues[next++ % settings.queues.length]!
        const claimedAt = yield* Clock.currentTimeMillis
        // Uninterruptible: a claim that committed must be dispatched (or released), never dropped.
        const result = yield* store.claim(queue, {
          lease: leaseMs,
          limit: Math.min(settings.batchSize, concurrency - inFlight),
          consumer: consumerId
        }).pipe(Effect.uninterruptible, Effect.result)
        if (result._tag === "Failure") {
          const error = result.failure
          if (error._tag === "ConnectionDead") {
            yield* Effect.logWarning(`claim failed, connection dead; retrying in ${seconds(backoff)}: ${error.message}`)
          } else {
            yield* Effect.logError(`claim failed (${error._tag}); retrying in ${seconds(backoff)}: ${error.message}`)
          }
          yield* Effect.sleep(backoff)
          backoff = Math.min(backoff * 2, settings.backoffMaxMs)
          continue
        }
        backoff = settings.pollIntervalMs
        const claims = result.success
        if (claims.length === 0) {
          if (++emptyInARow >= settings.queues.length) {
            emptyInARow = 0
            yield* idle
          }
          continue
        }
        emptyInARow = 0
        inFlight += claims.length
        yield* Metric.update(QueueMetrics.claimed, claims.length)
        yield* Metric.update(QueueMetrics.inFlight, inFlight)
        yield* Effect.forkIn(processClaim(claims, claimedAt), handlers)
      }
    }).pipe(Effect.annotateLogs({ ...annotations, module: "Consumer" }))

    // Warn when the event loop stalls for half a renewal interval: renewals would be late.
    yield* Effect.forkScoped(
      EventLoopLag.watch({ intervalMs: Math.floor(leaseMs / 3), warnAboveMs: Math.floor(leaseMs / 6) }).pipe(
        Effect.annotateLogs(annotations)
      )
    )
    const loopFiber = yield* Effect.forkDetach(loop.pipe(Effect.provideContext(context)))
    if (registration !== undefined) {
      // Cut off from the database (presence session gone, heartbeats failing), this consumer will
      // soon look dead to the others, whose reapers then release its claims: stop the handlers
      // first, so no message runs here and elsewhere at once.
      yield* Effect.forkScoped(
        PresenceWatch.watch({ registration, renewers, safetyMs: presenceSafetyMs }).pipe(
          Effect.annotateLogs(annotations)
        )
      )
    }
    // Keep the attempt history bounded: every consumer prunes now and then (an indexed delete).
    yield* Effect.forkScoped(
      Effect.forever(
        Effect.sleep("10 minutes").pipe(
          Effect.andThen(store.pruneAttempts(settings.attemptRetentionMs)),
          Effect.catch((e) => Effect.logWarning(`attempt history not pruned: ${e.message}`))
        )
      ).pipe(Effect.annotateLogs(annotations))
    )

    /** Stop claiming, let handlers finish within the grace, then interrupt and release the rest. */
    const shutdown = Effect.gen(function*() {
      stopping = true
      yield* Effect.logInfo(`shutting down: ${inFlight} in flight, grace ${seconds(settings.shutdownGraceMs)}`)
      // The loop's claim is uninterruptible (a committed claim must be dispatched); do not wait on a stuck one forever.
      const loopStopped = yield* Effect.timeoutOption(Fiber.interrupt(loopFiber), settings.renewerStopTimeoutMs)
      if (loopStopped._tag === "None") {
        yield* Effect.logWarning(`claim loop did not stop within ${seconds(settings.renewerStopTimeoutMs)}: a claim is stuck; going on`)
      }
      const drained = yield* Effect.timeoutOption(
        Effect.gen(function*() {
          while (inFlight > 0) {
            yield* slotFreed.close
            if (inFlight > 0) yield* slotFreed.await
          }
        }),
        settings.shutdownGraceMs
      )
      if (drained._tag === "None") {
        yield* Effect.logWarning(`grace elapsed: interrupting ${inFlight} handlers and releasing their messages`)
      }
      yield* Scope.close(handlers, Exit.void)
      yield* Effect.logInfo("consumer stopped")
    }).pipe(Effect.annotateLogs(annotations))
    yield* Effect.addFinalizer(() => shutdown)

    yield* Effect.logInfo(
      `consumer started: queues ${settings.queues.join(",")}, concurrency ${concurrency}, batch ${settings.batchSize}, lease ${seconds(leaseMs)}`
    ).pipe(Effect.annotateLogs(annotations))

    return Consumer.of({
      settings,
      health: Effect.map(Clock.currentTimeMillis, (now) => ({
        healthy: now - lastProgress <= settings.healthStaleMs,
        lastProgressAt: new Date(lastProgress),
        inFlight,
        stopping
      }))
    })
  })

/** A lease longer than the max runtime makes no sense: clamp it, and say so. */
const clampLease = (settings: QueueConfig.ConsumerSettings) =>
  Effect.gen(function*() {
    if (settings.leaseMs <= settings.maxRuntimeMs) return settings
    yield* Effect.logWarning(
      `lease ${seconds(settings.leaseMs)} exceeds max runtime ${seconds(settings.maxRuntimeMs)}: clamping the lease to the max runtime`
    ).pipe(Effect.annotateLogs({ module: "Consumer" }))
    const leaseMs = settings.maxRuntimeMs
    return { ...settings, leaseMs, leaseMarginMs: Math.min(settings.leaseMarginMs, Math.floor(leaseMs / 6)) }
  })

/** A consumer running `handler`, configured in code; it runs while the layer is in use. */
export const layer = <R>(
  handler: Handler<R> | Dispatcher<R>,
  options: QueueConfig.ConsumerOptions = {}
): Layer.Layer<Consumer, ConfigInvalid, QueueStore | R> =>
  Layer.effect(Consumer, Effect.flatMap(QueueConfig.resolve(options), (settings) => make(handler, settings)))

/** A consumer running `handler`, configured from `LEASEHOLD_*` environment variables. */
export const layerFromEnv = <R>(handler: Handler<R> | Dispatcher<R>): Layer.Layer<Consumer, ConfigInvalid, QueueStore | R> =>
  Layer.effect(Consumer, Effect.flatMap(QueueConfig.fromEnv, (settings) => make(handler, settings)))

/**
 * A teardown for `NodeRuntime.runMain` in worker programs: a shutdown asked for
 * by SIGTERM/SIGINT that drained (the main fiber ended by interruption only)
 * exits 0, not 130; anything else exits as Effect's default teardown says.
 *
 * `Layer.launch(WorkerLayer).pipe(NodeRuntime.runMain({ teardown: Consumer.teardown }))`
 */
export const teardown: Runtime.Teardown = (exit, onExit) =>
  Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause) ? onExit(0) : Runtime.defaultTeardown(exit, onExit)
