/**
 * Consumer configuration: from the environment (`LEASEHOLD_*`, through
 * Effect's `Config` and the current `ConfigProvider`) or from code, with
 * defaults, validated at start. An invalid value fails with {@link ConfigInvalid}
 * naming the variable (or, from code, the option) and the rule it broke.
 *
 * Each settings record has one `Config` description: the consumer's ({@link consumerConfig}, code
 * options laid over the environment), the worker process's (`processConfig`: HTTP server, admin
 * token, log level), the connection's (`connectionConfig`), the schema ({@link schemaConfig}) and
 * session liveness ({@link presenceModeConfig}). Every variable's name is in one record,
 * {@link env}. The `...FromEnv` effects read them through the current `ConfigProvider` (the
 * environment unless one is provided: `ConfigProvider.layer(ConfigProvider.fromUnknown({...}))`).
 *
 * @since 0.1.0
 */
import { Config, Effect } from "effect"
import * as os from "node:os"
import * as Read from "./config/read.ts"
import { checkName, type DurationLike, inRange, invalid, parseDuration, show } from "./config/rules.ts"
import { env } from "./config/variables.ts"
import { processConfig, type ProcessSettings } from "./config/process.ts"
import { type QueueOptions, queueMapsConfig, queueNames, type QueueSettings, resolveQueues } from "./config/queues.ts"
import type { ConfigInvalid } from "./QueueError.ts"

export * from "./config/connection.ts"
export * from "./config/process.ts"
export { forQueue, type Lane, lanes, marginFor, type QueueOptions, type QueueSettings } from "./config/queues.ts"
export { type DurationLike, parseDuration } from "./config/rules.ts"
export { type WorkflowEnv, workflowConfig, workflowFromEnv, workflowVariables } from "./config/workflow.ts"
export { env } from "./config/variables.ts"


/**
 * How many messages a lane may claim ahead of its free handler slots, held (leased and renewed)
 * until a slot frees: `auto` holds `concurrency + 1` while the lane's handlers are quick (under
 * 20 ms) and none otherwise, and gives back what waited 250 ms for a slot; a number holds that
 * many always (0: claim only for free slots). See docs/configuration.md, "Claiming ahead".
 */
export type Prefetch = "auto" | number

/** What the consumer does when it loses a lease while the handler still runs. */
export type OnLeaseLost = "interrupt" | "continue"

/** Resolved consumer settings: every duration in milliseconds. */
export interface ConsumerSettings {
  /** Queues to consume, claimed round-robin. */
  readonly queues: ReadonlyArray<string>
  /**
   * The queues with settings of their own (concurrency, batch size, lease), by queue; every other
   * queue takes the consumer's (read one queue's with `forQueue`).
   */
  readonly perQueue: Readonly<Record<string, QueueSettings>>
  /** This consumer's id, recorded as `leased_by` and in every log line. */
  readonly consumerId: string
  /** Handlers running at once. */
  readonly concurrency: number
  /** Messages taken per claim (never more than free slots and what `prefetch` holds ahead). */
  readonly batchSize: number
  /** Messages each lane may hold ahead of its free slots (see {@link Prefetch}). */
  readonly prefetch: Prefetch
  /** The claim window, renewed every lease/3. */
  readonly leaseMs: number
  /** The local deadline is last successful renewal + lease - margin. */
  readonly leaseMarginMs: number
  /** Per-message deadline after which a handler is interrupted and the message retried. */
  readonly maxRuntimeMs: number
  /** Sleep after an empty poll. */
  readonly pollIntervalMs: number
  /** Longest back-off after store errors. */
  readonly backoffMaxMs: number
  /** On shutdown, how long in-flight handlers get to finish before they are interrupted and released. */
  readonly shutdownGraceMs: number
  /** How long finishing a claim waits for its renewer to stop before reporting it wedged. */
  readonly renewerStopTimeoutMs: number
  /** `health` reports stale when the loop has made no progress for this long. */
  readonly healthStaleMs: number
  /** Interrupt (default) or let run a handler whose lease is lost. */
  readonly onLeaseLost: OnLeaseLost
  /** First retry delay after a failed attempt; doubles per attempt, with jitter. */
  readonly retryBaseMs: number
  /** Longest retry delay. */
  readonly retryMaxMs: number
  /** A message whose lease expired this many times is dead-lettered as a suspected worker-killer. */
  readonly quarantineAfter: number
  /** A message of a task this worker does not know is retried this many times before it is dead-lettered. */
  readonly unknownTaskAttempts: number
  /** Delay before such a message is tried again (perhaps by a newer worker). */
  readonly unknownTaskDelayMs: number
  /** Attempt history older than this is deleted. */
  readonly attemptRetentionMs: number
}

