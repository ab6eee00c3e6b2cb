/**
 * The consumer: claims messages in batches, runs a handler for each with a
 * renewer keeping the claim's leases alive, and finishes every message with a
 * fenced write (ack, retry, dead-letter or release). On shutdown it stops
 * claiming, lets handlers finish within a grace period, then releases the rest.
 * Queues with a concurrency of their own are claimed by loops of their own into
 * slots of their own (`consumer/lanes.ts`), all in one consumer.
 *
 * @since 0.1.0
 */
import { Cause, Clock, Context, Deferred, Effect, Exit, Fiber, Latch, Layer, type LogLevel, Option, References, Runtime, Scope } from "effect"
import * as ClaimLoop from "./consumer/claimLoop.ts"
import * as Completer from "./consumer/complete.ts"
import * as Flight from "./consumer/flight.ts"
import * as FlowDeclaration from "./FlowDeclaration.ts"
import * as Handle from "./consumer/handle.ts"
import * as EventLoopLag from "./consumer/lag.ts"
import * as Lanes from "./consumer/lanes.ts"
import * as PresenceWatch from "./consumer/presenceWatch.ts"
import { ConsumerPresence } from "./ConsumerPresence.ts"
import { StoreSettings } from "./StoreSettings.ts"
import * as QueueDepth from "./QueueDepth.ts"
import * as Maintenance from "./maintenance/Maintenance.ts"
import * as DepthHistory from "./maintenance/depthHistory.ts"
import { Insights } from "./Insights.ts"
import * as Prune from "./maintenance/prune.ts"
import * as LeaseRenewer from "./consumer/renew.ts"
import type { Claim } from "./Message.ts"
import * as QueueConfig from "./QueueConfig.ts"
import type { ConfigInvalid, InvalidInput, StoreError } from "./QueueError.ts"
import * as QueueMetrics from "./QueueMetrics.ts"
import { QueueStore, type QueueStoreShape } from "./QueueStore.ts"
import { seconds } from "./internal/format.ts"
import { type Dispatcher, type Handler, toDispatcher } from "./Handler.ts"

export type { Dispatcher, Handler, HandlerContext, MessagePolicy } from "./Handler.ts"

/** The consumer's view of its own liveness, for an orchestrator's health check. */
export interface Health {
  /** False when the claim loop failed, or made no progress for longer than the configured bound. */
  readonly healthy: boolean
  readonly lastProgressAt: Date
  readonly inFlight: number
  readonly stopping: boolean
}

/** A running consumer. */
export interface ConsumerShape {
  readonly settings: QueueConfig.ConsumerSettings
  /**
   * Healthy, or stale once the loop has made no progress for `healthStale`
   * (a claim answered, or a wait by design such as idling or waiting for a free
   * slot), or failed.
   */
  readonly health: Effect.Effect<Health>
  /**
   * Fails when the claim loop failed with an error that is not connection-dead
   * (a missing table, a revoked permission, a bug): the consumer has stopped
   * claiming. Never succeeds. {@link launch} makes it the program's failure.
   */
  readonly failure: Effect.Effect<never, StoreError | InvalidInput>
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
    const { consumerId } = settings
    const annotations = { module: "Consumer", consumer: consumerId }
    // Session liveness, when provided: registered before the first claim and kept until after the
    // drain (its finalizer runs after the shutdown's), so no claim of this consumer goes unprotected.
    const presence = yield* Effect.serviceOption(ConsumerPresence)
    const registration = presence._tag === "Some" ? yield* presence.value.register(consumerId, {
        queues: settings.queues,
        concurrency: settings.concurrency,
        leaseMs: settings.leaseMs
      })
      : undefined
    // Idle: sleep until the poll interval or the earliest delay/lease end of our queues, whichever
    // comes first; the reaper releasing a dead consumer's claims wakes us at once, and so does a send.
    // A send to one of our queues (LISTEN/NOTIFY on PostgreSQL) wakes us too: new work runs at once.
    // One lane per pool of handler slots (usually one), each with its own claim loop and idle sleep.
    const lanes = yield* Lanes.make({
      store,
      lanes: QueueConfig.lanes(settings),
      queues: settings.queues,
      pollIntervalMs: settings.pollIntervalMs,
      prefetch: settings.prefetch,
      reaped: registration?.reaped
    })

