/**
 * The flow-control routes of the admin API (docs/flow-control.md), over the store's
 * `FlowOperations`: list, store and clear limits, set a key's weight, read a queue's flow
 * status. Every value is checked by `FlowControl`'s rules (through the store) before anything
 * is written; a refusal is the store's `InvalidInput`, which `Admin` answers as a 400.
 *
 * @since 0.4.0
 */
import { Effect } from "effect"
import * as FlowControl from "../FlowControl.ts"
import type { FlowLimits, FlowStatus, Rate, StoredLimits } from "../FlowControl.ts"
import { InvalidInput, type StoreError } from "../QueueError.ts"
import type { QueueStoreShape } from "../QueueStore.ts"
import { BadRequest, type FlowStatusRow, type LimitsInput, type LimitsRow, type WeightInput } from "./adminSchema.ts"

/** A failure of a flow route: a refused input (400) or the store's failure (503). */
export type FlowFailure = BadRequest | InvalidInput | StoreError

/** Limits as the API shows them: only the limits there are (no `null`, no `false`). */
const limitsView = (limits: FlowLimits): typeof LimitsRow.Type["limits"] => ({
  ...(limits.concurrency == null ? {} : { concurrency: limits.concurrency }),
  ...(limits.rate == null ? {} : { rate: { count: limits.rate.count, periodMs: limits.rate.periodMs } }),
  ...(limits.keyConcurrency == null ? {} : { keyConcurrency: limits.keyConcurrency }),
  ...(limits.keyRate == null ? {} : { keyRate: { count: limits.keyRate.count, periodMs: limits.keyRate.periodMs } }),
  ...(limits.fifo === true ? { fifo: true } : {}),
  ...(limits.fair === true ? { fair: true } : {})
})

/** A stored record as the API shows it. */
export const limitsRow = (stored: StoredLimits): typeof LimitsRow.Type => ({
  queue: stored.queue,
  task: stored.task,
  limits: limitsView(stored.limits),
  source: stored.source,
  updatedAt: stored.updatedAt
})

/** A queue's flow status as the API shows it. */
export const flowStatusRow = (status: FlowStatus): typeof FlowStatusRow.Type => ({ ...status, limits: status.limits.map(limitsRow) })

/** The task of a write: in the body or the query; two different ones are refused. */
const taskOf = (body: string | undefined, query: string | undefined): Effect.Effect<string | undefined, BadRequest> => {
  if (body === undefined || query === undefined || body === query) return Effect.succeed(body ?? query)
  const rule = "the task in the body or in the query, not two different ones"
  return Effect.fail(new BadRequest({ field: "task", rule, message: `task: ${JSON.stringify(body)} in the body, ${JSON.stringify(query)} in the query (${rule})` }))
}

/** A rate of a body: `{ count, periodMs }` as it is, text (`"100/1m"`) parsed; a refusal names `field`. */
const rateOf = (field: "rate" | "keyRate", rate: Rate | string | null | undefined): Effect.Effect<Rate | null | undefined, InvalidInput> =>
  typeof rate !== "string"
    ? Effect.succeed(rate)
    : Effect.mapError(FlowControl.parseRate(rate), (e) =>
      new InvalidInput({
        field: e.field.replace(/^rate/, field),
        rule: e.rule,
        message: e.message.replace(/^rate/, field)
      }))

/** The limits a body names (rates as text parsed), for the store to check and write. */
const limitsOf = (body: typeof LimitsInput.Type): Effect.Effect<FlowLimits, InvalidInput> =>
  Effect.gen(function*() {
    const { task: _task, rate, keyRate, ...rest } = body
    const out: { -readonly [K in keyof FlowLimits]: FlowLimits[K] } = { ...rest }
    if (rate !== undefined) out.rate = yield* rateOf("rate", rate)
    if (keyRate !== undefined) out.keyRate = yield* rateOf("keyRate", keyRate)
    return out
  })

/** The handlers of the flow routes over `store`. */
export const flowRoutes = (store: QueueStoreShape) => {
  const queueLimits = (queue: string) => Effect.map(store.limits(queue), (rows) => rows.map(limitsRow))
  return {
    /** `GET /api/limits`. */
    limits: Effect.map(store.limits(), (rows) => rows.map(limitsRow)),
    /** `GET /api/queues/:queue/limits`. */
    queueLimits,
    /** `PUT /api/queues/:queue/limits`: the operator's limits, then the queue's as stored. */
    setLimits: (queue: string, queryTask: string | undefined, body: typeof LimitsInput.Type): Effect.Effect<Array<typeof LimitsRow.Type>, FlowFailure> =>
      Effect.gen(function*() {
        const task = yield* taskOf(body.task, queryTask)
        yield* store.setLimits({ queue, task }, yield* limitsOf(body), { source: "operator" })
        return yield* queueLimits(queue)
      }),
    /** `DELETE /api/queues/:queue/limits`: then the queue's limits left. */
    clearLimits: (queue: string, task: string | undefined) =>
      Effect.andThen(store.setLimits({ queue, task }, null, { source: "operator" }), queueLimits(queue)),
    /** `PUT /api/queues/:queue/weight`. */
    keyWeight: (queue: string, body: typeof WeightInput.Type) =>
      Effect.as(store.setKeyWeight(queue, body.key, body.weight), { queue, key: body.key, weight: body.weight }),
    /** `GET /api/queues/:queue/flow`. */
    flow: (queue: string) => Effect.map(store.flowStatus(queue), flowStatusRow)
  }
}
