/**
 * The rules every setting is checked by, from code or from the environment alike: durations,
 * whole numbers in a range, names. Each failure is a {@link ConfigInvalid} naming the variable
 * (or the option, from code) and the rule.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Option } from "effect"
import * as Validate from "../internal/validate.ts"
import { ConfigInvalid } from "../QueueError.ts"

/**
 * A duration: milliseconds as a number, any `Duration.Input` of effect (`Duration.seconds(30)`,
 * `"30 seconds"`, `"500 millis"`), or the short forms `30s`, `500ms`, `2m`, `1h`, `7d`.
 */
export type DurationLike = Duration.Input | string

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

/** A duration as an error message quotes it. */
export const show = (value: DurationLike): string =>
  typeof value === "string" || typeof value === "number" ? String(value) : Duration.isDuration(value) ? Duration.format(value) : String(value)


/** A `ConfigInvalid` for `variable`: its value and the rule it broke. */
export const invalid = (variable: string, rule: string, value: string) =>
  new ConfigInvalid({ variable, rule, message: `${variable}: ${JSON.stringify(value)} is invalid; expected ${rule}` })


/** `value` when a whole number from `min` to `max`, else a `ConfigInvalid` naming `variable` and the range. */
export const inRange = (variable: string, value: number, min: number, max: number, unit = "") =>
  Number.isInteger(value) && value >= min && value <= max
    ? Effect.succeed(value)
    : Effect.fail(invalid(variable, `a whole number from ${min}${unit} to ${max}${unit}`, String(value)))


/** `value` when it follows the name rule, else a `ConfigInvalid` naming `variable` and the rule. */
export const checkName = (variable: string, value: string) =>
  Validate.namePattern.test(value) ? Effect.succeed(value) : Effect.fail(invalid(variable, Validate.nameRule, value))