    // How long before it could be reaped a consumer stops its handlers, and stops claiming: a
    // reaper needs its lock seen free for `reapAfter` (300 ms by default), so a small margin
    // (the presence watch looks every 25 ms).
    const presenceSafetyMs = Math.min(100, settings.leaseMarginMs)
    const atRisk: Effect.Effect<boolean> = registration === undefined
      ? Effect.succeed(false)
      : Effect.gen(function*() {
        const reapableAt = yield* registration.reapableAt
        return reapableAt._tag === "Some" && (yield* Clock.currentTimeMillis) >= reapableAt.value - presenceSafetyMs
      })

    const handlers = yield* Scope.make()

    /**
     * Closed while a claim statement is in flight. A flush waits for it (at most
     * FLUSH_HOLD_MAX_MS), so it reaches the server as the claim's answer arrives and runs there
     * while the claimed messages are dispatched, instead of competing with the claim (the claim
     * is the step every message waits for; measured 15-20 % more messages/s at C=50).
     */
    const claimIdle = Latch.makeUnsafe(true)
    // With a second claim loop a claim is in flight most of the time: a held flush would wait out
    // its bound behind one claim after another (measured slower at C=50), so none is held.
    const holdFlushes = !lanes.some((lane) => Flight.claimsBeside(lane.flight.concurrency))
    const claimAnswered = Effect.suspend(() =>
      claimIdle.isOpen() || !holdFlushes ? Effect.void : Effect.asVoid(Effect.timeoutOption(claimIdle.await, FLUSH_HOLD_MAX_MS))
    )

    // Before the shutdown finalizer: its flushers outlive the drain.
    const completer = yield* Completer.make({
      beforeFlush: claimAnswered,
      store,
      consumerId,
      attemptTimeoutMs: settings.renewerStopTimeoutMs,
      flushers: COMPLETION_FLUSHERS,
      maxBatch: Flight.COMPLETION_BATCH
    })

    /** The handle step: run a message, decide its outcome, hand it to the completer. */
    const storeSettings = yield* Effect.serviceOption(StoreSettings)
    const schema = storeSettings._tag === "Some" ? storeSettings.value.schema : undefined
    const handle = Handle.make({
      dispatcher,
      settings,
      completer,
      store,
      idempotencyPrefix: schema === undefined ? "leasehold:" : `leasehold:${schema}:`
    })

    /** The renewers of the claims in progress, so a presence watchdog can stop them all. */
    const renewers = new Set<LeaseRenewer.LeaseRenewer>()
    yield* wakeCancelled(store, settings.queues, renewers)

    // The limits the tasks declare are written once, before any lane's first claim: a claim never
    // runs without them. A refused write fails the consumer like a failed claim would.
    const declared = yield* Effect.cached(
      FlowDeclaration.declareWhileConnecting(dispatcher.limits ?? [], { backoffMs: settings.pollIntervalMs, backoffMaxMs: settings.backoffMaxMs })
    )
    // A lane's claim loops: the lead, and from 32 slots one beside it while there is a backlog (ClaimLoop.Role).
    const loops = lanes.flatMap(({ queues, flight, idle }) =>
      (Flight.claimsBeside(flight.concurrency) ? LEAD_AND_BESIDE : LEAD_ONLY).map((role) =>
        Effect.andThen(
          declared,
          ClaimLoop.make({ store, settings, dispatcher, handle, completer, queues, flight, handlers, renewers, claimIdle, atRisk, idle }, role)
        ).pipe(Effect.annotateLogs({ ...annotations, module: "Consumer" }), Effect.provideContext(context))
      ))

