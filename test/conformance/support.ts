/**
 * What every file of the conformance suite shares: the suite's test methods and clock,
 * fresh queue names, and short ways to send, claim and read a refusal.
 */
import type { Vitest } from "@effect/vitest"
import { type Duration, Effect } from "effect"
import type { NewMessage } from "../../src/Message.ts"
import { QueueStore } from "../../src/QueueStore.ts"

/** One run of the suite, as each group of tests receives it. */
export interface Suite {
  /** The test methods, every test given the store layer under test. */
  readonly it: Vitest.MethodsNonLive<QueueStore>
  /** A test that moves time with TestClock: skipped on the database clock (covered by the real-time tests). */
  readonly movesTime: Vitest.MethodsNonLive<QueueStore>["effect"]["skip"]
  /** Whether the store is timed by the server's `now()`: the real-time tests of each group run then. */
  readonly databaseClock: boolean
  /** How many messages the exactly-once test delivers. */
  readonly exactlyOnceMessages: number
}

let counter = 0
/** A queue name no other test of this run uses. */
export const freshQueue = (label: string) => `${label}-${++counter}-${Math.random().toString(36).slice(2, 6)}`

/** A message of task `job`. */
export const msg = (payload: unknown, extra: Partial<NewMessage> = {}): NewMessage => ({ task: "job", payload, ...extra })

export const sendAll = (queue: string, messages: ReadonlyArray<NewMessage>) =>
  Effect.gen(function*() {
    const store = yield* QueueStore
    return yield* store.send(queue, messages)
  })

export const claimAll = (queue: string, options: { lease?: Duration.Input; limit?: number; consumer?: string } = {}) =>
  Effect.gen(function*() {
    const store = yield* QueueStore
    return yield* store.claim(queue, {
      lease: options.lease ?? "30 seconds",
      limit: options.limit ?? 100,
      consumer: options.consumer ?? "c1"
    })
  })

/** The error an operation failed with, as a refusal of bad input reads it. */
export const refusal = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.map(Effect.flip(effect), (e) => e as unknown as { readonly _tag: string; readonly field: string })

/** Wait for real (the TestClock does not move a database's `now()`). */
export const realSleep = (ms: number) => Effect.promise(() => new Promise<void>((done) => setTimeout(done, ms)))

/** Milliseconds by the machine's clock, which the local test server shares. */
export const wallClock = Effect.sync(() => Date.now())

/**
 * The real-time tests' bounds: leases and delays of about a second, waits a little past them,
 * bounds of a couple of seconds either side (the test server runs on this machine).
 */
export const slack = 2_000
