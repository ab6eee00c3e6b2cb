/**
 * Typed tasks: declare a task once (a name, a queue, a payload Schema and its
 * policies) with {@link define}, share the declaration between producers and
 * workers, and give it its handler where the worker is built with
 * {@link implement}. A producer imports the declaration only: sending is
 * type-checked and encodes through the schema (with `TaskClient` or {@link send});
 * the worker decodes through it. {@link make} declares and implements in one step.
 *
 * @since 0.1.0
 */
import { Effect, Result, Schema } from "effect"
import type * as FlowControl from "./FlowControl.ts"
import type * as Handler from "./Handler.ts"
import * as Backoff from "./internal/backoff.ts"
import * as AttemptResult from "./internal/attemptResult.ts"
import { schemaIssues } from "./internal/schemaIssues.ts"
import * as Validate from "./internal/validate.ts"
import type { Claim, SendResult } from "./Message.ts"
import * as QueueConfig from "./QueueConfig.ts"
import { type ConnectionDead, DecodeFailed, InvalidInput, type QueryFailed, UnknownTask, Unrecoverable } from "./QueueError.ts"
import { QueueStore, type QueueStoreShape } from "./QueueStore.ts"
import * as Scheduler from "./Scheduler.ts"
import { checkDefinition, type RetryPolicy } from "./task/definition.ts"

export type { RetryPolicy } from "./task/definition.ts"

/** What a task's handler gets besides its decoded payload. */
export interface TaskContext extends Handler.HandlerContext {
  /** The claimed message, raw: headers, priority, enqueue time. */
  readonly message: Claim
}

/**
 * A task's contract without its handler: what producers need to send it and
 * workers need to decode it. Create with {@link define}; share it from a module
 * that imports neither handlers nor their services, and give it a handler where
 * the worker is built with {@link implement}.
 */
export interface Declaration<Name extends string, A, I, S extends Schema.Top | undefined = Schema.Top | undefined> {
  readonly name: Name
  /** The queue it is sent to unless a send says otherwise. */
  readonly queue: string
  readonly payload: Schema.Codec<A, I>
  /**
   * Optional: the schema of the handler's success value. A result that matches is kept, encoded,
   * with its attempt's history record (read it with `TaskClient.result`); one that does not is
   * reported at ERROR and not kept.
   */
  readonly success: S
  /** Optional: the schema of the handler's typed error, used to record failures as JSON. */
  readonly error: Schema.Top | undefined
  readonly retry: RetryPolicy | undefined
  readonly maxAttempts: number | undefined
  readonly maxRuntime: QueueConfig.DurationLike | undefined
  /**
   * The lease of this task's messages, renewed every lease/3 while its handler runs, whatever
   * the consumer's lease (which then only covers the claim until the first renewal).
   */
  readonly lease: QueueConfig.DurationLike | undefined
  /**
   * Flow limits of this task in its queue (how many run at once, how many start per window, all
   * workers together), written by every worker whose dispatcher has the task, before its first
   * claim. An operator's limits for the task win until cleared.
   */
  readonly limits?: FlowControl.TaskLimits | undefined
}

/** Any declaration, for collections of declarations and for sending. */
export type AnyDeclaration = Declaration<string, any, any>

/**
 * A task with its handler: what {@link dispatcher} runs. Create with
 * {@link implement} (from a {@link Declaration}) or {@link make} (in one step).
 * It is also a declaration, so it can be sent.
 */
export interface Task<Name extends string, A, I, E, R, S extends Schema.Top | undefined = Schema.Top | undefined>
  extends Declaration<Name, A, I, S>
{
  readonly handler: (payload: A, context: TaskContext) => Effect.Effect<unknown, E | Unrecoverable, R>
}

/** Any task, for collections of tasks. */
export type Any = Task<string, any, any, any, any>

/**
 * What a send can fail with, one union to catch or to name in a signature: the
 * payload or an option is refused ({@link InvalidInput}, naming the task for a
 * payload that does not encode), or the store failed (`ConnectionDead`,
 * `QueryFailed`). Every member is a Schema-backed tagged error.
 */
export type SendError = InvalidInput | ConnectionDead | QueryFailed


