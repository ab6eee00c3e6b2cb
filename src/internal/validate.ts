/**
 * Input checks shared by every store, so that both refuse the same inputs with
 * the same errors before anything is written.
 */
import { Duration, Effect, Option } from "effect"
import { InvalidInput } from "../QueueError.ts"
import type { NewMessage } from "../Message.ts"
import * as Span from "./span.ts"

/** Queue, task and consumer names: letters, digits and `_ . : / -`, 1 to 128 characters. */
export const namePattern = /^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$/
/** The rule behind {@link namePattern}, as error messages state it. */
export const nameRule = "1-128 characters of A-Z a-z 0-9 _ . : / -, starting with a letter or digit"
/** SQL schema names: a lower-case identifier that never needs quoting. */
const schemaPattern = /^[a-z_][a-z0-9_]{0,62}$/

const INT4_MAX = 2_147_483_647
/** Most attempts a message may be given. */
export const MAX_ATTEMPTS = 10_000
/**
 * Longest delay a store accepts (send delay, retry and release delays, leases): about ten
 * years. Anything longer is almost certainly a unit mistake. Settings that become such a
 * delay (retry policies, the unknown-task delay) are bounded by it where they are configured.
 */
export const MAX_DELAY_MS = 10 * 366 * 24 * 3600 * 1000
/** The rule behind {@link MAX_DELAY_MS}, as error messages state it. */
export const maxDelayRule = `at most ${MAX_DELAY_MS} ms (ten years: the longest delay a store accepts)`
/** Recorded errors and reasons are cut to this many characters. */
export const MAX_ERROR_TEXT = 8 * 1024

const invalid = (field: string, rule: string, detail: string) =>
  new InvalidInput({ field, rule, message: `${field} ${detail} (rule: ${rule})` })

const show = (value: unknown): string => {
  const text = typeof value === "string" ? JSON.stringify(value) : String(value)
  return text.length > 60 ? `${text.slice(0, 57)}...` : text
}

/** Check a queue, task or consumer name. */
export const name = (field: string, value: unknown): Effect.Effect<string, InvalidInput> =>
  typeof value === "string" && namePattern.test(value)
    ? Effect.succeed(value)
    : Effect.fail(
      invalid(field, nameRule, `${show(value)} is not a valid name`)
    )

/** Check a SQL schema name, synchronously (used when building layers). */
export const schemaName = (value: string): Effect.Effect<string, InvalidInput> =>
  schemaPattern.test(value)
    ? Effect.succeed(value)
    : Effect.fail(invalid("schema", "a lower-case SQL identifier: [a-z_][a-z0-9_]{0,62}", `${show(value)} is not a valid schema name`))

/** Check a duration given as a `Duration.Input`, returning whole milliseconds. */
export const durationMs = (
  field: string,
  value: Duration.Input,
  options: { readonly min: number }
): Effect.Effect<number, InvalidInput> => {
  const decoded = Option.getOrUndefined(Duration.fromInput(value))
  if (decoded === undefined) return Effect.fail(invalid(field, "a duration such as 30000, \"30 seconds\"", `${show(value)} is not a duration`))
  const ms = Duration.toMillis(decoded)
  if (!Number.isFinite(ms) || ms < options.min || ms > MAX_DELAY_MS) {
    return Effect.fail(invalid(field, `between ${options.min} ms and ten years`, `${show(value)} is out of range`))
  }
  return Effect.succeed(Math.round(ms))
}

/** Check a positive whole number up to `max`. */
export const positiveInt = (field: string, value: unknown, max: number): Effect.Effect<number, InvalidInput> =>
  typeof value === "number" && Number.isInteger(value) && value >= 1 && value <= max
    ? Effect.succeed(value)
    : Effect.fail(invalid(field, `a whole number from 1 to ${max}`, `${show(value)} is out of range`))

/**
 * Recorded error text (an error, a dead-letter reason) made storable and cut to a bounded
 * size: the one boundary every store writes such text through. PostgreSQL's `text` refuses
 * NUL, and one refused value fails the whole statement (a finishing batch of many messages),
 * so a NUL is written as the visible escape `\u0000` (six characters) and a lone UTF-16
 * surrogate as U+FFFD; the memory store keeps the same text, so both stores agree.
 */
export const boundedText = (text: string): string => {
  const storable = storableText(text)
  if (storable.length <= MAX_ERROR_TEXT) return storable
  // A cut between the two halves of a surrogate pair would leave a lone one: drop it too.
  const cut = storable.slice(0, MAX_ERROR_TEXT - 20)
  return `${cut.isWellFormed() ? cut : cut.slice(0, -1)}\n... (truncated)`
}

/** `text` with each NUL written as the escape `\u0000` and each lone surrogate as U+FFFD; itself when clean. */
export const storableText = (text: string): string => {
  const clean = text.isWellFormed() ? text : text.toWellFormed()
  return clean.includes("\u0000") ? clean.replaceAll("\u0000", "\\u0000") : clean
}

