/**
 * Every metric leasehold records, in one place. Export them with any Effect
 * metrics exporter (e.g. `@effect/opentelemetry`); tests read them with
 * `Metric.value`.
 *
 * @since 0.1.0
 */
import { Metric } from "effect"

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
/** Acks that found the lease gone: another consumer ran or is running the message. */
export const doubleRuns = Metric.counter("leasehold_double_runs", { description: "Acks that found the lease taken" })
/** Renewers that did not stop within the stop timeout. */
export const wedgedRenewers = Metric.counter("leasehold_wedged_renewers", { description: "Renewers that failed to stop in time" })
/** Finishing writes (ack, retry, release, dead-letter) that could not be written. */
export const finishFailures = Metric.counter("leasehold_finish_failures", { description: "Finishing writes that failed" })
/** Handlers running now. */
export const inFlight = Metric.gauge("leasehold_in_flight", { description: "Handlers running" })
/** Handler duration in milliseconds. */
export const handlerDuration = Metric.histogram("leasehold_handler_duration_ms", {
  description: "Handler duration (ms)",
  boundaries: Metric.exponentialBoundaries({ start: 5, factor: 2, count: 20 })
})
/** Worst event-loop delay in the last renewal interval, in milliseconds. */
export const eventLoopLag = Metric.gauge("leasehold_event_loop_lag_ms", { description: "Worst event-loop delay per renewal interval (ms)" })
/**
 * Claims released by the session-liveness reaper: their holder's database session was
 * gone and its heartbeat stale, so they were made visible at once (counted as lease expiries).
 */
export const reaped = Metric.counter("leasehold_messages_reaped", { description: "Claims of dead consumers released by the reaper" })
