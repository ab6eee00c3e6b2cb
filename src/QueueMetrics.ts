/**
 * Every metric leasehold records, in one place, in effect's default metric
 * registry: export them with any Effect metrics exporter (Prometheus, OTLP);
 * tests read them with `Metric.value`. Per-message series are built once per
 * (queue, task) and cached ({@link forTask}); queue depths are sampled by
 * `QueueDepth.layer` ({@link forQueue}).
 *
 * @since 0.1.0
 */
import { Effect, Metric } from "effect"

/** Messages claimed by consumers. */
export const claimed = Metric.counter("leasehold_messages_claimed", { description: "Messages claimed" })

/** Messages acked after a successful handler. */
export const acked = Metric.counter("leasehold_messages_acked", { description: "Messages acked" })
/** Messages released (shutdown, interruption), the attempt given back. */
export const released = Metric.counter("leasehold_messages_released", { description: "Messages released" })
/** Messages retried after a failed attempt. */
export const retried = Metric.counter("leasehold_messages_retried", { description: "Messages scheduled for retry" })
/** Messages moved to dead letters. */
export const deadLettered = Metric.counter("leasehold_messages_dead_lettered", { description: "Messages dead-lettered" })
/** Leases renewed (one per message per successful renewal statement). */
export const renewals = Metric.counter("leasehold_lease_renewals", { description: "Leases renewed" })
/** Renewal statements that failed. */
export const renewalFailures = Metric.counter("leasehold_lease_renewal_failures", { description: "Failed renewal statements" })
/**
 * Leases lost, by `reason`: reclaimed, renewals-failing, renewer-failed, local-deadline.
 * Use {@link leaseLostBy} to record one.
 */
export const leasesLost = Metric.counter("leasehold_leases_lost", { description: "Leases lost, by reason" })
/** The lease-lost counter for one reason. */
export const leaseLostBy = (reason: string) => Metric.withAttributes(leasesLost, { reason })
/** Running messages stopped because an operator cancelled them (their handlers interrupted). */
export const cancelled = Metric.counter("leasehold_messages_cancelled", { description: "Running messages cancelled by an operator" })
/** Acks that found the lease gone: another consumer ran or is running the message. */
export const doubleRuns = Metric.counter("leasehold_double_runs", { description: "Acks that found the lease taken" })
/**
 * Commit steps that found their message no longer held: their writes rolled back with the ack,
 * so the double run applied nothing (`HandlerContext.commit`).
 */
export const doubleRunsPrevented = Metric.counter("leasehold_double_runs_prevented", {
  description: "Commit steps refused because the run no longer held its message (writes rolled back)"
})
/** Commit steps that committed: a handler's writes and its ack in one transaction. */
export const commits = Metric.counter("leasehold_commits", { description: "Commit steps committed (writes and ack in one transaction)" })
/** Renewers that did not stop within the stop timeout. */
export const wedgedRenewers = Metric.counter("leasehold_wedged_renewers", { description: "Renewers that failed to stop in time" })
/** Finishing writes (ack, retry, release, dead-letter) that could not be written. */
export const finishFailures = Metric.counter("leasehold_finish_failures", { description: "Finishing writes that failed" })
/**
 * Messages this process holds now: claimed and not yet finished (handlers running, plus runs
 * whose finishing write is still waiting for its batch).
 */
export const inFlight = Metric.gauge("leasehold_in_flight", { description: "Messages claimed by this process and not yet finished" })
const handlerDurationBoundaries = Metric.exponentialBoundaries({ start: 5, factor: 2, count: 20 })
/** Handler duration in milliseconds, by `queue` and `task` (see {@link forTask}). */
export const handlerDuration = Metric.histogram("leasehold_handler_duration_ms", {
  description: "Handler duration (ms)",
  boundaries: handlerDurationBoundaries
})
/** Worst event-loop delay in the last renewal interval, in milliseconds. */
export const eventLoopLag = Metric.gauge("leasehold_event_loop_lag_ms", { description: "Worst event-loop delay per renewal interval (ms)" })
/**
 * Claims released by the session-liveness reaper: their holder's database session was
 * gone and its heartbeat stale, so they were made visible at once (counted as lease expiries).
 */
export const reaped = Metric.counter("leasehold_messages_reaped", { description: "Claims of dead consumers released by the reaper" })
/** Schedule slots this process fired (one message each); slots another worker fired first are not counted. */
export const schedulesFired = Metric.counter("leasehold_schedule_slots_fired", { description: "Schedule slots fired by this process" })

