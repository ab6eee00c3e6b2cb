/**
 * The commit step: a handler's writes and its fenced finishing write in one transaction on the
 * store's main client. The message row is locked by its lease token first, so that no claim
 * (`SKIP LOCKED`), reap or renewal can take it while the handler's writes run; the finishing
 * write and its history record join the same transaction: an ack in one single-row statement of its
 * own, any other finish through `completeOn` (the batch statement with one entry). A token that no
 * longer matches rolls everything back before anything ran.
 *
 * @since 0.5.0
 */
import { Effect } from "effect"
import * as SqlClient from "effect/sql/SqlClient"
import { classify, CommitFenced, InvalidInput } from "../QueueError.ts"
import type { Completion, QueueStoreShape } from "../QueueStore.ts"
import { completeOn, endedOf, notifyReleased } from "./complete.ts"
import type { PgContext } from "./context.ts"
import { historyInsert, storeTime } from "./fragments.ts"
import { announceAfterCommit } from "./lifecycle.ts"
import { onePoolRule } from "./onePool.ts"

/**
 * Lock the message by its lease token (`FOR UPDATE`): the fence of the commit step, taken before
 * the handler's writes. No row: the lease is gone (reclaimed, or the message deleted). A renewal
 * or a claim of the row waits for (or skips) the lock until the transaction ends.
 */
const lockHeld = (ctx: PgContext, id: string, token: string) =>
  ctx.sql<{ id: bigint }>`
    SELECT id FROM ${ctx.table}
    WHERE id = ${id}::bigint AND lease_token = ${token}::uuid AND state = 'ready'
    FOR UPDATE`

/**
 * The ack of a commit step, one row: the message (locked above, in this transaction) deleted by its
 * token, and its history record, in one statement. The batch statement of `complete` costs one
 * message several times its share of a batch (its arrays and CTEs: 158-236 us against 20-46, measured
 * by bench:commit with BENCH_PG_STATS=1). A queue with flow limits hears its slot came back, after the
 * commit, as after `complete`.
 */
const ackLocked = (ctx: PgContext, c: Completion) =>
  Effect.gen(function*() {
    const now = yield* ctx.currentTime
    const rows = yield* ctx.sql<{ message_id: bigint }>`
      WITH acked AS (
        DELETE FROM ${ctx.table} WHERE id = ${c.ref.id}::bigint AND lease_token = ${c.ref.leaseToken}::uuid
        RETURNING id, attempt_base
      )
      ${historyInsert(ctx.attemptsTable)}
      SELECT a.id, ${c.queue}, ${c.task}, ${c.attempt}::int + a.attempt_base, ${c.consumer}, ${c.startedAt}::timestamptz,
             ${storeTime(now)}, ${c.outcome}, ${c.error}
      FROM acked AS a
      RETURNING message_id`
    const held = rows.length > 0
    const completed = { held: held ? [c.ref.id] : [], cancelled: [] }
    yield* notifyReleased(ctx, [c], completed)
    yield* announceAfterCommit(ctx, endedOf([c], completed))
    return held
  })

const fenced = (messageId: string, message: string) => new CommitFenced({ messageId, reason: "lease-lost", message })

/**
 * The handler's `SqlClient`, when it has one, must be the store's (one pool): writes through
 * another pool would commit on their own, outside the transaction that holds the ack.
 */
const checkOnePool = (ctx: PgContext) =>
  Effect.flatMap(Effect.serviceOption(SqlClient.SqlClient), (client) =>
    client._tag === "Some" && client.value.transactionService.key !== ctx.sql.transactionService.key
      ? Effect.fail(
        new InvalidInput({
          field: "commit",
          rule: onePoolRule,
          message: `commit refused: the handler's SqlClient is not the store's, so its writes would commit on their own ` +
            `(rule: ${onePoolRule}: build the store and the handler's SqlClient on the same layer)`
        })
      )
      : Effect.void)

/**
 * `completeWith`: the fence, `effect`, then the finishing write, in one transaction. Failures of
 * the database (the statements', BEGIN's or COMMIT's, `effect`'s own through the client) are
 * classified as every store operation's: `ConnectionDead` or `QueryFailed`.
 */
export const completeWith = (ctx: PgContext): QueueStoreShape["completeWith"] => (completion, effect) =>
  Effect.gen(function*() {
    yield* checkOnePool(ctx)
    const { id, leaseToken } = completion.ref
    return yield* ctx.sql.withTransaction(Effect.gen(function*() {
      const locked = yield* lockHeld(ctx, id, leaseToken)
      if (locked.length === 0) {
        return yield* fenced(id, `commit of message ${id} refused: this run no longer holds it (its lease was taken or it was deleted); its writes were rolled back`)
      }
      const value = yield* effect
      const held = completion.finish._tag === "Ack"
        ? yield* ackLocked(ctx, completion)
        : (yield* completeOn(ctx, ctx.sql, "after-commit")([completion])).held.includes(id)
      // Locked above, so the write always finds its row; should it not, nothing must commit.
      if (!held) return yield* fenced(id, `commit of message ${id}: the finishing write found no lease; rolled back`)
      return value
    }))
  }).pipe(classify("commit"))