/** The fields of a declaration, as given to {@link define} (and to {@link make}, with a handler). */
export interface DeclarationOptions<Name extends string, A, I, S extends Schema.Top | undefined = Schema.Top | undefined> {
  readonly name: Name
  readonly payload: Schema.Codec<A, I>
  readonly queue?: string | undefined
  readonly success?: S
  readonly error?: Schema.Top | undefined
  readonly retry?: RetryPolicy | undefined
  readonly maxAttempts?: number | undefined
  readonly maxRuntime?: QueueConfig.DurationLike | undefined
  /** Its messages' lease, renewed every lease/3 (default: the consumer's, per queue). */
  readonly lease?: QueueConfig.DurationLike | undefined
  /**
   * Its flow limits in its queue, e.g. `{ concurrency: 5, rate: { count: 100, periodMs: 60_000 } }`:
   * at most 5 running and 100 started a minute, across every worker.
   */
  readonly limits?: FlowControl.TaskLimits | undefined
}

/**
 * Declare a task without its handler: use it in a module shared by producers
 * and workers, so that a producer sends it without importing the handler or
 * its services. The worker gives it a handler with {@link implement}. The name
 * (and queue) must be valid names (1-128 of `A-Za-z0-9_.:/-`).
 *
 * The declaration is checked here: a retry policy whose delays could come out
 * negative, NaN or beyond the store's longest delay (a negative or non-finite
 * `factor`, `base` above `max`, a `max` over ten years), a bad `maxAttempts`,
 * `maxRuntime` or `lease` (300 ms to 24 h, at most `maxRuntime`), or `limits` that break a flow rule
 * (`FlowControl.validateLimits`: only `concurrency` and `rate` belong to a task) throws an {@link InvalidInput} naming the field and the rule.
 * Retry delays are then always within [0, retry.max].
 *
 * @throws InvalidInput when the declaration breaks a rule.
 */
export const define = <const Name extends string, A, I, S extends Schema.Top | undefined = undefined>(
  definition: DeclarationOptions<Name, A, I, S>
): Declaration<Name, A, I, S> => {
  checkDefinition(definition)
  return {
    name: definition.name,
    queue: definition.queue ?? "default",
    payload: definition.payload,
    success: definition.success as S,
    error: definition.error,
    retry: definition.retry,
    maxAttempts: definition.maxAttempts,
    maxRuntime: definition.maxRuntime,
    lease: definition.lease,
    ...(definition.limits === undefined ? {} : { limits: definition.limits })
  }
}

/**
 * Give a declared task its handler, where the worker is built: the result is
 * what {@link dispatcher} takes. The handler gets the payload decoded through the
 * declaration's schema; its services are the worker's, never the producer's.
 */
export const implement = <Name extends string, A, I, E = never, R = never, S extends Schema.Top | undefined = Schema.Top | undefined>(
  declaration: Declaration<Name, A, I, S>,
  handler: (payload: A, context: TaskContext) => Effect.Effect<unknown, E | Unrecoverable, R>
): Task<Name, A, I, E, R, S> => ({ ...declaration, handler })

/**
 * Declare and implement a task in one step ({@link define} then {@link implement}):
 * for a small app whose producer and worker share one process or may import the
 * handler. Split them when a producer should not depend on the handler's code.
 *
 * @throws InvalidInput when the definition breaks a rule (see {@link define}).
 */
export const make = <const Name extends string, A, I, E = never, R = never, S extends Schema.Top | undefined = undefined>(
  definition: DeclarationOptions<Name, A, I, S> & {
    readonly handler: (payload: A, context: TaskContext) => Effect.Effect<unknown, E | Unrecoverable, R>
  }
): Task<Name, A, I, E, R, S> => implement(define(definition), definition.handler)

/** Decode reporting every issue, not only the first: a dead letter's reason lists them all. */
const decodeAll = { errors: "all" } as const
export { schemaIssues } from "./internal/schemaIssues.ts"

/** Fail a handler with this to send the message straight to dead letters. */
export const unrecoverable = (message: string): Effect.Effect<never, Unrecoverable> => Effect.fail(new Unrecoverable({ message }))

