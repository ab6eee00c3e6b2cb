/**
 * The rules a task definition is checked by, when it is defined and again when a dispatcher takes
 * it: names, attempts, durations, the retry policy and the task's own flow limits. A definition
 * that breaks one throws an `InvalidInput` naming the field and the rule.
 */
import { Effect } from "effect"
import * as FlowControl from "../FlowControl.ts"
import * as Validate from "../internal/validate.ts"
import * as QueueConfig from "../QueueConfig.ts"
import { InvalidInput } from "../QueueError.ts"

/** How a task retries a failed attempt: jittered exponential backoff. */
export interface RetryPolicy {
  /** First delay (default 1s). */
  readonly base?: QueueConfig.DurationLike | undefined
  /** Longest delay (default 1h). */
  readonly max?: QueueConfig.DurationLike | undefined
  /** Growth per attempt (default 2). */
  readonly factor?: number | undefined
  /** Spread delays over 50-100% of the computed value (default true). */
  readonly jitter?: boolean | undefined
}

/** A definition that cannot work, found when the task is defined. */
const definitionError = (task: string, field: string, rule: string, value: unknown) =>
  new InvalidInput({
    field,
    rule,
    message: `task ${JSON.stringify(task)}: ${field} ${typeof value === "string" ? JSON.stringify(value) : String(value)} is invalid; expected ${rule}`
  })

const durationOf = (task: string, field: string, value: QueueConfig.DurationLike, min: number, max: number): number => {
  const parsed = Effect.runSync(Effect.result(QueueConfig.parseDuration(field, value)))
  if (parsed._tag === "Failure") throw definitionError(task, field, parsed.failure.rule, value)
  if (parsed.success < min || parsed.success > max) throw definitionError(task, field, `a duration from ${min} ms to ${max} ms`, value)
  return parsed.success
}

/** A retry policy checked and resolved to milliseconds. */
export interface Backoff {
  readonly baseMs: number
  readonly maxMs: number
  readonly factor: number
  readonly jitter: boolean
}

/**
 * Check a definition's policies, so that a retry delay can never come out negative, NaN or
 * beyond what the store accepts (which would leave the message leased until its lease expired).
 */
export const checkDefinition = (definition: {
  readonly name: string
  readonly queue?: string | undefined
  readonly retry?: RetryPolicy | undefined
  readonly maxAttempts?: number | undefined
  readonly maxRuntime?: QueueConfig.DurationLike | undefined
  readonly lease?: QueueConfig.DurationLike | undefined
  readonly limits?: FlowControl.TaskLimits | undefined
}): { readonly backoff: Backoff | undefined; readonly limits: FlowControl.TaskLimits | undefined } => {
  const task = definition.name
  if (typeof task !== "string" || !Validate.namePattern.test(task)) throw definitionError(String(task), "name", Validate.nameRule, task)
  if (definition.queue !== undefined && (typeof definition.queue !== "string" || !Validate.namePattern.test(definition.queue))) {
    throw definitionError(task, "queue", Validate.nameRule, definition.queue)
  }
  const maxAttempts = definition.maxAttempts
  if (maxAttempts !== undefined && !(Number.isInteger(maxAttempts) && maxAttempts >= 1 && maxAttempts <= Validate.MAX_ATTEMPTS)) {
    throw definitionError(task, "maxAttempts", `a whole number from 1 to ${Validate.MAX_ATTEMPTS}`, maxAttempts)
  }
  const maxRuntimeMs = definition.maxRuntime === undefined ? undefined : durationOf(task, "maxRuntime", definition.maxRuntime, 1, 7 * 86_400_000)
  if (definition.lease !== undefined) {
    // As the consumer's lease (300 ms to 24 h); a lease longer than the max runtime could only hide a dead worker's message longer.
    const leaseMs = durationOf(task, "lease", definition.lease, 300, 24 * 3_600_000)
    if (maxRuntimeMs !== undefined && leaseMs > maxRuntimeMs) throw definitionError(task, "lease", `at most maxRuntime (${maxRuntimeMs} ms)`, definition.lease)
  }
  const limits = checkLimits(task, definition.queue ?? "default", definition.limits)
  return { backoff: checkRetry(task, definition.retry), limits }
}

/** A task's own flow limits checked by the store's rules (`FlowControl.validateLimits`), absent ones left out. */
const checkLimits = (task: string, queue: string, limits: FlowControl.TaskLimits | undefined): FlowControl.TaskLimits | undefined => {
  if (limits === undefined) return undefined
  const checked = Effect.runSync(Effect.result(FlowControl.validateLimits(limits, { queue, task })))
  if (checked._tag === "Success") return checked.success
  const { field, rule, message } = checked.failure
  throw new InvalidInput({ field: `limits.${field}`, rule, message: `task ${JSON.stringify(task)}: limits.${message}` })
}

/** A retry policy checked and resolved to milliseconds (delays always within [0, retry.max]). */
const checkRetry = (task: string, retry: RetryPolicy | undefined): Backoff | undefined => {
  if (retry === undefined) return undefined
  if (typeof retry !== "object" || retry === null) throw definitionError(task, "retry", "an object { base, max, factor, jitter }", retry)
  const baseMs = durationOf(task, "retry.base", retry.base ?? 1_000, 0, Validate.MAX_DELAY_MS)
  const maxMs = durationOf(task, "retry.max", retry.max ?? 3_600_000, 0, Validate.MAX_DELAY_MS)
  if (maxMs < baseMs) throw definitionError(task, "retry.max", `at least retry.base (${baseMs} ms)`, retry.max ?? 3_600_000)
  const factor = retry.factor ?? 2
  if (typeof factor !== "number" || !Number.isFinite(factor) || factor < 1) {
    throw definitionError(task, "retry.factor", "a finite number, 1 or more (1 keeps the delay constant)", factor)
  }
  const jitter = retry.jitter ?? true
  if (typeof jitter !== "boolean") throw definitionError(task, "retry.jitter", "true or false", jitter)
  return { baseMs, maxMs, factor, jitter }
}
