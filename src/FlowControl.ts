/**
 * Flow control: the limits a claim keeps across every worker of a queue. How many run at once
 * (per queue, per task, per key), how many start per window (per queue, per task, per key),
 * round-robin claiming across keys, and one-at-a-time in send order per key. Limits are data:
 * stored by the store, declared in code and changed at runtime by operators.
 *
 * @since 0.4.0
 */
import { Effect } from "effect"
import type { StoreError } from "./QueueError.ts"
import * as Validate from "./internal/validate.ts"
import { InvalidInput } from "./QueueError.ts"

/** At most `count` starts in any window of `periodMs` milliseconds (a sliding window, not fixed buckets). */
export interface Rate {
  readonly count: number
  readonly periodMs: number
}

/**
 * The limits of a queue (or of one task in it: only `concurrency` and `rate`). Every limit holds
 * across every worker together, and is kept by the claim itself: a message whose limit is reached
 * is not claimed, and the claim takes others instead.
 */
export interface FlowLimits {
  /** Messages in flight at once (live leases), all workers together. */
  readonly concurrency?: number | null | undefined
  /** Starts per sliding window, all workers together. */
  readonly rate?: Rate | null | undefined
  /** Messages in flight at once per key (the `key` given at send). Queue level only. */
  readonly keyConcurrency?: number | null | undefined
  /** Starts per sliding window per key. Queue level only. */
  readonly keyRate?: Rate | null | undefined
  /**
   * One at a time per key, in send (id) order: only the oldest live message of a key is
   * claimable, so a failing head blocks its key until it succeeds or is dead-lettered (or
   * cancelled). Implies a key concurrency of 1. Queue level only.
   */
  readonly fifo?: boolean | undefined
  /**
   * Round-robin across keys within a priority: the n-th message of every key before the
   * (n+1)-th of any (weighted by `setKeyWeight`), work-conserving. Queue level only.
   */
  readonly fair?: boolean | undefined
}

/**
 * The limits a task may declare of its own (`Task.define({ limits })`): how many of its messages
 * run at once and how many start per window, all workers together. Key limits and the modes are
 * the queue's.
 */
export type TaskLimits = Pick<FlowLimits, "concurrency" | "rate">

/** Which limits: those of a whole queue (no `task`) or of one task in it. */
export interface LimitsTarget {
  readonly queue: string
  readonly task?: string | undefined
}

/**
 * Who wrote limits: `code` (a declaration a worker writes as it starts) or `operator` (the CLI,
 * the admin API). A code declaration never overwrites an operator's limits: clearing them
 * (`setLimits(target, null)`) gives the code its say again.
 */
export type LimitsSource = "code" | "operator"

/** Limits as stored. */
export interface StoredLimits {
  readonly queue: string
  /** `null` for the queue's own limits. */
  readonly task: string | null
  readonly limits: FlowLimits
  readonly source: LimitsSource
  readonly updatedAt: Date
}

/** A key at its concurrency limit: how many of its messages are in flight. */
export interface KeyAtLimit {
  readonly key: string
  readonly inFlight: number
}

/** A key of a FIFO queue whose head is waiting (failed and backing off, or delayed): the key is blocked. */
export interface BlockedKey {
  readonly key: string
  readonly headId: string
  readonly attempts: number
  readonly lastError: string | null
  /** When the head is due again. */
  readonly visibleAt: Date
}

/** A rate window that is full: no start until `nextAt`. */
export interface Throttle {
  readonly task: string | null
  readonly key: string | null
  readonly nextAt: Date
}

/** A queue's flow as the store sees it now. */
export interface FlowStatus {
  readonly queue: string
  readonly limits: ReadonlyArray<StoredLimits>
  /** Messages of the queue with a live lease. */
  readonly inFlight: number
  /** Keys at their concurrency limit (at most 100, the fullest first). */
  readonly keysAtLimit: ReadonlyArray<KeyAtLimit>
  /** FIFO keys blocked by a waiting head (at most 100, oldest head first). */
  readonly blockedKeys: ReadonlyArray<BlockedKey>
  /** Full rate windows (at most 100, the soonest free first). */
  readonly throttles: ReadonlyArray<Throttle>
}

/** Bounds of every limit, as the rules name them. */
export const bounds = {
  concurrency: 100_000,
  keyConcurrency: 10_000,
  rateCount: 10_000,
  minPeriodMs: 10,
  maxPeriodMs: 86_400_000,
  maxKeyLength: Validate.MAX_FLOW_KEY_LENGTH,
  maxWeight: 100
} as const

const fail = (field: string, rule: string, value: unknown) =>
  Effect.fail(new InvalidInput({ field, rule, message: `${field} ${JSON.stringify(value) ?? String(value)} is refused (rule: ${rule})` }))

