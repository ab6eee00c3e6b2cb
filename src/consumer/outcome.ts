/**
 * What to write when a message's run ends: the consumer's decision, as a pure
 * function of the claim and how the run ended, so every rule is in one place.
 */
import { fileURLToPath } from "node:url"
import { Cause, Exit } from "effect"
import type { AttemptOutcome, Claim } from "../Message.ts"
import type { LeaseLost, MessageCancelled } from "../QueueError.ts"

/** How a run ended. */
export type RunResult =
  /** The handler returned (successfully or not). */
  | { readonly _tag: "Handled"; readonly exit: Exit.Exit<unknown, unknown> }
  /** The lease was lost and the handler stopped. */
  | { readonly _tag: "LeaseLost"; readonly error: LeaseLost }
  /** Not run: the message had used up its attempts (earlier claims ended without an outcome). */
  | { readonly _tag: "Exhausted" }
  /** Not run: its lease expired too often; suspected of killing workers. */
  | { readonly _tag: "Quarantined" }
  /** Interrupted from outside: the consumer is shutting down. */
  | { readonly _tag: "Interrupted" }
  /** Stopped because an operator cancelled the message. */
  | { readonly _tag: "Cancelled"; readonly error: MessageCancelled }

/** The finishing write to make. `lost` marks a write that follows a lost lease, for the history. */
export type Action =
  /** `result`: the handler's success value as JSON text, kept with the history record. */
  | { readonly _tag: "Ack"; readonly result?: string | undefined }
  /** `limit`: the attempts this message gets, where lower than its `maxAttempts` (the unknown-task limit). */
  | { readonly _tag: "Retry"; readonly delayMs: number; readonly error: string; readonly lost?: true; readonly limit?: number }
  | { readonly _tag: "DeadLetter"; readonly reason: string; readonly error: string | undefined }
  /** `unstarted`: a message held ahead of a slot given back (not a shutdown's release). */
  | { readonly _tag: "Release"; readonly unstarted?: true }
  /** Write nothing: another consumer holds the message now. */
  | { readonly _tag: "Forget"; readonly error: string }
  /** Delete it: an operator cancelled it while it ran (never retried, never dead-lettered). */
  | { readonly _tag: "Cancel"; readonly error: string }

/** The rules the decision follows, from the consumer's settings and the task's policy. */
export interface Rules {
  readonly quarantineAfter: number
  readonly unknownTaskAttempts: number
  readonly unknownTaskDelayMs: number
  /** Delay before retry number `attempt + 1`. */
  readonly retryDelayMs: (attempt: number) => number
}

const typedFailure = (cause: Cause.Cause<unknown>): { readonly _tag?: unknown; readonly message?: unknown } | undefined => {
  const failure = cause.reasons.find(Cause.isFailReason)
  const error = failure?.error
  return typeof error === "object" && error !== null ? error : undefined
}

/** This library's own folder (src/ or dist/), as stack frames name it. */
const libraryDir = (() => {
  try {
    return fileURLToPath(new URL("../", import.meta.url))
  } catch {
    return undefined
  }
})()

/**
 * A stack frame of effect's runtime, of Node itself, or of this library: noise in a stored
 * error, which should show where the handler failed.
 */
const isInternalFrame = (line: string): boolean =>
  /^\s+at /.test(line) && (
    line.includes("/node_modules/effect/") ||
    line.includes("/node_modules/@effect/") ||
    line.includes("node:internal") ||
    line.includes("(<anonymous>)") ||
    (libraryDir !== undefined && line.includes(libraryDir))
  )

/**
 * A failure's text with the stack frames of effect, Node and this library left out; the
 * handler's own frames (and every line that is not a frame) kept. Only on the failure path.
 */
export const withoutInternalFrames = (text: string): string => {
  const lines = text.split("\n")
  const kept = lines.filter((line) => !isInternalFrame(line))
  return kept.length === lines.length ? text : kept.join("\n")
}

/** Decide the finishing write for `claim`. */
export const decide = (claim: Claim, result: RunResult, rules: Rules): Action => {
  switch (result._tag) {
    case "Interrupted":
      return { _tag: "Release" }
    case "Cancelled":
      return { _tag: "Cancel", error: result.error.message }
    case "Exhausted":
      return {
        _tag: "DeadLetter",
        reason: `attempts exhausted: claimed ${claim.attempts} times, max ${claim.maxAttempts} (earlier claims ended without an outcome)`,
        error: undefined
      }
    case "Quarantined":
      return {
        _tag: "DeadLetter",
        reason: `suspected worker-killer: its lease expired ${claim.leaseExpiries} times (the workers running it died or hung)`,
        error: undefined
      }
    case "LeaseLost":
      return result.error.reason === "reclaimed"
        ? { _tag: "Forget", error: result.error.message }
        // We may still hold the token: make the message available at once, the attempt counted.
        : { _tag: "Retry", delayMs: 0, error: result.error.message, lost: true }
    case "Handled": {
      if (Exit.isSuccess(result.exit)) return { _tag: "Ack" }
      const cause = result.exit.cause
      const error = withoutInternalFrames(Cause.pretty(cause))
      const failure = typedFailure(cause)
      const detail = typeof failure?.message === "string" ? failure.message : error
      switch (failure?._tag) {
        case "DecodeFailed":
          return { _tag: "DeadLetter", reason: `payload does not match the task's schema: ${detail}`, error }
        case "Unrecoverable":
          return { _tag: "DeadLetter", reason: `unrecoverable: ${detail}`, error }
        case "UnknownTask": {
          const limit = Math.min(rules.unknownTaskAttempts, claim.maxAttempts)
          return claim.attempts >= limit
            ? { _tag: "DeadLetter", reason: `unknown task "${claim.task}": no worker handled it in ${claim.attempts} attempts`, error }
            : { _tag: "Retry", delayMs: rules.unknownTaskDelayMs, error, limit }
        }
      }
      return claim.attempts >= claim.maxAttempts
        ? { _tag: "DeadLetter", reason: `attempts exhausted: ${claim.attempts} of ${claim.maxAttempts}`, error }
        : { _tag: "Retry", delayMs: rules.retryDelayMs(claim.attempts), error }
    }
  }
}

/** What the attempt history records for an action, given whether its fenced write found the lease. */
export const historyOutcome = (action: Action, held: boolean): AttemptOutcome => {
  if (!held || action._tag === "Forget") return "lease-lost"
  switch (action._tag) {
    case "Ack":
      return "acked"
    case "Retry":
      return action.lost === true ? "lease-lost" : "retried"
    case "DeadLetter":
      return "dead-lettered"
    case "Release":
      return "released"
    case "Cancel":
      return "cancelled"
  }
}
