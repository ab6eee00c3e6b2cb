/**
 * Retry delays: the jittered exponential backoff and the bound every delay is written within.
 * A leaf: a task definition (what a producer imports) computes its policy with it, and so does
 * the consumer.
 */
import { MAX_DELAY_MS } from "./validate.ts"

/**
 * A delay made safe to write: a whole number of milliseconds in [0, maxMs], and never beyond
 * what a store accepts. A value that is not a number (NaN from a bad custom policy) is treated
 * as the bound, the cautious end: the message waits the longest allowed rather than not at all.
 */
export const boundedDelayMs = (value: number, maxMs: number): number => {
  const bound = Number.isFinite(maxMs) ? Math.min(Math.max(maxMs, 0), MAX_DELAY_MS) : MAX_DELAY_MS
  if (typeof value !== "number" || Number.isNaN(value)) return Math.round(bound)
  return Math.round(Math.min(Math.max(value, 0), bound))
}

/** Jittered exponential backoff: base x factor^(attempt-1), capped, then 50-100% of it; always within [0, max]. */
export const backoffMs = (
  policy: { readonly baseMs: number; readonly maxMs: number; readonly factor: number; readonly jitter: boolean },
  attempt: number,
  random: number
): number => {
  const exponential = Math.min(policy.maxMs, policy.baseMs * policy.factor ** Math.min(Math.max(attempt - 1, 0), 60))
  return boundedDelayMs(policy.jitter ? exponential * (0.5 + random / 2) : exponential, policy.maxMs)
}
