/**
 * Settings per queue: a consumer that consumes several queues may give each its own
 * concurrency (handler slots of its own), batch size and lease, in code (`queues` as a record,
 * `{ emails: { concurrency: 20, lease: "5s" }, reports: { concurrency: 2, lease: "30s" } }`) or
 * from the environment (`LEASEHOLD_QUEUE_CONCURRENCY=emails=20,reports=2`, and
 * `LEASEHOLD_QUEUE_BATCH_SIZE`, `LEASEHOLD_QUEUE_LEASE` alike). What a queue leaves out it
 * takes from the consumer; a queue without a concurrency of its own shares the consumer's slots.
 *
 * @since 0.1.0
 */
import { Config, Effect } from "effect"
import type { ConfigInvalid } from "../QueueError.ts"
import * as Read from "./read.ts"
import { checkName, type DurationLike, inRange, invalid, parseDuration } from "./rules.ts"

/** What one queue may set for itself (in `ConsumerOptions.queues` as a record). */
export interface QueueOptions {
  /** Handlers of this queue running at once, in slots of its own (default: it shares the consumer's). */
  readonly concurrency?: number | undefined
  /** Most messages per claim of this queue (default: the consumer's). */
  readonly batchSize?: number | undefined
  /** The lease of this queue's claims, renewed every lease/3 (default: the consumer's). */
  readonly lease?: DurationLike | undefined
}

/** The settings of one queue, resolved (durations in milliseconds). */
export interface QueueSettings {
  /** Handler slots of its own, or undefined: it shares the consumer's. */
  readonly concurrency: number | undefined
  readonly batchSize: number
  readonly leaseMs: number
  /** The local deadline's margin for this queue's lease (see {@link marginFor}). */
  readonly leaseMarginMs: number
}

/** Per-queue settings as maps of queue to value: what the `LEASEHOLD_QUEUE_*` variables give. */
export interface QueueMaps {
  readonly queueConcurrency?: Readonly<Record<string, number>> | undefined
  readonly queueBatchSize?: Readonly<Record<string, number>> | undefined
  readonly queueLease?: Readonly<Record<string, DurationLike>> | undefined
}

/** The consumer-wide values a queue falls back to. */
interface Base {
  readonly batchSize: number
  readonly leaseMs: number
  readonly leaseMarginMs: number
  /** Whether the margin was set (else each lease gets its own sixth). */
  readonly marginSet: boolean
}

/** How a setting's error names it: the option in code, or the variable with `queue=value`. */
export type Labeller = (key: keyof QueueMaps) => { readonly env: boolean; readonly name: string }

const optionKeys: ReadonlyArray<string> = ["concurrency", "batchSize", "lease"]

/**
 * The margin for a lease of `leaseMs`: the consumer's `marginMs` while it stays under a third of
 * that lease (the local deadline must come before the lease ends, after a renewal's slack), else
 * a sixth of the lease. Used for queue leases and for the leases tasks declare.
 */
export const marginFor = (leaseMs: number, marginMs: number): number =>
  marginMs < leaseMs / 3 ? marginMs : Math.max(1, Math.floor(leaseMs / 6))

/** The queues of `queues` (a list, or a record of queues and their options) in order. */
export const queueNames = (queues: ReadonlyArray<string> | Readonly<Record<string, QueueOptions>>): ReadonlyArray<string> =>
  Array.isArray(queues) ? queues : Object.keys(queues)

/**
 * Resolve every queue's own settings: from the record form of `queues`, then from the maps,
 * checked by the consumer's rules; a map naming a queue the consumer does not consume is refused.
 * Only queues that set something are in the answer.
 */
export const resolveQueues = (
  queues: ReadonlyArray<string> | Readonly<Record<string, QueueOptions>>,
  maps: QueueMaps,
  base: Base,
  label: Labeller
): Effect.Effect<Readonly<Record<string, QueueSettings>>, ConfigInvalid> =>
  Effect.gen(function*() {
    const names = queueNames(queues)
    const record: Readonly<Record<string, QueueOptions>> = Array.isArray(queues) ? {} : queues as Record<string, QueueOptions>
    for (const [key, map] of Object.entries(maps) as Array<[keyof QueueMaps, Record<string, unknown> | undefined]>) {
      for (const queue of Object.keys(map ?? {})) {
        if (!names.includes(queue)) {
          const { env, name } = label(key)
          return yield* invalid(env ? name : `${name}.${queue}`, `a queue this consumer consumes (${names.join(", ")})`, queue)
        }
      }
    }
    const out: Record<string, QueueSettings> = {}
    for (const queue of names) {
      const own = record[queue] ?? {}
      if (typeof own !== "object" || own === null) return yield* invalid(`queues.${queue}`, "an object { concurrency, batchSize, lease }", String(own))
      const unknown = Object.keys(own).find((k) => !optionKeys.includes(k))
      if (unknown !== undefined) return yield* invalid(`queues.${queue}.${unknown}`, `one of ${optionKeys.join(", ")}`, unknown)
      const settings = yield* resolveOne(queue, own, maps, base, label)
      if (settings !== undefined) out[queue] = settings
    }
    return out
  })

