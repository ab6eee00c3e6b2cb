/**
 * The settings of a worker's process that are not the consumer's: its HTTP server
 * (`LEASEHOLD_HTTP_PORT`, `LEASEHOLD_HTTP_HOST`, `LEASEHOLD_HTTP_ALLOWED_HOSTS`), the admin token
 * (`LEASEHOLD_ADMIN_TOKEN`) and the minimum log level (`LEASEHOLD_LOG_LEVEL`), each a `Config`
 * description with its rules, and all of them as one ({@link processConfig}). Re-exported by
 * `QueueConfig`, as its users import it.
 *
 * @since 0.1.0
 */
import { Config, Effect, type LogLevel, Option, Redacted } from "effect"
import { canonicalHost } from "../http/security.ts"
import { ConfigInvalid } from "../QueueError.ts"
import * as Read from "./read.ts"
import { inRange, invalid } from "./rules.ts"
import { env } from "./variables.ts"

/**
 * The environment variables of leasehold's HTTP server (`Http.layerFromEnv`),
 * apart from {@link variables}: they configure the server, not the consumer.
 */
export const httpVariables = {
  port: env.httpPort,
  host: env.httpHost,
  allowedHosts: env.httpAllowedHosts,
  basePath: env.httpBasePath
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

/** `LEASEHOLD_HTTP_HOST` alone, checked; none while unset or blank. */
export const httpHostConfig: Config.Config<Option.Option<string>> = Read.text(env.httpHost, { trim: true }).pipe(
  Read.check((host) =>
    host === undefined ? Effect.succeedNone : Effect.map(httpAddress({ port: 0, host }, "env"), (a) => Option.some(a.host))
  )
)

/**
 * `LEASEHOLD_HTTP_HOST` alone (validated), for a server whose port comes from elsewhere
 * (`leasehold serve --port`, or its default port).
 */
export const httpHostFromEnv: Effect.Effect<Option.Option<string>, ConfigInvalid> = Read.load(httpHostConfig, env.httpHost)

/** `LEASEHOLD_HTTP_PORT` and `LEASEHOLD_HTTP_HOST`, checked; none while the port is unset or blank (no server). */
export const httpConfig: Config.Config<Option.Option<HttpAddress>> = Config.all({
  port: Read.text(env.httpPort, { trim: true }),
  host: Read.text(env.httpHost, { trim: true })
}).pipe(
  Read.check(({ host, port }) => {
    if (port === undefined) return Effect.succeedNone
    if (!/^\d+$/.test(port)) return Effect.fail(invalid(env.httpPort, "a whole number from 0 to 65535", port))
    return Effect.asSome(httpAddress({ port: Number(port), host }, "env"))
  })
)

/**
 * The HTTP server's address from `LEASEHOLD_HTTP_PORT` (a whole number from 0
 * to 65535) and `LEASEHOLD_HTTP_HOST` (default 127.0.0.1); none while
 * `LEASEHOLD_HTTP_PORT` is unset or empty (no server).
 */
export const httpFromEnv: Effect.Effect<Option.Option<HttpAddress>, ConfigInvalid> = Read.load(httpConfig, env.httpPort)

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

/** `LEASEHOLD_HTTP_ALLOWED_HOSTS`, comma-separated, checked; none while unset or blank. */
export const allowedHostsConfig: Config.Config<Option.Option<ReadonlyArray<string>>> = Read.text(env.httpAllowedHosts, { trim: true }).pipe(
  Read.check((text) =>
    text === undefined ? Effect.succeedNone : Effect.asSome(allowedHosts(text.split(",").map((name) => name.trim()), "env"))
  )
)

/** The `Host` allowlist from `LEASEHOLD_HTTP_ALLOWED_HOSTS`; none while it is unset or empty. */
export const allowedHostsFromEnv: Effect.Effect<Option.Option<ReadonlyArray<string>>, ConfigInvalid> = Read.load(
  allowedHostsConfig,
  env.httpAllowedHosts
)


/** The allowlist given in code (checked), else the one from the environment. */
export const allowedHostsOf = (
  names: ReadonlyArray<string> | undefined
): Effect.Effect<Option.Option<ReadonlyArray<string>>, ConfigInvalid> =>
  names === undefined ? allowedHostsFromEnv : Effect.map(allowedHosts(names), Option.some)

const basePathPattern = /^(?:\/[A-Za-z0-9._~-]+){1,8}$/
const basePathRule = "a path such as /leasehold or /ops/queues: 1 to 8 segments of A-Z a-z 0-9 . _ ~ -, each after a /, none . or .., no / at the end"

/**
 * Check the path a reverse proxy serves the admin server under (`/leasehold`): requests
 * under it are answered as if it were not there (the dashboard's requests are relative, so
 * it works under any such path).
 */
export const basePath = (path: string, source: "code" | "env" = "code"): Effect.Effect<string, ConfigInvalid> =>
  path.length <= 200 && basePathPattern.test(path) && !path.split("/").some((segment) => segment === "." || segment === "..")
    ? Effect.succeed(path)
    : Effect.fail(invalid(source === "env" ? httpVariables.basePath : "basePath", basePathRule, path))

/** The base path given in code (checked), else `LEASEHOLD_HTTP_BASE_PATH`; none while both are unset or blank. */
export const basePathOf = (path: string | undefined): Effect.Effect<Option.Option<string>, ConfigInvalid> =>
  path !== undefined
    ? Effect.asSome(basePath(path))
    : Read.load(
      Read.text(env.httpBasePath, { trim: true }).pipe(
        Read.check((text) => text === undefined ? Effect.succeedNone : Effect.asSome(basePath(text, "env")))
      ),
      env.httpBasePath
    )

/**
 * The admin API's variable (see `Admin`): `LEASEHOLD_ADMIN_TOKEN`, the bearer
 * token every `/api` route requires once it is set (unset: the changing routes answer 403,
 * and the reading ones too unless the server is bound to this machine).
 */
export const adminVariables = { token: env.adminToken } as const

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

/** `LEASEHOLD_ADMIN_TOKEN`, kept redacted and checked; none while unset or empty. */
export const adminTokenConfig: Config.Config<Option.Option<Redacted.Redacted>> = Read.secret(env.adminToken).pipe(
  Read.check((read) =>
    Option.isNone(read) || Redacted.value(read.value) === "" ? Effect.succeedNone : Effect.asSome(adminToken(read.value, "env"))
  )
)

/** The admin token from `LEASEHOLD_ADMIN_TOKEN`; none while it is unset or empty (see {@link adminVariables}). */
export const adminTokenFromEnv: Effect.Effect<Option.Option<Redacted.Redacted>, ConfigInvalid> = Read.load(adminTokenConfig, env.adminToken)

/**
 * The variable of the worker's minimum log level: `LEASEHOLD_LOG_LEVEL`, one of effect's
 * levels (`Debug` shows the consumer's renewal lines; default: effect's own, `Info`).
 */
export const logVariables = { level: env.logLevel } as const

/** The levels `LEASEHOLD_LOG_LEVEL` accepts, as effect spells them. */
export const logLevels: ReadonlyArray<LogLevel.LogLevel> = ["All", "Trace", "Debug", "Info", "Warn", "Error", "Fatal", "None"]

const logLevelRule = `one of ${logLevels.join(", ")} (any case)`

/** `LEASEHOLD_LOG_LEVEL`, any case; none while unset or blank. */
export const logLevelConfig: Config.Config<Option.Option<LogLevel.LogLevel>> = Read.text(env.logLevel, { trim: true }).pipe(
  Read.check((text) => {
    if (text === undefined) return Effect.succeedNone
    const level = logLevels.find((l) => l.toLowerCase() === text.toLowerCase())
    return level === undefined ? Effect.fail(invalid(env.logLevel, logLevelRule, text)) : Effect.succeed(Option.some(level))
  })
)

/**
 * The minimum log level from `LEASEHOLD_LOG_LEVEL` (any case: `debug` is `Debug`); none while
 * it is unset or empty. Anything else fails with `ConfigInvalid` naming the variable.
 */
export const logLevelFromEnv: Effect.Effect<Option.Option<LogLevel.LogLevel>, ConfigInvalid> = Read.load(logLevelConfig, env.logLevel)

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
 * Every process-wide variable of a worker, in the order they are checked: the HTTP address, the
 * host alone when no port is set (`leasehold serve` reads it without a port), the allowlist, the
 * admin token, the log level.
 */
export const processConfig: Config.Config<ProcessSettings> = Config.all({
  http: httpConfig,
  host: httpHostConfig,
  allowedHosts: allowedHostsConfig,
  adminToken: adminTokenConfig,
  logLevel: logLevelConfig
}).pipe(Config.map(({ adminToken, allowedHosts, http, logLevel }): ProcessSettings => ({ http, allowedHosts, adminToken, logLevel })))

/**
 * Read and check every process-wide variable of a worker at once (`LEASEHOLD_HTTP_PORT`,
 * `LEASEHOLD_HTTP_HOST`, `LEASEHOLD_HTTP_ALLOWED_HOSTS`, `LEASEHOLD_ADMIN_TOKEN`,
 * `LEASEHOLD_LOG_LEVEL`): `Consumer.launch` and `Consumer.layerFromEnv` run it before anything
 * starts, so a bad value fails the worker before it claims a message, not once the HTTP
 * server's layer is built after the consumer's.
 */
export const processFromEnv: Effect.Effect<ProcessSettings, ConfigInvalid> = Read.load(processConfig)
