/**
 * Announcements and the LISTEN loop: the schema's NOTIFY channel, writes that announce
 * themselves (and fall back to writing silently when the NOTIFY queue is full), and the
 * listening connection behind `sends` and `cancels`.
 *
 * @since 0.1.0
 */
import { PgClient } from "@effect/sql-pg"
import { Deferred, Effect, Fiber, Latch, Queue } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import { SqlError } from "effect/sql"
import type { MessageId } from "../Message.ts"
import * as Pooler from "../Pooler.ts"
import type { QueueStoreShape } from "../QueueStore.ts"
import * as Detached from "../internal/detached.ts"
import * as CancelInbox from "../internal/cancelInbox.ts"
import { hash31 } from "../internal/hash.ts"
import type { PgContext } from "./context.ts"

/** PostgreSQL's limit on identifiers, channel names included (NAMEDATALEN - 1 bytes). */
const MAX_IDENTIFIER_BYTES = 63

/**
 * The NOTIFY channel of `schema`: sends announce their queue on it.
 * `leasehold_<schema>` when that fits in an identifier; otherwise the schema is
 * cut short and a hash of the whole name keeps channels of different schemas apart.
 */
export const notifyChannel = (schema: string): string => {
  const plain = `leasehold_${schema}`
  if (Buffer.byteLength(plain) <= MAX_IDENTIFIER_BYTES) return plain
  const suffix = `_${hash31(schema).toString(36)}`
  return `leasehold_${schema.slice(0, MAX_IDENTIFIER_BYTES - "leasehold_".length - suffix.length)}${suffix}`
}

/**
 * Whether `error` is PostgreSQL refusing a NOTIFY because its queue is full ("too many
 * notifications in the NOTIFY queue", 54000, raised at commit): a listening session stopped
 * reading (a frozen consumer, a session left in a transaction) and the queue filled behind it.
 * The failing transaction wrote nothing, so its statement can be run again without the NOTIFY.
 */
const notifyQueueFull = (error: unknown): boolean => {
  if (!SqlError.isSqlError(error)) return false
  const cause = error.reason.cause as { readonly code?: unknown; readonly message?: unknown } | undefined
  return cause?.code === "54000" && /NOTIFY queue/i.test(String(cause.message ?? ""))
}

/** How often, at most, a full NOTIFY queue is logged. */
const NOTIFY_FULL_WARN_MS = 60_000

/** Runs a statement that announces what it wrote; `announce` false: the same write, silent. */
export type Announcing = <A, E, R>(statement: (announce: boolean) => Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>

/**
 * The store's {@link Announcing} (one per store: it remembers when it last warned).
 * Run a statement that announces what it wrote (a NOTIFY inside its own transaction), or,
 * when the NOTIFY queue is full, run it again without the announcement: the write matters,
 * the wake-up is best effort (consumers poll). Warned about at most once a minute.
 */
export const makeAnnouncing = (): Announcing => {
  let notifyFullWarnedAt = -Infinity
  return (statement) =>
    statement(true).pipe(Effect.catchIf(notifyQueueFull, () =>
      Effect.andThen(
        Effect.suspend(() => {
          const at = Date.now()
          if (at - notifyFullWarnedAt < NOTIFY_FULL_WARN_MS) return Effect.void
          notifyFullWarnedAt = at
          return Effect.logWarning(
            "the NOTIFY queue is full (a listening session stopped reading; see pg_notification_queue_usage()): " +
              "writing without waking listeners, consumers find the messages by polling"
          ).pipe(Effect.annotateLogs({ module: "PgQueueStore" }))
        }),
        statement(false)
      )))
}

/** `sends`: a LISTEN connection of its own per subscription, woken by the queues' announcements. */
export const sends = (ctx: PgContext): QueueStoreShape["sends"] => (queues) =>
  Effect.gen(function*() {
    const { cancelListeners, channel, pg } = ctx
    const latch = yield* Latch.make(false)
    if (pg._tag === "None") return Effect.never // no LISTEN without a PgClient: consumers poll
    const wanted = new Set(queues)
    const listening = yield* Deferred.make<void>()
    const cancelPrefix = "cancel "
    // One connection of its own per subscription, not one held from the main pool (a small
    // pool would lose a slot for good). When it dies, listen again after a pause; meanwhile
    // consumers poll.
    // LISTEN needs a session: through a transaction-mode pooler, the direct URL or nothing (poll).
    const target = yield* Pooler.sessionTarget(pg.value.config)
    if (target._tag === "None") return Effect.never
    const listen = Effect.scoped(Effect.gen(function*() {
      const client = yield* PgClient.makeClient({
        ...target.value.config,
        applicationName: `${pg.value.config.applicationName ?? "leasehold"}-listen`
      }).pipe(Effect.provide(Reactivity.layer))
      const notifications = yield* client.listen(channel)
      yield* Deferred.succeed(listening, undefined)
      while (true) {
        const notification = yield* Queue.take(notifications)
        if (wanted.has(notification.payload)) yield* latch.open
        // A cancel of running messages, announced on the same channel (queue names have no spaces):
        // `cancel <queue> <id>,<id>...`, or `cancel <queue>` naming none.
        else if (notification.payload.startsWith(cancelPrefix)) {
          const [queue = "", listed] = notification.payload.slice(cancelPrefix.length).split(" ", 2)
          const ids = listed === undefined ? undefined : listed.split(",") as Array<MessageId>
          for (const inbox of cancelListeners.get(queue) ?? []) inbox.add(ids)
        }
      }
    })).pipe(
      Effect.catchCause((cause) =>
        Effect.logDebug("send notifications interrupted; listening again in 1s", cause).pipe(Effect.andThen(Effect.sleep(1_000)))
      ),
      Effect.forever,
      Effect.annotateLogs({ module: "PgQueueStore", channel })
    )
    // Detached, and stopped with a bound: closing a listening connection that stopped answering
    // (a network partition) must not hold up the subscriber's shutdown; it is left to die alone.
    const listener = yield* Effect.forkDetach(listen)
    yield* Effect.addFinalizer(() => Effect.asVoid(Detached.within(Fiber.interrupt(listener), 1_000)))
    // Sends made after this returns must be heard: wait (boundedly) until LISTEN is in place.
    yield* Deferred.await(listening).pipe(Effect.timeoutOption(5_000))
    return Effect.andThen(latch.await, latch.close)
  })

/** `cancels`: heard by the listener of `sends`, which fills these inboxes on a `cancel <queue>` payload. */
export const cancels = (ctx: PgContext): QueueStoreShape["cancels"] => (queues) =>
  CancelInbox.subscribe(ctx.cancelListeners, queues)