/** Options of one send. Lower `priority` numbers run first. */
export interface SendOptions {
  /** Hide the message for this long. */
  readonly delay?: QueueConfig.DurationLike | undefined
  /** Or until this time (the later of the two wins when both are given). */
  readonly runAt?: Date | undefined
  readonly priority?: number | undefined
  readonly dedupKey?: string | undefined
  /** The flow key (a tenant, an account): per-key limits, fair claiming and FIFO go by it (`FlowControl`). */
  readonly key?: string | undefined
  /**
   * Keep `key` reserved on the queue for `for` ("1h", or milliseconds) after this send,
   * whatever happens to the message: a send with the key inside the window returns this
   * message's id with `deduplicated: true`. Not with `dedupKey`.
   */
  readonly unique?: { readonly key: string; readonly for: QueueConfig.DurationLike } | undefined
  /** Overrides the task's max attempts. */
  readonly maxAttempts?: number | undefined
  readonly headers?: Readonly<Record<string, string>> | undefined
  /** Overrides the task's queue. */
  readonly queue?: string | undefined
}

const encodeIssue = (task: { readonly name: string }, error: Schema.SchemaError) =>
  new InvalidInput({
    field: "payload",
    rule: `must match the schema of task "${task.name}"`,
    message: `payload of task "${task.name}" does not encode: ${error.message}`
  })

/**
 * Send one message of `task` (a declaration or an implemented task), type-checked
 * and encoded through its schema, with the `QueueStore` in context. A payload
 * that does not encode is refused with the schema's message and the task's name.
 * Inside the caller's `sql.withTransaction` (PostgreSQL store), the send joins it.
 * In an application, prefer `TaskClient.send`: one layer, no store in the requirements.
 */
export const send = <Name extends string, A, I>(
  task: Declaration<Name, A, I>,
  payload: A,
  options: SendOptions = {}
): Effect.Effect<SendResult, SendError, QueueStore> =>
  Effect.map(sendMany(task, [payload], options), (results) => results[0]!)

/** Send many messages of `task` at once (one batch: all or none), with the `QueueStore` in context. */
export const sendMany = <Name extends string, A, I>(
  task: Declaration<Name, A, I>,
  payloads: ReadonlyArray<A>,
  options: SendOptions = {}
): Effect.Effect<ReadonlyArray<SendResult>, SendError, QueueStore> =>
  Effect.gen(function*() {
    return yield* sendWith(yield* QueueStore, task, payloads, options)
  })

/**
 * Send many messages of `task` to `store`: what {@link sendMany} and `TaskClient`
 * do once they have their store. Use it when you hold a store yourself.
 */
export const sendWith = <Name extends string, A, I>(
  store: QueueStoreShape,
  task: Declaration<Name, A, I>,
  payloads: ReadonlyArray<A>,
  options: SendOptions = {}
): Effect.Effect<ReadonlyArray<SendResult>, SendError> =>
  Effect.gen(function*() {
    const encode = Schema.encodeEffect(task.payload)
    const encoded = yield* Effect.forEach(payloads, (p) => Effect.mapError(encode(p), (e) => encodeIssue(task, e)))
    const delayMs = yield* Effect.mapError(sendDelay(options), (e) =>
      new InvalidInput({ field: e.field, rule: e.rule, message: `task "${task.name}": ${e.message}` }))
    const unique = options.unique === undefined ? undefined : yield* Effect.mapError(
      QueueConfig.parseDuration("unique.for", options.unique.for),
      (e) => new InvalidInput({ field: "unique.for", rule: e.rule, message: `task "${task.name}": ${e.message}` })
    ).pipe(Effect.map((ms) => ({ key: options.unique!.key, for: ms })))
    return yield* store.send(
      options.queue ?? task.queue,
      encoded.map((payload) => ({
        task: task.name,
        payload,
        headers: options.headers,
        priority: options.priority,
        delay: delayMs,
        maxAttempts: options.maxAttempts ?? task.maxAttempts,
        dedupKey: options.dedupKey,
        key: options.key,
        unique
      }))
    )
  })

const sendDelay = (options: SendOptions): Effect.Effect<number | undefined, InvalidInput> =>
  Effect.gen(function*() {
    const delay = options.delay === undefined
      ? 0
      : yield* Effect.mapError(QueueConfig.parseDuration("delay", options.delay), (e) =>
        new InvalidInput({ field: "delay", rule: e.rule, message: e.message }))
    if (options.runAt === undefined) return options.delay === undefined ? undefined : delay
    if (!(options.runAt instanceof Date) || Number.isNaN(options.runAt.getTime())) {
      return yield* new InvalidInput({ field: "runAt", rule: "a valid Date", message: "runAt is not a valid Date" })
    }
    // The producer's clock sets run-at; the lease arithmetic stays on the database's clock.
    const until = Math.max(delay, options.runAt.getTime() - Date.now(), 0)
    if (until > Validate.MAX_DELAY_MS) {
      return yield* new InvalidInput({ field: "runAt", rule: Validate.maxDelayRule, message: `runAt ${options.runAt.toISOString()} is too far ahead (rule: ${Validate.maxDelayRule})` })
    }
    return until
  })