/** The settings a consumer takes from code: anything left out takes its default. Durations as `Duration.Input` or "30s". */
export interface ConsumerOptions {
  /**
   * The queues to consume: a list, or a record of queues and their own settings
   * (`{ emails: { concurrency: 20, lease: "5s" }, reports: { concurrency: 2, lease: "30s" } }`):
   * a queue with a `concurrency` gets handler slots of its own, the others share `concurrency`.
   */
  readonly queues?: ReadonlyArray<string> | Readonly<Record<string, QueueOptions>> | undefined
  /** Per-queue concurrency as a map (what `LEASEHOLD_QUEUE_CONCURRENCY` gives); the record form of `queues` wins. */
  readonly queueConcurrency?: Readonly<Record<string, number>> | undefined
  /** Per-queue batch size as a map (`LEASEHOLD_QUEUE_BATCH_SIZE`). */
  readonly queueBatchSize?: Readonly<Record<string, number>> | undefined
  /** Per-queue lease as a map (`LEASEHOLD_QUEUE_LEASE`). */
  readonly queueLease?: Readonly<Record<string, DurationLike>> | undefined
  readonly consumerId?: string | undefined
  readonly concurrency?: number | undefined
  readonly batchSize?: number | undefined
  /** `auto` (the default), or how many messages to hold ahead of free slots: see {@link Prefetch}. */
  readonly prefetch?: Prefetch | undefined
  readonly lease?: DurationLike | undefined
  readonly leaseMargin?: DurationLike | undefined
  readonly maxRuntime?: DurationLike | undefined
  readonly pollInterval?: DurationLike | undefined
  readonly backoffMax?: DurationLike | undefined
  readonly shutdownGrace?: DurationLike | undefined
  readonly renewerStopTimeout?: DurationLike | undefined
  readonly healthStale?: DurationLike | undefined
  readonly onLeaseLost?: OnLeaseLost | undefined
  readonly retryBase?: DurationLike | undefined
  readonly retryMax?: DurationLike | undefined
  readonly quarantineAfter?: number | undefined
  readonly unknownTaskAttempts?: number | undefined
  readonly unknownTaskDelay?: DurationLike | undefined
  readonly attemptRetention?: DurationLike | undefined
}


/** The defaults, as docs/configuration.md lists them. */
export const defaults = {
  queues: ["default"],
  concurrency: 10,
  batchSize: 100,
  prefetch: "auto" as Prefetch,
  leaseMs: 30_000,
  maxRuntimeMs: 3_600_000,
  pollIntervalMs: 1_000,
  backoffMaxMs: 30_000,
  shutdownGraceMs: 30_000,
  renewerStopTimeoutMs: 5_000,
  healthStaleMs: 60_000,
  onLeaseLost: "interrupt" as OnLeaseLost,
  retryBaseMs: 1_000,
  retryMaxMs: 3_600_000,
  quarantineAfter: 3,
  unknownTaskAttempts: 5,
  unknownTaskDelayMs: 30_000,
  attemptRetentionMs: 7 * 86_400_000
} as const


/** The environment variable behind each consumer option (and the database's): a view of {@link env}. */
export const variables = {
  databaseUrl: env.databaseUrl,
  schema: env.schema,
  queues: env.queues,
  consumerId: env.consumerId,
  concurrency: env.concurrency,
  batchSize: env.batchSize,
  prefetch: env.prefetch,
  lease: env.lease,
  queueConcurrency: env.queueConcurrency,
  queueBatchSize: env.queueBatchSize,
  queueLease: env.queueLease,
  leaseMargin: env.leaseMargin,
  maxRuntime: env.maxRuntime,
  pollInterval: env.pollInterval,
  backoffMax: env.backoffMax,
  shutdownGrace: env.shutdownGrace,
  renewerStopTimeout: env.renewerStopTimeout,
  healthStale: env.healthStale,
  onLeaseLost: env.onLeaseLost,
  retryBase: env.retryBase,
  retryMax: env.retryMax,
  quarantineAfter: env.quarantineAfter,
  unknownTaskAttempts: env.unknownTaskAttempts,
  unknownTaskDelay: env.unknownTaskDelay,
  attemptRetention: env.attemptRetention
} as const

