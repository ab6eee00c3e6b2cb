/**
 * The limited claim on real PostgreSQL, with claims racing on many connections at once: the
 * advisory lock per queue must keep every limit exact (never one over), a key at its limit must
 * not block others, rate windows must hold across claimers, FIFO heads and fair turns must
 * order what is claimed. The conformance suite (test/conformance/flow.ts) holds both stores to
 * the same rules; this file adds the races only a server with many sessions can run.
 */
import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Fiber, Option } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import type { Claim } from "../src/Message.ts"
import * as FlowDeclaration from "../src/FlowDeclaration.ts"
import { QueueStore } from "../src/QueueStore.ts"
import { StoreSettings } from "../src/StoreSettings.ts"
import * as Finish from "./support/Finish.ts"
import { storeLayer } from "./support/PgTest.ts"

/** `n` claims at once, each of up to `limit`, on as many connections as the pool has. */
const race = (queue: string, n: number, limit: number) =>
  Effect.gen(function*() {
    const store = yield* QueueStore
    const runs = yield* Effect.all(
      Array.from({ length: n }, (_, i) => store.claim(queue, { lease: "30 seconds", limit, consumer: `c${i}` })),
      { concurrency: "unbounded" }
    )
    return runs.flat()
  })

const countBy = (claims: ReadonlyArray<Claim>, by: (c: Claim) => string) => {
  const counts = new Map<string, number>()
  for (const c of claims) counts.set(by(c), (counts.get(by(c)) ?? 0) + 1)
  return counts
}