/**
 * A cron schedule of `task`: every slot of `cron` (in `tz`, default UTC) sends one message
 * of it with `payload`, encoded through its schema now, to its queue. `key` names the
 * schedule across workers (default: the task's name). Give the result to `Scheduler.layer`
 * beside the consumer. A payload that does not encode, an invalid cron expression or time
 * zone, or a bad key throws an `InvalidInput` naming it and the rule (see `Scheduler.define`).
 *
 * @throws InvalidInput when a rule is broken.
 */
export const schedule = <Name extends string, A, I>(
  task: Declaration<Name, A, I>,
  options: {
    readonly cron: string
    readonly tz?: string | undefined
    readonly payload: A
    readonly key?: string | undefined
    readonly missed?: Scheduler.Missed | undefined
  }
): Scheduler.Schedule => {
  const encoded = Schema.encodeResult(task.payload)(options.payload)
  if (Result.isFailure(encoded)) throw encodeIssue(task, encoded.failure)
  return Scheduler.define({ ...options, key: options.key ?? task.name, queue: task.queue, task: task.name, payload: encoded.success })
}

/** The task's failure, as recorded: JSON through its error schema when it has one and it encodes. */
const describeFailure = (task: Any, error: unknown): Effect.Effect<never, unknown> =>
  task.error === undefined
    ? Effect.fail(error)
    : Schema.encodeUnknownEffect(task.error as Schema.Codec<unknown, unknown>)(error).pipe(
      Effect.matchEffect({
        onFailure: () => Effect.fail(error),
        onSuccess: (json) => Effect.fail(new Error(`${task.name} failed: ${JSON.stringify(json)}`))
      })
    )

/**
 * Check a handler's result against the task's success schema and encode it for the
 * attempt history (an `Encoded`, JSON text; nothing for undefined or null, so a void
 * task costs nothing). A mismatch, or an encoded value that is not JSON, is a bug in
 * the handler or the schema, reported at ERROR and not kept; the message is still
 * acked, since its work is done and a retry would only do it again. Without a success
 * schema nothing is kept.
 */
const keepSuccess = (task: Any, result: unknown): Effect.Effect<AttemptResult.Encoded | undefined> =>
  task.success === undefined
    ? Effect.undefined
    : Schema.encodeUnknownEffect(task.success as Schema.Codec<unknown, unknown>)(result).pipe(
      Effect.matchEffect({
        onSuccess: (encoded) => {
          if (encoded === undefined || encoded === null) return Effect.undefined
          try {
            const json = JSON.stringify(encoded) as string | undefined
            return Effect.succeed(json === undefined ? undefined : new AttemptResult.Encoded(json))
          } catch (e) {
            return Effect.as(
              Effect.logError(`task "${task.name}" returned a value whose encoded form is not JSON (acked, result not kept): ${String(e)}`),
              undefined
            )
          }
        },
        onFailure: (e) =>
          Effect.as(
            Effect.logError(`task "${task.name}" returned a value that does not match its success schema (acked anyway): ${e.message}`),
            undefined
          )
      })
    )

/**
 * The handler's context plus its message. `signal` is read through a prototype getter, so it
 * stays lazy (a spread would create it) and costs nothing to set up (unlike a getter in an
 * object literal, about a microsecond).
 */
class TaskContextOf implements TaskContext {
  readonly messageId: Claim["id"]
  readonly queue: string
  readonly attempt: number
  readonly consumerId: string
  readonly message: Claim
  readonly #context: Handler.HandlerContext
  constructor(context: Handler.HandlerContext, message: Claim) {
    this.messageId = context.messageId
    this.queue = context.queue
    this.attempt = context.attempt
    this.consumerId = context.consumerId
    this.message = message
    this.#context = context
  }
  /** Read through, as `signal`: the consumer's context makes this effect on read, not per message. */
  get leaseDeadline(): Effect.Effect<Date> {
    return this.#context.leaseDeadline
  }
  get signal(): AbortSignal {
    return this.#context.signal
  }
  get idempotencyKey(): string {
    return this.#context.idempotencyKey
  }
  get commit(): Handler.HandlerContext["commit"] {
    return this.#context.commit
  }
  get progress(): Handler.HandlerContext["progress"] {
    return this.#context.progress
  }
}

