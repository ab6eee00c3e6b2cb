/**
 * The plans of the claim statement, on real PostgreSQL, read from the statement the store
 * really sends (its span's `db.query.text`):
 * - the pause check is a one-time filter over an InitPlan (one primary-key probe of the
 *   queues table per claim, never one per candidate row); executed on a paused queue with
 *   500 ready rows, the probe runs once and the scan of the candidates never;
 * - on statistics gathered before the queue's backlog arrived, a claim still reads the head
 *   of the claim index, not every ready row of the queue sorted.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Tracer } from "effect"
import { SqlClient } from "effect/sql"
import { StoreSettings } from "../src/StoreSettings.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as PgTest from "./support/PgTest.ts"
import { collecting } from "./support/Spans.ts"


/** The SQL text of the statement containing `marker`, as the store sent it. */
const statementText = (spans: ReadonlyArray<Tracer.NativeSpan>, marker: string): string => {
  const texts = spans.map((s) => s.attributes.get("db.query.text")).filter((t): t is string => typeof t === "string")
  const found = texts.find((t) => t.includes(marker))
  if (found === undefined) throw new Error(`no statement containing ${marker} among ${texts.length} statements`)
  return found
}

/** The SQL text of the claim statement, as the store sent it. */
const claimText = (spans: ReadonlyArray<Tracer.NativeSpan>): string => statementText(spans, "FOR UPDATE SKIP LOCKED")

/** The plan of `statement` as EXPLAIN with `options` prints it. */
const explain = (sql: SqlClient.SqlClient, statement: string, options = "COSTS OFF") =>
  Effect.map(
    sql.unsafe<{ "QUERY PLAN": string }>(`EXPLAIN (${options}) ${statement}`),
    (rows) => rows.map((r) => r["QUERY PLAN"]).join("\n")
  )

/** `statement` executed under EXPLAIN ANALYZE (no costs, timings or summary): its plan with actual rows. */
const executedPlan = (sql: SqlClient.SqlClient, statement: string) =>
  explain(sql, statement, "ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF")

/** What `effect` answers, run in a transaction that is then rolled back (nothing it wrote is kept). */
const rolledBack = <A, E, R>(sql: SqlClient.SqlClient, effect: Effect.Effect<A, E, R>) =>
  sql.withTransaction(Effect.flatMap(effect, (answer) => Effect.fail({ rolledBack: answer }))).pipe(
    Effect.flip,
    Effect.flatMap((e) => typeof e === "object" && e !== null && "rolledBack" in e ? Effect.succeed(e.rolledBack as A) : Effect.die(e))
  )

layer(PgTest.storeLayer({ clock: "database" }), { excludeTestServices: true })("claim on a paused queue (PostgreSQL)", (it) => {
  it.effect("the pause check is a one-time filter: planned as an InitPlan, probing the queues table once per claim", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      const queue = "planned"
      yield* store.send(queue, Array.from({ length: 500 }, (_, i) => ({ task: "t", payload: i })))
      const { spans, tracer } = collecting()
      assert.lengthOf(yield* store.claim(queue, { lease: "30 seconds", limit: 1, consumer: "c" }).pipe(Effect.provideService(Tracer.Tracer, tracer)), 1)
      const text = withValues(claimText(spans), queue)
      const plan = yield* explain(sql, text)
      console.log(`claim statement plan:\n${plan}`)
      assert.match(plan, /One-Time Filter: \(+NOT \(InitPlan \d+\)/, "the pause check is evaluated once per execution")
      assert.match(plan, /InitPlan \d+[\s\S]*?->\s+(Index (Only )?Scan using queues_pkey|Seq Scan on queues)/)
      assert.notMatch(plan, /SubPlan/, "nothing evaluated per row")

      // Executed (each in a transaction rolled back): over the 499 ready rows, the probe runs once
      // (loops=1) while the candidate scan returns them all; on the paused queue the scan never runs.
      const analyzed = (pausedFirst: boolean) =>
        rolledBack(sql, Effect.andThen(pausedFirst ? store.pause(queue) : Effect.void, executedPlan(sql, text)))
      const running = yield* analyzed(false)
      console.log(`claim of 1000 over 499 ready rows, executed:\n${running}`)
      assert.match(running, /InitPlan \d+[\s\S]*?queues[^\n]*\(actual rows=0(\.00)? loops=1\)/)
      assert.match(running, /Scan using messages_\w+ on messages \(actual rows=499(\.00)? loops=1\)/)
      const paused = yield* analyzed(true)
      console.log(`claim on the paused queue, executed:\n${paused}`)
      assert.match(paused, /InitPlan \d+[\s\S]*?queues[^\n]*\(actual rows=1(\.00)? loops=1\)/)
      assert.match(paused, /Scan using messages_\w+ on messages \(never executed\)/)
      // Rolled back: nothing claimed, not paused.
      assert.strictEqual((yield* store.stats(queue)).ready, 499)
      yield* store.pause(queue)
      assert.lengthOf(yield* store.claim(queue, { lease: "30 seconds", limit: 10, consumer: "c" }), 0)
    }))

  it.effect("queues() finds the queue names by index skip scans: no sequential scan of messages or attempts", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      yield* store.send("listed", [{ task: "t", payload: 1 }])
      const { spans, tracer } = collecting()
      yield* store.queues().pipe(Effect.provideService(Tracer.Tracer, tracer))
      const names = statementText(spans, "WITH RECURSIVE")
      // Tiny tables make a sequential scan the cheapest: forbid it, to see whether an index can serve every part.
      const plan = yield* sql.withTransaction(Effect.andThen(sql`SET LOCAL enable_seqscan = off`, explain(sql, names)))
      console.log(`queues() names plan:\n${plan}`)
      assert.notMatch(plan, /Seq Scan/)
      for (const index of ["messages_claim_idx", "messages_dead_idx", "attempts_queue_idx", "queues_pkey"]) assert.include(plan, index)
    }))
})