/**
 * Workflow runs this process finished, by `outcome`: `complete`, `suspended` (a sleep, a deferred,
 * a child, a failure it suspends on), `released` (stopped without a result: shutdown, an unsafe
 * interrupt, a defect), `lost` (its lease was gone, or its presence about to be judged dead: it wrote nothing more).
 */
export const workflowRuns = Metric.counter("leasehold_workflow_runs", { description: "Workflow runs finished, by outcome" })
/** {@link workflowRuns} with its outcome attribute. */
export const workflowRunsBy = (outcome: "complete" | "suspended" | "released" | "lost") =>
  Metric.withAttributes(workflowRuns, { outcome })
/** Workflow activity results this process recorded (fenced; a replayed result is not counted again). */
export const workflowActivitiesRecorded = Metric.counter("leasehold_workflow_activities_recorded", {
  description: "Workflow activity results recorded"
})
/** Workflow executions of dead runners this process's reaper released (session liveness). */
export const workflowReaped = Metric.counter("leasehold_workflow_executions_reaped", {
  description: "Workflow executions of dead runners released by the reaper"
})
/** Finished workflow executions this process deleted (the engine's retention, or `LeaseholdWorkflow.prune`), with what they recorded. */
export const workflowPruned = Metric.counter("leasehold_workflow_executions_pruned", {
  description: "Finished workflow executions deleted (retention or prune)"
})
/** Workflow runs under way in this process. */
export const workflowInFlight = Metric.gauge("leasehold_workflow_in_flight", { description: "Workflow runs under way in this process" })

// ---------------------------------------------------------------------------
// Per queue and task. The series above without attributes are the totals of the process
// (kept as they were); the families below carry `queue` and `task` (bounded: see
// MAX_TASK_SERIES), which is what a dashboard slices by.
// ---------------------------------------------------------------------------

/** Messages claimed, by `queue` and `task`. */
export const taskClaimed = Metric.counter("leasehold_task_messages_claimed", { description: "Messages claimed, by queue and task" })
/** Messages acked, by `queue` and `task`. */
export const taskAcked = Metric.counter("leasehold_task_messages_acked", { description: "Messages acked, by queue and task" })
/** Messages scheduled for retry, by `queue` and `task`. */
export const taskRetried = Metric.counter("leasehold_task_messages_retried", { description: "Messages scheduled for retry, by queue and task" })
/** Messages dead-lettered, by `queue` and `task`. */
export const taskDeadLettered = Metric.counter("leasehold_task_messages_dead_lettered", {
  description: "Messages dead-lettered, by queue and task"
})
/** Messages released (the attempt given back), by `queue` and `task`. */
export const taskReleased = Metric.counter("leasehold_task_messages_released", { description: "Messages released, by queue and task" })
/** Running messages cancelled by an operator (their handlers interrupted), by `queue` and `task`. */
export const taskCancelled = Metric.counter("leasehold_task_messages_cancelled", {
  description: "Running messages cancelled by an operator, by queue and task"
})
/** Leases lost, by `queue`, `task` and `reason`. */
export const taskLeasesLost = Metric.counter("leasehold_task_leases_lost", { description: "Leases lost, by queue, task and reason" })
const waitTimeBoundaries = Metric.exponentialBoundaries({ start: 1, factor: 2, count: 24 })
/**
 * Wait time in milliseconds, by `queue` and `task`: from the moment the message became
 * ready (sent, its delay or retry backoff over, or its previous lease expired) to its
 * handler's start.
 */
export const waitTime = Metric.histogram("leasehold_wait_time_ms", {
  description: "Ready to handler start (ms)",
  boundaries: waitTimeBoundaries
})

/** The attributed metrics of one (queue, task): built once, then reused by every message. */
export interface TaskMetrics {
  readonly queue: string
  readonly task: string
  readonly claimed: Metric.Metric<number, Metric.CounterState<number>>
  readonly acked: Metric.Metric<number, Metric.CounterState<number>>
  readonly retried: Metric.Metric<number, Metric.CounterState<number>>
  readonly deadLettered: Metric.Metric<number, Metric.CounterState<number>>
  readonly released: Metric.Metric<number, Metric.CounterState<number>>
  readonly cancelled: Metric.Metric<number, Metric.CounterState<number>>
  readonly handlerDuration: Metric.Metric<number, Metric.HistogramState>
  readonly waitTime: Metric.Metric<number, Metric.HistogramState>
  /** The lease-lost counter of this queue and task for `reason`. */
  readonly leaseLost: (reason: string) => Metric.Metric<number, Metric.CounterState<number>>
}

