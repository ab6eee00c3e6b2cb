/**
 * The storage service behind every queue: the whole lease protocol as a set of
 * short, fenced operations. `PgQueueStore` implements it on PostgreSQL and
 * `MemoryQueueStore` in memory; one conformance suite holds both to it.
 *
 * @since 0.1.0
 */
import { Context, type Duration, Effect, Option, type Scope } from "effect"
import * as Validate from "./internal/validate.ts"
import type {
  Attempt,
  CancelResult,
  Claim,
  ClaimRef,
  DeadLetter,
  MessageId,
  MessageInfo,
  MessageState,
  NewMessage,
  QueueInfo,
  QueueStats,
  SendResult
} from "./Message.ts"
import * as FlowControl from "./FlowControl.ts"
import * as Lifecycle from "./Lifecycle.ts"
import { type CommitFenced, InvalidInput, type StoreError } from "./QueueError.ts"

/** How to claim: for how long, how many at most, and who is claiming (recorded as `leased_by`). */
export interface ClaimOptions {
  readonly lease: Duration.Input
  readonly limit: number
  readonly consumer: string
  /** Of `limit`, what would wait for a handler slot (0 to `limit`, default 0): a queue with flow limits gives `limit - ahead` at most. */
  readonly ahead?: number | undefined
}

/**
 * Which dead letters an operation applies to: those of a queue, those with given ids (both:
 * of that queue), or every one. Listing with an empty filter lists every dead letter;
 * `redrive` and `purge` act on every one only with `all: true` and refuse an empty filter
 * (`InvalidInput`, field `filter`), so a forgotten field never redrives or purges them all.
 */
export interface DeadLetterFilter {
  readonly queue?: string | undefined
  readonly ids?: ReadonlyArray<MessageId> | undefined
  /** Say "every dead letter" to `redrive` and `purge` (of `queue`, or with `ids`, when those are given too). */
  readonly all?: boolean | undefined
}

/** Which messages of a queue {@link QueueStoreShape.messages} lists: a page in id order. */
export interface MessagesOptions {
  /** Only messages in this state (default: every state). */
  readonly state?: MessageState | undefined
  /** At most this many (1 to 10000, default 100). */
  readonly limit?: number | undefined
  /** Only ids after this one: the last id of the previous page. */
  readonly after?: MessageId | undefined
}

/** Which messages {@link QueueStoreShape.cancelWhere} cancels: every message of a queue, or of one task in it. */
export interface CancelFilter {
  readonly queue: string
  readonly task?: string | undefined
}

/** What {@link QueueStoreShape.renew} answers. */
export interface Renewed {
  /** The ids still held (their leases extended); one missing was reclaimed or deleted. */
  readonly held: ReadonlyArray<MessageId>
  /**
   * Of the held ids, those an operator asked to cancel: their holder stops the handler
   * and finishes them with `Cancel`.
   */
  readonly cancelling: ReadonlyArray<MessageId>
}

/** The finishing write of one message, as {@link QueueStoreShape.complete} takes it. */
export type Finish =
  | { readonly _tag: "Ack" }
  | { readonly _tag: "Retry"; readonly delayMs: number; readonly error: string }
  | { readonly _tag: "DeadLetter"; readonly reason: string; readonly error?: string | undefined }
  | { readonly _tag: "Release" }
  /** Write nothing (the lease is known lost): only the history record. */
  | { readonly _tag: "Forget" }
  /** Delete a message whose cancel was asked for (its handler stopped); the history says `cancelled`. */
  | { readonly _tag: "Cancel" }

/** What {@link QueueStoreShape.complete} answers. */
export interface Completed {
  /** The ids whose lease was still held: their write landed. */
  readonly held: ReadonlyArray<MessageId>
  /**
   * Of `held`, those deleted as cancelled (history `cancelled`): a `Cancel`, or a retry,
   * release or dead letter of a message whose cancel was asked for while it ran (the
   * handler ended before the flag reached it), which is never run again.
   */
  readonly cancelled: ReadonlyArray<MessageId>
}

