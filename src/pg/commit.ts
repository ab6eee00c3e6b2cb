/**
 * The commit step: a handler's writes and its fenced finishing write in one transaction on the
 * store's main client. The message row is locked by its lease token first, so that no claim
 * (`SKIP LOCKED`), reap or renewal can take it while the handler's writes run; the finishing
 * write and its history record (`completeOn`, the batch statement with one entry) join the same
 * transaction. A token that no longer matches rolls everything back before anything ran.
 *
 * @since 0.5.0
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import { classify, CommitFenced, InvalidInput } from "../QueueError.ts"
import type { QueueStoreShape } from "../QueueStore.ts"
import { completeOn } from "./complete.ts"
import type { PgContext } from "./context.ts"
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
      const written = yield* completeOn(ctx, ctx.sql)([completion])
      // Locked above, so the write always finds its row; should it not, nothing must commit.
      if (!written.held.includes(id)) return yield* fenced(id, `commit of message ${id}: the finishing write found no lease; rolled back`)
      return value
    }))
  }).pipe(classify("commit"))
