/**
 * The two statements of every claim cycle (the claim, the batched finishing write) are
 * planned once per connection, on real PostgreSQL: after the server's five trial custom plans
 * it keeps the generic plan, whatever the batch size. Planning either anew took ~0.7 ms
 * each time, more than running it; a `LIMIT $n` the custom plans can see, or arrays whose
 * lengths they can see, made every custom plan look cheaper and so kept them all.
 * One connection and no lease pool, so both run on the session whose
 * `pg_prepared_statements` the test reads.
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import { StoreSettings } from "../src/StoreSettings.ts"
import { QueueStore } from "../src/QueueStore.ts"
import { ackOf } from "./support/Completions.ts"
import * as PgTest from "./support/PgTest.ts"


layer(PgTest.storeLayer({ clock: "database", maxConnections: 1, leasePool: false }), { excludeTestServices: true })(
  "plan cache (PostgreSQL)",
  (it) => {
    it.effect("claims and finishing writes of 1 to 3 messages reuse one generic plan after the trial plans", () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const sql = yield* SqlClient.SqlClient
        // A backlog, with statistics (as autovacuum keeps them): custom plans of a claim with a
        // visible limit then look much cheaper than the generic one.
        yield* store.send("planned", Array.from({ length: 5_000 }, (_, i) => ({ task: "t", payload: i })))
        yield* sql`ANALYZE ${sql(`${(yield* StoreSettings).schema}.messages`)}`
        const rounds = 12
        for (let round = 0; round < rounds; round++) {
          const claims = yield* store.claim("planned", { lease: "30 seconds", limit: 1 + (round % 3), consumer: "c" })
          assert.lengthOf(claims, 1 + (round % 3))
          assert.lengthOf((yield* store.complete(claims.map((c) => ackOf(c)))).held, claims.length, "every ack held")
        }
        const plans = yield* sql<{ name: string; statement: string; params: number; generic_plans: string; custom_plans: string }>`
          SELECT name, statement, cardinality(parameter_types) AS params, generic_plans, custom_plans FROM pg_prepared_statements`
        const of = (marker: string) => {
          const found = plans.filter((p) => p.statement.includes(marker))
          assert.lengthOf(found, 1, `one prepared statement containing ${marker}`)
          const { name, params } = found[0]!
          return { generic: Number(found[0]!.generic_plans), custom: Number(found[0]!.custom_plans), name, params }
        }
        const claim = of("FOR UPDATE SKIP LOCKED")
        const complete = of("unnest(a.id, a.token")
        console.log(`claim: ${claim.custom} custom, ${claim.generic} generic plans; finishing write: ${complete.custom} custom, ${complete.generic} generic`)
        for (const [name, p] of [["claim", claim], ["finishing write", complete]] as const) {
          assert.strictEqual(p.custom + p.generic, rounds, `${name}: every execution counted`)
          assert.isAtMost(p.custom, 5, `${name}: planned anew only for the server's trial plans`)
          // The plan kept finds the messages it writes by index, never by reading the whole table.
          // (Any values do: a generic plan does not depend on them, and EXPLAIN does not run it.)
          yield* sql`SET plan_cache_mode = force_generic_plan`
          const nulls = Array.from({ length: p.params }, () => "NULL").join(", ")
          const generic = (yield* sql.unsafe<{ "QUERY PLAN": string }>(`EXPLAIN (COSTS OFF) EXECUTE ${p.name}(${nulls})`))
            .map((r) => r["QUERY PLAN"]).join("\n")
          yield* sql`RESET plan_cache_mode`
          assert.notMatch(generic, /Seq Scan on messages/, `${name}'s generic plan:\n${generic}`)
          assert.match(generic, /Index Scan using messages_pkey on messages m/, `${name}'s generic plan:\n${generic}`)
        }
      }))
  }
)
