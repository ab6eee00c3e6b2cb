/**
 * What the workflow engine of one process hears: every payload on the schema's workflow channel
 * (`run`: something may be claimed; `done <workflow> <id>`: a run wrote its result), heard on a
 * LISTEN connection of its own and also published locally, so waiting never depends on NOTIFY
 * alone (every wait has a poll bound as well).
 *
 * @since 0.1.0
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import { Effect, Option, PubSub, Queue, Scope } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"

/** The engine's signal bus. */
export interface Signals {
  readonly publish: (payload: string) => Effect.Effect<void>
  /**
   * Wait until a payload `wanted` accepts is heard or `ms` pass, whichever is first. `check`
   * runs after subscribing and before waiting, so a signal sent in between is not missed:
   * when it returns `Some`, that is the answer.
   */
  readonly waitUntil: <A>(options: {
    readonly check: Effect.Effect<Option.Option<A>>
    readonly wanted: (payload: string) => boolean
    readonly ms: number
  }) => Effect.Effect<Option.Option<A>>
}

/** The `done` payload of an execution. */
export const donePayload = (workflow: string, executionId: string): string => `done ${workflow} ${executionId}`

/** Build the bus; with a `PgClient` in context, LISTEN on `channel` for the process's lifetime (the scope's). */
export const make = (channel: string): Effect.Effect<Signals, never, Scope.Scope> =>
  Effect.gen(function*() {
    const bus = yield* PubSub.unbounded<string>()
    const pg = yield* Effect.serviceOption(PgClient.PgClient)
    if (Option.isSome(pg)) yield* Effect.forkScoped(listen(pg.value, channel, bus))
    const signals: Signals = {
      publish: (payload) => Effect.asVoid(PubSub.publish(bus, payload)),
      waitUntil: ({ check, ms, wanted }) =>
        Effect.scoped(Effect.gen(function*() {
          const heard = yield* PubSub.subscribe(bus)
          const now = yield* check
          if (Option.isSome(now)) return now
          yield* PubSub.take(heard).pipe(
            Effect.repeat({ until: wanted }),
            Effect.timeoutOption(ms)
          )
          return yield* check
        }))
    }
    return signals
  })

/** The LISTEN loop: a connection of its own (never a pool slot held for good); listens again after a pause when it dies. */
const listen = (pg: PgClient.PgClient, channel: string, bus: PubSub.PubSub<string>) =>
  Effect.scoped(Effect.gen(function*() {
    const client = yield* PgClient.makeClient({
      ...pg.config,
      applicationName: `${pg.config.applicationName ?? "leasehold"}-workflows`
    }).pipe(Effect.provide(Reactivity.layer))
    const notifications = yield* client.listen(channel)
    yield* PubSub.publish(bus, "run") // what was announced before LISTEN was in place
    while (true) {
      const notification = yield* Queue.take(notifications)
      yield* PubSub.publish(bus, notification.payload)
    }
  })).pipe(
    Effect.catchCause((cause) =>
      Effect.logDebug("workflow notifications interrupted; listening again in 1s", cause).pipe(
        Effect.andThen(Effect.sleep(1_000))
      )
    ),
    Effect.forever,
    Effect.annotateLogs({ module: "LeaseholdWorkflow", channel })
  )
