/**
 * Typed tasks on real PostgreSQL, in real time: sends that join the caller's
 * transaction, malformed rows and failing handlers that end as dead letters
 * with a reason, attempt history, kept results, quarantine of suspected worker-killers, and
 * the invariant over a mixed load of 205 messages on two consumers (5 of them
 * orphaned by a worker that died holding them): every message sent is acked,
 * dead-lettered or still waiting; nothing vanishes, nothing runs after its
 * death, nothing is acked twice, and input the producer side refuses never
 * reaches the table.
 *
 * Set TASKPG_LOG_LEVEL=Info (or Debug) to see the consumers' logs.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Exit, Layer, type LogLevel, Metric, Option, References, Schema, Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as Consumer from "../src/Consumer.ts"
import type { Attempt, DeadLetter, MessageId } from "../src/Message.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import type * as QueueConfig from "../src/QueueConfig.ts"
import * as QueueMetrics from "../src/QueueMetrics.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as Task from "../src/Task.ts"
import * as TaskClient from "../src/TaskClient.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitFor } from "./support/Wait.ts"

const LOG_LEVEL = (process.env["TASKPG_LOG_LEVEL"] ?? "Error") as LogLevel.LogLevel

/** The consumer settings of every test: short lease, fast polls, fast retries, few unknown-task tries. */
const BASE: QueueConfig.ConsumerOptions = {
  lease: "1 second",
  pollInterval: "50 millis",
  retryBase: "100 millis",
  retryMax: "400 millis",
  unknownTaskAttempts: 2,
  unknownTaskDelay: "100 millis",
  quarantineAfter: 2,
  shutdownGrace: "5 seconds"
}

/** A store on real PostgreSQL in `schema` (dropped afterwards), timed by the database's clock. */
const pgStore = (schema: string, maxConnections = 12) =>
  PgQueueStore.layer({ clock: "database", schema }).pipe(
    Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
    Layer.provideMerge(PgTest.clientLayer({ maxConnections }))
  )

/** Run `body` against a fresh schema; it gets the schema's name for raw SQL. */
const inFreshSchema = <A, E>(
  body: (schema: string) => Effect.Effect<A, E, QueueStore | SqlClient.SqlClient | Scope.Scope>,
  maxConnections?: number
) => {
  const schema = PgTest.uniqueSchema("tpg")
  return body(schema).pipe(
    Effect.provide(pgStore(schema, maxConnections)),
    Effect.provideService(References.MinimumLogLevel, LOG_LEVEL)
  )
}

/** Start a consumer in a child scope of the test's, so the test can stop it (gracefully) before checking. */
const startConsumer = <R>(dispatcher: Consumer.Dispatcher<R>, options: QueueConfig.ConsumerOptions) =>
  Effect.gen(function*() {
    const scope = yield* Scope.fork(yield* Scope.Scope)
    const context = yield* Layer.buildWithScope(Consumer.layer(dispatcher, { ...BASE, ...options }), scope)
    const consumer = Context.get(context, Consumer.Consumer)
    return { id: consumer.settings.consumerId, health: consumer.health, stop: Scope.close(scope, Exit.void) }
  })


const some = <A>(value: A | undefined | false): Option.Option<A> =>
  value === undefined || value === false ? Option.none() : Option.some(value)

/** Wait until the dead letters of `queue` number `n`; returns them. */
const waitDead = (queue: string, n: number, timeoutMs = 15_000) =>
  Effect.gen(function*() {
    const store = yield* QueueStore
    let seen: ReadonlyArray<DeadLetter> = []
    return yield* waitFor(
      `${n} dead letters on ${queue}`,
      Effect.map(store.deadLetters({ queue, limit: 1_000 }), (dead) => {
        seen = dead
        return some(dead.length >= n && dead)
      }),
      { timeoutMs, describe: () => `${seen.length} so far: ${seen.map((d) => `${d.task}: ${d.reason}`).join("; ")}` }
    )
  })

/** Wait until the attempt history of `id` ends with `outcome`; returns it. */
const waitHistory = (id: MessageId, outcome: Attempt["outcome"], timeoutMs = 15_000) =>
  Effect.gen(function*() {
    const store = yield* QueueStore
    let seen: ReadonlyArray<Attempt> = []
    return yield* waitFor(
      `the history of ${id} to end with ${outcome}`,
      Effect.map(store.attempts(id), (history) => {
        seen = history
        return some(history.length > 0 && history[history.length - 1]!.outcome === outcome && history)
      }),
      { timeoutMs, describe: () => JSON.stringify(seen.map((a) => [a.attempt, a.outcome, a.consumer])) }
    )
  })

/** Insert a row straight into the messages table, bypassing every check of `send`. */
const rawInsert = (schema: string, queue: string, task: string, payloadJson: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const [row] = yield* sql<{ id: string }>`
      INSERT INTO ${sql(`${schema}.messages`)} (queue, task, payload) VALUES (${queue}, ${task}, ${payloadJson}::jsonb)
      RETURNING id::text AS id`
    return row!.id as MessageId
  })

const count = (metric: Metric.Metric<number, Metric.CounterState<number>>) =>
  Effect.map(Metric.value(metric), (state) => Number(state.count))

const counters = Effect.all({
  acked: count(QueueMetrics.acked),
  deadLettered: count(QueueMetrics.deadLettered),
  doubleRuns: count(QueueMetrics.doubleRuns),
  finishFailures: count(QueueMetrics.finishFailures)
})

const outcomes = (history: ReadonlyArray<Attempt>) => history.map((a) => a.outcome)
const attemptNumbers = (history: ReadonlyArray<Attempt>) => history.map((a) => a.attempt)

/** The formatted schema error a payload gets when decoded with `schema`: what a dead letter's reason must quote. */
const decodeMessage = (schema: Schema.Top, payload: unknown): string => {
  const exit = Schema.decodeUnknownExit(schema as Schema.Codec<unknown, unknown>)(payload, { errors: "all" })
  if (Exit.isSuccess(exit)) throw new Error(`payload ${JSON.stringify(payload)} decodes`)
  const error = exit.cause.reasons.find((r) => r._tag === "Fail")
  return (error as { readonly error: Schema.SchemaError }).error.message
}

