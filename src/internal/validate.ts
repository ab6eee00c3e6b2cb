/**
 * Input checks shared by every store, so that both refuse the same inputs with
 * the same errors before anything is written.
 */
import { Duration, Effect, Option } from "effect"
import { InvalidInput } from "../QueueError.ts"
import { type MessageId, type NewMessage } from "../Message.ts"
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

/**
 * A synchronous check's answer: the value, or the refusal. The checks of a message are
 * synchronous so that a send of many messages costs no effect per message.
 */
type Checked<A> = A | InvalidInput

/** A synchronous check's answer as an effect. */
const lift = <A>(checked: Checked<A>): Effect.Effect<A, InvalidInput> =>
  checked instanceof InvalidInput ? Effect.fail(checked) : Effect.succeed(checked)

const checkName = (field: string, value: unknown): Checked<string> =>
  typeof value === "string" && namePattern.test(value) ? value : invalid(field, nameRule, `${show(value)} is not a valid name`)

/** Check a queue, task or consumer name. */
export const name = (field: string, value: unknown): Effect.Effect<string, InvalidInput> => lift(checkName(field, value))

/** Check a SQL schema name, synchronously (used when building layers). */
export const schemaName = (value: string): Effect.Effect<string, InvalidInput> =>
  schemaPattern.test(value)
    ? Effect.succeed(value)
    : Effect.fail(invalid("schema", "a lower-case SQL identifier: [a-z_][a-z0-9_]{0,62}", `${show(value)} is not a valid schema name`))

const checkDurationMs = (field: string, value: Duration.Input, options: { readonly min: number }): Checked<number> => {
  const decoded = Option.getOrUndefined(Duration.fromInput(value))
  if (decoded === undefined) return invalid(field, "a duration such as 30000, \"30 seconds\"", `${show(value)} is not a duration`)
  const ms = Duration.toMillis(decoded)
  if (!Number.isFinite(ms) || ms < options.min || ms > MAX_DELAY_MS) {
    return invalid(field, `between ${options.min} ms and ten years`, `${show(value)} is out of range`)
  }
  return Math.round(ms)
}

/** Check a duration given as a `Duration.Input`, returning whole milliseconds. */
export const durationMs = (
  field: string,
  value: Duration.Input,
  options: { readonly min: number }
): Effect.Effect<number, InvalidInput> => lift(checkDurationMs(field, value, options))

const checkPositiveInt = (field: string, value: unknown, max: number): Checked<number> =>
  typeof value === "number" && Number.isInteger(value) && value >= 1 && value <= max
    ? value
    : invalid(field, `a whole number from 1 to ${max}`, `${show(value)} is out of range`)

/** Check a positive whole number up to `max`. */
export const positiveInt = (field: string, value: unknown, max: number): Effect.Effect<number, InvalidInput> =>
  lift(checkPositiveInt(field, value, max))

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
  /** The flow key (per-key limits, fairness, FIFO), or null. */
  readonly key: string | null
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
 * drop functions, symbols and `undefined` (or turn them into null inside arrays), turn
 * NaN and ±Infinity into null, store a Map or Set as `{}` and a class instance as its own
 * fields without its class: the stored payload would not be the one sent.
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
    case "object":
      return value === null || Array.isArray(value) || isPlainObject(value) ? undefined : notPlain(value)
    default:
      return undefined
  }
}

/** An object literal's kind: its prototype is `Object.prototype` (of any realm) or null. */
const isPlainObject = (value: object): boolean => {
  const proto: unknown = Object.getPrototypeOf(value)
  return proto === null || Object.getPrototypeOf(proto) === null
}

const notPlain = (value: object): string => {
  const kind = (value as { readonly constructor?: { readonly name?: unknown } }).constructor?.name
  const named = typeof kind === "string" && kind.length > 0 ? kind : "object with a prototype"
  return value instanceof Map || value instanceof Set || value instanceof WeakMap || value instanceof WeakSet
    ? `is a ${named}, which JSON stores as {} (send an array or a plain object)`
    : `is an instance of ${named}, which JSON stores without its class (send a plain object)`
}

