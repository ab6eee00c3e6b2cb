/**
 * A handler's success value on its way to the attempt history: encoded through
 * its task's success schema to JSON text by `Task.dispatcher`, carried through
 * the consumer as an {@link Encoded} (so a plain value, or nothing, costs
 * nothing), and bounded by the stores with {@link bounded}.
 */
import { defaults } from "../QueueStore.ts"

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
 * The JSON text to store: `json` itself within the bound (measured in UTF-8 bytes), or the
 * too-large marker. Only results pay for the measure: a UTF-16 length a third of the bound
 * cannot exceed it, so short results skip the byte count.
 */
export const bounded = (json: string): string => {
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