    // Warn when the event loop stalls for half a renewal interval (of the shortest lease): renewals would be late.
    const taskLeasesMs = dispatcher.leasesMs ?? []
    const leaseMs = Math.min(...settings.queues.map((q) => QueueConfig.forQueue(settings, q).leaseMs), ...taskLeasesMs)
    yield* Effect.forkScoped(
      EventLoopLag.watch({ intervalMs: Math.floor(leaseMs / 3), warnAboveMs: Math.floor(leaseMs / 6) }).pipe(
        Effect.annotateLogs(annotations)
      )
    )
    const { failed, loopFibers } = yield* forkLoops(loops, lanes, annotations)
    if (registration !== undefined) {
      // Every presence session gone and none regained yet, this consumer will soon look dead to
      // the others, whose reapers then release its claims: stop the handlers first, so no
      // message runs here and elsewhere at once.
      yield* Effect.forkScoped(
        PresenceWatch.watch({ registration, renewers, safetyMs: presenceSafetyMs }).pipe(
          Effect.annotateLogs(annotations)
        )
      )
    }
    // Keep the attempt history bounded, and drop uniqueness reservations whose window ended: every
    // consumer prunes now and then (indexed deletes; see maintenance/prune.ts).
    yield* Maintenance.fork(Prune.attempts(store, settings.attemptRetentionMs)).pipe(Effect.annotateLogs(annotations))
    yield* Maintenance.fork(Prune.uniqueKeys(store)).pipe(Effect.annotateLogs(annotations))
    yield* Maintenance.fork(Prune.flow(store)).pipe(Effect.annotateLogs(annotations))
    // The fleet's queue depths over time, for the dashboard (one sample per interval between all processes).
    const insights = yield* Effect.serviceOption(Insights)
    if (Option.isSome(insights)) yield* Maintenance.fork(DepthHistory.make(store, insights.value)).pipe(Effect.annotateLogs(annotations))

    yield* Effect.addFinalizer(() => shutdown({ settings, lanes, handlers, loopFibers, taskLeasesMs }).pipe(Effect.annotateLogs(annotations)))

    // The queue-depth collector of this process (`QueueDepth.layer`) samples these queues.
    yield* QueueDepth.track(settings.queues)
    yield* QueueMetrics.exportAtZero(settings.queues, dispatcher.tasks ?? [])

    yield* Effect.logInfo(startupLine(settings, { presence: registration !== undefined, schema })).pipe(Effect.annotateLogs(annotations))

    return Consumer.of({
      settings,
      failure: Deferred.await(failed),
      health: Effect.map(Clock.currentTimeMillis, (now) => ({
        healthy: !Deferred.isDoneUnsafe(failed) && Lanes.fresh(lanes, now, settings.healthStaleMs),
        lastProgressAt: new Date(Lanes.lastProgress(lanes)),
        inFlight: Lanes.inFlight(lanes),
        stopping: lanes.some((lane) => lane.flight.stopping)
      }))
    })
  })

/**
 * The consumer's effective configuration, logged once at start: what an operator
 * checks first (the lease clamped to the max runtime shows here as it runs).
 */
export const startupLine = (
  settings: QueueConfig.ConsumerSettings,
  context: { readonly presence: boolean; readonly schema?: string | undefined }
): string =>
  [
    `consumer started: queues ${settings.queues.join(",")}`,
    `concurrency ${settings.concurrency}`,
    `batch ${settings.batchSize}`,
    `prefetch ${settings.prefetch}`,
    `lease ${seconds(settings.leaseMs)} (renewed every ${seconds(Math.floor(settings.leaseMs / 3))}, margin ${seconds(settings.leaseMarginMs)})`,
    ...Object.entries(settings.perQueue).map(([queue, own]) =>
      `queue ${queue}: ${own.concurrency === undefined ? "shared slots" : `concurrency ${own.concurrency}`}, batch ${own.batchSize}, lease ${seconds(own.leaseMs)}`),
    `max runtime ${seconds(settings.maxRuntimeMs)}`,
    `grace ${seconds(settings.shutdownGraceMs)}`,
    `on a lost lease ${settings.onLeaseLost}`,
    `liveness ${context.presence ? "presence on (dead sessions reaped)" : "presence off (lease expiry only)"}`,
    `poll ${seconds(settings.pollIntervalMs)}`,
    ...(context.schema === undefined ? [] : [`schema ${context.schema}`]),
    `id ${settings.consumerId}`
  ].join(", ")

