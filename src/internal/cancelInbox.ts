/**
 * The cancel notices one subscriber of `QueueStore.cancels` has not taken yet:
 * the running messages flagged since it last took them, or "some, unnamed"
 * when a notice could not list them. Shared by both stores.
 */
import { Effect, Latch, type Scope } from "effect"
import type { MessageId } from "../Message.ts"

/** Notices gathered for one subscriber until it takes them. */
export interface CancelInbox {
  /** Record one notice: the ids it names, or `undefined` when it names none (any may be flagged). */
  readonly add: (ids: ReadonlyArray<MessageId> | undefined) => void
  /** Wait for a notice, then take what was gathered: the ids, or `undefined` when one named none. */
  readonly take: Effect.Effect<ReadonlySet<MessageId> | undefined>
}

/** An empty inbox. */
export const make = (): CancelInbox => {
  const latch = Latch.makeUnsafe(false)
  let ids: Set<MessageId> | undefined = new Set()
  return {
    add: (more) => {
      if (more === undefined) ids = undefined
      else if (ids !== undefined) for (const id of more) ids.add(id)
      latch.openUnsafe()
    },
    take: Effect.andThen(
      latch.await,
      Effect.sync(() => {
        latch.closeUnsafe()
        const taken = ids
        ids = new Set()
        return taken
      })
    )
  }
}

/** The inboxes of a store's subscribers, per queue. */
export type Registry = Map<string, Set<CancelInbox>>

/**
 * Subscribe to the cancels of `queues` for the life of the current scope: an inbox in
 * `registry` under each queue (the store adds to them), taken by the effect returned.
 */
export const subscribe = (
  registry: Registry,
  queues: ReadonlyArray<string>
): Effect.Effect<Effect.Effect<ReadonlySet<MessageId> | undefined>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const inbox = make()
    for (const queue of queues) {
      const set = registry.get(queue) ?? new Set()
      set.add(inbox)
      registry.set(queue, set)
    }
    yield* Effect.addFinalizer(() => Effect.sync(() => queues.forEach((q) => registry.get(q)?.delete(inbox))))
    return inbox.take
  })

/** The longest id list a notice carries (bytes of text); a bigger cancel names none. */
export const MAX_LISTED_BYTES = 7_000