/**
 * Most (queue, task) pairs given series of their own; the task of any further pair is
 * recorded as {@link OTHER_TASK}. Task names come from message data: a producer sending
 * ever new task names must not grow the metrics without bound.
 */
export const MAX_TASK_SERIES = 1_000
/** The task attribute of pairs beyond {@link MAX_TASK_SERIES}. */
export const OTHER_TASK = "(other)"

/** The pairs with series of their own, by queue then task. */
const byQueue = new Map<string, Map<string, TaskMetrics>>()
/** The {@link OTHER_TASK} series of each queue. */
const others = new Map<string, TaskMetrics>()
let series = 0

/**
 * The series of `family` with `attributes` built in: the same series as
 * `Metric.withAttributes(family, attributes)` (same id, description and attributes), but
 * an update is a registry lookup, where `withAttributes` copies the fiber's context
 * on every update.
 */
const counterOf = (family: Metric.Counter<number>, attributes: Metric.Metric.AttributeSet) =>
  Metric.counter(family.id, { description: family.description, attributes })
const histogramOf = (family: Metric.Histogram<number>, boundaries: ReadonlyArray<number>, attributes: Metric.Metric.AttributeSet) =>
  Metric.histogram(family.id, { description: family.description, boundaries, attributes })

/**
 * Messages claimed, by the claim loop of its lane that claimed them (`loop`): `lead`, the loop
 * every lane has, or `beside`, a lane's second loop (lanes of 32 slots or more, while claims come
 * back full; consumer/claimLoop.ts). Together they are `leasehold_messages_claimed`.
 */
const claimedByLoop = Metric.counter("leasehold_loop_messages_claimed", { description: "Messages claimed, by claim loop (lead, beside)" })
/** The `lead` series of `leasehold_loop_messages_claimed`, built once. */
export const claimedByLead = counterOf(claimedByLoop, { loop: "lead" })
/** The `beside` series of `leasehold_loop_messages_claimed`, built once. */
export const claimedBeside = counterOf(claimedByLoop, { loop: "beside" })

const makeTaskMetrics = (queue: string, task: string): TaskMetrics => {
  const attributes = { queue, task }
  const lost = new Map<string, Metric.Metric<number, Metric.CounterState<number>>>()
  return {
    queue,
    task,
    claimed: counterOf(taskClaimed, attributes),
    acked: counterOf(taskAcked, attributes),
    retried: counterOf(taskRetried, attributes),
    deadLettered: counterOf(taskDeadLettered, attributes),
    released: counterOf(taskReleased, attributes),
    cancelled: counterOf(taskCancelled, attributes),
    handlerDuration: histogramOf(handlerDuration, handlerDurationBoundaries, attributes),
    waitTime: histogramOf(waitTime, waitTimeBoundaries, attributes),
    leaseLost: (reason) => {
      let metric = lost.get(reason)
      if (metric === undefined) {
        metric = counterOf(taskLeasesLost, { queue, task, reason })
        lost.set(reason, metric)
      }
      return metric
    }
  }
}

/**
 * The metrics of messages of `task` on `queue`, cached: two map lookups on the hot
 * path, never an attributed metric built per message. Only pairs with series of their own
 * are cached (at most {@link MAX_TASK_SERIES}); any other pair is answered with its queue's
 * {@link OTHER_TASK} series (one per queue), so ever new task names cost no memory.
 */
export const forTask = (queue: string, task: string): TaskMetrics => {
  if (task === OTHER_TASK) return otherOf(queue)
  const known = byQueue.get(queue)?.get(task)
  if (known !== undefined) return known
  if (series >= MAX_TASK_SERIES) return otherOf(queue)
  let tasks = byQueue.get(queue)
  if (tasks === undefined) {
    tasks = new Map()
    byQueue.set(queue, tasks)
  }
  const metrics = makeTaskMetrics(queue, task)
  tasks.set(task, metrics)
  series += 1
  return metrics
}

/** The {@link OTHER_TASK} series of `queue`. */
const otherOf = (queue: string): TaskMetrics => {
  let metrics = others.get(queue)
  if (metrics === undefined) {
    metrics = makeTaskMetrics(queue, OTHER_TASK)
    others.set(queue, metrics)
  }
  return metrics
}

/** How many (queue, task) names `forTask` keeps in its cache now: bounded, whatever the names it was given. */
export const taskCacheSize = (): number => {
  let n = others.size
  for (const tasks of byQueue.values()) n += tasks.size
  return n
}

/** A task a dispatcher handles, and the queue its messages are sent to. */
export interface TaskOfQueue {
  readonly queue: string
  readonly task: string
}

