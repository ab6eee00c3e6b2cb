/**
 * The conformance suite every QueueStore must pass, one file per group of the store's
 * operations (as `QueueStoreShape` groups them): the lease protocol (`lease.ts`: claim, renew,
 * expiry, wake-ups; `send.ts`: sends, dedup keys and uniqueness windows; `complete.ts`: the
 * finishing writes; `commit.ts`: the commit step), the operator's reads and writes (`operator.ts`; `deadLetters.ts`),
 * maintenance (`maintenance.ts`), schedules (`schedules.ts`), flow control (`flow.ts`), the refusal of bad input
 * (`input.ts`), and the caller's lifecycle (`lifecycle.ts`: completion events, progress, awaiting an end).
 * It runs on the memory store and on real PostgreSQL (see MemoryQueueStore.test.ts,
 * PgQueueStore.test.ts and PoolerConformance.test.ts).
 * Time is Effect's Clock, moved with TestClock; PostgreSQL also runs it on the database's
 * clock (production's path), with real-time tests in place of those that move time.
 * Each test uses its own queue. Tests finish claims through `complete`, one completion at a
 * time with test/support/Finish.ts.
 */
import { layer } from "@effect/vitest"
import type { Layer } from "effect"
import type { QueueStore } from "../../src/QueueStore.ts"
import { commit } from "./commit.ts"
import { complete } from "./complete.ts"
import { deadLetters } from "./deadLetters.ts"
import { flow } from "./flow.ts"
import { input } from "./input.ts"
import { lease } from "./lease.ts"
import { lifecycle } from "./lifecycle.ts"
import { maintenance } from "./maintenance.ts"
import { operator } from "./operator.ts"
import { schedules } from "./schedules.ts"
import { send } from "./send.ts"
import type { Suite } from "./support.ts"

/**
 * Define the conformance suite for a store layer. `exactlyOnceMessages` sizes the heavy
 * exactly-once test.
 *
 * `clock` says what times the store: `"effect"` (Effect's Clock, so TestClock moves it: the
 * memory store, and PostgreSQL with `clock: "effect"`) or `"database"` (the server's `now()`,
 * as in production). On the database clock the tests that move time with TestClock are
 * skipped (`movesTime`), and a set of real-time tests in each group covers the same rules with
 * short leases and delays, real waits and generous bounds: lease arithmetic, delays, expiry,
 * fencing after a reclaim, renewal, retry delays, dead-letter times, the oldest ready age and
 * pruning.
 */
export const conformance = (
  name: string,
  storeLayer: Layer.Layer<QueueStore, unknown>,
  options: { readonly exactlyOnceMessages: number; readonly clock?: "effect" | "database" | undefined }
) =>
  layer(storeLayer)(`QueueStore conformance: ${name}`, (it) => {
    const databaseClock = options.clock === "database"
    const suite: Suite = {
      it,
      movesTime: databaseClock ? it.effect.skip : it.effect,
      databaseClock,
      exactlyOnceMessages: options.exactlyOnceMessages
    }
    for (const group of [lease, send, complete, commit, operator, deadLetters, maintenance, schedules, flow, input, lifecycle]) group(suite)
  })
