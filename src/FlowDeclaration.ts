/**
 * Flow limits declared in code: what a worker writes as it starts (source `code`). An operator's
 * limits (the CLI, the admin API) win over a declaration until they are cleared; a declaration
 * never overwrites them.
 *
 * @since 0.4.0
 */
import { Effect, Layer } from "effect"
import * as FlowControl from "./FlowControl.ts"
import type { FlowLimits } from "./FlowControl.ts"
import type { InvalidInput, StoreError } from "./QueueError.ts"
import { QueueStore } from "./QueueStore.ts"

/** The limits of one queue, or of one task in it, as code declares them. */
export interface Declaration {
  readonly queue: string
  readonly task?: string | undefined
  readonly limits: FlowLimits
}

/** What declaring did, per declaration: written, or left to an operator's limits. */
export interface Declared extends Declaration {
  readonly written: boolean
}

/**
 * Write declarations (source `code`), all checked before any is written. An operator's limits
 * on the same queue or task are left as they are (`written: false`), and logged as such.
 */
export const declare = (
  declarations: ReadonlyArray<Declaration>
): Effect.Effect<ReadonlyArray<Declared>, InvalidInput | StoreError, QueueStore> =>
  Effect.gen(function*() {
    const store = yield* QueueStore
    const targets = declarations.map((d) => d.task === undefined ? { queue: d.queue } : { queue: d.queue, task: d.task })
    yield* Effect.forEach(declarations, (d, i) => FlowControl.validateLimits(d.limits, targets[i]!), { discard: true })
    const results: Array<Declared> = []
    for (const [i, d] of declarations.entries()) {
      const target = targets[i]!
      const written = yield* store.setLimits(target, d.limits, { source: "code" })
      if (!written) {
        yield* Effect.logInfo("flow limits declared in code left to the operator's").pipe(
          Effect.annotateLogs({ queue: d.queue, task: d.task ?? "" })
        )
      }
      results.push({ ...d, written })
    }
    return results
  })

/**
 * {@link declare}, trying again while the database cannot be reached (connection-dead errors
 * only, with a warning, the wait doubling from `backoffMs` to `backoffMaxMs`); any other
 * failure (a refused value, a missing table) fails loudly. What a consumer runs before its first
 * claim for the limits its tasks declare.
 */
export const declareWhileConnecting = (
  declarations: ReadonlyArray<Declaration>,
  backoff: { readonly backoffMs: number; readonly backoffMaxMs: number }
): Effect.Effect<ReadonlyArray<Declared>, InvalidInput | StoreError, QueueStore> => {
  const attempt = (waitMs: number): Effect.Effect<ReadonlyArray<Declared>, InvalidInput | StoreError, QueueStore> =>
    declare(declarations).pipe(
      Effect.catchTag("ConnectionDead", (error) =>
        Effect.logWarning(`declaring flow limits failed, connection dead; retrying in ${waitMs} ms: ${error.message}`).pipe(
          Effect.andThen(Effect.sleep(waitMs)),
          Effect.andThen(attempt(Math.min(waitMs * 2, backoff.backoffMaxMs)))
        ))
    )
  return declarations.length === 0 ? Effect.succeed([]) : attempt(backoff.backoffMs)
}

/**
 * Declare limits when the layer is built (a worker's start), e.g.
 * `FlowDeclaration.layer([{ queue: "emails", limits: { keyConcurrency: 2, rate: { count: 100, periodMs: 60_000 } } }])`.
 */
export const layer = (declarations: ReadonlyArray<Declaration>): Layer.Layer<never, InvalidInput | StoreError, QueueStore> =>
  Layer.effectDiscard(declare(declarations))
