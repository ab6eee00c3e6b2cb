/**
 * An in-memory queue store with the same semantics as the PostgreSQL one, for
 * fast tests of consumer logic. Time is Effect's `Clock`, so `TestClock` drives
 * leases and delays. It has no transactions and keeps nothing across restarts:
 * never use it in production.
 *
 * @since 0.1.0
 */
import { Effect, Layer, PubSub } from "effect"
import * as Lifecycle from "./Lifecycle.ts"
import type { CompletionEvent } from "./Lifecycle.ts"
import { defaults, fromOperations, QueueStore, type QueueStoreShape } from "./QueueStore.ts"
import * as Flow from "./memory/flow.ts"
import * as Cancel from "./memory/cancel.ts"
import * as Claim from "./memory/claim.ts"
import * as Commit from "./memory/commit.ts"
import * as Complete from "./memory/complete.ts"
import * as DeadLetters from "./memory/deadLetters.ts"
import * as History from "./memory/history.ts"
import * as Events from "./memory/lifecycle.ts"
import * as Lease from "./memory/lease.ts"
import * as Messages from "./memory/messages.ts"
import * as Notify from "./memory/notify.ts"
import * as Prune from "./memory/prune.ts"
import * as Queues from "./memory/queues.ts"
import * as Schedules from "./memory/schedules.ts"
import * as Send from "./memory/send.ts"
import { makeState } from "./memory/state.ts"

/** How to build a {@link MemoryQueueStore}. */
export interface MemoryQueueStoreOptions {
  /** Largest payload accepted, in JSON bytes (default 1 MiB). */
  readonly maxPayloadBytes?: number | undefined
  /** Attempts a message gets unless its sender says otherwise (default 25). */
  readonly defaultMaxAttempts?: number | undefined
}

/**
 * Build an empty in-memory store. Each operation runs synchronously, so it is
 * atomic with respect to other fibers, like a single SQL statement. The state
 * (`memory/state.ts`) is built once here; each group of operations is a module of `memory/`.
 */
export const make = (options: MemoryQueueStoreOptions = {}): Effect.Effect<QueueStoreShape> =>
  Effect.map(PubSub.dropping<CompletionEvent>(Lifecycle.limits.eventBuffer), (events) => {
    const state = makeState({
      maxPayloadBytes: options.maxPayloadBytes ?? defaults.maxPayloadBytes,
      defaultMaxAttempts: options.defaultMaxAttempts ?? defaults.maxAttempts
    }, events)
    return fromOperations({
      now: Schedules.now,
      upsertSchedules: Schedules.upsertSchedules(state),
      fireSchedule: Schedules.fireSchedule(state),
      triggerSchedule: Schedules.triggerSchedule(state),
      schedules: Schedules.schedules(state),
      removeSchedule: Schedules.removeSchedule(state),
      pruneUniqueKeys: Prune.pruneUniqueKeys(state),
      pruneFlow: Prune.pruneFlow(state),
      send: Send.send(state),
      claim: Claim.claim(state),
      renew: Lease.renew(state),
      complete: Complete.complete(state),
      completeWith: Commit.completeWith(state),
      redrive: DeadLetters.redrive(state),
      purge: DeadLetters.purge(state),
      deadLetters: DeadLetters.deadLetters(state),
      pause: Queues.pause(state),
      resume: Queues.resume(state),
      queues: Queues.queues(state),
      cancel: Cancel.cancel(state),
      cancelWhere: Cancel.cancelWhere(state),
      get: Messages.get(state),
      messages: Messages.messages(state),
      attempts: History.attempts(state),
      pruneAttempts: Prune.pruneAttempts(state),
      sends: Notify.sends(state),
      cancels: Notify.cancels(state),
      stats: Queues.stats(state),
      depths: Queues.depths(state),
      nextVisibleAt: Queues.nextVisibleAt(state),
      setLimits: Flow.setLimits(state),
      limits: Flow.limits(state),
      setKeyWeight: Flow.setKeyWeight(state),
      flowStatus: Flow.flowStatus(state),
      setProgress: Events.setProgress(state),
      completions: Events.completions(state)
    })
  })

/** A fresh, empty in-memory store as a layer: one per test gives isolation for free. */
export const layer = (options: MemoryQueueStoreOptions = {}): Layer.Layer<QueueStore> =>
  Layer.effect(QueueStore, make(options))
