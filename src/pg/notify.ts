/**
 * The LISTEN loop: the listening connection behind `sends` and `cancels`, woken by what
 * writes announce on the schema's channel (`channel.ts`).
 *
 * @since 0.1.0
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import { Deferred, Effect, Fiber, Latch, Queue } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import type { MessageId } from "../Message.ts"
import * as Pooler from "../Pooler.ts"
import type { QueueStoreShape } from "../QueueStore.ts"
import * as Detached from "../internal/detached.ts"
import * as CancelInbox from "../internal/cancelInbox.ts"
import type { PgContext } from "./context.ts"

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
