/**
 * The lease: one fenced statement that renews a whole claim and says which of its
 * messages an operator cancelled. It runs on the lease pool.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { defaults, type QueueStoreShape } from "../QueueStore.ts"
import * as Validate from "../internal/validate.ts"
import type { PgContext } from "./context.ts"
import { storeTime } from "./fragments.ts"
import { ids } from "./rows.ts"

/** `renew`: only rows whose token still matches move. */
export const renew = (ctx: PgContext): QueueStoreShape["renew"] => (claims, lease) =>
  Effect.gen(function*() {
    const { currentTime, leaseSql, table } = ctx
    if (claims.length === 0) return { held: [], cancelling: [] }
    const leaseMs = yield* Validate.durationMs("lease", lease, { min: defaults.minLeaseMs }).pipe(Effect.orDie)
    const now = yield* currentTime
    const refs = JSON.stringify(claims.map((c) => ({ id: c.id, token: c.leaseToken })))
    // One statement for the whole claim; only rows whose token still matches move. The
    // cancel flag rides along: a held message an operator cancelled is told to stop.
    const rows = yield* leaseSql<{ id: bigint; cancelling: boolean }>`
      UPDATE ${table} AS m
      SET visible_at = ${storeTime(now)} + ${leaseMs}::bigint * interval '1 millisecond'
      FROM jsonb_to_recordset(${refs}::jsonb) AS c(id bigint, token uuid)
      WHERE m.id = c.id AND m.lease_token = c.token AND m.state = 'ready'
        -- A lease claimed under flow limits is a slot: once expired it may have been counted free
        -- and given to another claim, so it is never renewed back (its holder learns it lost it).
        AND (NOT m.flow_limited OR m.visible_at > ${storeTime(now)})
      RETURNING m.id, m.cancel_requested_at IS NOT NULL AS cancelling`
    return { held: ids(rows), cancelling: ids(rows.filter((row) => row.cancelling)) }
  }).pipe((e) => ctx.op("renew", claims.length === 1 ? { count: 1, messageId: claims[0]!.id } : { count: claims.length }, e))
