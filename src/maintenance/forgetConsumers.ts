/**
 * Forgetting old consumer rows, as a maintenance task: about once a minute, each
 * registered consumer deletes the rows nobody has heartbeated for `forgetAfter`
 * (no lock, or a process that stalled for that long; a live one writes its row
 * again). The statement: `pg/reap.ts`.
 *
 * @since 0.1.0
 */
import type { PresenceContext } from "../pg/presence.ts"
import * as Reap from "../pg/reap.ts"
import type { StoreError } from "../QueueError.ts"
import type { Task } from "./Maintenance.ts"

/** The task of consumer `self`: every minute, in whole reaper rounds of `reapMs`. */
export const make = (options: {
  readonly ctx: PresenceContext
  readonly self: string
  readonly reapMs: number
  readonly forgetMs: number
}): Task<StoreError> => ({
  name: "forget consumers",
  every: Math.max(1, Math.round(60_000 / options.reapMs)) * options.reapMs,
  run: Reap.forgetConsumers(options.ctx, options.self, options.forgetMs),
  failed: (e) => `could not forget long-dead consumers: ${e.message}`
})