/**
 * Register at zero the counters of a consumer of `queues` that handles `tasks`: the process
 * totals and the series of each task of a consumed queue. An exporter lists a counter only
 * once it is registered, and a dashboard cannot show a zero it never saw (reading a metric
 * registers it; its value is left as it is).
 */
export const exportAtZero = (queues: ReadonlyArray<string>, tasks: ReadonlyArray<TaskOfQueue>): Effect.Effect<void> => {
  const consumed = new Set(queues)
  const perTask = tasks
    .filter((t) => consumed.has(t.queue))
    .flatMap((t) => {
      const m = forTask(t.queue, t.task)
      return [m.claimed, m.acked, m.retried, m.deadLettered, m.released, m.cancelled]
    })
  const totals = [claimed, claimedByLead, claimedBeside, acked, released, retried, deadLettered, cancelled, leasesLost, renewals, renewalFailures, doubleRuns, doubleRunsPrevented, commits, finishFailures]
  return Effect.forEach([...totals, ...perTask], (metric) => Metric.value(metric), { discard: true })
}

// ---------------------------------------------------------------------------
// Flow control: recorded by the store's limited claim (docs/flow-control.md).
// ---------------------------------------------------------------------------

/** The stage of the limited claim that held ready messages back: a key's, a task's or the queue's limits. */
export type FlowLimitStage = "key" | "task" | "queue"

/**
 * Claims that took fewer messages than asked because a flow limit (concurrency or rate window)
 * held ready ones back, by `queue` and `limit` (the stage: key, task or queue). One claim may
 * count under several stages. No label per key: keys are unbounded (`flowStatus` names them).
 */
export const claimsLimited = Metric.counter("leasehold_claims_limited", {
  description: "Claims cut short by a flow limit, by queue and limit stage (key, task, queue)"
})

/** Count one claim of `queue` cut short by each of `stages`. */
export const recordLimitedClaim = (queue: string, stages: ReadonlyArray<FlowLimitStage>): Effect.Effect<void> =>
  Effect.forEach(stages, (limit) => Metric.update(Metric.withAttributes(claimsLimited, { queue, limit }), 1), { discard: true })

// ---------------------------------------------------------------------------
// Queue depth, per queue: sampled by `QueueDepth.layer` (one statement per interval).
// ---------------------------------------------------------------------------

/** Messages ready now (expired leases included: they are claimable), by `queue`. */
export const queueReady = Metric.gauge("leasehold_queue_ready", { description: "Messages ready now, by queue" })
/** Messages waiting for a delay or retry backoff, by `queue`. */
export const queueDelayed = Metric.gauge("leasehold_queue_delayed", { description: "Messages waiting for their delay, by queue" })
/** Messages leased by a consumer, lease not expired, by `queue`. */
export const queueInFlight = Metric.gauge("leasehold_queue_in_flight", { description: "Messages leased now, by queue" })
/** Dead-lettered messages, by `queue`. */
export const queueDead = Metric.gauge("leasehold_queue_dead", { description: "Dead-lettered messages, by queue" })
/** Age in milliseconds of the oldest ready message (0 when none), by `queue`. */
export const queueOldestReadyAge = Metric.gauge("leasehold_queue_oldest_ready_age_ms", {
  description: "Age of the oldest ready message (ms), by queue"
})

/** The depth gauges of one queue. */
export interface DepthMetrics {
  readonly ready: Metric.Metric<number, Metric.GaugeState<number>>
  readonly delayed: Metric.Metric<number, Metric.GaugeState<number>>
  readonly inFlight: Metric.Metric<number, Metric.GaugeState<number>>
  readonly dead: Metric.Metric<number, Metric.GaugeState<number>>
  readonly oldestReadyAgeMs: Metric.Metric<number, Metric.GaugeState<number>>
}

const depths = new Map<string, DepthMetrics>()

/** The depth gauges of `queue`, cached. */
export const forQueue = (queue: string): DepthMetrics => {
  let metrics = depths.get(queue)
  if (metrics === undefined) {
    const attributes = { queue }
    const gaugeOf = (family: Metric.Gauge<number>) => Metric.gauge(family.id, { description: family.description, attributes })
    metrics = {
      ready: gaugeOf(queueReady),
      delayed: gaugeOf(queueDelayed),
      inFlight: gaugeOf(queueInFlight),
      dead: gaugeOf(queueDead),
      oldestReadyAgeMs: gaugeOf(queueOldestReadyAge)
    }
    depths.set(queue, metrics)
  }
  return metrics
}
