/**
 * The checked flags and arguments the commands share: each is parsed and checked before the
 * command's handler runs, and each failure names the flag and the rule (exit 2, nothing connected).
 */
import { Effect } from "effect"
import * as Argument from "effect/cli/Argument"
import * as CliError from "effect/cli/CliError"
import * as Flag from "effect/cli/Flag"
import type { MessageId } from "../Message.ts"

/** Refuse an invocation with `message` (printed with the command's help, exit 2). */
export const refuse = (message: string) => Effect.fail(new CliError.ValidationError({ message }))

/** A whole number from `min` to `max` (the bounds the store enforces, checked here before connecting). */
export const wholeNumber = (flag: string, min: number, max: number) => (text: string) => {
  if (!/^\s*-?\d{1,10}\s*$/.test(text)) return refuse(`--${flag}: ${JSON.stringify(text)} is not a whole number`)
  const n = Number(text)
  return n >= min && n <= max ? Effect.succeed(n) : refuse(`--${flag}: ${n} is out of range (a whole number from ${min} to ${max})`)
}

/** A message id as the commands take it: a decimal number of at most 19 digits. */
export const messageIdPattern = /^\d{1,19}$/

/** `--ids 1,2,3`: every one a message id (a decimal number). */
export const parseIds = (text: string) => {
  const ids = text.split(",").map((s) => s.trim())
  const bad = ids.find((id) => !messageIdPattern.test(id))
  return bad === undefined
    ? Effect.succeed(ids as ReadonlyArray<string> as ReadonlyArray<MessageId>)
    : refuse(`--ids: ${bad === "" ? "an empty id" : JSON.stringify(bad)} is not a message id (ids are numbers, comma-separated: --ids 17,18)`)
}

/** An optional whole-number flag from `min` to `max`, refused otherwise. */
export const intFlag = (name: string, description: string, min: number, max: number) =>
  Flag.String(name).pipe(Flag.withMetavar("N"), Flag.withDescription(description), Flag.mapEffect(wholeNumber(name, min, max)), Flag.optional)

/** `--json`: print JSON (for scripts) instead of a table. */
export const jsonFlag = Flag.Boolean("json").pipe(Flag.withDescription("Print JSON (for scripts) instead of a table"), Flag.withDefault(false))

/** `--limit N`: at most this many rows (default 100, at most 10000). */
export const limitFlag = Flag.String("limit").pipe(
  Flag.withMetavar("N"),
  Flag.withDescription("At most this many (default 100, at most 10000)"),
  Flag.mapEffect(wholeNumber("limit", 1, 10_000)),
  Flag.withDefault(100)
)

/** The `<message-id>` argument of `command`: a decimal number, refused otherwise before connecting. */
export const messageIdArgument = (command: string) =>
  Argument.String("message-id").pipe(
    Argument.withDescription("The id of the message"),
    Argument.mapEffect((text) =>
      messageIdPattern.test(text)
        ? Effect.succeed(text as MessageId)
        : refuse(`${command} needs a message id (a number): ${JSON.stringify(text)} is not one`)
    )
  )

/** The `<queue>` argument of pause and resume. */
export const queueArgument = Argument.String("queue").pipe(Argument.withDescription("The queue"))
