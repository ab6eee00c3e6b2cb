/**
 * The sender of typed tasks: one layer in the application ({@link layer}, built
 * from the `QueueStore`), after which {@link send} needs only `TaskClient`, never
 * the store. Use it in producers, HTTP API and RPC handlers: the handler's
 * requirements name `TaskClient`, which the application provides once. It also
 * reads a finished task's kept result back by message id ({@link result}).
 *
 * A producer imports task declarations (`Task.define`) only: sending needs the
 * declaration's name, queue, schema and limits, not its handler or the handler's
 * services.
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer, Option, Schema, Stream } from "effect"
import type { CompletionEvent } from "./Lifecycle.ts"
import type { MessageId, SendResult } from "./Message.ts"
import { type AwaitError, type InvalidInput, ResultUnreadable, type StoreError } from "./QueueError.ts"
import * as Validate from "./internal/validate.ts"
import * as Await from "./task/await.ts"
import { isMessageId, QueueStore, type QueueStoreShape } from "./QueueStore.ts"
import * as Task from "./Task.ts"

/** What the sender does: see {@link send} and {@link sendMany}. */
export interface TaskClientShape {
  /**
   * Send one message of `task`, type-checked and encoded through its schema. A
   * payload that does not encode is refused with an `InvalidInput` naming the task.
   */
  readonly send: <Name extends string, A, I>(
    task: Task.Declaration<Name, A, I>,
    payload: A,
    options?: Task.SendOptions
  ) => Effect.Effect<SendResult, Task.SendError>
  /** Send many messages of `task` at once (one batch: all or none). */
  readonly sendMany: <Name extends string, A, I>(
    task: Task.Declaration<Name, A, I>,
    payloads: ReadonlyArray<A>,
    options?: Task.SendOptions
  ) => Effect.Effect<ReadonlyArray<SendResult>, Task.SendError>
  /**
   * The result kept for message `id` of `task` (a task declared with a `success` schema),
   * decoded through that schema: from its acked attempt's history record. `None` while it
   * has not succeeded, when its handler returned nothing, or once the history is pruned.
   */
  readonly result: <S extends Schema.Top>(
    task: Task.Declaration<string, any, any, S>,
    id: MessageId
  ) => Effect.Effect<Option.Option<S["Type"]>, ResultUnreadable | StoreError>
  /** The result kept for message `id` as stored (encoded JSON), whatever its task: see {@link TaskClientShape.result}. */
  readonly resultJson: (id: MessageId) => Effect.Effect<Option.Option<unknown>, ResultUnreadable | StoreError>
  /**
   * Wait for message `id` of `task` to end, without polling it: woken by the store's completion
   * events (a lost one costs `pollInterval`, default 2 s), bounded by `timeout`, right when it had
   * already ended. Succeeds when it was acked, with its result decoded through the task's success
   * schema (`None` when none was kept); fails with `MessageDeadLettered` (its reason),
   * `MessageCancelled`, `MessageNotFound`, or `AwaitTimedOut` (still pending after `timeout`). A
   * retry is not an end: the await goes on through the message's retries.
   */
  readonly awaitResult: <S extends Schema.Top | undefined>(
    task: Task.Declaration<string, any, any, S>,
    id: MessageId,
    options: Await.AwaitOptions
  ) => Effect.Effect<Option.Option<ResultOf<S>>, AwaitError | ResultUnreadable | StoreError>
  /** {@link TaskClientShape.awaitResult}, whatever its task: the result as stored (encoded JSON). */
  readonly awaitResultJson: (
    id: MessageId,
    options: Await.AwaitOptions
  ) => Effect.Effect<Option.Option<unknown>, AwaitError | ResultUnreadable | StoreError>
  /**
   * The last progress a handler of message `id` reported (`HandlerContext.progress`), as JSON;
   * `None` before any, and once the message is gone (acked, cancelled, purged).
   */
  readonly progress: (id: MessageId) => Effect.Effect<Option.Option<unknown>, StoreError>
  /**
   * The completion events of `queues` (every queue when omitted): each run that ended, with how
   * (completed, retried, dead-lettered, cancelled) and when. For reactions that may miss one:
   * delivered at most once while the stream is pulled, never replayed (see `Lifecycle`); for a
   * reaction that must happen, send a task from the handler instead.
   */
  readonly events: (queues?: ReadonlyArray<string> | undefined) => Stream.Stream<CompletionEvent, InvalidInput>
}

/** What a task's success schema decodes to; nothing for a task without one. */
export type ResultOf<S> = S extends Schema.Top ? S["Type"] : never

/**
 * The task sender, as a service: provide {@link layer} once in the application
 * and send with {@link send} (or `yield* TaskClient` and its `send`).
 */
export class TaskClient extends Context.Service<TaskClient, TaskClientShape>()("leasehold/TaskClient") {}

/**
 * Build a sender on the `QueueStore` in context. Sends run in the caller's
 * fiber, so inside the caller's `sql.withTransaction` (PostgreSQL store on the
 * same client) a send joins the transaction, as `Task.send` does.
 */