/**
 * A consumer dispatcher for `tasks` (implemented: from {@link implement} or
 * {@link make}; a bare declaration is refused with an error): decodes each message's payload through
 * its task's schema (a payload that does not decode is dead-lettered at once,
 * with the schema's message), runs the handler, and applies the task's retry
 * policy, max runtime and lease. A task this worker does not know fails with
 * `UnknownTask`, which the consumer retries later a few times, then dead-letters.
 */
export const dispatcher = <const Tasks extends ReadonlyArray<Any>>(
  ...tasks: Tasks
): Handler.Dispatcher<Tasks[number] extends Task<any, any, any, any, infer R> ? R : never> => {
  const byName = new Map<string, Any>()
  for (const task of tasks) {
    if (byName.has(task.name)) throw new Error(`Task.dispatcher: task "${task.name}" is defined twice`)
    if (typeof task.handler !== "function") {
      throw new Error(`Task.dispatcher: task "${task.name}" is declared but has no handler: give it one with Task.implement(declaration, handler)`)
    }
    byName.set(task.name, task)
  }
  const runners = new Map([...byName].map(([name, task]) => [name, runnerOf(task)]))
  const policies = new Map<string, Handler.MessagePolicy>()
  const limits: Array<{ queue: string; task: string; limits: FlowControl.TaskLimits }> = []
  for (const task of tasks) {
    // Checked again, for tasks not built by `make`: the same rules, thrown here.
    const { backoff, limits: own } = checkDefinition(task)
    if (own !== undefined) limits.push({ queue: task.queue, task: task.name, limits: own })
    policies.set(task.name, {
      maxRuntimeMs: task.maxRuntime === undefined
        ? undefined
        : Effect.runSync(QueueConfig.parseDuration(`task ${task.name} maxRuntime`, task.maxRuntime)),
      leaseMs: task.lease === undefined ? undefined : Effect.runSync(QueueConfig.parseDuration(`task ${task.name} lease`, task.lease)),
      retryDelayMs: backoff === undefined ? undefined : (attempt, random) => Backoff.backoffMs(backoff, attempt, random)
    })
  }
  return {
    queues: [...new Set(tasks.map((task) => task.queue))],
    tasks: tasks.map((task) => ({ queue: task.queue, task: task.name })),
    limits,
    leasesMs: [...policies.values()].flatMap((policy) => policy.leaseMs === undefined ? [] : [policy.leaseMs]),
    policy: (message) => policies.get(message.task),
    handle: (message, context) => {
      const run = runners.get(message.task)
      if (run === undefined) {
        return Effect.fail(new UnknownTask({ task: message.task, message: `no handler for task "${message.task}" on this worker` }))
      }
      return run(message, context)
    }
  }
}

/**
 * How a dispatcher runs messages of `task`: decode the payload through the task's schema (a
 * payload that does not decode fails with `DecodeFailed`), run the handler (a failure other than
 * `Unrecoverable` described through the task's error schema), keep the success through its
 * success schema. The decoder and the functions it chains are made once per task, and the run
 * is a chain of plain combinators, not a generator: this is the hot path of a busy consumer
 * (issue 29: a generator and a decoder per message allocated ~2.5 KB more a message, measured
 * with `BENCH_TASK=1 npm run bench:overhead`).
 */
const runnerOf = (task: Any) => {
  const decode = Schema.decodeUnknownEffect(task.payload)
  const decodeFailed = (e: Schema.SchemaError) => new DecodeFailed({ task: task.name, message: schemaIssues(e) })
  const recoverable = (e: unknown): e is unknown => !(e instanceof Unrecoverable)
  const describe = (e: unknown) => describeFailure(task, e)
  const keep = (result: unknown) => keepSuccess(task, result)
  return (message: Claim, context: Handler.HandlerContext): Effect.Effect<unknown, unknown, any> =>
    Effect.flatMap(Effect.mapError(decode(message.payload, decodeAll), decodeFailed), (payload) => {
      const ran = Effect.catchIf(task.handler(payload, new TaskContextOf(context, message)), recoverable, describe)
      // Without a success schema nothing is kept: the run answers `undefined`.
      return task.success === undefined ? Effect.as(ran, undefined) : Effect.flatMap(ran, keep)
    })
}