const intIn = (field: string, value: unknown, max: number) =>
  typeof value === "number" && Number.isInteger(value) && value >= 1 && value <= max
    ? Effect.succeed(value)
    : fail(field, `an integer from 1 to ${max}`, value)

const checkRate = (field: string, rate: unknown): Effect.Effect<Rate, InvalidInput> =>
  Effect.gen(function*() {
    if (typeof rate !== "object" || rate === null) return yield* fail(field, "{ count, periodMs }", rate)
    const r = rate as Record<string, unknown>
    const count = yield* intIn(`${field}.count`, r.count, bounds.rateCount)
    const periodMs = r.periodMs
    if (typeof periodMs !== "number" || !Number.isInteger(periodMs) || periodMs < bounds.minPeriodMs || periodMs > bounds.maxPeriodMs) {
      return yield* fail(`${field}.periodMs`, `whole milliseconds from ${bounds.minPeriodMs} to ${bounds.maxPeriodMs} (one day)`, periodMs)
    }
    return { count, periodMs }
  })

const queueLevelOnly = ["keyConcurrency", "keyRate", "fifo", "fair"] as const
const known = new Set(["concurrency", "rate", "keyConcurrency", "keyRate", "fifo", "fair"])

/**
 * Check limits before anything is written: every number in its bounds, the key limits and
 * modes only on a queue, FIFO with no key concurrency other than 1. Answers the limits with
 * absent ones left out (an empty record means "no limits").
 */
export const validateLimits = (limits: FlowLimits, target: LimitsTarget): Effect.Effect<FlowLimits, InvalidInput> =>
  Effect.gen(function*() {
    if (typeof limits !== "object" || limits === null) return yield* fail("limits", "an object of limits", limits)
    for (const field of Object.keys(limits)) {
      if (!known.has(field)) return yield* fail(field, `one of ${[...known].join(", ")}`, field)
    }
    if (target.task !== undefined) {
      for (const field of queueLevelOnly) {
        if (limits[field] !== undefined && limits[field] !== null && limits[field] !== false) {
          return yield* fail(field, "a limit of the whole queue, not of a task", limits[field])
        }
      }
    }
    const out: { -readonly [K in keyof FlowLimits]: FlowLimits[K] } = {}
    if (limits.concurrency != null) out.concurrency = yield* intIn("concurrency", limits.concurrency, bounds.concurrency)
    if (limits.rate != null) out.rate = yield* checkRate("rate", limits.rate)
    if (limits.keyConcurrency != null) out.keyConcurrency = yield* intIn("keyConcurrency", limits.keyConcurrency, bounds.keyConcurrency)
    if (limits.keyRate != null) out.keyRate = yield* checkRate("keyRate", limits.keyRate)
    for (const flag of ["fifo", "fair"] as const) {
      const value = limits[flag]
      if (value === undefined || value === false) continue
      if (value !== true) return yield* fail(flag, "true or false", value)
      out[flag] = true
    }
    if (out.fifo === true && out.keyConcurrency !== undefined && out.keyConcurrency !== 1) {
      return yield* fail("keyConcurrency", "1 or absent with fifo (one at a time per key)", out.keyConcurrency)
    }
    return out
  })

/** Check a message's key: 1 to 200 characters, no control characters. */
export const validateKey: (key: unknown) => Effect.Effect<string, InvalidInput> = Validate.flowKey

/** Check a key's weight for fair claiming: an integer from 1 to 100 (a key of weight 2 gets twice the turns). */
export const validateWeight = (weight: unknown): Effect.Effect<number, InvalidInput> => intIn("weight", weight, bounds.maxWeight)

/** Whether limits say anything (an empty record is "no limits"). */
export const isEmpty = (limits: FlowLimits): boolean =>
  limits.concurrency == null && limits.rate == null && limits.keyConcurrency == null && limits.keyRate == null &&
  limits.fifo !== true && limits.fair !== true

/** The concurrency a key may have under `limits`: FIFO is one at a time. */
export const keyConcurrencyOf = (limits: FlowLimits): number | undefined =>
  limits.fifo === true ? 1 : limits.keyConcurrency ?? undefined

/**
 * Parse a rate written as `COUNT/PERIOD`, e.g. `100/1m`, `5/1s`, `1000/1h`, `10/250ms` (what the
 * CLI and the environment take).
 */
export const parseRate = (text: string): Effect.Effect<Rate, InvalidInput> => {
  const match = /^\s*(\d+)\s*\/\s*(\d*)\s*(ms|s|m|h|d)\s*$/.exec(text)
  if (match === null) return fail("rate", "COUNT/PERIOD such as 100/1m, 5/1s, 10/250ms", text)
  const unit = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }[match[3] as "ms" | "s" | "m" | "h" | "d"]
  return checkRate("rate", { count: Number(match[1]), periodMs: Number(match[2] === "" ? 1 : match[2]) * unit })
}