layer(PgTest.storeLayer({ clock: "database" }), { excludeTestServices: true })("claim on stale statistics (PostgreSQL)", (it) => {
  it.effect("a claim reads the head of the claim index even when the statistics predate the backlog", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      const messages = sql(`${(yield* StoreSettings).schema}.messages`)
      // Statistics that know only another queue, kept (autovacuum would refresh them within a
      // minute or so): what a new queue, or a burst on a quiet one between two autovacuum runs,
      // looks like. The planner then believes the bursting queue holds about one row.
      yield* sql`ALTER TABLE ${messages} SET (autovacuum_enabled = false)`
      yield* store.send("steady", Array.from({ length: 5_000 }, (_, i) => ({ task: "t", payload: i })))
      yield* sql`ANALYZE ${messages}`
      const queue = "burst"
      yield* store.send(queue, Array.from({ length: 20_000 }, (_, i) => ({ task: "t", payload: i })))
      const { spans, tracer } = collecting()
      assert.lengthOf(yield* store.claim(queue, { lease: "30 seconds", limit: 1, consumer: "c" }).pipe(Effect.provideService(Tracer.Tracer, tracer)), 1)
      const text = withValues(claimText(spans), queue)
      // Executed in a transaction rolled back: a claim of 1000 reads 1000 candidates.
      const plan = yield* rolledBack(sql, executedPlan(sql, text))
      console.log(`claim of 1000 over 19,999 ready rows on stale statistics, executed:\n${plan}`)
      assert.match(plan, /Index Scan using messages_claim_idx on messages \(actual rows=1000(\.00)? loops=1\)/, plan)
      assert.notMatch(plan, /Sort Key: messages\.priority/, "the candidates come in index order, never sorted")
    }))
})

layer(PgTest.storeLayer({ clock: "database" }), { excludeTestServices: true })("look-ahead of an idle consumer (PostgreSQL)", (it) => {
  it.effect("nextVisibleAt probes the claim index once per priority, never reading the waiting rows", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      const queue = "waiting"
      // 6,000 messages delayed by an hour or more, over three priorities.
      for (const priority of [-1, 0, 7]) {
        yield* store.send(queue, Array.from({ length: 2_000 }, (_, i) => ({ task: "t", payload: i, priority, delay: 3_600_000 + i * 1_000 })))
      }
      yield* sql`ANALYZE ${sql(`${(yield* StoreSettings).schema}.messages`)}`
      const { spans, tracer } = collecting()
      const next = yield* store.nextVisibleAt(queue).pipe(Effect.provideService(Tracer.Tracer, tracer))
      assert.isTrue(next._tag === "Some")
      const plan = yield* executedPlan(sql, withValues(statementText(spans, "WITH RECURSIVE priorities"), queue))
      console.log(`nextVisibleAt over 6,000 waiting rows in 3 priorities, executed:\n${plan}`)
      assert.notMatch(plan, /Seq Scan on messages/)
      const scans = [...plan.matchAll(/Scan using messages_claim_idx on messages m?\s*\(actual rows=([\d.]+) loops=(\d+)\)/g)]
      assert.isAtLeast(scans.length, 2, plan)
      for (const [line, rows, loops] of scans) {
        assert.isAtMost(Number(rows), 1, `one row per probe: ${line}`)
        assert.isAtMost(Number(loops), 4, `one probe per priority (and one to find none after the last): ${line}`)
      }
    }))
})

layer(PgTest.storeLayer({ clock: "database" }), { excludeTestServices: true })("listing in-flight messages (PostgreSQL)", (it) => {
  it.effect("messages(state: in-flight) reads the leased rows, not the backlog (what the dashboard asks every 2 s)", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      const queue = "busy"
      yield* store.send(queue, Array.from({ length: 20_000 }, (_, i) => ({ task: "t", payload: i })))
      const claimed = yield* store.claim(queue, { lease: "30 seconds", limit: 5, consumer: "c" })
      yield* sql`ANALYZE ${sql(`${(yield* StoreSettings).schema}.messages`)}`
      const { spans, tracer } = collecting()
      const listed = yield* store.messages(queue, { state: "in-flight", limit: 100 }).pipe(Effect.provideService(Tracer.Tracer, tracer))
      assert.deepStrictEqual(listed.map((m) => m.id), claimed.map((c) => c.id))
      const text = withValues(statementText(spans, "view_state"), queue).replace("m.id > 1000::bigint", "m.id > 0::bigint")
      const plan = yield* executedPlan(sql, text)
      console.log(`in-flight listing over 20,000 messages with 5 in flight, executed:\n${plan}`)
      assert.match(plan, /messages_leased_by_idx on messages m \(actual rows=5(\.00)? loops=1\)/, plan)
      assert.notMatch(plan, /Seq Scan on messages/, plan)
      assert.notMatch(plan, /Rows Removed by Filter: \d{3,}/, `no row of the backlog read: ${plan}`)
    }))
})

/**
 * The statement with its parameters written in, for EXPLAIN: `$n::timestamptz` (the store's
 * "now", null on the database clock) NULL, other casts (lease, limits) and LIMIT a number,
 * the rest (queue, consumer) the queue's name.
 */
const withValues = (text: string, queue: string): string =>
  text.replace(/(LIMIT\s+)?\$\d+(::[a-z]+)?/g, (_match, limit: string | undefined, cast: string | undefined) =>
    limit !== undefined ? `${limit}1000` : cast === "::timestamptz" ? `NULL${cast}` : cast !== undefined ? `1000${cast}` : `'${queue}'`
  )