/**
 * Run the claim loops (one per lane) detached, so that the shutdown controls when they stop (and
 * bounds the wait for a claim in flight). A failure of a loop, which is never a connection-dead
 * one, ends the consumer (every lane stops claiming): logged at ERROR, reported by `health` and
 * by `failure` (which `launch` turns into the program's).
 */
const forkLoops = (
  loops: ReadonlyArray<Effect.Effect<never, StoreError | InvalidInput>>,
  lanes: ReadonlyArray<Lanes.Running>,
  annotations: Record<string, string>
) =>
  Effect.gen(function*() {
    const failed = yield* Deferred.make<never, StoreError | InvalidInput>()
    const loopFibers = yield* Effect.forEach(loops, (loop) => Effect.forkDetach(loop.pipe(
      Effect.tapCause((cause) =>
        Cause.hasInterruptsOnly(cause) ? Effect.void : Effect.gen(function*() {
          Lanes.stop(lanes)
          yield* Effect.logError(
            `claim loop failed; the consumer stops claiming and shuts down:\n${Cause.pretty(cause)}\n` +
              `${Lanes.inFlight(lanes)} message(s) in flight get the shutdown grace to finish, then are released; ` +
              "messages not claimed stay queued for other consumers"
          ).pipe(
            Effect.annotateLogs(annotations)
          )
          yield* Deferred.failCause(failed, cause as Cause.Cause<StoreError | InvalidInput>)
        })
      )
    )))
    return { failed, loopFibers }
  })

/**
 * An operator cancelled running messages of `queues`: the claims holding them renew at once
 * and hear so in the answer (instead of at their next renewal, up to lease/3 later). A notice
 * that names none (a cancel of thousands) wakes every claim.
 */
const wakeCancelled = (store: QueueStoreShape, queues: ReadonlyArray<string>, renewers: ReadonlySet<LeaseRenewer.LeaseRenewer>) =>
  Effect.gen(function*() {
    const cancelled = yield* store.cancels(queues)
    const wake = (ids: ReadonlySet<Claim["id"]> | undefined) =>
      renewers.forEach((renewer) => {
        if (ids === undefined) return renewer.renewNow()
        for (const id of ids) {
          if (renewer.holds(id)) return renewer.renewNow()
        }
      })
    yield* Effect.forkScoped(Effect.forever(Effect.flatMap(cancelled, (ids) => Effect.sync(() => wake(ids)))))
  })

/** Stop claiming, let handlers finish within the grace, then interrupt and release the rest. */
const shutdown = (parts: {
  readonly settings: QueueConfig.ConsumerSettings
  readonly lanes: ReadonlyArray<Lanes.Running>
  readonly handlers: Scope.Closeable
  readonly loopFibers: ReadonlyArray<Fiber.Fiber<unknown, unknown>>
  /** The leases the dispatcher's tasks declare: a finishing write is retried while its message's lease lasts. */
  readonly taskLeasesMs: ReadonlyArray<number>
}) =>
  Effect.gen(function*() {
    const { settings, lanes, handlers, loopFibers } = parts
    Lanes.stop(lanes)
    yield* Effect.logInfo(`shutting down: ${Lanes.inFlight(lanes)} in flight, grace ${seconds(settings.shutdownGraceMs)}`)
    // The loop's claim is uninterruptible (a committed claim must be dispatched); do not wait on a stuck one forever.
    const loopStopped = yield* Effect.timeoutOption(Fiber.interruptAll(loopFibers), settings.renewerStopTimeoutMs)
    if (loopStopped._tag === "None") {
      yield* Effect.logWarning(`claim loop did not stop within ${seconds(settings.renewerStopTimeoutMs)}: a claim is stuck; going on`)
    }
    const drained = yield* Effect.timeoutOption(Lanes.drained(lanes), settings.shutdownGraceMs)
    if (drained._tag === "None") {
      const inFlight = Lanes.inFlight(lanes)
      yield* Effect.logWarning(`grace elapsed: interrupting ${inFlight} handler${inFlight === 1 ? "" : "s"} and releasing their messages`)
    }
    yield* Scope.close(handlers, Exit.void)
    // The interrupted handlers' releases (and any completion still queued) are written before the
    // completer stops: each is bounded by its lease plus one attempt.
    const completed = yield* Effect.timeoutOption(Lanes.drained(lanes), Math.max(longestLeaseMs(settings), ...parts.taskLeasesMs) + settings.renewerStopTimeoutMs)
    if (completed._tag === "None") {
      yield* Effect.logWarning(`${Lanes.inFlight(lanes)} finishing write(s) still pending at shutdown; those messages run again after their leases`)
    }
    yield* Effect.logInfo("consumer stopped")
  })