/** Why PostgreSQL cannot store `text` (in jsonb or text), or undefined when it can. */
const unstorableText = (text: string): string | undefined =>
  text.includes("\u0000")
    ? "contains a NUL character (\\u0000), which PostgreSQL cannot store"
    : text.isWellFormed()
    ? undefined
    : "contains a lone surrogate (malformed UTF-16), which PostgreSQL cannot store"

class Unencodable {
  readonly path: string
  readonly reason: string
  constructor(path: string, reason: string) {
    this.path = path
    this.reason = reason
  }
}

/** The rule of a payload's (and a result's) values. */
const jsonDataRule =
  "JSON data at any depth: no functions, symbols, undefined, NaN or Infinity; plain objects and arrays (no Map, Set or class instances); " +
  "text without NUL (\\u0000) or lone surrogates"

/** How deep {@link isPlainJson} looks before it leaves a value to the checking encoder. */
const PLAIN_JSON_DEPTH = 64

/**
 * Whether `value` is JSON data that `JSON.stringify` writes exactly as it is: finite numbers,
 * booleans, null, storable text, and arrays and plain objects (no `toJSON`) of those, with
 * storable keys. For such a value the checking replacer of {@link encodeJson} would change
 * nothing, so the payload is written without it (several times faster). Anything else, or a
 * value nested deeper than PLAIN_JSON_DEPTH, answers false and takes the checking path, which
 * refuses it or writes it as before: the answer decides the speed, never the result.
 */
const isPlainJson = (value: unknown, depth: number): boolean => {
  switch (typeof value) {
    case "string":
      return unstorableText(value) === undefined
    case "number":
      return Number.isFinite(value)
    case "boolean":
      return true
    case "object": {
      if (value === null) return true
      if (depth >= PLAIN_JSON_DEPTH || (value as { readonly toJSON?: unknown }).toJSON !== undefined) return false
      if (Array.isArray(value)) {
        for (let k = 0; k < value.length; k++) if (!isPlainJson(value[k], depth + 1)) return false
        return true
      }
      if (!isPlainObject(value)) return false
      for (const key of Object.keys(value)) {
        if (unstorableText(key) !== undefined || !isPlainJson((value as Record<string, unknown>)[key], depth + 1)) return false
      }
      return true
    }
    default:
      return false
  }
}

/** The plain JSON text of `value` when {@link isPlainJson}, else undefined (a getter that throws included). */
const plainJsonText = (value: unknown): string | undefined => {
  try {
    return isPlainJson(value, 0) ? JSON.stringify(value) : undefined
  } catch {
    return undefined
  }
}

/**
 * Encode `value` as JSON text PostgreSQL's jsonb stores as sent, or refuse it naming the
 * path (`root.items[3].n`) of the first value or key that would be dropped, changed or refused.
 */
export const jsonData = (root: string, value: unknown): Effect.Effect<string, InvalidInput> => lift(encodeJson(root, value))

/** {@link jsonData}, synchronously. */
const encodeJson = (root: string, value: unknown): Checked<string> => {
  const plain = plainJsonText(value)
  if (plain !== undefined) return plain
  let json: string | undefined
  // Where each object was met (its holder and key), recorded just before JSON.stringify descends
  // into it; the path is spelled out only for a refusal, so a payload that passes costs no paths.
  const where = new WeakMap<object, { readonly holder: object; readonly key: string }>()
  const pathTo = (holder: object, key: string): string => {
    const met = where.get(holder)
    // The holder JSON.stringify wraps the root value in was never met: its value is the root.
    return met === undefined ? root : childPath(pathTo(met.holder, met.key), holder, key)
  }
  try {
    json = JSON.stringify(value, function(this: object, key, value: unknown) {
      // Boxed primitives (new String("x")) are stored as their primitive: check that.
      const plain = typeof value === "object" && value !== null &&
          (value instanceof String || value instanceof Number || value instanceof Boolean)
        ? value.valueOf()
        : value
      const reason = typeof plain === "string" ? unstorableText(plain) : unencodable(plain)
      if (reason !== undefined) {
        const omit = plain === undefined && where.has(this) && !Array.isArray(this) ? " (leave the key out instead)" : ""
        throw new Unencodable(pathTo(this, key), reason + omit)
      }
      if (typeof plain === "object" && plain !== null) {
        where.set(plain, { holder: this, key })
        if (!Array.isArray(plain)) {
          for (const name of Object.keys(plain)) {
            const badKey = unstorableText(name)
            if (badKey !== undefined) throw new Unencodable(pathTo(plain, name), `has a key that ${badKey}`)
          }
        }
      }
      return plain
    })
  } catch (error) {
    if (error instanceof Unencodable) {
      return new InvalidInput({ field: root, rule: jsonDataRule, message: `${error.path} ${error.reason} (rule: ${jsonDataRule})` })
    }
    const reason = error instanceof Error ? error.message : String(error)
    return invalid(root, "must be JSON-encodable (no bigint, no cycles)", `cannot be encoded as JSON: ${reason}`)
  }
  if (json === undefined) return invalid(root, "must be JSON-encodable", `is ${typeof value}, which has no JSON form`)
  return json
}

