/**
 * A finishing write racing a cancel, on real PostgreSQL with two connections (issue 24,
 * item 7). The cancel's transaction (on a connection of the test's own) locks and flags the
 * running message and holds its row lock; the holder's retry, release or dead letter (through
 * `complete`, alone or in a batch) starts and waits on that lock; then the cancel commits. The
 * write must then see the cancel: delete the message as cancelled, record `cancelled`, and
 * say so, never match nothing and vanish ("lost", history `lease-lost`, the message hidden
 * until its lease ran out), which it did while it chose its branch on the flag as of its start.
 */
import { assert, layer } from "@effect/vitest"
import { Deferred, Effect, Fiber, Option } from "effect"
import { SqlClient } from "effect/sql"
import type { Claim } from "../src/Message.ts"
import { StoreSettings } from "../src/StoreSettings.ts"
import { type Finish, QueueStore } from "../src/QueueStore.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitFor } from "./support/Wait.ts"

let counter = 0
const freshQueue = (label: string) => `${label}-${++counter}-${Math.random().toString(36).slice(2, 6)}`

/** Send one message and claim it: the running message a cancel will flag. */
const running = (label: string) =>
  Effect.gen(function*() {
    const store = yield* QueueStore
    const queue = freshQueue(label)
    yield* store.send(queue, [{ task: "job", payload: { label } }])
    const [claim] = yield* store.claim(queue, { lease: "30 seconds", limit: 1, consumer: "holder" })
    return { queue, claim: claim! }
  })

/**
 * Run `write` while a cancel's transaction holds the row lock of `claim`: the transaction
 * locks the row (as `cancel` does) and either flags it itself (`flag: "manual"`, exactly the
 * cancel's writes) or, with `flag: "store"`, lets the store's own `cancel` queue behind it.
 * `write` starts once the lock is held, and the cancel commits once `write` waits on it.
 * Answers what `write` answered, and what the cancel answered (store flag).
 */
