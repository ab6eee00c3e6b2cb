/**
 * The store conformance suite through a real PgBouncer (started by the test) in
 * transaction mode (with the direct URL for LISTEN, as the README advises) and
 * in session mode: send, claim, renew, complete, retry, release, dead letters,
 * migrations and the rest work through the pooler. Skipped, saying so, where
 * pgbouncer is not installed outside CI (support/RequireTool.ts).
 */
import { describe } from "@effect/vitest"
import { Effect, Layer, Redacted } from "effect"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import * as QueueConfig from "../src/QueueConfig.ts"
import { conformance } from "./conformance/index.ts"
import * as PgBouncer from "./support/PgBouncer.ts"
import * as PgTest from "./support/PgTest.ts"
import { requireTool } from "./support/RequireTool.ts"

const pgbouncer = requireTool("pgbouncer", "PoolerConformance.test.ts")

const pooled = (mode: PgBouncer.PoolMode, direct: boolean) => {
  const schema = PgTest.uniqueSchema()
  const client = Layer.unwrap(Effect.map(PgBouncer.Bouncer, (bouncer) =>
    QueueConfig.pgLayer(Redacted.make(bouncer.url), {
      maxConnections: 12,
      applicationName: "leasehold-test",
      pooler: mode,
      directUrl: direct ? Redacted.make(PgTest.databaseUrl()) : undefined
    })))
  return PgQueueStore.layer({ clock: "effect", schema }).pipe(
    Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
    Layer.provideMerge(client),
    // Session mode holds a server connection per client connection for the client's life: the
    // pool must fit them all (main 12 + lease 2 + listen), or clients queue for good.
    Layer.provide(PgBouncer.layer(mode, { serverUrl: PgTest.databaseUrl(), poolSize: mode === "session" ? 20 : 3 }))
  )
}

describe.skipIf(!pgbouncer.runs)(`through PgBouncer${pgbouncer.skipNote}`, () => {
  conformance("PgBouncer transaction mode", pooled("transaction", true), { exactlyOnceMessages: 150 })
  conformance("PgBouncer session mode", pooled("session", false), { exactlyOnceMessages: 150 })
})