/**
 * Completion flushes in flight at once. One: while it is in flight the next completions gather
 * into a bigger batch (fewer statements; measured 0-10 % faster at C=50 than two), and the lease
 * pool's other connection stays free for renewals, which never wait behind a flush.
 */
const COMPLETION_FLUSHERS = 1
/**
 * The claim loops of a lane: its lead alone, or (`Flight.claimsBeside`) with a second loop that keeps a
 * claim statement in flight while the first's answer is dispatched: at C=200 over a backlog the worker,
 * the claim's backend and the finishing write's backend each stood about half idle, waiting on one
 * another (docs/benchmarks.md).
 */
const LEAD_ONLY: ReadonlyArray<ClaimLoop.Role> = ["lead"]
const LEAD_AND_BESIDE: ReadonlyArray<ClaimLoop.Role> = ["lead", "beside"]
/** The longest a flush waits for a claim in flight (a claim of 50 answers in 1-3 ms here). */
const FLUSH_HOLD_MAX_MS = 20

/**
 * The longest lease of the consumer's queues (a task's own lease may be longer: its finishing
 * write may then still be pending when the shutdown stops waiting, and the message runs again
 * after its lease).
 */
const longestLeaseMs = (settings: QueueConfig.ConsumerSettings) =>
  Math.max(settings.leaseMs, ...Object.values(settings.perQueue).map((own) => own.leaseMs))

/** A lease longer than the max runtime makes no sense: clamp it (the consumer's and each queue's), and say so. */
const clampLease = (settings: QueueConfig.ConsumerSettings) =>
  Effect.gen(function*() {
    const maxRuntimeMs = settings.maxRuntimeMs
    const clamped = (leaseMs: number, marginMs: number, queue?: string) =>
      leaseMs <= maxRuntimeMs ? Effect.succeed({ leaseMs, marginMs }) : Effect.as(
        Effect.logWarning(
          `lease ${seconds(leaseMs)} exceeds max runtime ${seconds(maxRuntimeMs)}: clamping the lease to the max runtime`
        ).pipe(Effect.annotateLogs(queue === undefined ? { module: "Consumer" } : { module: "Consumer", queue })),
        { leaseMs: maxRuntimeMs, marginMs: Math.max(1, Math.min(marginMs, Math.floor(maxRuntimeMs / 6))) }
      )
    const own = yield* clamped(settings.leaseMs, settings.leaseMarginMs)
    const perQueue: Record<string, QueueConfig.QueueSettings> = {}
    for (const [queue, q] of Object.entries(settings.perQueue)) {
      const lease = yield* clamped(q.leaseMs, q.leaseMarginMs, queue)
      perQueue[queue] = { ...q, leaseMs: lease.leaseMs, leaseMarginMs: lease.marginMs }
    }
    return { ...settings, leaseMs: own.leaseMs, leaseMarginMs: own.marginMs, perQueue }
  })

/** The queues a dispatcher's tasks are sent to, when it knows them. */
const dispatcherQueues = <R>(handler: Handler<R> | Dispatcher<R>): ReadonlyArray<string> | undefined =>
  typeof handler === "function" || handler.queues === undefined || handler.queues.length === 0 ? undefined : handler.queues