const marginRule = "more than 0 and less than a third of the lease (the local deadline comes before the lease ends; renewals run every lease/3)"
/** A consumer id unique enough to tell processes apart in logs and `leased_by`. */
export const defaultConsumerId = (): string =>
  `${os.hostname().replace(/[^A-Za-z0-9_.:/-]/g, "-").slice(0, 80)}-${process.pid}-${Math.random().toString(36).slice(2, 6)}`

/** Where an option's value came from, so its error names the option (code) or the variable (env). */
export type Source = "code" | "env"

/**
 * Validate options given in code (or read from the environment) and fill in
 * defaults. `source` maps each option to the name its errors use: the option's
 * own ("code"), its variable ("env"), or per option.
 */
export const resolve = (
  options: ConsumerOptions,
  source: Source | ((key: keyof typeof variables) => Source) = "code"
): Effect.Effect<ConsumerSettings, ConfigInvalid> =>
  Effect.gen(function*() {
    const label = (key: keyof typeof variables) =>
      (typeof source === "function" ? source(key) : source) === "env" ? variables[key] : key
    const duration = (key: keyof typeof variables, value: DurationLike | undefined, fallback: number) =>
      value === undefined ? Effect.succeed(fallback) : parseDuration(label(key), value)

    const queues = queueNames(options.queues ?? defaults.queues)
    if (queues.length === 0) return yield* invalid(label("queues"), "at least one queue name", "")
    for (const q of queues) yield* checkName(label("queues"), q)
    const consumerId = yield* checkName(label("consumerId"), options.consumerId ?? defaultConsumerId())
    const concurrency = yield* inRange(label("concurrency"), options.concurrency ?? defaults.concurrency, 1, 10_000)
    const batchSize = yield* inRange(label("batchSize"), options.batchSize ?? defaults.batchSize, 1, 1_000)
    const prefetch = yield* prefetchOf(label("prefetch"), options.prefetch ?? defaults.prefetch)
    const leaseMs = yield* duration("lease", options.lease, defaults.leaseMs)
    yield* inRange(label("lease"), leaseMs, 300, 24 * 3_600_000, " ms")
    const leaseMarginMs = yield* duration("leaseMargin", options.leaseMargin, Math.round(leaseMs / 6))
    // Above 0: the local deadline (last renewal + lease - margin) must come before the lease ends,
    // or a handler is stopped only once another consumer may already have its message.
    if (leaseMarginMs <= 0 || leaseMarginMs >= leaseMs / 3) {
      return yield* invalid(label("leaseMargin"), marginRule, show(options.leaseMargin ?? `${leaseMarginMs}ms`))
    }
    const maxRuntimeMs = yield* duration("maxRuntime", options.maxRuntime, defaults.maxRuntimeMs)
    yield* inRange(label("maxRuntime"), maxRuntimeMs, 1, 7 * 24 * 3_600_000, " ms")
    const pollIntervalMs = yield* duration("pollInterval", options.pollInterval, defaults.pollIntervalMs)
    yield* inRange(label("pollInterval"), pollIntervalMs, 1, 3_600_000, " ms")
    const backoffMaxMs = yield* duration("backoffMax", options.backoffMax, defaults.backoffMaxMs)
    yield* inRange(label("backoffMax"), backoffMaxMs, 1, 3_600_000, " ms")
    const shutdownGraceMs = yield* duration("shutdownGrace", options.shutdownGrace, defaults.shutdownGraceMs)
    const renewerStopTimeoutMs = yield* duration("renewerStopTimeout", options.renewerStopTimeout, defaults.renewerStopTimeoutMs)
    yield* inRange(label("renewerStopTimeout"), renewerStopTimeoutMs, 1, 600_000, " ms")
    const healthStaleMs = yield* duration("healthStale", options.healthStale, defaults.healthStaleMs)
    yield* inRange(label("healthStale"), healthStaleMs, 1, 24 * 3_600_000, " ms")
    const onLeaseLost = options.onLeaseLost ?? defaults.onLeaseLost
    if (onLeaseLost !== "interrupt" && onLeaseLost !== "continue") {
      return yield* invalid(label("onLeaseLost"), "interrupt or continue", String(onLeaseLost))
    }
    const retryBaseMs = yield* duration("retryBase", options.retryBase, defaults.retryBaseMs)
    const retryMaxMs = yield* duration("retryMax", options.retryMax, defaults.retryMaxMs)
    if (retryMaxMs < retryBaseMs) return yield* invalid(label("retryMax"), "at least the retry base", `${retryMaxMs}ms`)
    const quarantineAfter = yield* inRange(label("quarantineAfter"), options.quarantineAfter ?? defaults.quarantineAfter, 1, 1_000)
    const unknownTaskAttempts = yield* inRange(
      label("unknownTaskAttempts"),
      options.unknownTaskAttempts ?? defaults.unknownTaskAttempts,
      1,
      1_000
    )
    const unknownTaskDelayMs = yield* duration("unknownTaskDelay", options.unknownTaskDelay, defaults.unknownTaskDelayMs)
    const attemptRetentionMs = yield* duration("attemptRetention", options.attemptRetention, defaults.attemptRetentionMs)
    yield* inRange(label("attemptRetention"), attemptRetentionMs, 60_000, 3_650 * 86_400_000, " ms")
    const perQueue = yield* resolveQueues(
      options.queues ?? queues,
      { queueConcurrency: options.queueConcurrency, queueBatchSize: options.queueBatchSize, queueLease: options.queueLease },
      { batchSize, leaseMs, leaseMarginMs, marginSet: options.leaseMargin !== undefined },
      (key) => ({ env: (typeof source === "function" ? source(key) : source) === "env", name: label(key) })
    )
    return {
      queues,
      perQueue,
      consumerId,
      concurrency,
      batchSize,
      prefetch,
      leaseMs,
      leaseMarginMs,
      maxRuntimeMs,
      pollIntervalMs,
      backoffMaxMs,
      shutdownGraceMs,
      renewerStopTimeoutMs,
      healthStaleMs,
      onLeaseLost,
      retryBaseMs,
      retryMaxMs,
      quarantineAfter,
      unknownTaskAttempts,
      unknownTaskDelayMs,
      attemptRetentionMs
    }
  })