/** One finished run for {@link QueueStoreShape.complete}: the fenced write and its history record. */
export interface Completion {
  readonly ref: ClaimRef
  readonly finish: Finish
  readonly queue: string
  readonly task: string
  readonly attempt: number
  readonly consumer: string
  readonly startedAt: Date
  /** Recorded when the lease was still held; `lease-lost` otherwise. */
  readonly outcome: Attempt["outcome"]
  readonly error: string | null
  /**
   * The handler's success value, encoded through its task's success schema, as JSON text
   * (absent for none); kept with the history record, bounded by `defaults.maxResultBytes`.
   */
  readonly result?: string | undefined
}

/**
 * The lease protocol: what producers and consumers run, on the hot path. Send; claim a batch,
 * each message under a fenced lease; renew the leases; finish each run with `complete` (its
 * fenced write and its history record); hear about sends and cancels; sleep until the next
 * visibility; read the store's clock.
 */
export interface LeaseProtocol {
  /**
   * Enqueue messages on `queue`; one result per message, in order. On
   * PostgreSQL, inside the caller's `sql.withTransaction` on the store's own
   * `SqlClient` the enqueue commits or rolls back with the caller's
   * transaction; inside a transaction of another client it fails with
   * `InvalidInput` (rule `one-pool`) rather than commit on its own.
   */
  readonly send: (
    queue: string,
    messages: ReadonlyArray<NewMessage>
  ) => Effect.Effect<ReadonlyArray<SendResult>, InvalidInput | StoreError>
  /**
   * Atomically take up to `limit` ready messages, lowest priority number first,
   * then oldest visibility, then id; hide them for `lease`, count the attempt
   * and give each a fresh lease token. A message whose previous lease expired
   * (its holder died) has `leaseExpiries` counted up, its expired attempt
   * recorded, and is claimed alone: a suspected worker-killer is never batched
   * with other messages. A message whose cancel was asked for while it ran, and
   * whose holder stopped before finishing it, is deleted instead (history
   * `cancelled`): never run again. On a queue with flow limits (`setLimits`) the
   * claim keeps them across every claimer: it takes no message whose queue, task
   * or key is at its concurrency or rate limit (or, FIFO, not its key's oldest),
   * and takes others instead; a fair queue is claimed round-robin across keys.
   */
  readonly claim: (queue: string, options: ClaimOptions) => Effect.Effect<ReadonlyArray<Claim>, InvalidInput | StoreError>
  /**
   * Extend the leases of many claims in one statement. Answers the ids still
   * held (an id missing was reclaimed by another consumer or deleted, and its
   * holder must stop) and, of those, the ones flagged by `cancel` (their
   * holder must stop the handler and finish them with `Cancel`).
   */
  readonly renew: (claims: ReadonlyArray<ClaimRef>, lease: Duration.Input) => Effect.Effect<Renewed, StoreError>
  /**
   * Finish many runs at once: each message's fenced write (an `Ack` deletes it; a
   * `Retry` makes it visible again after its delay, recording the error; a `Release`
   * makes it visible now, giving the attempt back; a `DeadLetter` moves it out of the
   * ready set with its reason; see {@link Finish}) and its attempt-history record,
   * in one statement and one commit on PostgreSQL. Answers the ids whose lease
   * was still held (their write landed), and which of those were deleted as
   * cancelled; the others were left untouched and their history says
   * `lease-lost`. Idempotent per message: a retried call (the first one's commit
   * landed, its answer was lost) finds the history record its landed write left
   * (same message, consumer, start and error) and answers as it says (held, or
   * cancelled), recording nothing more. Error text and reasons are made storable
   * (`Validate.boundedText`), results too (`AttemptResult.bounded`), so no value of
   * one completion can fail the others. Delays must be valid (0 .. ten years).
   */
  readonly complete: (completions: ReadonlyArray<Completion>) => Effect.Effect<Completed, StoreError>
  /**
   * Run `effect` and the fenced finishing write of `completion` in one transaction, effect first:
   * the message is locked by its lease token before `effect` runs (so no claim, reap or renewal
   * of it can run meanwhile), and the write and its history record go in after it. Fails with
   * `CommitFenced` (`lease-lost`) before running `effect` when the token no longer matches (the
   * lease was reclaimed, the message deleted); with `effect`'s own failure, or a `StoreError`,
   * when the transaction rolled back. On PostgreSQL the transaction is `sql.withTransaction` on
   * the store's main client: `effect`'s writes through that same `SqlClient` commit or roll back
   * with the write; a `SqlClient` of another pool in `effect`'s context is refused
   * (`InvalidInput`, rule `one-pool`) before anything runs. The memory store locks the message
   * the same way but cannot roll back what `effect` did.
   */
  readonly completeWith: <A, E, R>(
    completion: Completion,
    effect: Effect.Effect<A, E, R>
  ) => Effect.Effect<A, E | CommitFenced | InvalidInput | StoreError, R>
  /**
   * Hear about sends: subscribe to `queues` for the life of the current scope;
   * the returned effect completes when a message ready now was sent to one of
   * them since the last time it completed (on PostgreSQL: LISTEN/NOTIFY,
   * delivered when the sending transaction commits). An idle consumer races
   * it with its poll, so a new message runs at once; best effort, never needed
   * for correctness.
   */
  readonly sends: (queues: ReadonlyArray<string>) => Effect.Effect<Effect.Effect<void>, never, Scope.Scope>
  /**
   * Hear about cancels of running messages: subscribe to `queues` for the life of the
   * current scope; the returned effect completes when a running message of one of them was
   * flagged by `cancel` since the last time it completed, with the ids flagged meanwhile
   * (`undefined` when a notice could not name them: a cancel of thousands at once). A
   * consumer then renews the claims holding them at once, so the flag reaches the handler
   * without waiting for the next renewal. On PostgreSQL it rides on the notifications of
   * `sends` (heard while a `sends` subscription of the store is open, as a consumer always
   * has). Best effort, like `sends`.
   */
  readonly cancels: (
    queues: ReadonlyArray<string>
  ) => Effect.Effect<Effect.Effect<ReadonlySet<MessageId> | undefined>, never, Scope.Scope>
  /**
   * The earliest future time a message of `queue` becomes visible (a delay
   * ending or a lease expiring), so an idle consumer can sleep exactly until then.
   * On a queue whose rate window is full, no earlier than the window frees a start.
   */
  readonly nextVisibleAt: (queue: string) => Effect.Effect<Option.Option<Date>, InvalidInput | StoreError>
  /**
   * The store's clock: what leases, delays and schedules are timed by. On PostgreSQL the
   * database's `now()` (Effect's `Clock` with `clock: "effect"`); in memory, Effect's `Clock`.
   * A scheduler times its slots by it, so workers whose own clocks are off still agree.
   */
  readonly now: Effect.Effect<Date, StoreError>
}