/**
 * A consumer running `handler`, configured in code; it runs while the layer is
 * in use. Without `queues`, a dispatcher's consumer consumes its tasks' queues
 * (a plain handler: `default`).
 */
export const layer = <R>(
  handler: Handler<R> | Dispatcher<R>,
  options: QueueConfig.ConsumerOptions = {}
): Layer.Layer<Consumer, ConfigInvalid, QueueStore | R> =>
  Layer.effect(
    Consumer,
    Effect.flatMap(
      QueueConfig.resolve(options.queues === undefined ? { ...options, queues: dispatcherQueues(handler) } : options),
      (settings) => make(handler, settings)
    )
  )

/**
 * A consumer running `handler`, configured from `LEASEHOLD_*` environment
 * variables. Without `LEASEHOLD_QUEUES`, a dispatcher's consumer consumes its
 * tasks' queues (a plain handler: `default`). Every variable of the worker is
 * checked before the consumer starts (`QueueConfig.workerFromEnv`: the HTTP
 * server's and the admin token too, whose layers are built after this one), and
 * the consumer logs from `LEASEHOLD_LOG_LEVEL` up when it is set.
 */
export const layerFromEnv = <R>(handler: Handler<R> | Dispatcher<R>): Layer.Layer<Consumer, ConfigInvalid, QueueStore | R> =>
  Layer.effect(
    Consumer,
    Effect.gen(function*() {
      // LEASEHOLD_QUEUES is read once: unset (or blank), a dispatcher's task queues stand in for it.
      const { consumer: settings, process } = yield* QueueConfig.workerFromEnvWith({ fallbacks: { queues: dispatcherQueues(handler) } })
      return yield* withLogLevel(make(handler, settings), process.logLevel)
    })
  )

/** `effect` with the minimum log level `level`, when there is one (else as it is). */
const withLogLevel = <A, E, R>(effect: Effect.Effect<A, E, R>, level: Option.Option<LogLevel.LogLevel>) =>
  Option.isNone(level) ? effect : Effect.provideService(effect, References.MinimumLogLevel, level.value)

/**
 * Run a worker: build `layer` (which provides a {@link Consumer}), keep it
 * running until interrupted (SIGTERM/SIGINT under `NodeRuntime.runMain`), and
 * fail when the consumer's claim loop fails with an error that is not
 * connection-dead, after the consumer shut down (in-flight handlers drained
 * within the grace, the rest released). Prefer it to `Layer.launch`, which
 * would keep a failed consumer's process running. Before it builds anything it
 * checks the process's variables (`QueueConfig.processFromEnv`: HTTP server,
 * admin token, `LEASEHOLD_LOG_LEVEL`), failing with `ConfigInvalid` on a bad
 * one, and runs the whole worker from `LEASEHOLD_LOG_LEVEL` up when it is set.
 *
 * `Consumer.launch(WorkerLayer).pipe(NodeRuntime.runMain({ teardown: Consumer.teardown }))`
 */
export const launch = <E, R>(
  layer: Layer.Layer<Consumer, E, R>
): Effect.Effect<never, E | StoreError | InvalidInput | ConfigInvalid, R> =>
  Effect.flatMap(QueueConfig.processFromEnv, (process) =>
    withLogLevel(Effect.scoped(Effect.flatMap(Layer.build(layer), (context) => Context.get(context, Consumer).failure)), process.logLevel))

/**
 * A teardown for `NodeRuntime.runMain` in worker programs: a shutdown asked for
 * by SIGTERM/SIGINT that drained (the main fiber ended by interruption only)
 * exits 0, not 130; anything else exits as Effect's default teardown says.
 *
 * `Consumer.launch(WorkerLayer).pipe(NodeRuntime.runMain({ teardown: Consumer.teardown }))`
 */
export const teardown: Runtime.Teardown = (exit, onExit) =>
  Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause) ? onExit(0) : Runtime.defaultTeardown(exit, onExit)