export const make: Effect.Effect<TaskClientShape, never, QueueStore> = Effect.gen(function*() {
  const store = yield* QueueStore
  return TaskClient.of({
    send: (task, payload, options) => Effect.map(Task.sendWith(store, task, [payload], options), (results) => results[0]!),
    sendMany: (task, payloads, options) => Task.sendWith(store, task, payloads, options),
    result: (task, id) => Effect.flatMap(keptResult(store, id), (kept) => decodeKept(task, id, kept)),
    resultJson: (id) => keptResult(store, id),
    awaitResult: (task, id, options) => Effect.flatMap(Await.awaitEnd(store, id, options), (kept) => decodeKept(task, id, kept)),
    awaitResultJson: (id, options) => Await.awaitEnd(store, id, options),
    progress: (id) => Effect.map(store.get(id), Option.flatMap((m) => Option.fromNullishOr(m.progress))),
    events: (queues) => eventStream(store, queues)
  })
})

/** The JSON kept with the last acked attempt of `id`, if any; the too-large and unstorable markers fail. */
const keptResult = (store: QueueStoreShape, id: MessageId): Effect.Effect<Option.Option<unknown>, ResultUnreadable | StoreError> =>
  !isMessageId(id) ? Effect.succeed(Option.none()) : Effect.flatMap(store.attempts(id), (history) => Await.keptResultOf(id, history))

/** Decode a kept result through `task`'s success schema (none stays none). */
const decodeKept = <S extends Schema.Top | undefined>(
  task: Task.Declaration<string, any, any, S>,
  id: MessageId,
  kept: Option.Option<unknown>
): Effect.Effect<Option.Option<ResultOf<S>>, ResultUnreadable> =>
  Option.isNone(kept) || task.success === undefined
    ? Effect.succeed(Option.none())
    : Schema.decodeUnknownEffect(task.success as unknown as Schema.Codec<ResultOf<S>, unknown>)(kept.value).pipe(
      Effect.map(Option.some),
      Effect.mapError((e) =>
        new ResultUnreadable({
          messageId: id,
          reason: "schema",
          message: `the result of message ${id} does not decode with the success schema of task "${task.name}": ${e.message}`
        })
      )
    )

/** The completion events of `queues` (all for `undefined`) as a stream, subscribed while it is pulled. */
const eventStream = (store: QueueStoreShape, queues: ReadonlyArray<string> | undefined): Stream.Stream<CompletionEvent, InvalidInput> =>
  Stream.unwrap(Effect.gen(function*() {
    for (const queue of queues ?? []) yield* Validate.name("queue", queue)
    return Stream.fromEffectRepeat(yield* store.completions(queues))
  }))

/**
 * The sender layer, built from the `QueueStore`: e.g.
 * `TaskClient.layer.pipe(Layer.provide(PgQueueStore.layer()), Layer.provide(QueueConfig.pgLayerFromEnv()))`.
 * Use it in every process that sends tasks.
 */
export const layer: Layer.Layer<TaskClient, never, QueueStore> = Layer.effect(TaskClient, make)

/**
 * Send one message of `task` with the {@link TaskClient} in context: requires
 * `TaskClient` only, and fails with one union, `Task.SendError`.
 */
export const send = <Name extends string, A, I>(
  task: Task.Declaration<Name, A, I>,
  payload: A,
  options?: Task.SendOptions
): Effect.Effect<SendResult, Task.SendError, TaskClient> =>
  Effect.gen(function*() {
    const client = yield* TaskClient
    return yield* client.send(task, payload, options)
  })

/** Send many messages of `task` at once (one batch: all or none) with the {@link TaskClient} in context. */
export const sendMany = <Name extends string, A, I>(
  task: Task.Declaration<Name, A, I>,
  payloads: ReadonlyArray<A>,
  options?: Task.SendOptions
): Effect.Effect<ReadonlyArray<SendResult>, Task.SendError, TaskClient> =>
  Effect.gen(function*() {
    const client = yield* TaskClient
    return yield* client.sendMany(task, payloads, options)
  })

/**
 * The result kept for message `id` of `task`, decoded through its success schema, with the
 * {@link TaskClient} in context: `None` until it succeeded, for a void result, or once pruned.
 */
export const result = <S extends Schema.Top>(
  task: Task.Declaration<string, any, any, S>,
  id: MessageId
): Effect.Effect<Option.Option<S["Type"]>, ResultUnreadable | StoreError, TaskClient> =>
  Effect.flatMap(TaskClient, (client) => client.result(task, id))

/**
 * Wait for message `id` of `task` to end and decode its result, with the {@link TaskClient} in
 * context (see {@link TaskClientShape.awaitResult}): e.g.
 * `TaskClient.awaitResult(resize, sent.id, { timeout: "30 seconds" })`.
 */
export const awaitResult = <S extends Schema.Top | undefined>(
  task: Task.Declaration<string, any, any, S>,
  id: MessageId,
  options: Await.AwaitOptions
): Effect.Effect<Option.Option<ResultOf<S>>, AwaitError | ResultUnreadable | StoreError, TaskClient> =>
  Effect.flatMap(TaskClient, (client) => client.awaitResult(task, id, options))

/** The last progress reported for message `id`, with the {@link TaskClient} in context. */
export const progress = (id: MessageId): Effect.Effect<Option.Option<unknown>, StoreError, TaskClient> =>
  Effect.flatMap(TaskClient, (client) => client.progress(id))

/** The completion events of `queues` (every queue when omitted), with the {@link TaskClient} in context. */
export const events = (queues?: ReadonlyArray<string>): Stream.Stream<CompletionEvent, InvalidInput, TaskClient> =>
  Stream.unwrap(Effect.map(TaskClient, (client) => client.events(queues)))

export type { AwaitOptions } from "./task/await.ts"