layer(storeLayer({ maxConnections: 12 }), { timeout: 60_000 })("flow claim on PostgreSQL", (it) => {
  it.effect("racing claimers never exceed a key's concurrency, and keys at their limit block no others", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      yield* store.setLimits({ queue: "fk" }, { keyConcurrency: 2 })
      // Key a's 40 messages first: a claim that stopped at a full key would take nothing else.
      const sends = [
        ...Array.from({ length: 40 }, (_, i) => ({ task: "t", payload: i, key: "a" })),
        ...Array.from({ length: 10 }, (_, i) => ({ task: "t", payload: i, key: "b" })),
        ...Array.from({ length: 10 }, (_, i) => ({ task: "t", payload: i, key: "c" }))
      ]
      yield* store.send("fk", sends)
      const claimed = yield* race("fk", 24, 5)
      const perKey = countBy(claimed, (c) => c.key ?? "")
      assert.deepStrictEqual([...perKey.entries()].sort(), [["a", 2], ["b", 2], ["c", 2]])
      assert.lengthOf(yield* race("fk", 8, 5), 0, "every key is at its limit")
      // An ack gives exactly one slot of its key back.
      assert.isTrue(yield* Finish.ack(store, claimed.find((c) => c.key === "b")!))
      const again = yield* race("fk", 8, 5)
      assert.deepStrictEqual(again.map((c) => c.key), ["b"])
    }))

  it.effect("a queue's concurrency and a task's hold across racing claimers", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      yield* store.setLimits({ queue: "qc" }, { concurrency: 5 })
      yield* store.setLimits({ queue: "qc", task: "slow" }, { concurrency: 2 })
      yield* store.send("qc", [
        ...Array.from({ length: 20 }, (_, i) => ({ task: "slow", payload: i })),
        ...Array.from({ length: 20 }, (_, i) => ({ task: "fast", payload: i }))
      ])
      const claimed = yield* race("qc", 20, 3)
      assert.lengthOf(claimed, 5)
      assert.strictEqual(countBy(claimed, (c) => c.task).get("slow"), 2)
    }))

  it.effect("a rate window holds across racing claimers and tells idle consumers when it frees", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      yield* store.setLimits({ queue: "rt" }, { rate: { count: 7, periodMs: 60_000 } })
      yield* store.send("rt", Array.from({ length: 30 }, (_, i) => ({ task: "t", payload: i })))
      const start = yield* store.now
      const started = yield* race("rt", 12, 2)
      assert.lengthOf(started, 7)
      // Finished at once: what an idle consumer waits for now is the window alone.
      for (const c of started) assert.isTrue(yield* Finish.ack(store, c))
      const next = yield* store.nextVisibleAt("rt")
      assert.isTrue(Option.isSome(next))
      assert.strictEqual(Option.getOrThrow(next).getTime(), start.getTime() + 60_000)
      yield* TestClock.adjust(Duration.seconds(59))
      assert.lengthOf(yield* race("rt", 4, 2), 0, "still inside the window")
      yield* TestClock.adjust(Duration.seconds(1))
      assert.lengthOf(yield* race("rt", 12, 2), 7, "the window slid past every start")
    }))

  it.effect("FIFO: a failing head blocks its key only, until it is dead-lettered", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      yield* store.setLimits({ queue: "ff" }, { fifo: true })
      yield* store.send("ff", [
        { task: "t", payload: "a1", key: "a", maxAttempts: 2 },
        { task: "t", payload: "a2", key: "a" },
        { task: "t", payload: "b1", key: "b" },
        { task: "t", payload: "b2", key: "b" }
      ])
      const first = yield* race("ff", 6, 4)
      assert.deepStrictEqual(first.map((c) => c.payload).sort(), ["a1", "b1"])
      const a1 = first.find((c) => c.payload === "a1")!
      assert.strictEqual(yield* Finish.retry(store, a1, { delay: "10 seconds", error: "boom" }), "written")
      assert.isTrue(yield* Finish.ack(store, first.find((c) => c.payload === "b1")!))
      assert.deepStrictEqual((yield* race("ff", 4, 4)).map((c) => c.payload), ["b2"], "a2 waits behind a1")
      const status = yield* store.flowStatus("ff")
      assert.deepStrictEqual(status.blockedKeys.map((b) => [b.key, b.headId, b.lastError]), [["a", a1.id, "boom"]])
      yield* TestClock.adjust(Duration.seconds(10))
      const retried = yield* race("ff", 4, 4)
      assert.deepStrictEqual(retried.map((c) => c.payload), ["a1"])
      assert.strictEqual(yield* Finish.deadLetter(store, retried[0]!, { reason: "gave up" }), "written")
      assert.deepStrictEqual((yield* race("ff", 4, 4)).map((c) => c.payload), ["a2"])
    }))

  it.effect("fair: ten small keys finish within the first 110 claimed behind a 10,000-message key", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      yield* store.setLimits({ queue: "fair" }, { fair: true })
      yield* store.send("fair", Array.from({ length: 10_000 }, (_, i) => ({ task: "t", payload: i, key: "big" })))
      for (let k = 0; k < 10; k++) {
        yield* store.send("fair", Array.from({ length: 10 }, (_, i) => ({ task: "t", payload: i, key: `small${k}` })))
      }
      let last = 0
      let smallLeft = 100
      for (let n = 1; smallLeft > 0 && n <= 200; n++) {
        const [claim] = yield* store.claim("fair", { lease: "30 seconds", limit: 1, consumer: "c" })
        assert.isDefined(claim)
        if (claim!.key !== "big") {
          smallLeft--
          last = n
        }
        assert.isTrue(yield* Finish.ack(store, claim!))
      }
      assert.strictEqual(smallLeft, 0)
      assert.isAtMost(last, 110)
    }))

  it.effect("a lease claimed under limits is not renewed once expired; its slot went back", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      yield* store.setLimits({ queue: "rn" }, { concurrency: 1 })
      yield* store.send("rn", [{ task: "t", payload: 1 }, { task: "t", payload: 2 }])
      const [held] = yield* store.claim("rn", { lease: "1 second", limit: 5, consumer: "c" })
      assert.lengthOf((yield* store.renew([held!], "1 second")).held, 1, "a live lease renews")
      yield* TestClock.adjust(Duration.millis(1_500))
      const [next] = yield* store.claim("rn", { lease: "30 seconds", limit: 5, consumer: "d" })
      assert.isDefined(next, "the expired slot came back")
      assert.lengthOf((yield* store.renew([held!], "1 second")).held, 0, "the late renewal is refused")
    }))

  it.effect("limits declared in code give way to an operator's; a bad declaration writes nothing", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const bad = yield* FlowDeclaration.declare([
        { queue: "dq", limits: { concurrency: 4 } },
        { queue: "dq", task: "t", limits: { keyConcurrency: 2 } }
      ]).pipe(Effect.flip)
      assert.strictEqual(bad._tag, "InvalidInput")
      assert.lengthOf(yield* store.limits("dq"), 0, "nothing written: every declaration is checked first")
      yield* FlowDeclaration.declare([{ queue: "dq", limits: { concurrency: 4 } }])
      assert.deepStrictEqual((yield* store.limits("dq")).map((l) => [l.source, l.limits]), [["code", { concurrency: 4 }]])
      assert.isTrue(yield* store.setLimits({ queue: "dq" }, { concurrency: 1 }))
      const [again] = yield* FlowDeclaration.declare([{ queue: "dq", limits: { concurrency: 4 } }])
      assert.isFalse(again!.written)
      assert.deepStrictEqual((yield* store.limits("dq")).map((l) => [l.source, l.limits]), [["operator", { concurrency: 1 }]])
      assert.isTrue(yield* store.setLimits({ queue: "dq" }, null))
      yield* FlowDeclaration.declare([{ queue: "dq", limits: { concurrency: 4 } }])
      assert.deepStrictEqual((yield* store.limits("dq")).map((l) => l.source), ["code"])
    }))

  it.effect("a finished message of a limited queue wakes idle consumers: its slot came back", () =>
    TestClock.withLive(Effect.scoped(Effect.gen(function*() {
      const store = yield* QueueStore
      yield* store.setLimits({ queue: "wk" }, { concurrency: 1 })
      yield* store.send("wk", [{ task: "t", payload: 1 }, { task: "t", payload: 2 }])
      const [held] = yield* store.claim("wk", { lease: "30 seconds", limit: 5, consumer: "c" })
      assert.lengthOf(yield* store.claim("wk", { lease: "30 seconds", limit: 5, consumer: "d" }), 0, "at its limit")
      const heard = yield* store.sends(["wk"])
      const woken = yield* Effect.forkChild(heard)
      yield* Effect.sleep("200 millis")
      assert.isUndefined(woken.pollUnsafe(), "nothing woke it before the slot came back")
      assert.isTrue(yield* Finish.ack(store, held!))
      yield* Fiber.join(woken).pipe(Effect.timeout("10 seconds"))
      assert.lengthOf(yield* store.claim("wk", { lease: "30 seconds", limit: 5, consumer: "d" }), 1)
    }))))

  it.effect("pruneFlow deletes keys with no live message and windows a day old, and nothing still in use", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      yield* store.setLimits({ queue: "pf" }, { keyRate: { count: 5, periodMs: 60_000 } })
      yield* store.send("pf", [{ task: "t", payload: 1, key: "done" }, { task: "t", payload: 2, key: "live" }])
      yield* store.setKeyWeight("pf", "weighted", 3)
      const claimed = yield* store.claim("pf", { lease: "30 seconds", limit: 5, consumer: "c" })
      assert.lengthOf(claimed, 2)
      assert.isTrue(yield* Finish.ack(store, claimed.find((c) => c.key === "done")!))
      // Other tests of this file share the schema: read this queue's rows only.
      const { schema } = yield* StoreSettings
      const sql = yield* SqlClient.SqlClient
      const rowsOf = Effect.gen(function*() {
        const keys = yield* sql<{ key: string }>`SELECT key FROM ${sql(`${schema}.flow_keys`)} WHERE queue = 'pf' ORDER BY key`
        const windows = yield* sql<{ key: string }>`SELECT key FROM ${sql(`${schema}.flow_rates`)} WHERE queue = 'pf' ORDER BY key`
        return [keys.map((r) => r.key), windows.map((r) => r.key)]
      })
      assert.deepStrictEqual(yield* rowsOf, [["done", "live", "weighted"], ["done", "live"]])
      yield* store.pruneFlow
      assert.deepStrictEqual(yield* rowsOf, [["live", "weighted"], ["done", "live"]], "the idle key goes, fresh windows stay")
      yield* TestClock.adjust(Duration.hours(25))
      yield* store.pruneFlow
      assert.deepStrictEqual(yield* rowsOf, [["live", "weighted"], []], "day-old windows go; a key with a live message stays")
    }))
})