const encodePayload = (payload: unknown, limits: SendLimits): Checked<string> => {
  const json = encodeJson("payload", payload)
  if (json instanceof InvalidInput) return json
  // Each UTF-16 unit is at most 3 bytes of UTF-8: a short text needs no count.
  const bytes = json.length * 3 <= limits.maxPayloadBytes ? 0 : Buffer.byteLength(json, "utf8")
  return bytes > limits.maxPayloadBytes ? invalid("payload", `at most ${limits.maxPayloadBytes} bytes as JSON`, `is ${bytes} bytes`) : json
}

/** Most headers a message may carry. */
const MAX_HEADERS = 64
/** Most bytes a message's headers may take as JSON: a bound of their own, apart from the payload's. */
export const MAX_HEADER_BYTES = 64 * 1024
const headerRule = `an object of at most ${MAX_HEADERS} string values, names of 1-128 characters, ` +
  `no NUL (\\u0000) or lone surrogates in names or values, at most ${MAX_HEADER_BYTES} bytes as JSON`

/** Why one header cannot be stored, or undefined when it can. */
const badHeader = (name: string, value: unknown): string | undefined => {
  if (name.length === 0 || name.length > 128) return `has a name of ${name.length} characters`
  const badName = unstorableText(name)
  if (badName !== undefined) return `has a name that ${badName}`
  if (typeof value !== "string") return `is ${value === null ? "null" : typeof value}, not a string`
  const badValue = unstorableText(value)
  return badValue === undefined ? undefined : `has a value that ${badValue}`
}

const checkHeaders = (headers: unknown): Checked<Readonly<Record<string, string>>> => {
  if (headers === undefined) return {}
  if (typeof headers !== "object" || headers === null || Array.isArray(headers)) return invalid("headers", headerRule, "is not an object")
  const entries = Object.entries(headers)
  if (entries.length === 0) return {}
  if (entries.length > MAX_HEADERS) return invalid("headers", headerRule, `has ${entries.length} entries`)
  for (const [name, value] of entries) {
    const reason = badHeader(name, value)
    if (reason !== undefined) {
      return new InvalidInput({ field: "headers", rule: headerRule, message: `${childPath("headers", headers, name)} is invalid: it ${reason} (rule: ${headerRule})` })
    }
  }
  const checked = Object.fromEntries(entries) as Record<string, string>
  const bytes = Buffer.byteLength(JSON.stringify(checked), "utf8")
  if (bytes > MAX_HEADER_BYTES) return invalid("headers", headerRule, `are ${bytes} bytes as JSON`)
  return checked
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
): Effect.Effect<PreparedMessage, InvalidInput> => Effect.suspend(() => lift(prepareOne(queue, message, limits, traceparent)))

/** {@link prepareMessage}, synchronously. */
const prepareOne = (queue: string, message: NewMessage, limits: SendLimits, traceparent: string | undefined): Checked<PreparedMessage> => {
  const checked = prepareChecked(queue, message, limits, traceparent)
  // Name the task in every refusal of its message (once it is a valid name).
  return checked instanceof InvalidInput && checked.field !== "task" && typeof message.task === "string" && namePattern.test(message.task)
    ? new InvalidInput({ field: checked.field, rule: checked.rule, message: `task "${message.task}": ${checked.message}` })
    : checked
}

