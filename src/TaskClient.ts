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
import { Context, Effect, Layer, Option, Schema } from "effect"
import { isResultTooLarge, isResultUnstorable, type MessageId, type SendResult } from "./Message.ts"
import { ResultUnreadable, type StoreError } from "./QueueError.ts"
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
}

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
    result: (task, id) =>
      Effect.flatMap(keptResult(store, id), (kept) =>
        Option.isNone(kept)
          ? Effect.succeed(Option.none())
          : Schema.decodeUnknownEffect(task.success as unknown as Schema.Codec<unknown, unknown>)(kept.value).pipe(
            Effect.map(Option.some),
            Effect.mapError((e) =>
              new ResultUnreadable({
                messageId: id,
                reason: "schema",
                message: `the result of message ${id} does not decode with the success schema of task "${task.name}": ${e.message}`
              })
            )
          )),
    resultJson: (id) => keptResult(store, id)
  })
})

/** The JSON kept with the last acked attempt of `id`, if any; the too-large and unstorable markers fail. */
const keptResult = (store: QueueStoreShape, id: MessageId): Effect.Effect<Option.Option<unknown>, ResultUnreadable | StoreError> =>
  !isMessageId(id) ? Effect.succeed(Option.none()) : Effect.flatMap(store.attempts(id), (history) => {
    const acked = history.findLast((a) => a.outcome === "acked")
    const result = acked?.result
    if (isResultUnstorable(result)) {
      return Effect.fail(
        new ResultUnreadable({
          messageId: id,
          reason: "unstorable",
          message: `the result of message ${id} was not kept: ${result.path} ${result.reason}`
        })
      )
    }
    if (!isResultTooLarge(result)) return Effect.succeed(Option.fromUndefinedOr(result))
    return Effect.fail(
      new ResultUnreadable({
        messageId: id,
        reason: "too-large",
        message: `the result of message ${id} was ${result.bytes} bytes of JSON, over the ${result.limit}-byte bound: not kept`
      })
    )
  })

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
  Effect.gen(function*() {
    const client = yield* TaskClient
    return yield* client.result(task, id)
  })
