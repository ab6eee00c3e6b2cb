/**
 * Flow control in the PostgreSQL store: the limits, key weights and flow status.
 *
 * @since 0.4.0
 */
import { Effect } from "effect"
import type { QueueStoreShape } from "../QueueStore.ts"
import type { PgContext } from "./context.ts"

const notYet = (op: string) => Effect.die(new Error(`PostgreSQL store: ${op} is not built yet (issue 27 in progress)`))

/** `setLimits`. */
export const setLimits = (_ctx: PgContext): QueueStoreShape["setLimits"] => () => notYet("setLimits")
/** `limits`. */
export const limits = (_ctx: PgContext): QueueStoreShape["limits"] => () => notYet("limits")
/** `setKeyWeight`. */
export const setKeyWeight = (_ctx: PgContext): QueueStoreShape["setKeyWeight"] => () => notYet("setKeyWeight")
/** `flowStatus`. */
export const flowStatus = (_ctx: PgContext): QueueStoreShape["flowStatus"] => () => notYet("flowStatus")
