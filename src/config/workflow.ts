/**
 * The workflow engine's settings from the environment (`LeaseholdWorkflow.layerFromEnv`):
 * `LEASEHOLD_WORKFLOW_LEASE`, `LEASEHOLD_WORKFLOW_POLL_INTERVAL`, `LEASEHOLD_WORKFLOW_CONCURRENCY`,
 * `LEASEHOLD_WORKFLOW_SHUTDOWN_GRACE` and `LEASEHOLD_WORKFLOW_RETENTION`, each a `Config`
 * description with its rule (the same bounds as the options from code); a broken one names the
 * variable and the rule.
 *
 * @since 0.1.0
 */
import { Config, Effect } from "effect"
import type { ConfigInvalid } from "../QueueError.ts"
import { maxDelayRule } from "../internal/validate.ts"
import * as Read from "./read.ts"
import { inRange, invalid, parseDuration } from "./rules.ts"
import { env } from "./variables.ts"

/** The workflow engine's variables, by option. */
export const workflowVariables = {
  lease: env.workflowLease,
  pollInterval: env.workflowPollInterval,
  concurrency: env.workflowConcurrency,
  shutdownGrace: env.workflowShutdownGrace,
  retention: env.workflowRetention
} as const

/** The least lease, poll interval, grace and retention an engine accepts, in ms (as `LeaseholdWorkflow.make` checks them). */
export const workflowMinimums = { leaseMs: 30, pollIntervalMs: 1, shutdownGraceMs: 0, retentionMs: 60_000 } as const

/** How long finished executions are kept unless told otherwise (as the attempt history). */
export const DEFAULT_WORKFLOW_RETENTION = "7 days"

/** The rule of a retention, from code or the environment. */
export const retentionRule = `off, or a duration of at least ${workflowMinimums.retentionMs} ms (1 minute), such as 7d`

/** A retention: `off` (any case: keep finished executions), or a duration of at least a minute; undefined while unset or blank. */
const retention = (name: string): Config.Config<number | "off" | undefined> =>
  Read.text(name, { trim: true }).pipe(Read.check((text): Effect.Effect<number | "off" | undefined, ConfigInvalid> =>
    text === undefined
      ? Effect.succeed(undefined)
      : text.toLowerCase() === "off"
      ? Effect.succeed("off" as const)
      : parseDuration(name, text).pipe(
        // A malformed or short one is told the whole rule (`off` included); a too long one, its bound.
        Effect.mapError((e) => (e.rule === maxDelayRule ? e : invalid(name, retentionRule, text))),
        Effect.flatMap((ms) =>
          ms >= workflowMinimums.retentionMs ? Effect.succeed(ms) : Effect.fail(invalid(name, retentionRule, text))
        )
      )
  ))

/** The most executions one engine runs at once. */
export const MAX_WORKFLOW_CONCURRENCY = 10_000

/** A duration variable of at least `minMs`; undefined while unset or blank. */
const duration = (name: string, minMs: number): Config.Config<number | undefined> =>
  Read.text(name, { trim: true }).pipe(Read.check((text) =>
    text === undefined
      ? Effect.succeed(undefined)
      : Effect.flatMap(parseDuration(name, text), (ms) =>
        ms >= minMs ? Effect.succeed(ms) : Effect.fail(invalid(name, `a duration of at least ${minMs} ms`, text)))
  ))

/** A whole number variable from `min` to `max`; undefined while unset or blank. */
const whole = (name: string, min: number, max: number): Config.Config<number | undefined> =>
  Read.text(name, { trim: true }).pipe(Read.check((text) =>
    text === undefined
      ? Effect.succeed(undefined)
      : /^\d+$/.test(text)
      ? inRange(name, Number(text), min, max)
      : Effect.fail(invalid(name, `a whole number from ${min} to ${max}`, text))
  ))

/** The engine's settings as the environment gives them (milliseconds), each undefined while unset. */
export interface WorkflowEnv {
  readonly leaseMs: number | undefined
  readonly pollIntervalMs: number | undefined
  readonly concurrency: number | undefined
  readonly shutdownGraceMs: number | undefined
  /** Milliseconds finished executions are kept, or `off` (kept for good). */
  readonly retention: number | "off" | undefined
}

/** The engine's variables, read through the current `ConfigProvider` and checked. */
export const workflowConfig: Config.Config<WorkflowEnv> = Config.all({
  leaseMs: duration(workflowVariables.lease, workflowMinimums.leaseMs),
  pollIntervalMs: duration(workflowVariables.pollInterval, workflowMinimums.pollIntervalMs),
  concurrency: whole(workflowVariables.concurrency, 1, MAX_WORKFLOW_CONCURRENCY),
  shutdownGraceMs: duration(workflowVariables.shutdownGrace, workflowMinimums.shutdownGraceMs),
  retention: retention(workflowVariables.retention)
})

/** Read {@link workflowConfig}; a bad value fails with a `ConfigInvalid` naming its variable and rule. */
export const workflowFromEnv: Effect.Effect<WorkflowEnv, ConfigInvalid> = Read.load(workflowConfig)