const raceCancel = <A, E>(claim: Claim, write: Effect.Effect<A, E>, flag: "manual" | "store" = "manual") =>
  Effect.gen(function*() {
    const store = yield* QueueStore
    const sql = yield* SqlClient.SqlClient
    const { schema } = yield* StoreSettings
    const messages = sql(`${schema}.messages`)
    const locked = yield* Deferred.make<number>()
    const commit = yield* Deferred.make<void>()
    const holder = yield* sql.withTransaction(Effect.gen(function*() {
      const [me] = yield* sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`
      yield* sql`SELECT id FROM ${messages} WHERE id = ${claim.id}::bigint FOR UPDATE`
      if (flag === "manual") yield* sql`UPDATE ${messages} SET cancel_requested_at = now() WHERE id = ${claim.id}::bigint`
      yield* Deferred.succeed(locked, me!.pid)
      yield* Deferred.await(commit)
    })).pipe(Effect.forkScoped)
    const pid = yield* Deferred.await(locked).pipe(Effect.timeout("10 seconds"))
    /** Wait until a statement waits on a lock held by one of `pids`; answers its backend. */
    const blockedBy = (what: string, pids: ReadonlyArray<number>) =>
      waitFor(
        what,
        Effect.map(
          sql<{ pid: number }>`
            SELECT pid FROM pg_stat_activity
            WHERE pg_blocking_pids(pid) && ${`{${pids.join(",")}}`}::int[] AND NOT (pid = ANY(${`{${pids.join(",")}}`}::int[]))`,
          (rows) => Option.fromNullishOr(rows[0]?.pid)
        ),
        10_000
      )
    let cancel: Fiber.Fiber<unknown, unknown> | undefined
    const lockers = [pid]
    if (flag === "store") {
      cancel = yield* store.cancel([claim.id]).pipe(Effect.forkScoped)
      lockers.push(yield* blockedBy("the store's cancel to wait on the row lock", lockers))
    }
    const writing = yield* write.pipe(Effect.forkScoped)
    yield* blockedBy("the finishing write to wait on the cancel's row lock", lockers)
    yield* Deferred.succeed(commit, undefined)
    yield* Fiber.join(holder).pipe(Effect.timeout("10 seconds"))
    const cancelled = cancel === undefined ? undefined : yield* Fiber.join(cancel).pipe(Effect.timeout("10 seconds"))
    const answer = yield* Fiber.join(writing).pipe(Effect.timeout("10 seconds"))
    return { answer, cancelled }
  })

/** The message's row is gone and its history is one `cancelled` run of its holder. */
const assertCancelled = (claim: Claim) =>
  Effect.gen(function*() {
    const store = yield* QueueStore
    assert.isTrue(Option.isNone(yield* store.get(claim.id)), "the message is deleted, not left hidden or handed back")
    const history = yield* store.attempts(claim.id)
    assert.deepStrictEqual(history.map((a) => [a.outcome, a.attempt, a.consumer]), [["cancelled", 1, "holder"]])
  })

const completion = (claim: Claim, queue: string, finish: Finish) => ({
  ref: claim,
  finish,
  queue,
  task: "job",
  attempt: claim.attempts,
  consumer: "holder",
  startedAt: new Date(),
  outcome: finish._tag === "DeadLetter" ? "dead-lettered" as const : finish._tag === "Release" ? "released" as const : "retried" as const,
  error: "boom"
})

layer(PgTest.storeLayer({ clock: "database" }), { excludeTestServices: true })("a finishing write racing a cancel (PostgreSQL)", (it) => {
  const batched: Record<string, Finish> = {
    Retry: { _tag: "Retry", delayMs: 0, error: "boom" },
    Release: { _tag: "Release" },
    DeadLetter: { _tag: "DeadLetter", reason: "r", error: "boom" }
  }
  for (const [name, finish] of Object.entries(batched)) {
    it.effect(`a batched ${name} (complete) that waited on a cancel's row lock deletes the message as cancelled and says so`, () =>
      Effect.gen(function*() {
        const store = yield* QueueStore
        const { claim, queue } = yield* running(`batch-${name}`)
        const { answer } = yield* raceCancel(claim, store.complete([completion(claim, queue, finish)]))
        yield* assertCancelled(claim)
        assert.deepStrictEqual(answer, { held: [claim.id], cancelled: [claim.id] })
      }))
  }

  it.effect("a batch of writes racing a cancel: the cancelled one is deleted as cancelled, the others land", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const queue = freshQueue("batch-mixed")
      yield* store.send(queue, [{ task: "job", payload: 1 }, { task: "job", payload: 2 }, { task: "job", payload: 3 }])
      const [doomed, retried, acked] = yield* store.claim(queue, { lease: "30 seconds", limit: 3, consumer: "holder" })
      const { answer } = yield* raceCancel(
        doomed!,
        store.complete([
          completion(doomed!, queue, batched["Retry"]!),
          completion(retried!, queue, batched["Retry"]!),
          { ...completion(acked!, queue, { _tag: "Ack" }), outcome: "acked" as const, error: null }
        ])
      )
      yield* assertCancelled(doomed!)
      assert.deepStrictEqual([...answer.held].sort(), [doomed!.id, retried!.id, acked!.id].sort())
      assert.deepStrictEqual(answer.cancelled, [doomed!.id])
      assert.strictEqual(Option.getOrThrow(yield* store.get(retried!.id)).state, "ready", "the other retry landed")
      assert.isTrue(Option.isNone(yield* store.get(acked!.id)), "the ack landed")
    }))

  it.effect("the store's own cancel, queued behind a lock with the write behind it: the write answers cancelled", () =>
    Effect.gen(function*() {
      const store = yield* QueueStore
      const { claim, queue } = yield* running("store-cancel")
      const { answer, cancelled } = yield* raceCancel(claim, store.complete([completion(claim, queue, batched["Retry"]!)]), "store")
      assert.deepStrictEqual(cancelled, [{ id: claim.id, result: "cancelling" }])
      yield* assertCancelled(claim)
      assert.deepStrictEqual(answer, { held: [claim.id], cancelled: [claim.id] })
    }))
})
