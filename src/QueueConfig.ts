/**
 * Consumer configuration: from the environment (`LEASEHOLD_*`, through
 * Effect's `Config`) or from code, with defaults, validated at start. An
 * invalid value fails with {@link ConfigInvalid} naming the variable and the
 * rule it broke.
 *
 * @since 0.1.0
 */
import { PgClient } from "@effect/sql-pg"
import { Config, Duration, Effect, Layer, type LogLevel, Option, Redacted } from "effect"
import type { SqlClient } from "effect/sql"
import * as os from "node:os"
import { canonicalHost } from "./http/security.ts"
import * as Validate from "./internal/validate.ts"
import * as Pooler from "./Pooler.ts"
import { classify, ConfigInvalid, type StoreError } from "./QueueError.ts"

/** What the consumer does when it loses a lease while the handler still runs. */
export type OnLeaseLost = "interrupt" | "continue"

/** Resolved consumer settings: every duration in milliseconds. */
export interface ConsumerSettings {
  /** Queues to consume, claimed round-robin. */
  readonly queues: ReadonlyArray<string>
  /** This consumer's id, recorded as `leased_by` and in every log line. */
  readonly consumerId: string
  /** Handlers running at once. */
  readonly concurrency: number
  /** Messages taken per claim (never more than free slots). */
  readonly batchSize: number
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
  readonly queues?: ReadonlyArray<string> | undefined
  readonly consumerId?: string | undefined
  readonly concurrency?: number | undefined
  readonly batchSize?: number | undefined
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

/**
 * A duration: milliseconds as a number, any `Duration.Input` of effect (`Duration.seconds(30)`,
 * `"30 seconds"`, `"500 millis"`), or the short forms `30s`, `500ms`, `2m`, `1h`, `7d`.
 */
export type DurationLike = Duration.Input | string

/** The defaults, as documented in the README. */
export const defaults = {
  queues: ["default"],
  concurrency: 10,
  batchSize: 100,
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

/** The environment variable behind each option. */
export const variables = {
  databaseUrl: "LEASEHOLD_DATABASE_URL",
  schema: "LEASEHOLD_SCHEMA",
  queues: "LEASEHOLD_QUEUES",
  consumerId: "LEASEHOLD_CONSUMER_ID",
  concurrency: "LEASEHOLD_CONCURRENCY",
  batchSize: "LEASEHOLD_BATCH_SIZE",
  lease: "LEASEHOLD_LEASE",
  leaseMargin: "LEASEHOLD_LEASE_MARGIN",
  maxRuntime: "LEASEHOLD_MAX_RUNTIME",
  pollInterval: "LEASEHOLD_POLL_INTERVAL",
  backoffMax: "LEASEHOLD_BACKOFF_MAX",
  shutdownGrace: "LEASEHOLD_SHUTDOWN_GRACE",
  renewerStopTimeout: "LEASEHOLD_RENEWER_STOP_TIMEOUT",
  healthStale: "LEASEHOLD_HEALTH_STALE",
  onLeaseLost: "LEASEHOLD_ON_LEASE_LOST",
  retryBase: "LEASEHOLD_RETRY_BASE",
  retryMax: "LEASEHOLD_RETRY_MAX",
  quarantineAfter: "LEASEHOLD_QUARANTINE_AFTER",
  unknownTaskAttempts: "LEASEHOLD_UNKNOWN_TASK_ATTEMPTS",
  unknownTaskDelay: "LEASEHOLD_UNKNOWN_TASK_DELAY",
  attemptRetention: "LEASEHOLD_ATTEMPT_RETENTION"
} as const

/**
 * The short units people type, as effect's `Duration` spells them. `Duration.fromInput` does the
 * parsing, but it only reads `<number> <unit>` with a space and a long unit (`30 seconds`,
 * `500 millis`): `30s`, `500ms`, `2m`, `1h` and `7d` (and `30sec`, `5 mins`, ...) need this
 * one-line translation. A unit effect knows (`30 seconds`, `2 weeks`) passes through unchanged.
 */
const shortUnits: Record<string, string> = {
  ms: "millis", millisecond: "millis", milliseconds: "millis",
  s: "seconds", sec: "seconds", secs: "seconds",
  m: "minutes", min: "minutes", mins: "minutes",
  h: "hours", hr: "hours", hrs: "hours",
  d: "days",
  w: "weeks"
}

const durationRule = "a duration such as 500ms, 30s, 2m, 1h, 7d or \"30 seconds\""

/** Text to effect's `Duration`: `"30s"` as `"30 seconds"`, then `Duration.fromInput`. Negative or malformed text is none. */
const durationFromText = (text: string): Option.Option<Duration.Duration> => {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*$/i.exec(text)
  if (match === null) return Option.none()
  const unit = match[2]!.toLowerCase()
  return Duration.fromInput(`${match[1]!} ${shortUnits[unit] ?? unit}` as Duration.Input)
}

/**
 * Parse a duration for `variable`; bare numbers are milliseconds only when given from code.
 * No duration may exceed {@link Validate.MAX_DELAY_MS} (ten years), the longest delay a store
 * accepts: a retry or unknown-task delay beyond it would make the finishing write fail.
 */
export const parseDuration = (variable: string, value: DurationLike): Effect.Effect<number, ConfigInvalid> => {
  const decoded = typeof value === "string" ? durationFromText(value) : Duration.fromInput(value)
  const ms = Option.match(decoded, { onNone: () => NaN, onSome: Duration.toMillis })
  if (Number.isNaN(ms) || ms < 0 || (typeof value === "number" && !Number.isFinite(value))) return Effect.fail(invalid(variable, durationRule, show(value)))
  return ms <= Validate.MAX_DELAY_MS
    ? Effect.succeed(Math.round(ms))
    : Effect.fail(invalid(variable, Validate.maxDelayRule, show(value)))
}

const show = (value: DurationLike): string =>
  typeof value === "string" || typeof value === "number" ? String(value) : Duration.isDuration(value) ? Duration.format(value) : String(value)

const marginRule = "more than 0 and less than a third of the lease (the local deadline comes before the lease ends; renewals run every lease/3)"

const invalid = (variable: string, rule: string, value: string) =>
  new ConfigInvalid({ variable, rule, message: `${variable}: ${JSON.stringify(value)} is invalid; expected ${rule}` })

const inRange = (variable: string, value: number, min: number, max: number, unit = "") =>
  Number.isInteger(value) && value >= min && value <= max
    ? Effect.succeed(value)
    : Effect.fail(invalid(variable, `a whole number from ${min}${unit} to ${max}${unit}`, String(value)))


const checkName = (variable: string, value: string) =>
  Validate.namePattern.test(value) ? Effect.succeed(value) : Effect.fail(invalid(variable, Validate.nameRule, value))

/** A consumer id unique enough to tell processes apart in logs and `leased_by`. */
export const defaultConsumerId = (): string =>
  `${os.hostname().replace(/[^A-Za-z0-9_.:/-]/g, "-").slice(0, 80)}-${process.pid}-${Math.random().toString(36).slice(2, 6)}`

/**
 * Validate options given in code (or read from the environment) and fill in
 * defaults. `source` maps each option to the variable named in errors.
 */
export const resolve = (
  options: ConsumerOptions,
  source: "code" | "env" = "code"
): Effect.Effect<ConsumerSettings, ConfigInvalid> =>
  Effect.gen(function*() {
    const label = (key: keyof typeof variables) => source === "env" ? variables[key] : key
    const duration = (key: keyof typeof variables, value: DurationLike | undefined, fallback: number) =>
      value === undefined ? Effect.succeed(fallback) : parseDuration(label(key), value)

    const queues = options.queues ?? defaults.queues
    if (queues.length === 0) return yield* invalid(label("queues"), "at least one queue name", "")
    for (const q of queues) yield* checkName(label("queues"), q)
    const consumerId = yield* checkName(label("consumerId"), options.consumerId ?? defaultConsumerId())
    const concurrency = yield* inRange(label("concurrency"), options.concurrency ?? defaults.concurrency, 1, 10_000)
    const batchSize = yield* inRange(label("batchSize"), options.batchSize ?? defaults.batchSize, 1, 1_000)
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
    return {
      queues,
      consumerId,
      concurrency,
      batchSize,
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

const optionalString = (name: string) => Config.option(Config.String(name))

const readEnv = <K extends keyof typeof variables>(key: K) =>
  Effect.map(
    Effect.mapError(optionalString(variables[key]), (e) =>
      new ConfigInvalid({ variable: variables[key], rule: "readable", message: `${variables[key]}: ${e.message}` })),
    (o) => Option.getOrUndefined(Option.filter(o, (s) => s.trim() !== ""))
  )

const readInt = (key: keyof typeof variables) =>
  Effect.flatMap(readEnv(key), (text) => {
    if (text === undefined) return Effect.succeed(undefined)
    return /^\s*\d+\s*$/.test(text)
      ? Effect.succeed(Number(text))
      : Effect.fail(invalid(variables[key], "a whole number", text))
  })

/** Read the consumer settings from `LEASEHOLD_*` variables (through the current `ConfigProvider`). */
export const fromEnv: Effect.Effect<ConsumerSettings, ConfigInvalid> = Effect.gen(function*() {
  const queues = yield* readEnv("queues")
  const onLeaseLost = yield* readEnv("onLeaseLost")
  const options: ConsumerOptions = {
    queues: queues?.split(",").map((q) => q.trim()).filter((q) => q !== ""),
    consumerId: yield* readEnv("consumerId"),
    concurrency: yield* readInt("concurrency"),
    batchSize: yield* readInt("batchSize"),
    lease: yield* readEnv("lease"),
    leaseMargin: yield* readEnv("leaseMargin"),
    maxRuntime: yield* readEnv("maxRuntime"),
    pollInterval: yield* readEnv("pollInterval"),
    backoffMax: yield* readEnv("backoffMax"),
    shutdownGrace: yield* readEnv("shutdownGrace"),
    renewerStopTimeout: yield* readEnv("renewerStopTimeout"),
    healthStale: yield* readEnv("healthStale"),
    onLeaseLost: onLeaseLost as OnLeaseLost | undefined,
    retryBase: yield* readEnv("retryBase"),
    retryMax: yield* readEnv("retryMax"),
    quarantineAfter: yield* readInt("quarantineAfter"),
    unknownTaskAttempts: yield* readInt("unknownTaskAttempts"),
    unknownTaskDelay: yield* readEnv("unknownTaskDelay"),
    attemptRetention: yield* readEnv("attemptRetention")
  }
  return yield* resolve(options, "env")
})

/** The SQL schema from `LEASEHOLD_SCHEMA` (default `leasehold`); the store validates it. */
export const schemaFromEnv: Effect.Effect<string | undefined, ConfigInvalid> = readEnv("schema")

/**
 * The database URL from `LEASEHOLD_DATABASE_URL`, kept redacted, and checked as
 * the driver will read it ({@link checkDatabaseUrl}): a value that is not a
 * PostgreSQL URL fails here, naming the variable, instead of failing every
 * connection later as if the server were down.
 */
export const databaseUrl: Effect.Effect<Redacted.Redacted, ConfigInvalid> = Effect.mapError(
  Config.Redacted(variables.databaseUrl),
  () =>
    new ConfigInvalid({
      variable: variables.databaseUrl,
      rule: urlRule,
      message: `${variables.databaseUrl} is not set; expected ${urlRule}`
    })
).pipe(Effect.flatMap((url) => checkDatabaseUrl(variables.databaseUrl, url)))

const urlRule = "a PostgreSQL URL such as postgres://user:password@host:5432/db"

/** What is wrong with `text` as a PostgreSQL URL (never quoting it: it may hold a password), or undefined. */
const urlProblem = (text: string): string | undefined => {
  let url: URL
  try {
    url = new URL(text)
  } catch {
    return "not a URL"
  }
  if (url.protocol !== "postgres:" && url.protocol !== "postgresql:") {
    // The scheme alone is safe to show: it ends before any credentials.
    return `the scheme ${JSON.stringify(url.protocol.slice(0, 20))} is not postgres: or postgresql:`
  }
  if (url.port === "0") return "port 0"
  for (const [part, value] of [["user name", url.username], ["password", url.password], ["database", url.pathname]] as const) {
    try {
      decodeURIComponent(value)
    } catch {
      return `invalid percent-encoding in the ${part}`
    }
  }
  return undefined
}

/**
 * Check a database URL the way the driver parses it (a WHATWG URL, scheme
 * postgres: or postgresql:, port 1-65535, valid percent-encoding), naming
 * `variable` (an environment variable, or `url` from code) when it is not one.
 * The driver would report such a URL on every connection attempt as a
 * `ConnectionError`, which reads as a dead connection and is retried forever.
 * The message never quotes the value.
 */
export const checkDatabaseUrl = (variable: string, url: Redacted.Redacted): Effect.Effect<Redacted.Redacted, ConfigInvalid> => {
  const problem = urlProblem(Redacted.value(url).trim())
  return problem === undefined
    ? Effect.succeed(url)
    : Effect.fail(new ConfigInvalid({ variable, rule: urlRule, message: `${variable} is not a PostgreSQL URL (${problem}); expected ${urlRule}` }))
}

/**
 * The environment variables that say how leasehold reaches PostgreSQL, apart
 * from {@link variables}: read by {@link pgLayerFromEnv}, not by the consumer.
 */
export const connectionVariables = {
  pooler: "LEASEHOLD_POOLER",
  directDatabaseUrl: "LEASEHOLD_DIRECT_DATABASE_URL"
} as const

const poolerRule = "none, session or transaction"

/** The pooler between leasehold and PostgreSQL from `LEASEHOLD_POOLER` (none, session or transaction; default none). */
export const poolerFromEnv: Effect.Effect<Pooler.Mode, ConfigInvalid> = Effect.gen(function*() {
  const name = connectionVariables.pooler
  const value = yield* Effect.mapError(
    optionalString(name),
    (e) => new ConfigInvalid({ variable: name, rule: "readable", message: `${name}: ${e.message}` })
  )
  const text = Option.getOrElse(value, () => "").trim().toLowerCase()
  if (text === "") return "none"
  const mode = Pooler.modes.find((m) => m === text)
  return mode ?? (yield* invalid(name, poolerRule, text))
})

/**
 * The direct URL from `LEASEHOLD_DIRECT_DATABASE_URL`, kept redacted: none when
 * unset or empty. A value that is not a PostgreSQL URL ({@link checkDatabaseUrl})
 * fails, without the value in the message (it may hold a password).
 */
export const directDatabaseUrl: Effect.Effect<Option.Option<Redacted.Redacted>, ConfigInvalid> = Effect.gen(function*() {
  const name = connectionVariables.directDatabaseUrl
  const value = yield* Effect.mapError(
    Config.option(Config.Redacted(name)),
    () => new ConfigInvalid({ variable: name, rule: "readable", message: `${name} could not be read` })
  )
  if (Option.isNone(value) || Redacted.value(value.value).trim() === "") return Option.none()
  const url = yield* checkDatabaseUrl(name, Redacted.make(Redacted.value(value.value).trim()))
  return Option.some(url)
})

/** How {@link pgLayer} connects. */
export interface PgLayerOptions {
  readonly maxConnections?: number | undefined
  readonly applicationName?: string | undefined
  /**
   * What `url` goes through (default `none`: straight to PostgreSQL). `transaction` turns
   * prepared statements off; any pooler drops the startup parameters of the extra pools
   * (see `Pooler`).
   */
  readonly pooler?: Pooler.Mode | undefined
  /**
   * A URL straight to PostgreSQL for what needs a session of its own (session liveness's
   * presence lock and `LISTEN` wake-ups) when `url` goes through a transaction-mode pooler.
   */
  readonly directUrl?: Redacted.Redacted | undefined
}

/**
 * A PostgreSQL client for `url`, with connection failures classified and the
 * URL redacted from every error, and the {@link Pooler.Pooler} setting that the
 * store and session liveness read. Use it for the main pool of an application.
 * A `url` (or `directUrl`) that is not a PostgreSQL URL fails the layer with
 * `ConfigInvalid` naming `url` (or `directUrl`).
 */
export const pgLayer = (
  url: Redacted.Redacted,
  options: PgLayerOptions = {}
): Layer.Layer<PgClient.PgClient | SqlClient.SqlClient | Pooler.Pooler, StoreError | ConfigInvalid> => {
  const mode = options.pooler ?? "none"
  const checked = Effect.andThen(
    options.directUrl === undefined ? Effect.void : checkDatabaseUrl("directUrl", options.directUrl),
    checkDatabaseUrl("url", url)
  )
  return Layer.merge(
    PgClient.layerFrom(
      Effect.flatMap(checked, (url) => PgClient.make({
        url,
        maxConnections: options.maxConnections ?? 10,
        applicationName: options.applicationName ?? "leasehold",
        keepAlive: "10 seconds",
        connectTimeout: "10 seconds",
        // A statement prepared on one backend is not there on the next: parse each time.
        ...(mode === "transaction" ? { prepare: false } : {})
      }).pipe(classify("connect")))
    ),
    Pooler.layer({ mode, directUrl: options.directUrl })
  )
}

/**
 * {@link pgLayer} with the URL from `LEASEHOLD_DATABASE_URL`, the pooler from
 * `LEASEHOLD_POOLER` and the direct URL from `LEASEHOLD_DIRECT_DATABASE_URL`.
 */
export const pgLayerFromEnv = (
  options: Omit<PgLayerOptions, "pooler" | "directUrl"> = {}
): Layer.Layer<PgClient.PgClient | SqlClient.SqlClient | Pooler.Pooler, StoreError | ConfigInvalid> =>
  Layer.unwrap(Effect.gen(function*() {
    const url = yield* databaseUrl
    const pooler = yield* poolerFromEnv
    const directUrl = Option.getOrUndefined(yield* directDatabaseUrl)
    return pgLayer(url, { ...options, pooler, directUrl })
  }))

/**
 * The environment variables of leasehold's HTTP server (`Http.layerFromEnv`),
 * apart from {@link variables}: they configure the server, not the consumer.
 */
export const httpVariables = {
  port: "LEASEHOLD_HTTP_PORT",
  host: "LEASEHOLD_HTTP_HOST",
  allowedHosts: "LEASEHOLD_HTTP_ALLOWED_HOSTS"
} as const

/** Where the HTTP server listens. */
export interface HttpAddress {
  /** 0 picks a free port (the address the server got is logged). */
  readonly port: number
  readonly host: string
}

/** The interface the HTTP server binds to unless told otherwise: this machine only. */
export const defaultHttpHost = "127.0.0.1"

const hostPattern = /^[A-Za-z0-9._:-]{1,253}$/
const hostRule = "a host name or IP address such as 127.0.0.1, 0.0.0.0 or ::"

/**
 * Check an HTTP address given in code or read from the environment (`source`
 * picks the names errors use: `port`/`host` or the variables).
 */
export const httpAddress = (
  options: { readonly port: number; readonly host?: string | undefined },
  source: "code" | "env" = "code"
): Effect.Effect<HttpAddress, ConfigInvalid> =>
  Effect.gen(function*() {
    const port = yield* inRange(source === "env" ? httpVariables.port : "port", options.port, 0, 65_535)
    const host = options.host ?? defaultHttpHost
    if (!hostPattern.test(host)) return yield* invalid(source === "env" ? httpVariables.host : "host", hostRule, host)
    return { port, host }
  })

/** A variable's value, trimmed; undefined when unset or empty. */
const readTrimmed = (name: string) =>
  Effect.map(
    Effect.mapError(optionalString(name), (e) => new ConfigInvalid({ variable: name, rule: "readable", message: `${name}: ${e.message}` })),
    (o) => Option.getOrUndefined(Option.filter(Option.map(o, (s) => s.trim()), (s) => s !== ""))
  )

/**
 * `LEASEHOLD_HTTP_HOST` alone (validated), for a server whose port comes from elsewhere
 * (`leasehold serve --port`, or its default port).
 */
export const httpHostFromEnv: Effect.Effect<Option.Option<string>, ConfigInvalid> = Effect.gen(function*() {
  const host = yield* readTrimmed(httpVariables.host)
  if (host === undefined) return Option.none()
  return Option.some((yield* httpAddress({ port: 0, host }, "env")).host)
})

/**
 * The HTTP server's address from `LEASEHOLD_HTTP_PORT` (a whole number from 0
 * to 65535) and `LEASEHOLD_HTTP_HOST` (default 127.0.0.1); none while
 * `LEASEHOLD_HTTP_PORT` is unset or empty (no server).
 */
export const httpFromEnv: Effect.Effect<Option.Option<HttpAddress>, ConfigInvalid> = Effect.gen(function*() {
  const port = yield* readTrimmed(httpVariables.port)
  if (port === undefined) return Option.none()
  if (!/^\d+$/.test(port)) return yield* invalid(httpVariables.port, "a whole number from 0 to 65535", port)
  return Option.some(yield* httpAddress({ port: Number(port), host: yield* readTrimmed(httpVariables.host) }, "env"))
})

const allowedHostsRule = "host names or IP addresses without a port, comma-separated, such as queues.example.com,10.0.0.7"

/**
 * Check a `Host` allowlist given in code (`source` "code": errors name `allowedHosts`) or read
 * from `LEASEHOLD_HTTP_ALLOWED_HOSTS`; each name as the server compares it (lower case, IPv6
 * bracketed). An empty list is refused: it would answer loopback names only, which no
 * allowlist does too.
 */
export const allowedHosts = (
  names: ReadonlyArray<string>,
  source: "code" | "env" = "code"
): Effect.Effect<ReadonlyArray<string>, ConfigInvalid> => {
  const variable = source === "env" ? httpVariables.allowedHosts : "allowedHosts"
  if (names.length === 0) return Effect.fail(invalid(variable, allowedHostsRule, ""))
  const canonical: Array<string> = []
  for (const name of names) {
    const host = canonicalHost(name)
    if (host === undefined) return Effect.fail(invalid(variable, allowedHostsRule, name))
    canonical.push(host)
  }
  return Effect.succeed(canonical)
}

/** The `Host` allowlist from `LEASEHOLD_HTTP_ALLOWED_HOSTS`; none while it is unset or empty. */
export const allowedHostsFromEnv: Effect.Effect<Option.Option<ReadonlyArray<string>>, ConfigInvalid> = Effect.gen(function*() {
  const text = yield* readTrimmed(httpVariables.allowedHosts)
  if (text === undefined) return Option.none()
  return Option.some(yield* allowedHosts(text.split(",").map((name) => name.trim()), "env"))
})

/** The allowlist given in code (checked), else the one from the environment. */
export const allowedHostsOf = (
  names: ReadonlyArray<string> | undefined
): Effect.Effect<Option.Option<ReadonlyArray<string>>, ConfigInvalid> =>
  names === undefined ? allowedHostsFromEnv : Effect.map(allowedHosts(names), Option.some)

/**
 * The admin API's variable (see `Admin`): `LEASEHOLD_ADMIN_TOKEN`, the bearer
 * token every `/api` route requires once it is set (unset: the changing routes answer 403,
 * and the reading ones too unless the server is bound to this machine).
 */
export const adminVariables = { token: "LEASEHOLD_ADMIN_TOKEN" } as const

/** Shortest admin token accepted: a guessable token would guard nothing. */
export const adminTokenMinLength = 16
const adminTokenRule = `at least ${adminTokenMinLength} characters, no whitespace`

/**
 * Check an admin token given in code or read from the environment (`source`
 * picks the name errors use). The error never quotes the token.
 */
export const adminToken = (
  token: Redacted.Redacted,
  source: "code" | "env" = "code"
): Effect.Effect<Redacted.Redacted, ConfigInvalid> => {
  const value = Redacted.value(token)
  if (value.length >= adminTokenMinLength && !/\s/.test(value)) return Effect.succeed(token)
  const variable = source === "env" ? adminVariables.token : "adminToken"
  return Effect.fail(
    new ConfigInvalid({
      variable,
      rule: adminTokenRule,
      message: `${variable} is invalid (${value.length} characters); expected ${adminTokenRule}`
    })
  )
}

/** The admin token from `LEASEHOLD_ADMIN_TOKEN`; none while it is unset or empty (see {@link adminVariables}). */
export const adminTokenFromEnv: Effect.Effect<Option.Option<Redacted.Redacted>, ConfigInvalid> = Effect.gen(function*() {
  const read = yield* Effect.mapError(
    Config.option(Config.Redacted(adminVariables.token)),
    (e) => new ConfigInvalid({ variable: adminVariables.token, rule: "readable", message: `${adminVariables.token}: ${e.message}` })
  )
  if (Option.isNone(read) || Redacted.value(read.value) === "") return Option.none()
  return Option.some(yield* adminToken(read.value, "env"))
})

/**
 * The variable of the worker's minimum log level: `LEASEHOLD_LOG_LEVEL`, one of effect's
 * levels (`Debug` shows the consumer's renewal lines; default: effect's own, `Info`).
 */
export const logVariables = { level: "LEASEHOLD_LOG_LEVEL" } as const

/** The levels `LEASEHOLD_LOG_LEVEL` accepts, as effect spells them. */
export const logLevels: ReadonlyArray<LogLevel.LogLevel> = ["All", "Trace", "Debug", "Info", "Warn", "Error", "Fatal", "None"]

const logLevelRule = `one of ${logLevels.join(", ")} (any case)`

/**
 * The minimum log level from `LEASEHOLD_LOG_LEVEL` (any case: `debug` is `Debug`); none while
 * it is unset or empty. Anything else fails with `ConfigInvalid` naming the variable.
 */
export const logLevelFromEnv: Effect.Effect<Option.Option<LogLevel.LogLevel>, ConfigInvalid> = Effect.gen(function*() {
  const text = yield* readTrimmed(logVariables.level)
  if (text === undefined) return Option.none()
  const level = logLevels.find((l) => l.toLowerCase() === text.toLowerCase())
  return level === undefined ? yield* invalid(logVariables.level, logLevelRule, text) : Option.some(level)
})

/**
 * The settings of a worker's process that are not the consumer's: its HTTP server, `Host`
 * allowlist, admin token and minimum log level, each none while its variable is unset.
 */
export interface ProcessSettings {
  readonly http: Option.Option<HttpAddress>
  readonly allowedHosts: Option.Option<ReadonlyArray<string>>
  readonly adminToken: Option.Option<Redacted.Redacted>
  readonly logLevel: Option.Option<LogLevel.LogLevel>
}

/**
 * Read and check every process-wide variable of a worker at once (`LEASEHOLD_HTTP_PORT`,
 * `LEASEHOLD_HTTP_HOST`, `LEASEHOLD_HTTP_ALLOWED_HOSTS`, `LEASEHOLD_ADMIN_TOKEN`,
 * `LEASEHOLD_LOG_LEVEL`): `Consumer.launch` and `Consumer.layerFromEnv` run it before anything
 * starts, so a bad value fails the worker before it claims a message, not once the HTTP
 * server's layer is built after the consumer's.
 */
export const processFromEnv: Effect.Effect<ProcessSettings, ConfigInvalid> = Effect.gen(function*() {
  const http = yield* httpFromEnv
  // The host alone is checked too: `leasehold serve` reads it without a port.
  if (Option.isNone(http)) yield* httpHostFromEnv
  return {
    http,
    allowedHosts: yield* allowedHostsFromEnv,
    adminToken: yield* adminTokenFromEnv,
    logLevel: yield* logLevelFromEnv
  }
})

/** Everything a worker configured from the environment reads: the consumer's settings and the process's. */
export interface WorkerSettings {
  readonly consumer: ConsumerSettings
  readonly process: ProcessSettings
}

/** {@link fromEnv} and {@link processFromEnv} together: every variable of a worker, checked before any of it starts. */
export const workerFromEnv: Effect.Effect<WorkerSettings, ConfigInvalid> = Effect.gen(function*() {
  const process = yield* processFromEnv
  return { consumer: yield* fromEnv, process }
})