const prepareChecked = (
  queue: string,
  message: NewMessage,
  limits: SendLimits,
  traceparent: string | undefined
): Checked<PreparedMessage> => {
  const task = checkName("task", message.task)
  if (task instanceof InvalidInput) return task
  const payloadJson = encodePayload(message.payload, limits)
  if (payloadJson instanceof InvalidInput) return payloadJson
  const checked = checkHeaders(message.headers)
  if (checked instanceof InvalidInput) return checked
  const headers = traceparent === undefined || "traceparent" in checked || Object.keys(checked).length >= MAX_HEADERS
    ? checked
    : { ...checked, traceparent }
  const priority = message.priority ?? 0
  if (!Number.isInteger(priority) || Math.abs(priority) > INT4_MAX) {
    return invalid("priority", "a whole number (lower runs first)", `${show(priority)} is not allowed`)
  }
  const delay = message.delay ?? 0
  if (typeof delay !== "number" || !Number.isFinite(delay) || delay < 0 || delay > MAX_DELAY_MS) {
    return invalid("delay", "milliseconds, 0 or more, at most ten years", `${show(delay)} is not allowed`)
  }
  const maxAttempts = checkPositiveInt("maxAttempts", message.maxAttempts ?? limits.defaultMaxAttempts, MAX_ATTEMPTS)
  if (maxAttempts instanceof InvalidInput) return maxAttempts
  const dedupKey = message.dedupKey ?? null
  if (dedupKey !== null && (typeof dedupKey !== "string" || dedupKey.length === 0 || dedupKey.length > 512 || dedupKey.includes("\u0000") || !dedupKey.isWellFormed())) {
    return invalid("dedupKey", "a string of 1-512 characters", `${show(dedupKey)} is not allowed`)
  }
  const unique = uniqueWindow(message.unique, dedupKey)
  if (unique instanceof InvalidInput) return unique
  const key = message.key === undefined || message.key === null ? null : checkFlowKey(message.key)
  if (key instanceof InvalidInput) return key
  return { queue, task, payloadJson, headers, priority, delayMs: Math.round(delay), maxAttempts, dedupKey, unique, key }
}

/** Longest flow key (`NewMessage.key`). */
export const MAX_FLOW_KEY_LENGTH = 200

const checkFlowKey = (key: unknown): Checked<string> =>
  typeof key === "string" && key.length >= 1 && key.length <= MAX_FLOW_KEY_LENGTH && key.isWellFormed() &&
    !/[\u0000-\u001f\u007f]/.test(key)
    ? key
    : invalid("key", `1 to ${MAX_FLOW_KEY_LENGTH} characters, no control characters`, `${show(key)} is not allowed`)

/** Check a flow key (`NewMessage.key`): 1 to 200 characters, no control characters. */
export const flowKey = (key: unknown): Effect.Effect<string, InvalidInput> => lift(checkFlowKey(key))

/** Check a `unique` send option: a key like a dedup key, a window from 1 ms to ten years, never with a dedup key. */
const uniqueWindow = (unique: NewMessage["unique"], dedupKey: string | null): Checked<PreparedMessage["unique"]> => {
  if (unique === undefined || unique === null) return null
  if (typeof unique !== "object") return invalid("unique", "an object { key, for }", `${show(unique)} is not allowed`)
  if (dedupKey !== null) return invalid("unique", "either unique or dedupKey, not both", "is given with a dedupKey")
  const key = unique.key
  if (typeof key !== "string" || key.length === 0 || key.length > 512 || key.includes("\u0000") || !key.isWellFormed()) {
    return invalid("unique.key", "a string of 1-512 characters", `${show(key)} is not allowed`)
  }
  const forMs = checkDurationMs("unique.for", unique.for, { min: 1 })
  return forMs instanceof InvalidInput ? forMs : { key, forMs }
}