layer(storeLayer({ clock: "database", maxConnections: 4 }), { timeout: 60_000 })("flow claim on the database clock", (it) => {
  // Found by the flow chaos run (bench/chaos/run.ts --flow): a claim recorded its start at its
  // transaction's start, before it waited on the queue's claim lock.
  it.effect("a claim records its start when it holds the claim lock: one that began first but claims second starts later", () =>
    TestClock.withLive(Effect.gen(function*() {
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      yield* store.setLimits({ queue: "lk" }, { rate: { count: 2, periodMs: 2_000 } })
      yield* store.send("lk", [{ task: "t", payload: 1 }, { task: "t", payload: 2 }])
      const claim = (consumer: string) => store.claim("lk", { lease: "30 seconds", limit: 1, consumer })
      // X's transaction begins first (its now() is fixed); Y claims 100 ms later; then X claims.
      let yDone!: () => void
      const afterY = new Promise<void>((resolve) => (yDone = resolve))
      const x = yield* Effect.forkChild(sql.withTransaction(Effect.gen(function*() {
        yield* sql`SELECT now()`
        yield* Effect.promise(() => afterY)
        return yield* claim("x")
      })))
      yield* Effect.sleep("100 millis")
      const y = yield* claim("y")
      yDone()
      const xs = yield* Fiber.join(x)
      assert.lengthOf(y, 1)
      assert.lengthOf(xs, 1)
      const rows = yield* sql<{ leased_by: string; ms: number }>`
        SELECT leased_by, extract(epoch FROM leased_at)::float8 * 1000 AS ms FROM ${sql(`${(yield* StoreSettings).schema}.messages`)}
        WHERE queue = 'lk' ORDER BY leased_at`
      assert.deepStrictEqual(rows.map((r) => r.leased_by), ["y", "x"], "starts recorded in the order the claims took the lock")
    })))
})
