/**
 * The one-pool rule: a send made while a transaction of another SqlClient than the
 * store's is open is refused, since it would commit on its own whatever that transaction does.
 *
 * @since 0.1.0
 */
import { Context } from "effect"
import * as SqlClient from "effect/sql/SqlClient"
import { InvalidInput } from "../QueueError.ts"

/**
 * The key of the innermost open transaction of any effect/sql client (set by every
 * `withTransaction`, `undefined` outside one). effect keeps the reference itself internal
 * (`effect/internal/sql.ts`); a reference with the same key reads the same entry. Only a
 * cheap gate: when it is set, the context is scanned for the connections of every open
 * transaction. test/OnePoolRule.test.ts breaks if the key changes.
 */
const CurrentTransactionService = Context.Reference<Context.Key<unknown, object> | undefined>(
  "effect/sql/CurrentTransactionService",
  { defaultValue: () => undefined }
)

/** Every client's transaction connection key is this prefix and the client's number. */
const transactionKeyPrefix = SqlClient.TransactionConnection(0).key.replace(/0$/, "")

/**
 * Whether a transaction of another SqlClient than `own` is open in `context`. A send there
 * would run on the store's own pool and commit on its own, whatever that transaction does.
 */
export const foreignTransactionOpen = (context: Context.Context<never>, own: string): boolean => {
  if (Context.get(context, CurrentTransactionService) === undefined) return false
  for (const key of context.mapUnsafe.keys()) {
    if (key !== own && key.startsWith(transactionKeyPrefix)) return true
  }
  return false
}

/** The one-pool rule, as a send inside another client's transaction is refused with it. */
export const onePoolRule = "one-pool"

/** The refusal of a send to `queue` inside another client's transaction. */
export const foreignTransaction = (queue: string) =>
  new InvalidInput({
    field: "transaction",
    rule: onePoolRule,
    message: `send to queue ${JSON.stringify(queue)} refused: a transaction is open on another SqlClient ` +
      `than the store's, and the send would commit on its own whatever that transaction does ` +
      `(rule: ${onePoolRule}: build the store and your transactions on the same SqlClient layer, ` +
      `or send outside the transaction)`
  })