/**
 * Check the queue name and every message of a send; each message records the
 * current span as its `traceparent` header (see `Span.currentTraceparent`).
 * The first refusal fails the send.
 */
export const prepareSend = (
  queue: string,
  messages: ReadonlyArray<NewMessage>,
  limits: SendLimits
): Effect.Effect<ReadonlyArray<PreparedMessage>, InvalidInput> =>
  Effect.flatMap(name("queue", queue), (q) =>
    Effect.flatMap(Span.currentTraceparent, (traceparent) =>
      Effect.suspend(() => {
        const prepared = new Array<PreparedMessage>(messages.length)
        for (let k = 0; k < messages.length; k++) {
          const checked = prepareOne(q, messages[k]!, limits, traceparent)
          if (checked instanceof InvalidInput) return Effect.fail(checked)
          prepared[k] = checked
        }
        return Effect.succeed(prepared)
      })))

const maxMessageId = 2n ** 63n - 1n
/** The rule of message ids, as error messages state it. */
export const messageIdRule = "a message id: a positive decimal number up to 9223372036854775807 (a PostgreSQL bigint)"

/** Whether `id` can be a message's id: a positive decimal that fits a PostgreSQL bigint. */
export const isMessageId = (id: unknown): id is MessageId =>
  typeof id === "string" && /^[1-9][0-9]{0,18}$/.test(id) && BigInt(id) <= maxMessageId

/** Check a message id given from outside (a filter, a history record). */
export const messageId = (field: string, id: unknown): Effect.Effect<MessageId, InvalidInput> =>
  isMessageId(id) ? Effect.succeed(id) : Effect.fail(invalid(field, messageIdRule, `${show(id)} is not a message id`))

/** Check a dead-letter filter: a valid queue name, message ids that fit a bigint, a sane limit. */
export const deadLetterFilter = <F extends { readonly queue?: string | undefined; readonly ids?: ReadonlyArray<string> | undefined; readonly limit?: number | undefined }>(
  filter: F
): Effect.Effect<F, InvalidInput> =>
  Effect.gen(function*() {
    if (filter.queue !== undefined) yield* name("queue", filter.queue)
    if (filter.ids !== undefined && !Array.isArray(filter.ids)) return yield* invalid("ids", "an array of message ids", `${show(filter.ids)} is not an array`)
    const ids = filter.ids === undefined ? undefined : yield* Effect.forEach(filter.ids, (id) => filterId(id))
    if (filter.limit !== undefined) yield* positiveInt("limit", filter.limit, 10_000)
    return ids === undefined ? filter : { ...filter, ids }
  })

/**
 * A message id of a filter, in its canonical form: decimal text with leading zeros is the id
 * it spells (`017` is 17, as PostgreSQL reads it), so both stores match the same messages.
 */
const filterId = (id: unknown): Effect.Effect<MessageId, InvalidInput> => {
  if (typeof id === "string" && /^[0-9]{1,40}$/.test(id)) {
    const canonical = String(BigInt(id))
    if (isMessageId(canonical)) return Effect.succeed(canonical)
  }
  return Effect.fail(invalid("ids", messageIdRule, `${show(id)} is not a message id`))
}

/** The rule of what redrive and purge act on. */
export const deadLetterTargetRule = "name a queue, ids, or all: true (an empty filter never means every dead letter)"

/**
 * Check the filter of a redrive or purge: as {@link deadLetterFilter}, and it must say which
 * dead letters: a queue, ids, or `all: true`. An empty filter is refused, never read as "all".
 */
export const deadLetterTarget = <F extends { readonly queue?: string | undefined; readonly ids?: ReadonlyArray<string> | undefined; readonly all?: boolean | undefined }>(
  filter: F
): Effect.Effect<F, InvalidInput> =>
  Effect.gen(function*() {
    if (filter.all !== undefined && typeof filter.all !== "boolean") return yield* invalid("all", "true or false", `${show(filter.all)} is not a boolean`)
    if (filter.queue === undefined && filter.ids === undefined && filter.all !== true) {
      return yield* invalid("filter", deadLetterTargetRule, "says no dead letters")
    }
    return yield* deadLetterFilter(filter)
  })