/**
 * What an operator reads and writes (the CLI, the admin API, the dashboard): messages and
 * their history, queues and their counts, dead letters, pauses and cancels.
 */
export interface OperatorOperations {
  /**
   * One message by id, live or dead, with its state (as `stats` counts it, at the store's
   * now); `Option.none` for an id no message has (finished and deleted, or never sent).
   */
  readonly get: (id: MessageId) => Effect.Effect<Option.Option<MessageInfo>, StoreError>
  /**
   * A page of the messages of `queue`, live and dead (or those in one state), in id order
   * (the order they were sent); the next page starts `after` the last id of this one.
   */
  readonly messages: (
    queue: string,
    options?: MessagesOptions
  ) => Effect.Effect<ReadonlyArray<MessageInfo>, InvalidInput | StoreError>
  /**
   * Every queue that has messages, attempt history or has been paused, by name, with its
   * counts (as `stats` gives them) and whether it is paused. For operators and dashboards.
   */
  readonly queues: () => Effect.Effect<ReadonlyArray<QueueInfo>, StoreError>
  /** Counts of one queue: ready, delayed, in flight, dead, age of the oldest ready message. */
  readonly stats: (queue: string) => Effect.Effect<QueueStats, InvalidInput | StoreError>
  /**
   * The counts of several queues (as {@link QueueStoreShape.stats} gives them for one) in one
   * statement: one result per distinct queue, in the order given; a queue without messages
   * counts zeros. What the queue-depth gauges sample.
   */
  readonly depths: (queues: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<QueueStats>, InvalidInput | StoreError>
  /** List dead letters, oldest death first. */
  readonly deadLetters: (
    filter: DeadLetterFilter & { readonly limit?: number | undefined }
  ) => Effect.Effect<ReadonlyArray<DeadLetter>, InvalidInput | StoreError>
  /**
   * Return dead letters to ready with a fresh attempt budget (attempts and lease expiries reset); returns the ids redriven.
   * The filter must name a queue, ids or `all: true`. A redriven message keeps its dedup key unless a live message
   * holds it, or an earlier-dead message redriven with it (same queue and key) takes it: then it gives the key up
   * (`dedupKey` null) and is redriven all the same, never merged and never failing the redrive.
   */
  readonly redrive: (filter: DeadLetterFilter) => Effect.Effect<ReadonlyArray<MessageId>, InvalidInput | StoreError>
  /** Delete dead letters for good; returns the ids purged. The filter must name a queue, ids or `all: true`. */
  readonly purge: (filter: DeadLetterFilter) => Effect.Effect<ReadonlyArray<MessageId>, InvalidInput | StoreError>
  /**
   * Stop consuming `queue`: no consumer claims from it until `resume` (sends are still
   * accepted; messages in flight finish normally). Pausing a paused queue changes nothing.
   */
  readonly pause: (queue: string) => Effect.Effect<void, InvalidInput | StoreError>
  /** Let consumers claim from `queue` again, waking idle ones at once (as a send does). */
  readonly resume: (queue: string) => Effect.Effect<void, InvalidInput | StoreError>
  /**
   * Cancel messages by id: a ready, delayed or dead one is deleted at once (`cancelled`,
   * recorded in its history); a running one is flagged (`cancelling`), and its consumer
   * stops the handler when a renewal answers the flag (at once when it hears of the cancel
   * through {@link QueueStoreShape.cancels}, else at its next renewal) and deletes it. Ids of no message (finished,
   * never sent, malformed) are simply absent from the answer, which is in id order.
   * Cancelling a message already `cancelling` answers `cancelling` again.
   */
  readonly cancel: (ids: ReadonlyArray<MessageId>) => Effect.Effect<ReadonlyArray<CancelResult>, StoreError>
  /** Cancel, as {@link QueueStoreShape.cancel} does, every message of a queue (or of one task in it). */
  readonly cancelWhere: (filter: CancelFilter) => Effect.Effect<ReadonlyArray<CancelResult>, InvalidInput | StoreError>
  /** The attempt history of a message, oldest first (none for an id that cannot be a message id). */
  readonly attempts: (id: MessageId) => Effect.Effect<ReadonlyArray<Attempt>, StoreError>
}

/** Maintenance, run periodically by consumers: what bounds the history and the uniqueness reservations. */
export interface MaintenanceOperations {
  /** Delete attempt records that ended more than `olderThan` ago; returns how many. */
  readonly pruneAttempts: (olderThan: Duration.Input) => Effect.Effect<number, StoreError>
  /** Delete uniqueness reservations whose window ended before now; returns how many. */
  readonly pruneUniqueKeys: Effect.Effect<number, StoreError>
  /**
   * Delete flow bookkeeping nothing needs any more: rate windows whose every start is older
   * than the longest period (a day), and keys of weight 1 with no live message (a key that
   * comes back starts at the queue's current turn, as a new one does); returns how many.
   */
  readonly pruneFlow: Effect.Effect<number, StoreError>
}

/** Schedules (see `Scheduler`): rows keyed by schedule key, fired at most once per slot. */
export interface ScheduleOperations {
  /**
   * Insert or update schedules as a worker declares them, and record that `seenBy` still
   * declares them at `now` (the store's time, as {@link QueueStoreShape.now} reads it; a `now`
   * later than the store's own by more than `defaults.scheduleClockToleranceMs` is taken as the
   * store's now). A new schedule's last slot is `now`, so
   * only later slots fire; a changed cron or time zone moves it up to `now` too (the new
   * expression starts from now, nothing "missed" under it fires). Every spec is checked
   * (names, payload) before anything is written. Returns the rows as stored.
   *
   * With `replace: false` (a worker's periodic "still declared"), an existing row keeps its
   * definition and next slot and only its last-seen time moves; a missing row is inserted.
   */
  readonly upsertSchedules: (
    specs: ReadonlyArray<ScheduleSpec>,
    options: { readonly seenBy: string; readonly now: Date; readonly replace?: boolean | undefined }
  ) => Effect.Effect<ReadonlyArray<ScheduleInfo>, InvalidInput | StoreError>
  /**
   * Fire one slot of a schedule: move its last slot to `slot` only if it is earlier (the
   * fence) and the row still holds `cron` and `tz`, and send its message, in one
   * transaction. `none` when another worker fired this slot or a later one (or the row
   * changed or is gone), or when the slot is still in the future by the store's clock (later
   * than its now plus `defaults.scheduleClockToleranceMs`: a worker whose clock runs ahead
   * cannot fire a slot early, nor move the fence past slots the others still have to fire):
   * nothing was sent. The message carries the headers
   * `leasehold-schedule` (the key) and `leasehold-slot` (the slot, ISO 8601).
   */
  readonly fireSchedule: (
    key: string,
    fire: { readonly slot: Date; readonly nextSlot: Date | null; readonly cron: string; readonly tz: string }
  ) => Effect.Effect<Option.Option<SendResult>, InvalidInput | StoreError>
  /**
   * Send a schedule's message now, outside its slots (its last slot is left alone); the
   * message carries `leasehold-schedule` and `leasehold-slot: manual`. `none` for an unknown key.
   */
  readonly triggerSchedule: (key: string) => Effect.Effect<Option.Option<SendResult>, InvalidInput | StoreError>
  /** Every stored schedule, by key. */
  readonly schedules: Effect.Effect<ReadonlyArray<ScheduleInfo>, StoreError>
  /** Delete a schedule (a worker that still declares it upserts it again); false for an unknown key. */
  readonly removeSchedule: (key: string) => Effect.Effect<boolean, InvalidInput | StoreError>
}

/**
 * The operations of a queue store, by group. Every write on a claim is fenced by `(id, leaseToken)`.
 */
export interface QueueStoreShape
  extends LeaseProtocol, OperatorOperations, MaintenanceOperations, ScheduleOperations, FlowControl.FlowOperations, Lifecycle.LifecycleOperations
{}

/** A schedule as a worker declares it to the store: the cron and time zone are checked by `Scheduler`. */
export interface ScheduleSpec {
  readonly key: string
  readonly cron: string
  readonly tz: string
  readonly queue: string
  readonly task: string
  /** The payload as sent (already encoded). */
  readonly payload: unknown
  /** The next slot after now, for `schedules list`. */
  readonly nextSlot: Date | null
}

/** A stored schedule: its definition, how far it fired, and who declared it last. */
export interface ScheduleInfo extends ScheduleSpec {
  /** The latest slot fired (or the time it was declared or its cron changed): later slots fire. */
  readonly lastSlot: Date
  /** When a slot was last fired, if ever. */
  readonly firedAt: Date | null
  /** When a worker last declared it: a schedule no running worker declares stops being seen. */
  readonly lastSeenAt: Date
  readonly lastSeenBy: string
}

/**
 * The queue store service. Provide `PgQueueStore.layer` in applications and
 * `MemoryQueueStore.layer` in fast tests of consumer logic.
 */
export class QueueStore extends Context.Service<QueueStore, QueueStoreShape>()("leasehold/QueueStore") {}

/**
 * Build the service from a store's operations, checking the dead-letter filters
 * of `redrive`, `purge` and `deadLetters` and the ids of `get`, `cancel` and
 * `attempts` like every other input, before any store
 * code runs. Both stores are made with it.
 */
export const fromOperations = (shape: QueueStoreShape): QueueStoreShape =>
  QueueStore.of({
    ...shape,
    // An id that is no message id (not a positive bigint) names no message.
    get: (id) => isMessageId(id) ? shape.get(id) : Effect.succeed(Option.none()),
    messages: (queue, options = {}) => Effect.flatMap(messagesOptions(queue, options), (checked) => shape.messages(queue, checked)),
    redrive: (filter) => Effect.flatMap(Validate.deadLetterTarget(filter), shape.redrive),
    pause: (queue) => Effect.flatMap(Validate.name("queue", queue), shape.pause),
    resume: (queue) => Effect.flatMap(Validate.name("queue", queue), shape.resume),
    // Ids that cannot be message ids name no message: left out before the store sees them.
    cancel: (ids) => {
      const valid = [...new Set(ids)].filter(isMessageId)
      return valid.length === 0 ? Effect.succeed([]) : shape.cancel(valid)
    },
    cancelWhere: (filter) =>
      Effect.gen(function*() {
        yield* Validate.name("queue", filter.queue)
        if (filter.task !== undefined) yield* Validate.name("task", filter.task)
        return yield* shape.cancelWhere({ queue: filter.queue, task: filter.task })
      }),
    purge: (filter) => Effect.flatMap(Validate.deadLetterTarget(filter), shape.purge),
    attempts: (id) => isMessageId(id) ? shape.attempts(id) : Effect.succeed([]),
    deadLetters: (filter) => Effect.flatMap(Validate.deadLetterFilter(filter), shape.deadLetters),
    upsertSchedules: (specs, options) => Effect.flatMap(checkSpecs(specs, options.seenBy), () => shape.upsertSchedules(specs, options)),
    fireSchedule: (key, fire) => Effect.flatMap(Validate.name("schedule key", key), () => shape.fireSchedule(key, fire)),
    triggerSchedule: (key) => Effect.flatMap(Validate.name("schedule key", key), shape.triggerSchedule),
    removeSchedule: (key) => Effect.flatMap(Validate.name("schedule key", key), shape.removeSchedule),
    ...FlowControl.checkedOperations(shape),
    ...Lifecycle.checkedOperations(shape)
  })

/** Check the names of schedules before an upsert (the payloads are checked by the store, against its limits). */
const checkSpecs = (specs: ReadonlyArray<ScheduleSpec>, seenBy: string): Effect.Effect<void, InvalidInput> =>
  Effect.gen(function*() {
    yield* Validate.name("consumer", seenBy)
    const keys = new Set<string>()
    for (const spec of specs) {
      yield* Validate.name("schedule key", spec.key)
      yield* Validate.name("queue", spec.queue)
      yield* Validate.name("task", spec.task)
      if (keys.has(spec.key)) {
        return yield* new InvalidInput({
          field: "schedule key",
          rule: "unique among the schedules declared together",
          message: `schedule key ${JSON.stringify(spec.key)} is declared twice (rule: unique among the schedules declared together)`
        })
      }
      keys.add(spec.key)
    }
  })

/** Whether `id` can be a message's id: a positive decimal that fits a PostgreSQL bigint. Check ids from outside with it. */
export const isMessageId: (id: unknown) => id is MessageId = Validate.isMessageId

const messageStates: ReadonlySet<unknown> = new Set<MessageState>(["ready", "delayed", "in-flight", "dead"])

/** Check the queue and options of `messages`, filling in the default limit. */
const messagesOptions = (queue: string, options: MessagesOptions): Effect.Effect<MessagesOptions, InvalidInput> =>
  Effect.gen(function*() {
    yield* Validate.name("queue", queue)
    const limit = yield* Validate.positiveInt("limit", options.limit ?? 100, 10_000)
    if (options.state !== undefined && !messageStates.has(options.state)) {
      return yield* Effect.fail(
        new InvalidInput({
          field: "state",
          rule: "ready, delayed, in-flight or dead",
          message: `state ${JSON.stringify(String(options.state))} is not a message state (rule: ready, delayed, in-flight or dead)`
        })
      )
    }
    if (options.after !== undefined && !isMessageId(options.after)) {
      return yield* Effect.fail(
        new InvalidInput({
          field: "after",
          rule: "a message id",
          message: `after ${JSON.stringify(String(options.after))} is not a message id (rule: a message id)`
        })
      )
    }
    return { state: options.state, limit, after: options.after }
  })

/** The history's error texts that the stores write themselves (the same in both). */
export const historyErrors = {
  leaseExpired: "lease expired: the holder stopped renewing (died, hung or lost its connection)",
  cancelledUnfinished: "cancelled while it ran; its holder stopped before finishing it (died, hung or was reaped)"
} as const

/** Defaults shared by the stores. */
export const defaults = {
  /** Largest payload accepted, as JSON bytes: 1 MiB. */
  maxPayloadBytes: 1024 * 1024,
  /**
   * Largest handler result kept in the attempt history, as JSON bytes: 64 KiB. A larger one is
   * kept as `{"leasehold":"result-too-large","bytes":N,"limit":65536}` (see `Message.isResultTooLarge`).
   */
  maxResultBytes: 64 * 1024,
  /** Attempts a message gets unless its sender says otherwise. */
  maxAttempts: 25,
  /** Shortest lease accepted by `claim` and `renew`. */
  minLeaseMs: 100,
  /**
   * How far a schedule's time may run ahead of the store's clock: a slot fires only once it is
   * at most this much later than the store's now, and a scheduler whose own clock is off the
   * store's by more than this logs a warning.
   */
  scheduleClockToleranceMs: 1_000
} as const
