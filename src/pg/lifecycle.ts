/**
 * The caller's lifecycle on PostgreSQL: progress written on a held message, and the completion
 * events the finishing writes and cancels announce on the schema's ended channel (the
 * announcement is a CTE of the statement that ends the runs, so it is delivered at that
 * statement's commit and never for an end that rolled back). The listener that hears them is
 * `events.ts`.
 *
 * @since 0.6.0
 */
import { Effect } from "effect"
import type { Statement } from "effect/sql"
import type { CompletionEvent, CompletionOutcome, LifecycleOperations } from "../Lifecycle.ts"
import type { MessageId } from "../Message.ts"
import type { PgContext } from "./context.ts"
import { storeTime, textArray } from "./fragments.ts"

/** Ids one announcement names at most: 300 ids of up to 20 bytes, with names of 128, fit PostgreSQL's 8000-byte payload. */
const IDS_PER_NOTICE = 300

/**
 * `setProgress`: the value (checked by `fromOperations`) on the row its claim still holds, fenced
 * by `(id, lease_token)` like every write on a claim: a stale run matches nothing. On the main
 * client, not the lease pool: progress never waits in line with renewals. The row is updated in
 * place (no indexed column changes, so a HOT update).
 */
export const setProgress = ({ currentTime, op, sql, table }: PgContext): LifecycleOperations["setProgress"] => (ref, progress) =>
  Effect.gen(function*() {
    const now = yield* currentTime
    const rows = yield* sql<{ id: bigint }>`
      UPDATE ${table} SET progress = ${JSON.stringify(progress)}::jsonb, progress_at = ${storeTime(now)}
      WHERE id = ${ref.id}::bigint AND lease_token = ${ref.leaseToken}::uuid AND state = 'ready'
      RETURNING id`
    return rows.length > 0
  }).pipe((e) => op("setProgress", { messageId: ref.id }, e))

/**
 * The announcement of the runs a statement ended, as the body of a CTE: it reads a CTE named
 * `ended` (columns `id`, `queue`, `task`, `outcome`) of the same statement, and must be read by
 * its final SELECT (an unread CTE that only selects is never run). One NOTIFY per outcome, queue
 * and task and IDS_PER_NOTICE ids, payload `<outcome> <queue> <task> <at ms> <id>,<id>...`
 * (names have no spaces); `count` makes it one row whatever it announced. Not run at all when
 * `announce` is false (the NOTIFY queue is full, or the store announces no ends).
 *
 * Shaped for the finishing write's hot path: one aggregate per outcome, queue and task gathers
 * its ids in order, and each notice is a slice of that array (`k`-th of IDS_PER_NOTICE). It used
 * to number every row with a window function and format the time per row: ~1.5 us per message
 * more on the server (pairs of 50-message finishing writes, `pg_stat_statements`).
 */
export const announceEnded = ({ endedChannel, sql }: PgContext, announce: boolean, now: Date | null): Statement.Statement<never> =>
  sql`
    SELECT count(pg_notify(${endedChannel}, g.head || array_to_string(g.ids[k * ${IDS_PER_NOTICE}::int + 1 : (k + 1) * ${IDS_PER_NOTICE}::int], ','))) AS n
    FROM (
      SELECT e.outcome || ' ' || e.queue || ' ' || e.task || ' ' || (extract(epoch FROM ${storeTime(now)}) * 1000)::bigint::text || ' ' AS head,
             array_agg(e.id ORDER BY e.id) AS ids
      FROM ended AS e
      WHERE ${announce}::boolean
      GROUP BY e.outcome, e.queue, e.task
    ) AS g, generate_series(0, (cardinality(g.ids) - 1) / ${IDS_PER_NOTICE}::int) AS k`

/** One run that ended, for {@link announceAfterCommit}. */
export interface Ended {
  readonly id: MessageId
  readonly queue: string
  readonly task: string
  readonly outcome: CompletionOutcome
}

/**
 * Announce runs that ended inside a caller's transaction (the commit step's): after its outermost
 * commit, on a statement of its own, best effort, as a send inside a transaction is announced. A
 * NOTIFY in the transaction itself would fail the caller's whole commit when the NOTIFY queue is full.
 */
export const announceAfterCommit = (ctx: PgContext, ended: ReadonlyArray<Ended>): Effect.Effect<void> =>
  !ctx.announceEnds || ended.length === 0 ? Effect.void : Effect.flatMap(ctx.currentTime, (now) => {
    const at = String(now?.getTime() ?? Date.now())
    const payloads = ended.map((e) => `${e.outcome} ${e.queue} ${e.task} ${at} ${e.id}`)
    return ctx.sql.afterCommit(Effect.ignore(ctx.sql`SELECT pg_notify(${ctx.endedChannel}, p) FROM unnest(${textArray(payloads)}) AS p`))
  })

const outcomes: ReadonlySet<string> = new Set<CompletionOutcome>(["completed", "retried", "dead-lettered", "cancelled"])

/** The events an announcement names (see {@link announceEnded}); none for a payload of another shape. */
export const parseEnded = (payload: string): ReadonlyArray<CompletionEvent> => {
  const [outcome = "", queue = "", task = "", atText = "", ids = ""] = payload.split(" ", 5)
  const at = Number(atText)
  if (!outcomes.has(outcome) || ids === "" || !Number.isFinite(at)) return []
  const when = new Date(at)
  return ids.split(",").map((id) => ({
    messageId: id as MessageId,
    queue,
    task,
    outcome: outcome as CompletionOutcome,
    at: when
  }))
}
