/**
 * The pause check of the claim statement, on real PostgreSQL: the statement the store
 * really sends (read from its span's `db.query.text`) is planned with the check as a
 * one-time filter over an InitPlan (one primary-key probe of the queues table per claim,
 * never one per candidate row); executed on a paused queue with 500 ready rows, the probe
 * runs once and the scan of the candidates never.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Tracer } from "effect"
import { SqlClient } from "effect/sql"
import { QueueStore } from "../src/QueueStore.ts"
import * as PgTest from "./support/PgTest.ts"

/** A tracer keeping every span it makes. */
const collecting = () => {
  const spans: Array<Tracer.NativeSpan> = []
  const tracer = Tracer.make({
    span(options) {
      const span = new Tracer.NativeSpan(options)
      spans.push(span)
      return span
    }
  })
  return { spans, tracer }
}

/** The SQL text of the claim statement, as the store sent it. */
const claimText = (spans: ReadonlyArray<Tracer.NativeSpan>): string => {
  const texts = spans.map((s) => s.attributes.get("db.query.text")).filter((t): t is string => typeof t === "string")
  const claim = texts.find((t) => t.includes("FOR UPDATE SKIP LOCKED"))
  if (claim === undefined) throw new Error(`no claim statement among ${texts.length} statements`)
  return claim
}

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
      const explain = (options: string) =>
        Effect.map(
          sql.unsafe<{ "QUERY PLAN": string }>(`EXPLAIN (${options}) ${text}`),
          (rows) => rows.map((r) => r["QUERY PLAN"]).join("\n")
        )
      const plan = yield* explain("COSTS OFF")
      console.log(`claim statement plan:\n${plan}`)
      assert.match(plan, /One-Time Filter: \(NOT \(InitPlan \d+\)/, "the pause check is evaluated once per execution")
      assert.match(plan, /InitPlan \d+[\s\S]*?->\s+(Index (Only )?Scan using queues_pkey|Seq Scan on queues)/)
      assert.notMatch(plan, /SubPlan/, "nothing evaluated per row")

      // Executed (each in a transaction rolled back): over the 499 ready rows, the probe runs once
      // (loops=1) while the candidate scan returns them all; on the paused queue the scan never runs.
      const analyzed = (pausedFirst: boolean) =>
        sql.withTransaction(Effect.gen(function*() {
          if (pausedFirst) yield* store.pause(queue)
          const out = yield* explain("ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF")
          return yield* Effect.fail({ rolledBack: out })
        })).pipe(Effect.flip, Effect.map((e) => (e as { rolledBack: string }).rolledBack))
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
      const texts = spans.map((s) => s.attributes.get("db.query.text")).filter((t): t is string => typeof t === "string")
      const names = texts.find((t) => t.includes("WITH RECURSIVE"))
      assert.isDefined(names, "the statement listing the names")
      // Tiny tables make a sequential scan the cheapest: forbid it, to see whether an index can serve every part.
      const plan = yield* sql.withTransaction(Effect.gen(function*() {
        yield* sql`SET LOCAL enable_seqscan = off`
        const rows = yield* sql.unsafe<{ "QUERY PLAN": string }>(`EXPLAIN (COSTS OFF) ${names!}`)
        return rows.map((r) => r["QUERY PLAN"]).join("\n")
      }))
      console.log(`queues() names plan:\n${plan}`)
      assert.notMatch(plan, /Seq Scan/)
      for (const index of ["messages_visible_idx", "messages_dead_idx", "attempts_queue_idx", "queues_pkey"]) assert.include(plan, index)
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
