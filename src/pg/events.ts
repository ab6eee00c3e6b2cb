/**
 * The listener of completion events: one LISTEN connection per store on the ended channel
 * (`channel.ts`), opened when the first subscriber comes (a store nobody awaits or watches opens
 * none) and kept for the store's life, its notifications fanned out to every subscriber through
 * one `PubSub`. Awaiting many results at once costs one connection, not one each.
 *
 * @since 0.6.0
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import { Deferred, Effect, Fiber, PubSub, Queue, Scope } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import type { CompletionEvent, LifecycleOperations } from "../Lifecycle.ts"
import { limits, ofQueues } from "../Lifecycle.ts"
import * as Pooler from "../Pooler.ts"
import * as Detached from "../internal/detached.ts"
import type { EventsHub, PgContext } from "./context.ts"
import { parseEnded } from "./lifecycle.ts"

/** An idle hub for a store built in `scope`. */
export const makeHub = (scope: Scope.Scope): Effect.Effect<EventsHub> =>
  Effect.map(PubSub.dropping<CompletionEvent>(limits.eventBuffer), (pubsub) => ({ pubsub, listening: undefined, scope }))

/**
 * The LISTEN loop: a connection of its own (through a transaction-mode pooler, the direct URL,
 * or none: then subscribers only poll), listening again a second after it dies (what was
 * announced meanwhile is not heard: delivery is at most once).
 */
const listen = (ctx: PgContext, hub: EventsHub, listening: Deferred.Deferred<void>) =>
  Effect.gen(function*() {
    const { endedChannel, pg } = ctx
    if (pg._tag === "None") return yield* Deferred.succeed(listening, undefined)
    const target = yield* Pooler.sessionTarget(pg.value.config)
    if (target._tag === "None") return yield* Deferred.succeed(listening, undefined)
    const session = Effect.scoped(Effect.gen(function*() {
      const client = yield* PgClient.makeClient({
        ...target.value.config,
        applicationName: `${pg.value.config.applicationName ?? "leasehold"}-events`
      }).pipe(Effect.provide(Reactivity.layer))
      const notifications = yield* client.listen(endedChannel)
      yield* Deferred.succeed(listening, undefined)
      while (true) {
        const notification = yield* Queue.take(notifications)
        for (const event of parseEnded(notification.payload)) PubSub.publishUnsafe(hub.pubsub, event)
      }
    })).pipe(
      Effect.catchCause((cause) =>
        Effect.logDebug("completion events interrupted; listening again in 1s", cause).pipe(Effect.andThen(Effect.sleep(1_000)))
      ),
      Effect.forever,
      Effect.annotateLogs({ module: "PgQueueStore", channel: endedChannel })
    )
    // Detached, stopped with a bound when the store closes (a listening connection that stopped
    // answering must not hold up the shutdown), as the sends' listener is.
    const fiber = yield* Effect.forkDetach(session)
    yield* Scope.addFinalizer(hub.scope, Effect.asVoid(Detached.within(Fiber.interrupt(fiber), 1_000)))
  })

/**
 * `completions`: a subscription to the hub (the listener started first, if it was not), once
 * LISTEN is in place (waited for 5 s at most: past that, the subscriber relies on its polls), of
 * the events of `queues` (every queue for `undefined`).
 */
export const completions = (ctx: PgContext): LifecycleOperations["completions"] => (queues) =>
  Effect.gen(function*() {
    const hub = ctx.events
    let listening = hub.listening
    if (listening === undefined) {
      listening = hub.listening = Deferred.makeUnsafe<void>()
      yield* listen(ctx, hub, listening)
    }
    yield* Deferred.await(listening).pipe(Effect.timeoutOption(5_000))
    return ofQueues(PubSub.take(yield* PubSub.subscribe(hub.pubsub)), queues)
  })