/** `auto`, or a whole number from 0 to 10000: the prefetch rule. */
const prefetchOf = (name: string, value: Prefetch | string): Effect.Effect<Prefetch, ConfigInvalid> => {
  if (value === "auto") return Effect.succeed("auto")
  const n = typeof value === "string" && /^\s*\d+\s*$/.test(value) ? Number(value) : value
  return typeof n === "number" && Number.isInteger(n) && n >= 0 && n <= 10_000
    ? Effect.succeed(n)
    : Effect.fail(invalid(name, "auto, or a whole number from 0 to 10000 (messages held ahead of free handler slots)", String(value)))
}

/** A whole number from the environment (the range is the rule's, checked by {@link resolve}). */
const whole = (name: string): Config.Config<number | undefined> =>
  Read.text(name).pipe(Read.check((text) =>
    text === undefined
      ? Effect.succeed(undefined)
      : /^\s*\d+\s*$/.test(text)
      ? Effect.succeed(Number(text))
      : Effect.fail(invalid(name, "a whole number", text))
  ))

/**
 * The consumer's options as the environment gives them, each undefined while its variable is
 * unset or blank: read, not yet checked (that is {@link resolve}'s, with the defaults).
 */
export const consumerOptionsConfig: Config.Config<ConsumerOptions> = Config.all({
  queues: Config.map(Read.text(env.queues), (text) => text?.split(",").map((q) => q.trim()).filter((q) => q !== "")),
  consumerId: Read.text(env.consumerId),
  concurrency: whole(env.concurrency),
  batchSize: whole(env.batchSize),
  // Checked by resolve (auto or a whole number), naming the variable.
  prefetch: Read.text(env.prefetch) as Config.Config<Prefetch | undefined>,
  lease: Read.text(env.lease),
  ...queueMapsConfig(env),
  leaseMargin: Read.text(env.leaseMargin),
  maxRuntime: Read.text(env.maxRuntime),
  pollInterval: Read.text(env.pollInterval),
  backoffMax: Read.text(env.backoffMax),
  shutdownGrace: Read.text(env.shutdownGrace),
  renewerStopTimeout: Read.text(env.renewerStopTimeout),
  healthStale: Read.text(env.healthStale),
  // Checked by resolve (interrupt or continue), naming the variable.
  onLeaseLost: Read.text(env.onLeaseLost) as Config.Config<OnLeaseLost | undefined>,
  retryBase: Read.text(env.retryBase),
  retryMax: Read.text(env.retryMax),
  quarantineAfter: whole(env.quarantineAfter),
  unknownTaskAttempts: whole(env.unknownTaskAttempts),
  unknownTaskDelay: Read.text(env.unknownTaskDelay),
  attemptRetention: Read.text(env.attemptRetention)
})