/** A message checked and encoded, ready for any store to write. */
export interface PreparedMessage {
  readonly queue: string
  readonly task: string
  /** The payload as JSON text: what is stored and what the size limit measures. */
  readonly payloadJson: string
  readonly headers: Readonly<Record<string, string>>
  readonly priority: number
  readonly delayMs: number
  readonly maxAttempts: number
  readonly dedupKey: string | null
  /** The uniqueness window: the key and its length in milliseconds. */
  readonly unique: { readonly key: string; readonly forMs: number } | null
}

/** Limits a store applies to what it is sent. */
export interface SendLimits {
  readonly maxPayloadBytes: number
  readonly defaultMaxAttempts: number
}

/** The path of a value inside the payload, as a reader would write it: `payload.items[3].n`, `payload["a b"]`. */
export const childPath = (parent: string, holder: unknown, key: string): string =>
  Array.isArray(holder) ? `${parent}[${key}]` : /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(key) ? `${parent}.${key}` : `${parent}[${JSON.stringify(key)}]`

/**
 * Why JSON cannot carry `value` faithfully, or undefined when it can. JSON.stringify would
 * drop functions, symbols and `undefined` (or turn them into null inside arrays) and turn
 * NaN and ±Infinity into null: the stored payload would not be the one sent.
 */
const unencodable = (value: unknown): string | undefined => {
  switch (typeof value) {
    case "function":
      return "is a function, which has no JSON form"
    case "symbol":
      return "is a symbol, which has no JSON form"
    case "undefined":
      return "is undefined, which has no JSON form"
    case "number":
      return Number.isFinite(value) ? undefined : `is ${value}, which JSON can only store as null`
    default:
      return undefined
  }
}

class Unencodable {
  readonly path: string
  readonly reason: string
  constructor(path: string, reason: string) {
    this.path = path
    this.reason = reason
  }
}

const encodePayload = (payload: unknown, limits: SendLimits): Effect.Effect<string, InvalidInput> => {
  let json: string | undefined
  // PostgreSQL's jsonb refuses NUL characters and lone UTF-16 surrogates, which JSON.stringify
  // lets through as escapes: find them here, to refuse them with a clear message instead of a failed INSERT.
  let nul = false
  let malformed = false
  const check = (text: string) => {
    if (text.includes("\u0000")) nul = true
    if (!text.isWellFormed()) malformed = true
  }
  // The path of every object on the way down (set just before JSON.stringify descends into it),
  // so that a value JSON would silently drop or change is refused with where it is.
  const paths = new WeakMap<object, string>()
  try {
    json = JSON.stringify(payload, function(this: unknown, key, value: unknown) {
      const parent = typeof this === "object" && this !== null ? paths.get(this) : undefined
      const path = parent === undefined ? "payload" : childPath(parent, this, key)
      check(key)
      if (typeof value === "string") check(value)
      const reason = unencodable(value)
      if (reason !== undefined) {
        const omit = value === undefined && parent !== undefined && !Array.isArray(this) ? " (leave the key out instead)" : ""
        throw new Unencodable(path, reason + omit)
      }
      if (typeof value === "object" && value !== null) paths.set(value, path)
      return value
    })
  } catch (error) {
    if (error instanceof Unencodable) {
      const rule = "JSON data at any depth: no functions, symbols, undefined, NaN or Infinity"
      return Effect.fail(new InvalidInput({ field: "payload", rule, message: `${error.path} ${error.reason} (rule: ${rule})` }))
    }
    const reason = error instanceof Error ? error.message : String(error)
    return Effect.fail(invalid("payload", "must be JSON-encodable (no bigint, no cycles)", `cannot be encoded as JSON: ${reason}`))
  }
  if (json === undefined) {
    return Effect.fail(invalid("payload", "must be JSON-encodable", `is ${typeof payload}, which has no JSON form`))
  }
  if (nul) {
    return Effect.fail(invalid("payload", "no NUL (\\u0000) characters: PostgreSQL jsonb cannot store them", "contains a NUL character"))
  }
  if (malformed) {
    return Effect.fail(invalid("payload", "well-formed Unicode: no lone UTF-16 surrogates", "contains a lone surrogate"))
  }
  const bytes = Buffer.byteLength(json, "utf8")
  if (bytes > limits.maxPayloadBytes) {
    return Effect.fail(invalid("payload", `at most ${limits.maxPayloadBytes} bytes as JSON`, `is ${bytes} bytes`))
  }
  return Effect.succeed(json)
}

/** Most headers a message may carry. */
const MAX_HEADERS = 64

const checkHeaders = (headers: unknown): Effect.Effect<Readonly<Record<string, string>>, InvalidInput> => {
  if (headers === undefined) return Effect.succeed({})
  const rule = "an object of string values, names of 1-128 characters, at most 64 entries"
  if (typeof headers !== "object" || headers === null || Array.isArray(headers)) {
    return Effect.fail(invalid("headers", rule, "is not an object"))
  }
  const entries = Object.entries(headers)
  const bad = entries.find(([k, v]) =>
    k.length === 0 || k.length > 128 || !k.isWellFormed() || typeof v !== "string" || v.includes("\u0000") || !v.isWellFormed()
  )
  if (entries.length > MAX_HEADERS || bad !== undefined) {
    return Effect.fail(invalid("headers", rule, bad === undefined ? "has too many entries" : `entry ${show(bad[0])} is invalid`))
  }
  return Effect.succeed(Object.fromEntries(entries) as Record<string, string>)
}

