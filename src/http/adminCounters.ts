/**
 * The admin API's counters (`GET /api/counters`, `Admin.counters`): what only leasehold counts,
 * read from this process's metrics.
 */
import { Effect, Metric } from "effect"
import * as QueueMetrics from "../QueueMetrics.ts"
import type { Counters } from "./adminSchema.ts"

const counterValue = (snapshot: ReadonlyArray<Metric.Metric.Snapshot>, id: string): number =>
  snapshot
    .filter((m) => m.id === id && m.type === "Counter" && Object.keys(m.attributes ?? {}).length === 0)
    .reduce((sum, m) => sum + Number((m.state as Metric.CounterState<number>).count), 0)

/** The counters only leasehold has, read from this process's metrics. */
export const counters: Effect.Effect<typeof Counters.Type> = Effect.map(Metric.snapshot, (snapshot) => {
  const leasesLost: Record<string, number> = {}
  for (const m of snapshot) {
    const reason = m.attributes?.["reason"]
    if (m.id !== QueueMetrics.leasesLost.id || m.type !== "Counter" || reason === undefined) continue
    leasesLost[String(reason)] = (leasesLost[String(reason)] ?? 0) + Number((m.state as Metric.CounterState<number>).count)
  }
  const count = (metric: { readonly id: string }) => counterValue(snapshot, metric.id)
  return {
    leasesLost,
    doubleRuns: count(QueueMetrics.doubleRuns),
    reaped: count(QueueMetrics.reaped),
    wedgedRenewers: count(QueueMetrics.wedgedRenewers),
    renewalFailures: count(QueueMetrics.renewalFailures),
    finishFailures: count(QueueMetrics.finishFailures),
    claimed: count(QueueMetrics.claimed),
    acked: count(QueueMetrics.acked),
    retried: count(QueueMetrics.retried),
    deadLettered: count(QueueMetrics.deadLettered),
    released: count(QueueMetrics.released),
    cancelled: count(QueueMetrics.cancelled)
  }
})
