/**
 * Consumers under flow limits on real PostgreSQL, in real time: two consumers of one queue with
 * a key concurrency of 1 and a rate of 6 starts per second never run two messages of a key at
 * once nor start more than the rate allows, and finish at the pace of the rate, not of their poll
 * interval (5 s): a full window wakes them when it frees a start, a finished message when its
 * slot comes back.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Option, Scope } from "effect"
import * as Consumer from "../src/Consumer.ts"
import { QueueStore } from "../src/QueueStore.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitFor } from "./support/Wait.ts"

const QUEUE = "flow_consumers"
const KEYS = ["k1", "k2", "k3"]
const PER_KEY = 6
const RATE = 6
const HANDLER_MS = 150

interface Run {
  readonly key: string
  readonly startedAt: number
  endedAt?: number
}

const startConsumer = (runs: Array<Run>, consumerId: string) =>
  Effect.gen(function*() {
    const scope = yield* Scope.fork(yield* Scope.Scope)
    const handler: Consumer.Handler = (message) =>
      Effect.gen(function*() {
        const run: Run = { key: message.key ?? "", startedAt: Date.now() }
        runs.push(run)
        yield* Effect.sleep(HANDLER_MS)
        run.endedAt = Date.now()
      })
    yield* Layer.buildWithScope(
      Consumer.layer(handler, { queues: [QUEUE], consumerId, lease: "5 seconds", pollInterval: "5 seconds", concurrency: 10 }),
      scope
    ).pipe(Effect.map((context) => Context.get(context, Consumer.Consumer)))
    return Scope.close(scope, Exit.void)
  })

describe("Consumers under flow limits on PostgreSQL (real time)", () => {
  it.live("a key concurrency and a rate hold across two consumers, which keep the rate's pace", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      yield* store.setLimits({ queue: QUEUE }, { keyConcurrency: 1, rate: { count: RATE, periodMs: 1_000 } })
      const runs: Array<Run> = []
      const stops = [yield* startConsumer(runs, "flow-a"), yield* startConsumer(runs, "flow-b")]
      const startedAt = Date.now()
      yield* store.send(QUEUE, KEYS.flatMap((key) => Array.from({ length: PER_KEY }, (_, i) => ({ task: "t", payload: i, key }))))
      yield* waitFor(
        "every message to run",
        Effect.sync(() => runs.filter((r) => r.endedAt !== undefined).length === KEYS.length * PER_KEY ? Option.some(true) : Option.none()),
        30_000
      )
      const tookMs = Date.now() - startedAt
      yield* Effect.log(`took ${tookMs} ms; starts at ${runs.map((r) => r.startedAt - startedAt).sort((a, b) => a - b).join(" ")}`)
      for (const stop of stops) yield* stop
      for (const key of KEYS) {
        const own = runs.filter((r) => r.key === key).sort((a, b) => a.startedAt - b.startedAt)
        for (let i = 1; i < own.length; i++) {
          assert.isAtLeast(own[i]!.startedAt, own[i - 1]!.endedAt!, `key ${key}: run ${i} started before run ${i - 1} ended`)
        }
      }
      // The window is kept on the database's clock at claim time; handler starts follow their claims
      // within a few milliseconds, so a 900 ms window of starts holds at most the rate.
      const starts = runs.map((r) => r.startedAt).sort((a, b) => a - b)
      for (let i = 0; i + RATE < starts.length; i++) {
        assert.isAtLeast(starts[i + RATE]! - starts[i]!, 900, `${RATE + 1} starts within ${starts[i + RATE]! - starts[i]!} ms`)
      }
      // 18 starts at 6 a second: about 2 s. Waking only at the 5 s poll would take 10 s or more.
      assert.isBelow(tookMs, 8_000, `took ${tookMs} ms`)
    }).pipe(Effect.provide(PgTest.storeLayer({ clock: "database" }))), 40_000)
})