describe("Task on PostgreSQL (real time)", () => {
  // -------------------------------------------------------------------------------------------
  // a. transactions
  // -------------------------------------------------------------------------------------------
  it.live("Task.send inside the caller's sql.withTransaction commits with it and rolls back with it", () =>
    inFreshSchema((schema) =>
      Effect.gen(function*() {
        const QUEUE = "tx"
        const sql = yield* SqlClient.SqlClient
        const table = sql(`${schema}.messages`)
        // A second client, not in the transaction: what any other session (a consumer) sees.
        const outside = Context.get(yield* Layer.build(PgTest.clientLayer({ maxConnections: 1 })), SqlClient.SqlClient)
        const visibleOutside = (ids: ReadonlyArray<MessageId>) =>
          Effect.map(
            outside<{ n: number }>`SELECT count(*)::int AS n FROM ${outside(`${schema}.messages`)}
              WHERE id IN (SELECT jsonb_array_elements_text(${JSON.stringify(ids)}::jsonb)::bigint)`,
            (rows) => rows[0]!.n
          )
        const ran: Array<{ readonly id: MessageId; readonly to: string }> = []
        const greet = Task.make({
          name: "greet",
          queue: QUEUE,
          payload: Schema.Struct({ to: Schema.String }),
          handler: (payload, context) => Effect.sync(() => ran.push({ id: context.messageId, to: payload.to }))
        })
        const consumer = yield* startConsumer(Task.dispatcher(greet), { queues: [QUEUE], consumerId: "tx-consumer" })

        // Committed: invisible to others (and to the polling consumer) until the commit, then run.
        const committed = yield* sql.withTransaction(Effect.gen(function*() {
          const one = yield* Task.send(greet, { to: "ada" })
          const many = yield* Task.sendMany(greet, [{ to: "bob" }, { to: "cy" }])
          const ids = [one.id, ...many.map((r) => r.id)]
          const [inside] = yield* sql<{ n: number }>`
            SELECT count(*)::int AS n FROM ${table} WHERE id IN (SELECT jsonb_array_elements_text(${JSON.stringify(ids)}::jsonb)::bigint)`
          assert.strictEqual(inside!.n, 3, "the caller's transaction sees its sends")
          // A negative observation: six poll intervals of a running consumer, which must not see the rows.
          yield* Effect.sleep("300 millis")
          assert.strictEqual(yield* visibleOutside(ids), 0, "no other session sees an uncommitted send")
          assert.lengthOf(ran, 0, "the consumer cannot run an uncommitted message")
          return ids
        }))
        assert.strictEqual(yield* visibleOutside(committed), 3, "committed with the caller's transaction")
        for (const id of committed) yield* waitHistory(id, "acked")
        assert.sameMembers(ran.map((r) => r.to), ["ada", "bob", "cy"])
        assert.sameMembers(ran.map((r) => r.id), committed)

        // Rolled back: the caller's work fails after the sends; nothing is enqueued.
        const attempted: Array<MessageId> = []
        const exit = yield* sql.withTransaction(Effect.gen(function*() {
          attempted.push((yield* Task.send(greet, { to: "dora" })).id)
          attempted.push(...(yield* Task.sendMany(greet, [{ to: "eve" }, { to: "fay" }])).map((r) => r.id))
          return yield* Effect.fail("the caller's own work failed" as const)
        })).pipe(Effect.exit)
        assert.isTrue(Exit.isFailure(exit))
        assert.lengthOf(attempted, 3, "the sends themselves succeeded inside the transaction")
        assert.strictEqual(yield* visibleOutside(attempted), 0, "rolled back with the caller's transaction")
        const [left] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${table}`
        assert.strictEqual(left!.n, 0, "the table is empty: the committed ones were acked, the others never existed")
        const stats = yield* (yield* QueueStore).stats(QUEUE)
        assert.deepStrictEqual([stats.ready, stats.delayed, stats.inFlight, stats.dead], [0, 0, 0, 0])
        assert.lengthOf(ran, 3, "nothing of the rolled-back transaction ran")
        yield* consumer.stop
      })
    ), { timeout: 30_000 })

  it.live("a declared task sent with TaskClient joins the caller's transaction; the worker runs its implementation", () =>
    inFreshSchema((schema) =>
      Effect.gen(function*() {
        const QUEUE = "tx-client"
        const sql = yield* SqlClient.SqlClient
        // The producer's side: the declaration and the sender layer, built on the store in context.
        const welcome = Task.define({ name: "welcome", queue: QUEUE, payload: Schema.Struct({ to: Schema.String, n: Schema.NumberFromString }) })
        const client = Context.get(yield* Layer.build(TaskClient.layer), TaskClient.TaskClient)
        // The worker's side: the declaration given its handler.
        const ran: Array<{ readonly to: string; readonly n: number }> = []
        const welcomeImpl = Task.implement(welcome, (payload) => Effect.sync(() => ran.push(payload)))
        const consumer = yield* startConsumer(Task.dispatcher(welcomeImpl), { queues: [QUEUE], consumerId: "tx-client-consumer" })

        const sent = yield* sql.withTransaction(client.send(welcome, { to: "ada", n: 1 }))
        const [row] = yield* sql<{ payload: unknown }>`SELECT payload FROM ${sql(`${schema}.messages`)} WHERE id = ${sent.id}::bigint`
        assert.deepStrictEqual(row?.payload, { to: "ada", n: "1" }, "stored encoded by the schema")
        const exit = yield* sql.withTransaction(Effect.gen(function*() {
          yield* client.sendMany(welcome, [{ to: "bob", n: 2 }, { to: "cy", n: 3 }])
          return yield* Effect.fail("the caller's own work failed" as const)
        })).pipe(Effect.exit)
        assert.isTrue(Exit.isFailure(exit))
        yield* waitHistory(sent.id, "acked")
        const stats = yield* (yield* QueueStore).stats(QUEUE)
        assert.deepStrictEqual([stats.ready, stats.delayed, stats.inFlight, stats.dead], [0, 0, 0, 0], "the rolled-back sends never existed")
        assert.deepStrictEqual(ran, [{ to: "ada", n: 1 }])
        yield* consumer.stop
      })
    ), { timeout: 30_000 })

  // -------------------------------------------------------------------------------------------
  // b. malformed rows
  // -------------------------------------------------------------------------------------------
  it.live("malformed rows written by SQL end as dead letters that say why; the consumer keeps going", () =>
    inFreshSchema((schema) =>
      Effect.gen(function*() {
        const QUEUE = "raw"
        const store = yield* QueueStore
        const Point = Schema.Struct({ x: Schema.Number, label: Schema.String })
        const ran: Array<MessageId> = []
        const point = Task.make({
          name: "point",
          queue: QUEUE,
          payload: Point,
          handler: (_payload, context) => Effect.sync(() => ran.push(context.messageId))
        })
        const undecodable = [
          { what: "x is not a number", payload: { x: "twelve", label: "a" } },
          { what: "JSON null", payload: null },
          { what: "a missing key", payload: { x: 1 } },
          { what: "a string, not an object", payload: "just text" }
        ]
        const unknown = [
          { what: "empty task name", task: "" },
          { what: "a task nobody defines", task: "retired-task-v0" },
          { what: "a hostile task name", task: "point'; DROP TABLE messages; --" }
        ]
        const decodeIds = new Map<MessageId, { readonly what: string; readonly payload: unknown }>()
        for (const u of undecodable) decodeIds.set(yield* rawInsert(schema, QUEUE, "point", JSON.stringify(u.payload)), u)
        const unknownIds = new Map<MessageId, { readonly what: string; readonly task: string }>()
        for (const u of unknown) unknownIds.set(yield* rawInsert(schema, QUEUE, u.task, "{}"), u)

        const consumer = yield* startConsumer(Task.dispatcher(point), { queues: [QUEUE], consumerId: "raw-consumer" })
        const dead = yield* waitDead(QUEUE, decodeIds.size + unknownIds.size)
        const byId = new Map(dead.map((d) => [d.id, d]))

        for (const [id, u] of decodeIds) {
          const d = byId.get(id)
          assert.isDefined(d, `${u.what}: dead-lettered`)
          assert.strictEqual(d!.attempts, 1, `${u.what}: dead-lettered on the first attempt`)
          assert.strictEqual(
            d!.reason,
            `payload does not match the task's schema: ${decodeMessage(Point, u.payload)}`,
            `${u.what}: the reason quotes the formatted schema error`
          )
          assert.include(d!.lastError ?? "", "DecodeFailed", `${u.what}: the last error is the DecodeFailed cause`)
          const history = yield* store.attempts(id)
          assert.deepStrictEqual(outcomes(history), ["dead-lettered"], u.what)
          assert.deepStrictEqual(attemptNumbers(history), [1], u.what)
        }
        for (const [id, u] of unknownIds) {
          const d = byId.get(id)
          assert.isDefined(d, `${u.what}: dead-lettered`)
          assert.strictEqual(d!.attempts, 2, `${u.what}: tried unknownTaskAttempts (2) times`)
          assert.strictEqual(d!.reason, `unknown task ${JSON.stringify(u.task)}: no worker handled it in 2 attempts`, u.what)
          const history = yield* store.attempts(id)
          assert.deepStrictEqual(outcomes(history), ["retried", "dead-lettered"], u.what)
          assert.deepStrictEqual(attemptNumbers(history), [1, 2], u.what)
          assert.include(history[0]!.error ?? "", "UnknownTask", u.what)
          // Tried again after the unknown-task delay (100 ms), not at once.
          const gap = history[1]!.startedAt.getTime() - history[0]!.endedAt.getTime()
          assert.isAtLeast(gap, 100 - 30, `${u.what}: retried after the unknown-task delay (gap ${gap} ms)`)
        }
        assert.lengthOf(ran, 0, "no handler ran on a malformed row")

        // The consumer is alive and well: a good message sent now is processed.
        const good = yield* Task.send(point, { x: 1, label: "fine" })
        yield* waitHistory(good.id, "acked")
        assert.deepStrictEqual(ran, [good.id])
        assert.isTrue((yield* consumer.health).healthy)
        const stats = yield* store.stats(QUEUE)
        assert.deepStrictEqual([stats.ready, stats.delayed, stats.inFlight, stats.dead], [0, 0, 0, 7])
        yield* consumer.stop
      })
    ), { timeout: 30_000 })

  // -------------------------------------------------------------------------------------------
  // c. failing handlers
  // -------------------------------------------------------------------------------------------
  it.live("handlers that throw, fail, give up or hang: retried with the task's backoff, dead-lettered with the cause", () =>
    inFreshSchema(() =>
      Effect.gen(function*() {
        const QUEUE = "failing"
        const store = yield* QueueStore
        const runs: Array<{ readonly task: string; readonly attempt: number; readonly at: number; interruptedAt?: number }> = []
        const Payload = Schema.Struct({ n: Schema.Number })
        class Boom extends Schema.TaggedError<Boom>()("Boom", { message: Schema.String, code: Schema.Number }) {}

        const throws = Task.make({
          name: "throws",
          queue: QUEUE,
          payload: Payload,
          maxAttempts: 3,
          retry: { base: "150 millis", jitter: false },
          handler: (_p, context): Effect.Effect<void> => {
            runs.push({ task: "throws", attempt: context.attempt, at: Date.now() })
            throw new Error("thrown outside any Effect")
          }
        })
        const fails = Task.make({
          name: "fails",
          queue: QUEUE,
          payload: Payload,
          maxAttempts: 3,
          retry: { base: "300 millis", factor: 2, jitter: false },
          handler: (_p, context) =>
            Effect.suspend(() => {
              runs.push({ task: "fails", attempt: context.attempt, at: Date.now() })
              return Effect.fail(new Error(`typed failure on attempt ${context.attempt}`))
            })
        })
        const failsEncoded = Task.make({
          name: "fails-encoded",
          queue: QUEUE,
          payload: Payload,
          error: Boom,
          maxAttempts: 2,
          retry: { base: "100 millis", jitter: false },
          handler: (_p, context) =>
            Effect.suspend(() => {
              runs.push({ task: "fails-encoded", attempt: context.attempt, at: Date.now() })
              return Effect.fail(new Boom({ message: "boom", code: 7 }))
            })
        })
        const givesUp = Task.make({
          name: "gives-up",
          queue: QUEUE,
          payload: Payload,
          maxAttempts: 5,
          handler: (_p, context) =>
            Effect.suspend(() => {
              runs.push({ task: "gives-up", attempt: context.attempt, at: Date.now() })
              return Task.unrecoverable("this input can never work")
            })
        })
        const hangs = Task.make({
          name: "hangs",
          queue: QUEUE,
          payload: Payload,
          maxAttempts: 2,
          maxRuntime: "300 millis",
          retry: { base: "100 millis", jitter: false },
          handler: (_p, context) =>
            Effect.suspend(() => {
              const run = { task: "hangs", attempt: context.attempt, at: Date.now() } as (typeof runs)[number]
              runs.push(run)
              return Effect.never.pipe(Effect.onInterrupt(() => Effect.sync(() => { run.interruptedAt = Date.now() })))
            })
        })
        const consumer = yield* startConsumer(Task.dispatcher(throws, fails, failsEncoded, givesUp, hangs), {
          queues: [QUEUE],
          consumerId: "failing-consumer",
          concurrency: 5
        })
        const ids = {
          throws: (yield* Task.send(throws, { n: 1 })).id,
          fails: (yield* Task.send(fails, { n: 2 })).id,
          failsEncoded: (yield* Task.send(failsEncoded, { n: 3 })).id,
          givesUp: (yield* Task.send(givesUp, { n: 4 })).id,
          hangs: (yield* Task.send(hangs, { n: 5 })).id
        }
        const dead = new Map((yield* waitDead(QUEUE, 5)).map((d) => [d.id, d]))
        yield* consumer.stop
        const runsOf = (task: string) => runs.filter((r) => r.task === task)
        const history = (id: MessageId) => store.attempts(id)

        // Throws (a defect): retried, then dead at max attempts, the Cause.pretty text kept.
        {
          const d = dead.get(ids.throws)!
          const h = yield* history(ids.throws)
          assert.strictEqual(d.attempts, 3)
          assert.strictEqual(d.reason, "attempts exhausted: 3 of 3")
          assert.match(d.lastError ?? "", /^Error: thrown outside any Effect\n\s+at /, "the defect's Cause.pretty, with its stack")
          assert.deepStrictEqual(outcomes(h), ["retried", "retried", "dead-lettered"])
          assert.deepStrictEqual(attemptNumbers(h), [1, 2, 3])
          assert.strictEqual(h[2]!.error, d.lastError, "the history keeps the same text")
          assert.deepStrictEqual(runsOf("throws").map((r) => r.attempt), [1, 2, 3])
        }
        // Fails (typed): retried with the task's own backoff (300 ms, then 600 ms), then dead.
        {
          const d = dead.get(ids.fails)!
          const h = yield* history(ids.fails)
          assert.strictEqual(d.attempts, 3)
          assert.strictEqual(d.reason, "attempts exhausted: 3 of 3")
          assert.match(d.lastError ?? "", /^Error: typed failure on attempt 3\n\s+at /)
          assert.deepStrictEqual(outcomes(h), ["retried", "retried", "dead-lettered"])
          assert.match(h[0]!.error ?? "", /^Error: typed failure on attempt 1/)
          assert.match(h[1]!.error ?? "", /^Error: typed failure on attempt 2/)
          const gaps = [1, 2].map((i) => h[i]!.startedAt.getTime() - h[i - 1]!.endedAt.getTime())
          assert.isAtLeast(gaps[0]!, 300 - 30, `first retry after the task's base of 300 ms (not the consumer's 100 ms): ${gaps}`)
          assert.isAtLeast(gaps[1]!, 600 - 30, `second retry after 2 x 300 ms: ${gaps}`)
          assert.isBelow(gaps[1]!, 600 + 2_000, `second retry not much later than due: ${gaps}`)
          assert.deepStrictEqual(runsOf("fails").map((r) => r.attempt), [1, 2, 3])
        }
        // Fails with a typed error that has an error schema: recorded as its JSON.
        {
          const d = dead.get(ids.failsEncoded)!
          assert.strictEqual(d.attempts, 2)
          assert.strictEqual(d.reason, "attempts exhausted: 2 of 2")
          assert.match(d.lastError ?? "", /^Error: fails-encoded failed: \{"_tag":"Boom","message":"boom","code":7\}/)
          assert.deepStrictEqual(outcomes(yield* history(ids.failsEncoded)), ["retried", "dead-lettered"])
        }
        // Unrecoverable: dead at once, on its first attempt, though 5 were allowed.
        {
          const d = dead.get(ids.givesUp)!
          assert.strictEqual(d.attempts, 1)
          assert.strictEqual(d.reason, "unrecoverable: this input can never work")
          assert.include(d.lastError ?? "", "Unrecoverable")
          assert.deepStrictEqual(outcomes(yield* history(ids.givesUp)), ["dead-lettered"])
          assert.lengthOf(runsOf("gives-up"), 1)
        }
        // Hangs: interrupted at the task's max runtime (300 ms), retried, dead at max attempts.
        {
          const d = dead.get(ids.hangs)!
          const h = yield* history(ids.hangs)
          assert.strictEqual(d.attempts, 2)
          assert.strictEqual(d.reason, "attempts exhausted: 2 of 2")
          assert.match(d.lastError ?? "", /^MaxRuntimeExceeded: handler ran past its max runtime of 0\.3s and was interrupted/)
          assert.deepStrictEqual(outcomes(h), ["retried", "dead-lettered"])
          assert.match(h[0]!.error ?? "", /^MaxRuntimeExceeded/)
          const hung = runsOf("hangs")
          assert.deepStrictEqual(hung.map((r) => r.attempt), [1, 2])
          for (const r of hung) {
            assert.isDefined(r.interruptedAt, "the hung handler was interrupted")
            const ranFor = r.interruptedAt! - r.at
            assert.isAtLeast(ranFor, 300 - 10, `ran until its max runtime: ${ranFor} ms`)
            assert.isBelow(ranFor, 1_000, `interrupted at the max runtime, well before the lease or anything else: ${ranFor} ms`)
          }
        }
        const stats = yield* store.stats(QUEUE)
        assert.deepStrictEqual([stats.ready, stats.delayed, stats.inFlight, stats.dead], [0, 0, 0, 5])
      })
    ), { timeout: 30_000 })

  // -------------------------------------------------------------------------------------------
  // d. attempt history
  // -------------------------------------------------------------------------------------------
  it.live("attempt history: two failures then success; a dead worker's expired lease, then the consumer's outcome", () =>
    inFreshSchema(() =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const seen: Array<{ readonly id: MessageId; readonly attempt: number }> = []
        const flaky = Task.make({
          name: "flaky",
          queue: "history",
          payload: Schema.Struct({ failTimes: Schema.Number }),
          retry: { base: "100 millis" },
          handler: (payload, context) =>
            Effect.suspend(() => {
              seen.push({ id: context.messageId, attempt: context.attempt })
              return context.attempt <= payload.failTimes
                ? Effect.fail(new Error(`flaky failure ${context.attempt}`))
                : Effect.void
            })
        })
        const failing = yield* Task.send(flaky, { failTimes: 2 })
        // A worker claims this one and dies: it never renews, acks or fails it.
        const orphan = yield* Task.send(flaky, { failTimes: 0 }, { queue: "history-orphan" })
        const [deadClaim] = yield* store.claim("history-orphan", { lease: "300 millis", limit: 1, consumer: "dead-worker" })
        assert.strictEqual(deadClaim?.id, orphan.id)

        const consumer = yield* startConsumer(Task.dispatcher(flaky), {
          queues: ["history", "history-orphan"],
          consumerId: "history-consumer"
        })
        const h1 = yield* waitHistory(failing.id, "acked")
        const h2 = yield* waitHistory(orphan.id, "acked")
        yield* consumer.stop

        assert.deepStrictEqual(outcomes(h1), ["retried", "retried", "acked"])
        assert.deepStrictEqual(attemptNumbers(h1), [1, 2, 3])
        assert.deepStrictEqual(h1.map((a) => a.consumer), ["history-consumer", "history-consumer", "history-consumer"])
        assert.deepStrictEqual(h1.map((a) => a.task), ["flaky", "flaky", "flaky"])
        assert.match(h1[0]!.error ?? "", /^Error: flaky failure 1/)
        assert.match(h1[1]!.error ?? "", /^Error: flaky failure 2/)
        assert.isNull(h1[2]!.error)
        for (let i = 0; i < h1.length; i++) {
          assert.isAtMost(h1[i]!.startedAt.getTime(), h1[i]!.endedAt.getTime())
          if (i > 0) assert.isAtMost(h1[i - 1]!.endedAt.getTime(), h1[i]!.startedAt.getTime())
        }

        assert.deepStrictEqual(outcomes(h2), ["lease-expired", "acked"])
        assert.deepStrictEqual(attemptNumbers(h2), [1, 2])
        assert.deepStrictEqual(h2.map((a) => a.consumer), ["dead-worker", "history-consumer"])
        assert.match(h2[0]!.error ?? "", /^lease expired/)
        // The expired attempt ended when its lease did.
        assert.strictEqual(h2[0]!.endedAt.getTime(), deadClaim!.leaseExpiresAt.getTime())
        assert.isAtMost(h2[0]!.endedAt.getTime(), h2[1]!.startedAt.getTime())

        assert.deepStrictEqual(seen.filter((s) => s.id === failing.id).map((s) => s.attempt), [1, 2, 3])
        assert.deepStrictEqual(seen.filter((s) => s.id === orphan.id).map((s) => s.attempt), [2], "the handler saw attempt 2")
      })
    ), { timeout: 30_000 })

  // -------------------------------------------------------------------------------------------
  // e. quarantine
  // -------------------------------------------------------------------------------------------
  it.live("results: a task's value is kept with its acked attempt by the batched finishing write, read back typed; void keeps nothing", () =>
    inFreshSchema((schema) =>
      Effect.gen(function*() {
        const QUEUE = "results"
        const Total = Schema.Struct({ total: Schema.NumberFromString })
        const sum = Task.define({ name: "sum", queue: QUEUE, payload: Schema.Array(Schema.Number), success: Total })
        const ping = Task.define({ name: "ping", queue: QUEUE, payload: Schema.Number, success: Schema.Void })
        const client = yield* TaskClient.make
        const sums = yield* client.sendMany(sum, [[1, 2], [3, 4, 5], []])
        const [pinged] = yield* client.sendMany(ping, [1])
        const consumer = yield* startConsumer(Task.dispatcher(
          Task.implement(sum, (ns) => Effect.succeed({ total: ns.reduce((a, b) => a + b, 0) })),
          Task.implement(ping, () => Effect.void)
        ), { queues: [QUEUE], consumerId: "results-consumer" })
        for (const sent of [...sums, pinged!]) yield* waitHistory(sent.id, "acked")
        yield* consumer.stop
        const totals = yield* Effect.forEach(sums, (sent) => client.result(sum, sent.id))
        assert.deepStrictEqual(totals, [Option.some({ total: 3 }), Option.some({ total: 12 }), Option.some({ total: 0 })])
        // Stored encoded, in the attempts table's jsonb column; a void result is a NULL there.
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{ message_id: string; result: unknown }>`
          SELECT message_id::text AS message_id, result FROM ${sql(`${schema}.attempts`)} ORDER BY id`
        const byId = new Map(rows.map((r) => [r.message_id, r.result]))
        assert.deepStrictEqual(byId.get(sums[1]!.id), { total: "12" })
        assert.isNull(byId.get(pinged!.id))
        assert.deepStrictEqual(yield* client.resultJson(pinged!.id), Option.none())
      })))

  it.live("a message whose lease expired quarantineAfter (2) times is dead-lettered as a suspected worker-killer, unrun", () =>
    inFreshSchema(() =>
      Effect.gen(function*() {
        const QUEUE = "quarantine"
        const store = yield* QueueStore
        const runs: Array<MessageId> = []
        const killer = Task.make({
          name: "killer",
          queue: QUEUE,
          payload: Schema.Struct({ n: Schema.Number }),
          handler: (_p, context) => Effect.sync(() => runs.push(context.messageId))
        })
        const suspect = yield* Task.send(killer, { n: 1 })
        // Two workers take it in turn and die with it: their leases lapse.
        const [first] = yield* store.claim(QUEUE, { lease: "200 millis", limit: 1, consumer: "dead-worker-1" })
        assert.strictEqual(first?.id, suspect.id)
        assert.strictEqual(first!.leaseExpiries, 0)
        const second = yield* waitFor(
          "the first dead worker's lease to lapse",
          Effect.map(store.claim(QUEUE, { lease: "200 millis", limit: 1, consumer: "dead-worker-2" }), (c) => some(c[0]))
        )
        assert.strictEqual(second.id, suspect.id)
        assert.strictEqual(second.leaseExpiries, 1)

        const consumer = yield* startConsumer(Task.dispatcher(killer), { queues: [QUEUE], consumerId: "careful-consumer" })
        const [dead] = yield* waitDead(QUEUE, 1)
        assert.strictEqual(dead!.id, suspect.id)
        assert.match(dead!.reason, /^suspected worker-killer: its lease expired 2 times/)
        assert.strictEqual(dead!.attempts, 3)
        assert.strictEqual(dead!.leaseExpiries, 2)
        assert.lengthOf(runs, 0, "the handler never ran on the suspect")
        const history = yield* waitHistory(suspect.id, "dead-lettered")
        assert.deepStrictEqual(outcomes(history), ["lease-expired", "lease-expired", "dead-lettered"])
        assert.deepStrictEqual(attemptNumbers(history), [1, 2, 3])
        assert.deepStrictEqual(history.map((a) => a.consumer), ["dead-worker-1", "dead-worker-2", "careful-consumer"])

        // The handler does run on an ordinary message: the quarantine was the suspect's alone.
        const ordinary = yield* Task.send(killer, { n: 2 })
        yield* waitHistory(ordinary.id, "acked")
        assert.deepStrictEqual(runs, [ordinary.id])
        yield* consumer.stop
      })
    ), { timeout: 30_000 })

  // -------------------------------------------------------------------------------------------
  // f. the invariant
  // -------------------------------------------------------------------------------------------
  it.live("205 mixed messages on two consumers: every one acked, dead-lettered or waiting; none lost, none run after death, none acked twice; refused input never stored", () =>
    inFreshSchema((schema) =>
      Effect.gen(function*() {
        const QUEUE = "mix"
        const store = yield* QueueStore
        const sql = yield* SqlClient.SqlClient
        const before = yield* counters

        /**
         * Every handler execution, with its start on the database's clock in microseconds
         * (a `Date` keeps milliseconds only, and a handler that fails at once is dead-lettered
         * within the same millisecond).
         */
        const runs: Array<{ readonly id: MessageId; readonly task: string; readonly attempt: number; readonly consumer: string; readonly atUs: bigint }> = []
        const record = (context: Task.TaskContext) =>
          Effect.gen(function*() {
            const [row] = yield* sql<{ us: string }>`SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint::text AS us`
            runs.push({ id: context.messageId, task: context.message.task, attempt: context.attempt, consumer: context.consumerId, atUs: BigInt(row!.us) })
          }).pipe(Effect.orDie)

        const Item = Schema.Struct({ i: Schema.Int })
        const good = Task.make({ name: "good", queue: QUEUE, payload: Item, maxAttempts: 5, handler: (_p, c) => record(c) })
        const flaky = Task.make({
          name: "flaky",
          queue: QUEUE,
          payload: Schema.Struct({ i: Schema.Int, failTimes: Schema.Int }),
          maxAttempts: 5,
          retry: { base: "100 millis", max: "300 millis" },
          handler: (p, c) =>
            Effect.andThen(record(c), c.attempt <= p.failTimes ? Effect.fail(new Error(`flaky ${p.i} attempt ${c.attempt}`)) : Effect.void)
        })
        const doomed = Task.make({
          name: "doomed",
          queue: QUEUE,
          payload: Item,
          maxAttempts: 3,
          retry: { base: "100 millis", max: "200 millis" },
          handler: (p, c) => Effect.andThen(record(c), Effect.fail(new Error(`doomed ${p.i}`)))
        })
        const poison = Task.make({
          name: "poison",
          queue: QUEUE,
          payload: Item,
          handler: (p, c) => Effect.andThen(record(c), Task.unrecoverable(`poison ${p.i}`))
        })
        const defect = Task.make({
          name: "defect",
          queue: QUEUE,
          payload: Item,
          maxAttempts: 2,
          retry: { base: "100 millis" },
          handler: (p, c) =>
            Effect.andThen(record(c), Effect.sync(() => {
              throw new Error(`defect ${p.i}`)
            }))
        })
        const hang = Task.make({
          name: "hang",
          queue: QUEUE,
          payload: Schema.Struct({ i: Schema.Int, hangAttempts: Schema.Int }),
          maxAttempts: 2,
          maxRuntime: "300 millis",
          retry: { base: "100 millis" },
          handler: (p, c) => Effect.andThen(record(c), c.attempt <= p.hangAttempts ? Effect.never : Effect.void)
        })
        const blob = Task.make({ name: "blob", queue: QUEUE, payload: Schema.Struct({ data: Schema.String }), handler: (_p, c) => record(c) })
        // Task.make refuses such a name at definition; built by hand, the store refuses it at send.
        const badName: Task.Task<string, { readonly i: number }, { readonly i: number }, never, never> = {
          ...Task.make({ name: "bad-name", queue: QUEUE, payload: Item, handler: () => Effect.void }),
          name: "bad name; DROP TABLE messages"
        }

        type Expect =
          | { readonly end: "acked"; readonly runs: number; readonly leaseExpired?: number }
          | { readonly end: "dead"; readonly runs: number; readonly attempts: number; readonly reason: RegExp; readonly lastError?: RegExp }
          | { readonly end: "waiting" }
        interface Plan {
          readonly kind: string
          readonly send: Effect.Effect<ReadonlyArray<{ readonly id: MessageId }>, unknown, QueueStore>
          readonly expect: Expect
        }
        const plans: Array<Plan> = []
        const add = (n: number, make: (i: number) => Plan) => {
          for (let k = 0; k < n; k++) plans.push(make(plans.length))
        }
        const one = <A>(effect: Effect.Effect<A, unknown, QueueStore>) => Effect.map(effect, (r) => [r] as unknown as ReadonlyArray<{ readonly id: MessageId }>)
        add(70, (i) => ({ kind: "good", send: one(Task.send(good, { i })), expect: { end: "acked", runs: 1 } }))
        add(5, (i) => ({ kind: "delayed", send: one(Task.send(good, { i }, { delay: "1 hour" })), expect: { end: "waiting" } }))
        add(35, (i) => {
          const failTimes = 1 + (i % 3)
          return { kind: `flaky-${failTimes}`, send: one(Task.send(flaky, { i, failTimes })), expect: { end: "acked", runs: failTimes + 1 } }
        })
        add(15, (i) => ({
          kind: "doomed",
          send: one(Task.send(doomed, { i })),
          expect: { end: "dead", runs: 3, attempts: 3, reason: /^attempts exhausted: 3 of 3$/, lastError: /^Error: doomed \d+/ }
        }))
        add(15, (i) => ({
          kind: "poison",
          send: one(Task.send(poison, { i })),
          expect: { end: "dead", runs: 1, attempts: 1, reason: /^unrecoverable: poison \d+$/ }
        }))
        add(15, (i) => ({
          kind: "defect",
          send: one(Task.send(defect, { i })),
          expect: { end: "dead", runs: 2, attempts: 2, reason: /^attempts exhausted: 2 of 2$/, lastError: /^Error: defect \d+/ }
        }))
        add(5, (i) => ({ kind: "hang-once", send: one(Task.send(hang, { i, hangAttempts: 1 })), expect: { end: "acked", runs: 2 } }))
        add(5, (i) => ({
          kind: "hang-always",
          send: one(Task.send(hang, { i, hangAttempts: 2 })),
          expect: { end: "dead", runs: 2, attempts: 2, reason: /^attempts exhausted: 2 of 2$/, lastError: /^MaxRuntimeExceeded/ }
        }))
        // Undecodable: sent raw (untyped) under a typed task's name.
        const badPayloads: ReadonlyArray<unknown> = [{ i: "x" }, null, {}, "text", { i: 1.5 }]
        add(20, (i) => ({
          kind: "undecodable",
          send: store.send(QUEUE, [{ task: i % 2 === 0 ? "good" : "flaky", payload: badPayloads[i % badPayloads.length] }]),
          expect: { end: "dead", runs: 0, attempts: 1, reason: /^payload does not match the task's schema: /, lastError: /DecodeFailed/ }
        }))
        add(15, (i) => ({
          kind: "unknown",
          send: store.send(QUEUE, [{ task: i % 2 === 0 ? "nobody" : "retired-task-v0", payload: { i } }]),
          expect: { end: "dead", runs: 0, attempts: 2, reason: /^unknown task "(nobody|retired-task-v0)": no worker handled it in 2 attempts$/ }
        }))
        assert.lengthOf(plans, 200)

        // Refused at the producer: each must fail with InvalidInput naming the field, and write nothing.
        const refused: ReadonlyArray<{ readonly kind: string; readonly field: string; readonly send: Effect.Effect<unknown, unknown, QueueStore> }> = [
          { kind: "bad task name", field: "task", send: Task.send(badName, { i: 1 }) },
          { kind: "hostile queue", field: "queue", send: Task.send(good, { i: 1 }, { queue: "mix'; DROP SCHEMA public CASCADE; --" }) },
          { kind: "empty queue", field: "queue", send: Task.send(good, { i: 1 }, { queue: "" }) },
          { kind: "oversized payload", field: "payload", send: Task.send(blob, { data: "x".repeat(1024 * 1024) }) },
          { kind: "bigint payload", field: "payload", send: store.send(QUEUE, [{ task: "good", payload: { i: 1n } }]) },
          {
            kind: "one bigint in a batch",
            field: "payload",
            send: store.send(QUEUE, [{ task: "good", payload: { i: 1 } }, { task: "good", payload: { i: 2n } }])
          },
          { kind: "NUL in payload", field: "payload", send: Task.send(blob, { data: "a\u0000b" }) },
          { kind: "payload not matching its schema", field: "payload", send: Task.send(good, { i: 1.5 }) },
          { kind: "negative delay", field: "delay", send: Task.send(good, { i: 1 }, { delay: -5 }) },
          { kind: "zero max attempts", field: "maxAttempts", send: Task.send(good, { i: 1 }, { maxAttempts: 0 }) }
        ]

        // Interleave everything in a fixed pseudo-random order.
        type Step = { readonly plan: Plan } | { readonly refused: (typeof refused)[number] }
        const steps: Array<Step> = [...plans.map((plan) => ({ plan })), ...refused.map((r) => ({ refused: r }))]
        let seed = 42
        const random = () => (seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648) / 2_147_483_648
        for (let i = steps.length - 1; i > 0; i--) {
          const j = Math.floor(random() * (i + 1))
          ;[steps[i], steps[j]] = [steps[j]!, steps[i]!]
        }

        const sent: Array<{ readonly id: MessageId; readonly plan: Plan }> = []

        // Orphans: claimed by a worker that dies at once (its lease lapses); the consumers take them over.
        const ORPHANS = "mix-orphans"
        const orphan: Plan = { kind: "orphan", send: Effect.die("sent below"), expect: { end: "acked", runs: 1, leaseExpired: 1 } }
        for (const r of yield* Task.sendMany(good, [1, 2, 3, 4, 5].map((i) => ({ i: 1_000 + i })), { queue: ORPHANS })) {
          sent.push({ id: r.id, plan: orphan })
        }
        const orphaned = yield* store.claim(ORPHANS, { lease: "500 millis", limit: 5, consumer: "dead-worker" })
        assert.lengthOf(orphaned, 5)

        const dispatcher = Task.dispatcher(good, flaky, doomed, poison, defect, hang, blob)
        const options = { queues: [QUEUE, ORPHANS], concurrency: 8, batchSize: 5 }
        const c1 = yield* startConsumer(dispatcher, { ...options, consumerId: "mix-1" })
        const c2 = yield* startConsumer(dispatcher, { ...options, consumerId: "mix-2" })
        const startedAt = Date.now()

        for (const step of steps) {
          if ("plan" in step) {
            const [result] = yield* step.plan.send
            sent.push({ id: result!.id, plan: step.plan })
          } else {
            const exit = yield* Effect.exit(step.refused.send)
            assert.isTrue(Exit.isFailure(exit), `${step.refused.kind}: refused`)
            const error = Exit.isFailure(exit) ? exit.cause.reasons.find((r) => r._tag === "Fail") : undefined
            const failure = (error as { readonly error?: { readonly _tag?: string; readonly field?: string } } | undefined)?.error
            assert.strictEqual(failure?._tag, "InvalidInput", `${step.refused.kind}: an InvalidInput`)
            assert.strictEqual(failure?.field, step.refused.field, `${step.refused.kind}: names the field`)
          }
        }
        const sentAfter = Date.now() - startedAt

        // Wait until nothing is ready, in flight or waiting for a retry: only the 1-hour delays remain.
        const waiting = plans.filter((p) => p.expect.end === "waiting").length
        let last = ""
        yield* waitFor(
          "the queue to settle",
          Effect.map(Effect.all([store.stats(QUEUE), store.stats(ORPHANS)]), ([s, o]) => {
            last = JSON.stringify([s, o])
            return some(s.ready === 0 && s.inFlight === 0 && s.delayed === waiting && o.ready + o.inFlight + o.delayed === 0)
          }),
          { timeoutMs: 25_000, intervalMs: 100, describe: () => last }
        )
        const settledAfter = Date.now() - startedAt
        // A graceful stop: every in-flight finish and its history record is written before this returns.
        yield* c1.stop
        yield* c2.stop
        const after = yield* counters

        // What is left in the table, and the history of every message.
        const rows = new Map(
          (yield* sql<{ id: string; state: string; attempts: number; dead_reason: string | null; dead_at_us: string | null; last_error: string | null }>`
            SELECT id::text AS id, state, attempts, dead_reason, (extract(epoch FROM dead_at) * 1000000)::bigint::text AS dead_at_us, last_error
            FROM ${sql(`${schema}.messages`)}`).map((r) => [r.id, r])
        )
        const histories = new Map<MessageId, ReadonlyArray<Attempt>>()
        yield* Effect.forEach(sent, ({ id }) => Effect.map(store.attempts(id), (h) => void histories.set(id, h)), { concurrency: 8 })
        const deadLetters = new Map((yield* store.deadLetters({ queue: QUEUE, limit: 1_000 })).map((d) => [d.id, d]))
        const runsOf = new Map<string, Array<(typeof runs)[number]>>()
        for (const r of runs) runsOf.set(r.id, [...(runsOf.get(r.id) ?? []), r])

        // Nothing but what was sent ever reached the table: 200 ids, the sequence never moved past them.
        const sentIds = new Set(sent.map((s) => s.id))
        assert.strictEqual(sentIds.size, 205, "205 distinct ids")
        const [seq] = yield* sql<{ last_value: string }>`SELECT last_value::text AS last_value FROM ${sql(`${schema}.messages_id_seq`)}`
        assert.strictEqual(Number(seq!.last_value), 205, "no refused send ever inserted (or rolled back) a row")
        for (const id of rows.keys()) assert.isTrue(sentIds.has(id as MessageId), `row ${id} was sent`)
        const [foreign] = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM ${sql(`${schema}.attempts`)}
          WHERE message_id NOT IN (SELECT jsonb_array_elements_text(${JSON.stringify([...sentIds])}::jsonb)::bigint)`
        assert.strictEqual(foreign!.n, 0, "no history of anything not sent")
        for (const r of runs) assert.isTrue(sentIds.has(r.id), `run of ${r.id}: it was sent`)

        const tally = { acked: 0, dead: 0, waiting: 0 }
        for (const { id, plan } of sent) {
          const what = `${plan.kind} ${id}`
          const row = rows.get(id)
          const history = histories.get(id) ?? []
          const myRuns = runsOf.get(id) ?? []
          const acks = history.filter((a) => a.outcome === "acked").length
          assert.deepStrictEqual(attemptNumbers(history), history.map((_, i) => i + 1), `${what}: one history record per attempt, in order`)
          assert.isAtMost(acks, 1, `${what}: never acked twice`)
          switch (plan.expect.end) {
            case "acked": {
              tally.acked++
              assert.isUndefined(row, `${what}: acked, so gone from the table`)
              assert.strictEqual(history[history.length - 1]?.outcome, "acked", `${what}: history ends acked`)
              assert.strictEqual(acks, 1, `${what}: acked once`)
              const expired = plan.expect.leaseExpired ?? 0
              assert.deepStrictEqual(
                outcomes(history),
                [...Array(expired).fill("lease-expired"), ...Array(plan.expect.runs - 1).fill("retried"), "acked"],
                `${what}: history`
              )
              assert.strictEqual(myRuns.length, plan.expect.runs, `${what}: runs`)
              assert.strictEqual(history.length, myRuns.length + expired, `${what}: one record per run (and per expired lease)`)
              assert.deepStrictEqual(
                myRuns.map((r) => r.attempt).sort((a, b) => a - b),
                Array.from({ length: plan.expect.runs }, (_, k) => expired + k + 1),
                `${what}: the handler saw each attempt once`
              )
              break
            }
            case "dead": {
              tally.dead++
              const expect = plan.expect
              assert.isDefined(row, `${what}: dead, kept in the table`)
              assert.strictEqual(row!.state, "dead", `${what}: state`)
              assert.strictEqual(row!.attempts, expect.attempts, `${what}: attempts`)
              assert.match(row!.dead_reason ?? "", expect.reason, `${what}: reason`)
              if (expect.lastError) assert.match(row!.last_error ?? "", expect.lastError, `${what}: last error`)
              const letter = deadLetters.get(id)
              assert.isDefined(letter, `${what}: listed as a dead letter`)
              assert.strictEqual(letter!.reason, row!.dead_reason)
              assert.deepStrictEqual(outcomes(history), [...Array(expect.attempts - 1).fill("retried"), "dead-lettered"], `${what}: history`)
              assert.strictEqual(myRuns.length, expect.runs, `${what}: runs`)
              // Nothing ran after the death, on the database's clock, to the microsecond.
              const deadAtUs = BigInt(row!.dead_at_us!)
              for (const r of myRuns) {
                assert.isTrue(r.atUs < deadAtUs, `${what}: run of attempt ${r.attempt} started (${r.atUs} us) before its death (${deadAtUs} us)`)
              }
              break
            }
            case "waiting": {
              tally.waiting++
              assert.isDefined(row, `${what}: still in the table`)
              assert.strictEqual(row!.state, "ready", `${what}: still ready`)
              assert.strictEqual(row!.attempts, 0, `${what}: never claimed`)
              assert.lengthOf(history, 0, what)
              assert.lengthOf(myRuns, 0, what)
              break
            }
          }
        }
        assert.deepStrictEqual(tally, { acked: 115, dead: 85, waiting: 5 })
        assert.strictEqual(rows.size, tally.dead + tally.waiting, "the table holds exactly the dead and the waiting")
        assert.strictEqual(after.acked - before.acked, tally.acked, "acked metric: each acked message once")
        assert.strictEqual(after.deadLettered - before.deadLettered, tally.dead, "dead-lettered metric")
        assert.strictEqual(after.doubleRuns - before.doubleRuns, 0, "no double runs")
        assert.strictEqual(after.finishFailures - before.finishFailures, 0, "no failed finishing writes")
        const consumers = new Set([...histories.values()].flat().map((a) => a.consumer))
        assert.sameMembers([...consumers], ["mix-1", "mix-2", "dead-worker"], "both consumers did work")
        yield* Effect.logWarning(
          `invariant: sent in ${sentAfter} ms, settled after ${settledAfter} ms; ${runs.length} handler runs; ` +
            `by consumer ${JSON.stringify(Object.fromEntries([...consumers].map((c) => [c, runs.filter((r) => r.consumer === c).length])))}`
        ).pipe(Effect.provideService(References.MinimumLogLevel, "Warn"))
      }), 20
    ), { timeout: 45_000 })
})
