/**
 * Exactly-once activities (docs/workflows.md): an activity annotated `WithTransaction` runs its
 * writes to the engine's database and the record of its result in one transaction, the execution
 * row locked by its lease token first. A runner that lost the lease rolls its writes back with its
 * result; a failed attempt's writes roll back too, and its failure is recorded on its own.
 *
 * @since 0.1.0
 */
import { Context, Data, Effect } from "effect"
import { constFalse } from "effect/Function"
import * as SqlClient from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql"
import type { Workflow } from "effect/workflow"
import * as Sql from "../pg/workflow.ts"
import * as Codec from "./codec.ts"
import { type EngineState, type Run, statement } from "./state.ts"

/**
 * Mark an activity as transactional: `activity.annotate(WithTransaction, true)`. The same key as
 * effect's `ClusterSchema.WithTransaction`, so an activity annotated for effect's cluster engine
 * is transactional here too.
 */
export const WithTransaction = Context.Reference<boolean>("effect/cluster/ClusterSchema/WithTransaction", {
  defaultValue: constFalse
})

/** Why a transactional attempt rolled back: the lease was gone, or the attempt failed (recorded after). */
class RolledBack extends Data.TaggedError("RolledBack")<{
  readonly lost: boolean
  readonly result: Workflow.Result<unknown, unknown> | undefined
}> {}

/**
 * The activity's client must be the engine's (one pool, one transaction): writes through another
 * pool would commit on their own, outside the transaction that records the result.
 */
const checkOnePool = (state: EngineState) =>
  Effect.flatMap(Effect.serviceOption(SqlClient.SqlClient), (client) =>
    client._tag === "Some" && client.value.transactionService.key !== state.w.sql.transactionService.key
      ? Effect.die("leasehold workflow: a transactional activity's SqlClient is not the engine's; build both on one layer")
      : Effect.void)

/**
 * Run `attempt` (the activity, as a `Workflow.Result`) in one transaction with its fenced record.
 * `lost`: the lease was gone, nothing was written.
 */
export const runTransactional = <R>(
  state: EngineState,
  run: Run,
  name: string,
  attemptNumber: number,
  attempt: Effect.Effect<Workflow.Result<unknown, unknown>, never, R>
): Effect.Effect<Workflow.Result<unknown, unknown> | "lost", never, R> =>
  Effect.gen(function*() {
    yield* checkOnePool(state)
    const inTransaction = Effect.gen(function*() {
      if (!(yield* Sql.lockHeld(state.w, run.claimed))) return yield* new RolledBack({ lost: true, result: undefined })
      const result = yield* attempt
      if (result._tag !== "Complete" || result.exit._tag === "Failure") return yield* new RolledBack({ lost: false, result })
      const encoded = yield* Codec.encodeResult(result)
      yield* Sql.recordActivity(state.w, run.claimed, name, attemptNumber, encoded)
      return result
    })
    return yield* state.w.sql.withTransaction(inTransaction).pipe(
      Effect.catchTag("RolledBack", (rolledBack) => Effect.succeed(rolledBack.lost ? "lost" as const : rolledBack.result!)),
      (effect) => statement(effect as Effect.Effect<Workflow.Result<unknown, unknown> | "lost", SqlError.SqlError, R>)
    )
  })