/**
 * Options from code around the environment's: `overrides` win over the variables, `fallbacks`
 * apply where a variable is unset (then the defaults). Errors name the option for a value from
 * code and the variable for one from the environment.
 */
export interface CodeOptions {
  readonly overrides?: ConsumerOptions | undefined
  readonly fallbacks?: ConsumerOptions | undefined
}

/**
 * The consumer's settings: `LEASEHOLD_*` variables through the current `ConfigProvider`, with
 * the options of `code` laid over (and under) them, checked by {@link resolve}'s rules.
 */
export const consumerConfig = (code: CodeOptions = {}): Config.Config<ConsumerSettings> =>
  consumerOptionsConfig.pipe(Read.check((fromEnv) => {
    const merged: Record<string, unknown> = {}
    const sources: Partial<Record<keyof typeof variables, Source>> = {}
    for (const [source, options] of [["code", code.fallbacks], ["env", fromEnv], ["code", code.overrides]] as const) {
      for (const [key, value] of Object.entries(options ?? {})) {
        if (value === undefined) continue
        merged[key] = value
        sources[key as keyof typeof variables] = source
      }
    }
    // A default that breaks a rule with another setting (a retry base above the default maximum)
    // names the variable: that is what the operator sets to fix it.
    return resolve(merged as ConsumerOptions, (key) => sources[key] ?? "env")
  }))

/** Read the consumer settings from `LEASEHOLD_*` variables (through the current `ConfigProvider`). */
export const fromEnv: Effect.Effect<ConsumerSettings, ConfigInvalid> = Read.load(consumerConfig())

/** `LEASEHOLD_SCHEMA` as written; undefined while unset or blank (the store validates it and defaults to `leasehold`). */
export const schemaConfig: Config.Config<string | undefined> = Read.text(env.schema)

/** The SQL schema from `LEASEHOLD_SCHEMA` (default `leasehold`); the store validates it. */
export const schemaFromEnv: Effect.Effect<string | undefined, ConfigInvalid> = Read.load(schemaConfig, env.schema)

/** Session liveness: `on`, `off` or `auto` (see `ConsumerPresence`). */
export type PresenceMode = "on" | "off" | "auto"

/** `LEASEHOLD_SESSION_LIVENESS`: on, off or auto (any case, spaces around ignored); default auto. */
export const presenceModeConfig: Config.Config<PresenceMode> = Read.text(env.sessionLiveness).pipe(
  Read.check((text) => {
    if (text === undefined) return Effect.succeed<PresenceMode>("auto")
    const mode = text.trim().toLowerCase()
    return mode === "on" || mode === "off" || mode === "auto"
      ? Effect.succeed<PresenceMode>(mode)
      : Effect.fail(invalid(env.sessionLiveness, "on, off or auto", text))
  })
)

/** The mode from `LEASEHOLD_SESSION_LIVENESS` (on, off or auto; default auto). */
export const presenceModeFromEnv: Effect.Effect<PresenceMode, ConfigInvalid> = Read.load(presenceModeConfig, env.sessionLiveness)

/** Everything a worker configured from the environment reads: the consumer's settings and the process's. */
export interface WorkerSettings {
  readonly consumer: ConsumerSettings
  readonly process: ProcessSettings
}

/** The process's settings, then the consumer's ({@link consumerConfig} with `code`): every variable of a worker. */
export const workerConfig = (code: CodeOptions = {}): Config.Config<WorkerSettings> =>
  Config.all({ process: processConfig, consumer: consumerConfig(code) })

/** {@link fromEnv} and `processFromEnv` together: every variable of a worker, checked before any of it starts. */
export const workerFromEnv: Effect.Effect<WorkerSettings, ConfigInvalid> = Read.load(workerConfig())

/** {@link workerFromEnv} with options from code laid over (`overrides`) or under (`fallbacks`) the variables. */
export const workerFromEnvWith = (code: CodeOptions): Effect.Effect<WorkerSettings, ConfigInvalid> => Read.load(workerConfig(code))