/** One queue's settings, or undefined when it sets nothing of its own. */
const resolveOne = (queue: string, own: QueueOptions, maps: QueueMaps, base: Base, label: Labeller) =>
  Effect.gen(function*() {
    /** The value and the name its error uses: the record's option, else the map's entry. */
    const pick = <A>(option: keyof QueueOptions, key: keyof QueueMaps) => {
      const fromRecord = own[option] as A | undefined
      if (fromRecord !== undefined) return { value: fromRecord, name: `queues.${queue}.${option}`, env: false }
      const { env, name } = label(key)
      const value = (maps[key] as Record<string, A> | undefined)?.[queue]
      return { value, name: env ? name : `${name}.${queue}`, env }
    }
    /** Check `value` for one queue; from the environment, the error quotes `queue=value`. */
    const checked = <A>(picked: { readonly value: A; readonly name: string; readonly env: boolean }, check: (name: string, value: A) => Effect.Effect<number, ConfigInvalid>) =>
      Effect.mapError(check(picked.name, picked.value), (e) =>
        picked.env ? invalid(picked.name, e.rule, `${queue}=${String(picked.value)}`) : e)
    const concurrency = pick<number>("concurrency", "queueConcurrency")
    const batchSize = pick<number>("batchSize", "queueBatchSize")
    const lease = pick<DurationLike>("lease", "queueLease")
    if (concurrency.value === undefined && batchSize.value === undefined && lease.value === undefined) return undefined
    const leaseMs = lease.value === undefined ? base.leaseMs : yield* checked(lease as typeof lease & { value: DurationLike }, (name, value) =>
      Effect.flatMap(parseDuration(name, value), (ms) => inRange(name, ms, 300, 24 * 3_600_000, " ms")))
    return {
      concurrency: concurrency.value === undefined ? undefined : yield* checked(concurrency, (name, value) => inRange(name, value as number, 1, 10_000)),
      batchSize: batchSize.value === undefined ? base.batchSize : yield* checked(batchSize, (name, value) => inRange(name, value as number, 1, 1_000)),
      leaseMs,
      leaseMarginMs: leaseMs === base.leaseMs
        ? base.leaseMarginMs
        : base.marginSet ? marginFor(leaseMs, base.leaseMarginMs) : Math.round(leaseMs / 6)
    } satisfies QueueSettings
  })

const pairsRule = "comma-separated queue=value pairs, e.g. emails=20,reports=2"

/** A `LEASEHOLD_QUEUE_*` variable's pairs, `queue=value` each, values as written (checked later). */
const pairs = (name: string): Config.Config<Record<string, string> | undefined> =>
  Read.text(name).pipe(Read.check((text) =>
    Effect.gen(function*() {
      if (text === undefined) return undefined
      const out: Record<string, string> = {}
      for (const pair of text.split(",").map((p) => p.trim()).filter((p) => p !== "")) {
        const at = pair.indexOf("=")
        const queue = pair.slice(0, at).trim()
        const value = pair.slice(at + 1).trim()
        if (at <= 0 || value === "") return yield* invalid(name, pairsRule, text)
        yield* checkName(name, queue)
        if (queue in out) return yield* invalid(name, `${pairsRule}, each queue once`, text)
        out[queue] = value
      }
      return out
    })
  ))

/** A `LEASEHOLD_QUEUE_*` variable of whole numbers per queue. */
const wholePairs = (name: string): Config.Config<Record<string, number> | undefined> =>
  pairs(name).pipe(Read.check((map) =>
    Effect.gen(function*() {
      if (map === undefined) return undefined
      const out: Record<string, number> = {}
      for (const [queue, value] of Object.entries(map)) {
        if (!/^\d+$/.test(value)) return yield* invalid(name, "a whole number", `${queue}=${value}`)
        out[queue] = Number(value)
      }
      return out
    })
  ))

/** The per-queue variables' descriptions, read (their rules with the consumer's are {@link resolveQueues}'). */
export const queueMapsConfig = (names: {
  readonly queueConcurrency: string
  readonly queueBatchSize: string
  readonly queueLease: string
}) => ({
  queueConcurrency: wholePairs(names.queueConcurrency),
  queueBatchSize: wholePairs(names.queueBatchSize),
  queueLease: pairs(names.queueLease)
})

/** One queue's settings: its own where it has them, else the consumer's. */
export const forQueue = (
  settings: {
    readonly batchSize: number
    readonly leaseMs: number
    readonly leaseMarginMs: number
    readonly perQueue: Readonly<Record<string, QueueSettings>>
  },
  queue: string
): QueueSettings =>
  settings.perQueue[queue] ??
    { concurrency: undefined, batchSize: settings.batchSize, leaseMs: settings.leaseMs, leaseMarginMs: settings.leaseMarginMs }

/** A group of queues claimed by one loop into one pool of handler slots. */
export interface Lane {
  readonly queues: ReadonlyArray<string>
  readonly concurrency: number
}

/**
 * The lanes of a consumer: the queues without a concurrency of their own share the consumer's
 * slots (one lane), and each queue with one has a lane of its own.
 */
export const lanes = (settings: {
  readonly queues: ReadonlyArray<string>
  readonly concurrency: number
  readonly perQueue: Readonly<Record<string, QueueSettings>>
}): ReadonlyArray<Lane> => {
  const shared = settings.queues.filter((q) => settings.perQueue[q]?.concurrency === undefined)
  const own = settings.queues.flatMap((q) => {
    const concurrency = settings.perQueue[q]?.concurrency
    return concurrency === undefined ? [] : [{ queues: [q], concurrency }]
  })
  return shared.length === 0 ? own : [{ queues: shared, concurrency: settings.concurrency }, ...own]
}
