/**
 * The handler contract: what a consumer runs for each message (a {@link Handler}, or a
 * {@link Dispatcher} of tasks with their per-message policies) and what a handler gets besides the
 * message. A leaf: task definitions, the consumer and its stages import it, and it imports none of them.
 *
 * @since 0.1.0
 */
import type { Effect } from "effect"
import type { TaskLimits } from "./FlowControl.ts"
import type { Claim } from "./Message.ts"
import type { CommitFenced, InvalidInput, StoreError } from "./QueueError.ts"
import type * as QueueMetrics from "./QueueMetrics.ts"

/** What a handler gets besides the message. */
export interface HandlerContext {
  readonly messageId: Claim["id"]
  readonly queue: string
  /** 1 on the first run, counting every claim of the message. */
  readonly attempt: number
  readonly consumerId: string
  /** When the current lease ends as far as this consumer knows (it moves with every renewal). */
  readonly leaseDeadline: Effect.Effect<Date>
  /**
   * Aborted when the handler is interrupted, for code outside Effect (a `fetch`, a driver, a child
   * process) that should stop with it: `reason` is the `LeaseLost` or `MaxRuntimeExceeded` error
   * when the watchdog stopped it, else an `AbortError` `DOMException` (shutdown). Aborted once the
   * interruption has ended the handler (after its own finalizers); never when it succeeds or fails. Created on
   * first read, so a handler that never reads it pays nothing.
   */
  readonly signal: AbortSignal
  /**
   * The same for every run of this message, redeliveries and redrives included, and no other
   * message's: give it to an API that takes an idempotency key (a payment, an email), so that an
   * effect outside the database is applied once however often the message runs.
   */
  readonly idempotencyKey: string
  /**
   * The commit step: run `effect` (the handler's writes, through the store's own `SqlClient`) and
   * the message's fenced ack in one transaction. If this run no longer holds the message (its
   * lease was taken, it was cancelled) nothing commits: it fails with `CommitFenced`
   * (`lease-lost`), reported as a double run prevented. Call it once, as the handler's last step:
   * from its start the message is no longer renewed, and it is bounded by the lease left. A
   * failure of `effect` rolls back the ack too: the attempt fails and is retried like any other.
   */
  readonly commit: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | CommitFenced | InvalidInput | StoreError, R>
  /**
   * Report how far this run has got: JSON data of at most 4 KiB (`Lifecycle.limits`), kept on
   * the message (`MessageInfo.progress`, `TaskClient.progress`, the CLI's `get`, the admin API),
   * across its retries. Written in the background, at most every 500 ms with the last value
   * reported (so a report in a run's last moments may not be written), and fenced by this run's
   * lease token: a run that lost its message writes nothing. It never waits for the database and
   * fails only with `InvalidInput` (field `progress`) for a value that is not JSON or too large.
   */
  readonly progress: (value: unknown) => Effect.Effect<void, InvalidInput>
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
  /** The message's lease, renewed with every lease/3 instead of the consumer's. */
  readonly leaseMs?: number | undefined
  /** Delay before retry number `attempt + 1`; `random` is uniform in [0, 1) for jitter. */
  readonly retryDelayMs?: ((attempt: number, random: number) => number) | undefined
}

/** A handler with per-message policies: build one from tasks with `Task.dispatcher`. */
export interface Dispatcher<R = never> {
  readonly handle: Handler<R>
  readonly policy: (message: Claim) => MessagePolicy | undefined
  /**
   * The queues its messages are sent to (its tasks' queues): a consumer built
   * from it consumes these unless its configuration names queues itself.
   */
  readonly queues?: ReadonlyArray<string> | undefined
  /**
   * The tasks it handles, with their queues: their counters are exported at zero from the
   * consumer's start (see {@link QueueMetrics.exportAtZero}).
   */
  readonly tasks?: ReadonlyArray<QueueMetrics.TaskOfQueue> | undefined
  /**
   * The flow limits its tasks declare (`Task.define({ limits })`), checked: a consumer built from
   * it writes them (source `code`) before its first claim.
   */
  readonly limits?: ReadonlyArray<{ readonly queue: string; readonly task: string; readonly limits: TaskLimits }> | undefined
  /**
   * The leases its tasks declare (ms): the consumer's event-loop lag watch and its last wait at
   * shutdown count them beside the queues' leases.
   */
  readonly leasesMs?: ReadonlyArray<number> | undefined
}

/** A bare handler as a dispatcher with no per-message policies. */
export const toDispatcher = <R>(handler: Handler<R> | Dispatcher<R>): Dispatcher<R> =>
  typeof handler === "function" ? { handle: handler, policy: () => undefined } : handler
