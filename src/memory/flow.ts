/**
 * Flow control in the memory store: the limits, key weights and flow status.
 *
 * @since 0.4.0
 */
import { Effect } from "effect"
import type { QueueStoreShape } from "../QueueStore.ts"
import type { MemoryState } from "./state.ts"

const notYet = (op: string) => Effect.die(new Error(`memory store: ${op} is not built yet (issue 27 in progress)`))

/** `setLimits`. */
export const setLimits = (_state: MemoryState): QueueStoreShape["setLimits"] => () => notYet("setLimits")
/** `limits`. */
export const limits = (_state: MemoryState): QueueStoreShape["limits"] => () => notYet("limits")
/** `setKeyWeight`. */
export const setKeyWeight = (_state: MemoryState): QueueStoreShape["setKeyWeight"] => () => notYet("setKeyWeight")
/** `flowStatus`. */
export const flowStatus = (_state: MemoryState): QueueStoreShape["flowStatus"] => () => notYet("flowStatus")
