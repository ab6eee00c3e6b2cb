/**
 * The bridge between effect's `Config` and leasehold's {@link ConfigInvalid}: the settings are
 * described as `Config` values (read through the current `ConfigProvider`: the environment by
 * default, `ConfigProvider.fromUnknown` or `fromEnv({ env })` in tests), and a broken rule inside
 * a description travels as a `ConfigError` carrying the `ConfigInvalid` (variable and rule), which
 * {@link load} takes out again.
 *
 * @since 0.1.0
 */
import { Config, ConfigProvider, Effect, Option, type Redacted } from "effect"
import { ConfigInvalid } from "../QueueError.ts"

/** `error` as a `ConfigError`, to fail a `Config` description with it (see {@link load}). */
export const carry = (error: ConfigInvalid): Config.ConfigError =>
  new Config.ConfigError(new ConfigProvider.SourceError({ message: error.message, cause: error }))

/** The `ConfigInvalid` a `ConfigError` carries, else one naming `variable` with the rule "readable". */
const uncarry = (error: Config.ConfigError, variable: string): ConfigInvalid =>
  error.cause._tag === "SourceError" && error.cause.cause instanceof ConfigInvalid
    ? error.cause.cause
    : new ConfigInvalid({ variable, rule: "readable", message: `${variable}: ${error.message}` })

/**
 * Read a `Config` description through the current `ConfigProvider`, failing with the
 * `ConfigInvalid` it carries (`variable` names a failure that carries none).
 */
export const load = <A>(config: Config.Config<A>, variable = "configuration"): Effect.Effect<A, ConfigInvalid> =>
  Effect.mapError(config, (error) => uncarry(error, variable))

/** A `Config` checked by `rule`: its `ConfigInvalid` (variable and rule) is carried to {@link load}. */
export const check = <A, B>(rule: (a: A) => Effect.Effect<B, ConfigInvalid>) => (self: Config.Config<A>): Config.Config<B> =>
  Config.mapEffect(self, (a) => Effect.mapError(rule(a), carry))

/** `config`, whose read failures (not its absence) become a `ConfigInvalid` naming `name`. */
const named = <A>(name: string, config: Config.Config<Option.Option<A>>): Config.Config<Option.Option<A>> =>
  Config.orElse(config, (error) => Config.fail(carry(uncarry(error, name)).cause))

/**
 * A variable's text: undefined when unset or blank (only spaces). `trim` gives it trimmed; else
 * as written (the rules that read it say what they do with spaces).
 */
export const text = (name: string, options: { readonly trim?: boolean } = {}): Config.Config<string | undefined> =>
  Config.map(named(name, Config.option(Config.String(name))), (o) =>
    Option.getOrUndefined(
      Option.filter(options.trim === true ? Option.map(o, (s) => s.trim()) : o, (s) => s.trim() !== "")
    ))

/** A secret variable (kept `Redacted`): none when unset. */
export const secret = (name: string): Config.Config<Option.Option<Redacted.Redacted>> =>
  named(name, Config.option(Config.Redacted(name)))