/** A rate as `parseRate` reads it back: `100/1m`. */
export const formatRate = (rate: Rate): string => {
  for (const [unit, ms] of [["d", 86_400_000], ["h", 3_600_000], ["m", 60_000], ["s", 1_000]] as const) {
    if (rate.periodMs % ms === 0) return `${rate.count}/${rate.periodMs / ms}${unit}`
  }
  return `${rate.count}/${rate.periodMs}ms`
}

/**
 * The store's flow operations: the limits the claim keeps across every worker, stored so
 * that operators change them at runtime; a claim reads them in its own transaction, so a change
 * holds from the next claim on.
 */
export interface FlowOperations {
  /**
   * Write the limits of a queue or of one task in it (`null` or no limits: clear them). Checked
   * first (`FlowControl.validateLimits`): nothing is written when a value breaks a rule. With
   * `source: "code"` (a worker's declaration) an operator's limits are left as they are and the
   * answer is `false`; otherwise `true`. Messages in flight above a new limit finish as they are.
   */
  readonly setLimits: (
    target: LimitsTarget,
    limits: FlowLimits | null,
    options?: { readonly source?: LimitsSource | undefined }
  ) => Effect.Effect<boolean, InvalidInput | StoreError>
  /** The stored limits of one queue (its own, then its tasks'), or of every queue, by queue and task. */
  readonly limits: (queue?: string) => Effect.Effect<ReadonlyArray<StoredLimits>, InvalidInput | StoreError>
  /**
   * The weight of a key in fair claiming (1 to 100, default 1): a key of weight 2 gets two turns
   * for every one of a key of weight 1. Applies to messages sent from now on.
   */
  readonly setKeyWeight: (queue: string, key: string, weight: number) => Effect.Effect<void, InvalidInput | StoreError>
  /** What holds a queue back now: its limits, keys at their limit, FIFO keys blocked, full rate windows. */
  readonly flowStatus: (queue: string) => Effect.Effect<FlowStatus, InvalidInput | StoreError>
}

/**
 * The flow operations of a store with their inputs checked first (names, keys, weights, limits,
 * the source), as `QueueStore.fromOperations` builds every store: an empty record of limits is
 * written as none.
 */
export const checkedOperations = (shape: FlowOperations): FlowOperations => ({
  setLimits: (target, limits, options) =>
    Effect.gen(function*() {
      const checked = yield* checkTarget(target)
      const valid = limits === null ? null : yield* validateLimits(limits, checked)
      const source = options?.source ?? "operator"
      if (source !== "code" && source !== "operator") {
        return yield* new InvalidInput({ field: "source", rule: "code or operator", message: `source ${JSON.stringify(source)} is refused (rule: code or operator)` })
      }
      return yield* shape.setLimits(checked, valid === null || isEmpty(valid) ? null : valid, { source })
    }),
  limits: (queue) => queue === undefined ? shape.limits() : Effect.flatMap(Validate.name("queue", queue), shape.limits),
  setKeyWeight: (queue, key, weight) =>
    Effect.gen(function*() {
      yield* Validate.name("queue", queue)
      yield* validateKey(key)
      yield* validateWeight(weight)
      return yield* shape.setKeyWeight(queue, key, weight)
    }),
  flowStatus: (queue) => Effect.flatMap(Validate.name("queue", queue), shape.flowStatus)
})

/** Check the queue (and task) limits are written for. */
const checkTarget = (target: LimitsTarget): Effect.Effect<LimitsTarget, InvalidInput> =>
  Effect.gen(function*() {
    const queue = yield* Validate.name("queue", target?.queue)
    if (target.task === undefined) return { queue }
    return { queue, task: yield* Validate.name("task", target.task) }
  })

/**
 * What a claim may take from a queue with flow limits: its `limit` less `ahead` (what the
 * consumer would hold ahead of a free handler slot, `ClaimOptions.ahead`: a held message would
 * count against the queue's concurrency limits without running), `ahead` checked as a whole
 * number from 0 to `limit`. Both stores read a claim's `ahead` so.
 */
export const limitedClaimSize = (ahead: unknown, limit: number): Effect.Effect<number, InvalidInput> =>
  ahead === undefined || ahead === 0
    ? Effect.succeed(limit)
    : typeof ahead === "number" && Number.isInteger(ahead) && ahead >= 0 && ahead <= limit
    ? Effect.succeed(limit - ahead)
    : Effect.fail(
      new InvalidInput({
        field: "ahead",
        rule: `a whole number from 0 to the claim's limit (${limit})`,
        message: `ahead ${String(ahead)} is out of range (rule: a whole number from 0 to the claim's limit (${limit}))`
      })
    )
