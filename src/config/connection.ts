/**
 * How leasehold reaches PostgreSQL: the database URL, the pooler in between and the direct URL
 * (`LEASEHOLD_DATABASE_URL`, `LEASEHOLD_POOLER`, `LEASEHOLD_DIRECT_DATABASE_URL`) as one `Config`
 * description ({@link connectionConfig}), and the client layer built from them. Re-exported by
 * `QueueConfig`, as its users import it.
 *
 * @since 0.1.0
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import { Config, Effect, Layer, Option, Redacted } from "effect"
import type { SqlClient } from "effect/sql"
import * as Pooler from "../Pooler.ts"
import { classify, ConfigInvalid, type StoreError } from "../QueueError.ts"
import * as Read from "./read.ts"
import { invalid } from "./rules.ts"
import { env } from "./variables.ts"

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
 * `LEASEHOLD_DATABASE_URL`, kept redacted, required, and checked as the driver will read it
 * ({@link checkDatabaseUrl}).
 */
export const databaseUrlConfig: Config.Config<Redacted.Redacted> = Read.secret(env.databaseUrl).pipe(
  Read.check((url) =>
    Option.isNone(url)
      ? Effect.fail(
        new ConfigInvalid({ variable: env.databaseUrl, rule: urlRule, message: `${env.databaseUrl} is not set; expected ${urlRule}` })
      )
      : checkDatabaseUrl(env.databaseUrl, url.value)
  )
)

/**
 * The database URL from `LEASEHOLD_DATABASE_URL`, kept redacted, and checked as
 * the driver will read it ({@link checkDatabaseUrl}): a value that is not a
 * PostgreSQL URL fails here, naming the variable, instead of failing every
 * connection later as if the server were down.
 */
export const databaseUrl: Effect.Effect<Redacted.Redacted, ConfigInvalid> = Read.load(databaseUrlConfig, env.databaseUrl)

/**
 * The environment variables that say how leasehold reaches PostgreSQL, apart
 * from `QueueConfig.variables`: read by {@link pgLayerFromEnv}, not by the consumer.
 */
export const connectionVariables = {
  pooler: env.pooler,
  directDatabaseUrl: env.directDatabaseUrl
} as const

const poolerRule = "none, session or transaction"

/** `LEASEHOLD_POOLER`: none, session or transaction (any case); default none. */
export const poolerConfig: Config.Config<Pooler.Mode> = Read.text(env.pooler, { trim: true }).pipe(
  Read.check((text) => {
    if (text === undefined) return Effect.succeed<Pooler.Mode>("none")
    const mode = Pooler.modes.find((m) => m === text.toLowerCase())
    return mode === undefined ? Effect.fail(invalid(env.pooler, poolerRule, text.toLowerCase())) : Effect.succeed(mode)
  })
)

/** The pooler between leasehold and PostgreSQL from `LEASEHOLD_POOLER` (none, session or transaction; default none). */
export const poolerFromEnv: Effect.Effect<Pooler.Mode, ConfigInvalid> = Read.load(poolerConfig, env.pooler)

/** `LEASEHOLD_DIRECT_DATABASE_URL`, trimmed and kept redacted; none when unset or blank. */
export const directDatabaseUrlConfig: Config.Config<Option.Option<Redacted.Redacted>> = Read.secret(env.directDatabaseUrl).pipe(
  Read.check((value) => {
    const text = Option.isNone(value) ? "" : Redacted.value(value.value).trim()
    return text === "" ? Effect.succeedNone : Effect.asSome(checkDatabaseUrl(env.directDatabaseUrl, Redacted.make(text)))
  })
)

/**
 * The direct URL from `LEASEHOLD_DIRECT_DATABASE_URL`, kept redacted: none when
 * unset or empty. A value that is not a PostgreSQL URL ({@link checkDatabaseUrl})
 * fails, without the value in the message (it may hold a password).
 */
export const directDatabaseUrl: Effect.Effect<Option.Option<Redacted.Redacted>, ConfigInvalid> = Read.load(
  directDatabaseUrlConfig,
  env.directDatabaseUrl
)

/** The connection settings from the environment, checked in this order: URL, pooler, direct URL. */
export const connectionConfig = Config.all({ url: databaseUrlConfig, pooler: poolerConfig, directUrl: directDatabaseUrlConfig })

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
  Layer.unwrap(Effect.map(Read.load(connectionConfig), ({ directUrl, pooler, url }) =>
    pgLayer(url, { ...options, pooler, directUrl: Option.getOrUndefined(directUrl) })))
