/**
 * Renewing leases in the memory store.
 *
 * @since 0.1.0
 */
import { Clock, Effect } from "effect"
import type { MessageId } from "../Message.ts"
import { defaults, type QueueStoreShape } from "../QueueStore.ts"
import * as Validate from "../internal/validate.ts"
import { held, type MemoryState } from "./state.ts"

/** `renew`: extend the leases still held, saying which of them are flagged for cancel. */
export const renew = (state: MemoryState): QueueStoreShape["renew"] => (claims, lease) =>
  Effect.gen(function*() {
    const leaseMs = yield* Validate.durationMs("lease", lease, { min: defaults.minLeaseMs }).pipe(Effect.orDie)
    const now = yield* Clock.currentTimeMillis
    const stillHeld: Array<MessageId> = []
    const cancelling: Array<MessageId> = []
    for (const c of claims) {
      const row = held(state, c.id, c.leaseToken)
      // A lease claimed under flow limits is a slot: once expired it may have been counted free
      // and given to another claim, so it is never renewed back (its holder learns it lost it).
      if (row === undefined || (row.flowLimited && row.visibleAt <= now)) continue
      row.visibleAt = now + leaseMs
      stillHeld.push(c.id)
      if (row.cancelRequestedAt !== null) cancelling.push(c.id)
    }
    return { held: stillHeld, cancelling }
  })
