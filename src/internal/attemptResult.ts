/**
 * A handler's success value on its way to the attempt history: encoded through
 * its task's success schema to JSON text by `Task.dispatcher`, carried through
 * the consumer as an {@link Encoded} (so a plain value, or nothing, costs
 * nothing), and bounded by the stores with {@link bounded}.
 */
import { defaults } from "../QueueStore.ts"
import { childPath } from "./validate.ts"

/** A success value already encoded, as JSON text: what the history keeps. */
export class Encoded {
  readonly json: string
  constructor(json: string) {
    this.json = json
  }
}

/** The JSON text kept for a handler's run: its result when it returned an {@link Encoded}, else nothing. */
export const jsonOf = (value: unknown): string | undefined => value instanceof Encoded ? value.json : undefined

/** What the history keeps instead of a result over {@link defaults.maxResultBytes}: its size, so the ack never fails. */
export const tooLarge = (bytes: number): string =>
  `{"leasehold":"result-too-large","bytes":${bytes},"limit":${defaults.maxResultBytes}}`

/**
 * What the history keeps instead of a result PostgreSQL's jsonb cannot store (a NUL character,
 * or a lone UTF-16 surrogate, in a string or a key at `path`): where and why, so the ack
 * never fails on it (and never fails the other acks of its batch). The handler's work is
 * done, so the message is acked all the same; readers fail with `ResultUnreadable`.
 */
export const unstorable = (path: string, reason: string): string =>
  JSON.stringify({ leasehold: "result-unstorable", path: path.length > 200 ? `${path.slice(0, 197)}...` : path, reason })

/** Why a string cannot be kept in jsonb, or undefined when it can. */
const refusal = (text: string): string | undefined =>
  text.includes("\u0000")
    ? "contains a NUL character (\\u0000), which PostgreSQL jsonb cannot store"
    : text.isWellFormed()
    ? undefined
    : "contains a lone UTF-16 surrogate, which PostgreSQL jsonb cannot store"

/** The first string or key of `value` jsonb would refuse, as the marker to keep instead; undefined if none. */
const firstUnstorable = (value: unknown, path: string): string | undefined => {
  if (typeof value === "string") {
    const reason = refusal(value)
    return reason === undefined ? undefined : unstorable(path, reason)
  }
  if (typeof value !== "object" || value === null) return undefined
  for (const [key, child] of Object.entries(value)) {
    const at = childPath(path, value, key)
    const reason = Array.isArray(value) ? undefined : refusal(key)
    const found = reason === undefined ? firstUnstorable(child, at) : unstorable(at, `its key ${reason}`)
    if (found !== undefined) return found
  }
  return undefined
}

/**
 * The unstorable marker for `json` when jsonb would refuse it, else undefined. JSON.stringify
 * writes a NUL or a lone surrogate as a `\u` escape, so text without one (the common case,
 * a few native scans) is storable; only text with an escape is parsed and searched for the culprit.
 */
const unstorableOf = (json: string): string | undefined => {
  if (!json.includes("\\u") && !json.includes("\u0000") && json.isWellFormed()) return undefined
  let value: unknown
  try {
    value = JSON.parse(json)
  } catch {
    return unstorable("result", "is not JSON text")
  }
  return firstUnstorable(value, "result")
}

/**
 * The JSON text to store: `json` itself when jsonb can store it and it is within the bound
 * (measured in UTF-8 bytes), else the unstorable or the too-large marker. Only results pay
 * for the measure: a UTF-16 length a third of the bound cannot exceed it, so short results
 * skip the byte count.
 */
export const bounded = (json: string): string => {
  const refused = unstorableOf(json)
  if (refused !== undefined) return refused
  if (json.length * 3 <= defaults.maxResultBytes) return json
  const bytes = Buffer.byteLength(json, "utf8")
  return bytes <= defaults.maxResultBytes ? json : tooLarge(bytes)
}

/** A result value as the history keeps it: bounded JSON text, or undefined for none (undefined or null). */
export const textOf = (result: unknown): string | undefined => {
  if (result === undefined || result === null) return undefined
  const json = JSON.stringify(result) as string | undefined
  return json === undefined ? undefined : bounded(json)
}