/**
 * Check and encode one message for `queue`. `traceparent`, when given, is
 * added to its headers (the sender's span, so the handler continues its trace),
 * unless the sender set one itself or the headers are full.
 */
export const prepareMessage = (
  queue: string,
  message: NewMessage,
  limits: SendLimits,
  traceparent?: string | undefined
): Effect.Effect<PreparedMessage, InvalidInput> =>
  Effect.mapError(
    prepareChecked(queue, message, limits, traceparent),
    // Name the task in every refusal of its message (once it is a valid name).
    (e) =>
      e.field !== "task" && typeof message.task === "string" && namePattern.test(message.task)
        ? new InvalidInput({ field: e.field, rule: e.rule, message: `task "${message.task}": ${e.message}` })
        : e
  )

const prepareChecked = (
  queue: string,
  message: NewMessage,
  limits: SendLimits,
  traceparent: string | undefined
): Effect.Effect<PreparedMessage, InvalidInput> =>
  Effect.gen(function*() {
    const task = yield* name("task", message.task)
    const payloadJson = yield* encodePayload(message.payload, limits)
    const checked = yield* checkHeaders(message.headers)
    const headers = traceparent === undefined || "traceparent" in checked || Object.keys(checked).length >= MAX_HEADERS
      ? checked
      : { ...checked, traceparent }
    const priority = message.priority ?? 0
    if (!Number.isInteger(priority) || Math.abs(priority) > INT4_MAX) {
      return yield* invalid("priority", "a whole number (lower runs first)", `${show(priority)} is not allowed`)
    }
    const delay = message.delay ?? 0
    if (typeof delay !== "number" || !Number.isFinite(delay) || delay < 0 || delay > MAX_DELAY_MS) {
      return yield* invalid("delay", "milliseconds, 0 or more, at most ten years", `${show(delay)} is not allowed`)
    }
    const maxAttempts = yield* positiveInt("maxAttempts", message.maxAttempts ?? limits.defaultMaxAttempts, MAX_ATTEMPTS)
    const dedupKey = message.dedupKey ?? null
    if (dedupKey !== null && (typeof dedupKey !== "string" || dedupKey.length === 0 || dedupKey.length > 512 || dedupKey.includes("\u0000") || !dedupKey.isWellFormed())) {
      return yield* invalid("dedupKey", "a string of 1-512 characters", `${show(dedupKey)} is not allowed`)
    }
    const unique = yield* uniqueWindow(message.unique, dedupKey)
    return { queue, task, payloadJson, headers, priority, delayMs: Math.round(delay), maxAttempts, dedupKey, unique }
  })

/** Check a `unique` send option: a key like a dedup key, a window from 1 ms to ten years, never with a dedup key. */
const uniqueWindow = (
  unique: NewMessage["unique"],
  dedupKey: string | null
): Effect.Effect<PreparedMessage["unique"], InvalidInput> =>
  Effect.gen(function*() {
    if (unique === undefined || unique === null) return null
    if (typeof unique !== "object") return yield* invalid("unique", "an object { key, for }", `${show(unique)} is not allowed`)
    if (dedupKey !== null) return yield* invalid("unique", "either unique or dedupKey, not both", "is given with a dedupKey")
    const key = unique.key
    if (typeof key !== "string" || key.length === 0 || key.length > 512 || key.includes("\u0000") || !key.isWellFormed()) {
      return yield* invalid("unique.key", "a string of 1-512 characters", `${show(key)} is not allowed`)
    }
    const forMs = yield* durationMs("unique.for", unique.for, { min: 1 })
    return { key, forMs }
  })

/**
 * Check the queue name and every message of a send; each message records the
 * current span as its `traceparent` header (see `Span.currentTraceparent`).
 */
export const prepareSend = (
  queue: string,
  messages: ReadonlyArray<NewMessage>,
  limits: SendLimits
): Effect.Effect<ReadonlyArray<PreparedMessage>, InvalidInput> =>
  Effect.flatMap(name("queue", queue), (q) =>
    Effect.flatMap(Span.currentTraceparent, (traceparent) =>
      Effect.forEach(messages, (m) => prepareMessage(q, m, limits, traceparent))))

/** Check a dead-letter filter: a valid queue name, message ids as decimal strings, a sane limit. */
export const deadLetterFilter = <F extends { readonly queue?: string | undefined; readonly ids?: ReadonlyArray<string> | undefined; readonly limit?: number | undefined }>(
  filter: F
): Effect.Effect<F, InvalidInput> =>
  Effect.gen(function*() {
    if (filter.queue !== undefined) yield* name("queue", filter.queue)
    const bad = filter.ids?.find((id) => typeof id !== "string" || !/^\d{1,19}$/.test(id))
    if (bad !== undefined) return yield* invalid("ids", "message ids: decimal numbers", `${show(bad)} is not a message id`)
    if (filter.limit !== undefined) yield* positiveInt("limit", filter.limit, 10_000)
    return filter
  })
