/**
 * What the queue store in use resolved, for the parts that must agree with it without
 * depending on its implementation: session liveness (`ConsumerPresence`) registers consumers
 * in the store's schema so the reaper sweeps the claims the store hands out; the consumer's
 * start-up line, the admin API and the CLI name it. `PgQueueStore.layer` provides it; a
 * store without a schema (the memory store) provides none.
 *
 * A leaf module: store-agnostic code imports this, never the PostgreSQL store.
 *
 * @since 0.1.0
 */
import { Context } from "effect"

/** The settings a store built by `PgQueueStore.layer` resolved. */
export class StoreSettings extends Context.Service<StoreSettings, {
  /** The validated SQL schema of the store's tables. */
  readonly schema: string
}>()("leasehold/StoreSettings") {}
