/**
 * A schema error's issues as a dead letter's reason lists them: every issue, bounded in count
 * and length (re-exported as `Task.schemaIssues`).
 */
import type { Schema } from "effect"

/** Most schema issues a dead letter's reason lists; the rest are counted. */
const MAX_REASON_ISSUES = 20
/** Longest the listed issues may run, in characters. */
const MAX_REASON_CHARS = 2000

/**
 * Every issue of a schema error, one after another as the schema formats them, bounded:
 * at most {@link MAX_REASON_ISSUES} issues and {@link MAX_REASON_CHARS} characters, then
 * how many more there were. Only on the failure path.
 */
export const schemaIssues = (error: Schema.SchemaError): string => {
  // Each issue starts on a line of its own; its `at [path]` lines are indented.
  const issues = error.message.split(/\n(?=\S)/)
  const kept: Array<string> = []
  let length = 0
  for (const issue of issues) {
    if (kept.length >= MAX_REASON_ISSUES || length + issue.length > MAX_REASON_CHARS) break
    kept.push(issue)
    length += issue.length + 1
  }
  if (kept.length === 0) return `${error.message.slice(0, MAX_REASON_CHARS)}\n... (truncated)`
  const more = issues.length - kept.length
  return more === 0 ? kept.join("\n") : `${kept.join("\n")}\n... and ${more} more issue${more === 1 ? "" : "s"}`
}

