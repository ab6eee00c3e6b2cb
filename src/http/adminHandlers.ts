/**
 * The handlers of the admin API's routes (`Admin.handlers`), over the `QueueStore` in context:
 * loaded when `Admin.layer` (or `Admin.handlers`) is built, with the flow, insight and workflow
 * routes they call, so a worker that serves no admin API does not load them.
 */
import { Effect, Option } from "effect"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import * as SqlClient from "effect/sql/SqlClient"
import * as ConsumerPresence from "../ConsumerPresence.ts"
import { Insights } from "../Insights.ts"
import { redactSecrets } from "../internal/redact.ts"
import type { MessageId } from "../Message.ts"
import type { InvalidInput, StoreError } from "../QueueError.ts"
import { type DeadLetterFilter, QueueStore } from "../QueueStore.ts"
import { StoreSettings } from "../StoreSettings.ts"
import { counters } from "./adminCounters.ts"
import { AdminApi } from "./adminApi.ts"
import { flowRoutes } from "./adminFlow.ts"
import { insightRoutes } from "./adminInsights.ts"
import { BadRequest, type DeadLetterSelection, NotFound, Unavailable } from "./adminSchema.ts"
import { workflowRoutes } from "./adminWorkflows.ts"

/** Store failures as responses: a refused input is a 400, a database failure a 503 (redacted). */
const storeFailure = (error: InvalidInput | StoreError | BadRequest): BadRequest | Unavailable =>
  error._tag === "BadRequest"
    ? error
    : error._tag === "InvalidInput"
    ? new BadRequest({ field: error.field, rule: error.rule, message: error.message })
    : new Unavailable({ message: redactSecrets(`${error._tag}: ${error.message}`) })

/** Exactly one of queue, ids or all: redrive and purge never act on "everything" by omission. */
const selection = (input: typeof DeadLetterSelection.Type): Effect.Effect<DeadLetterFilter, BadRequest> => {
  const given = [input.queue !== undefined, input.ids !== undefined, input.all === true].filter(Boolean).length
  if (given === 1) {
    return Effect.succeed({ queue: input.queue, ids: input.ids as ReadonlyArray<MessageId> | undefined, all: input.all })
  }
  const rule = "exactly one of queue, ids or all: true"
  return Effect.fail(new BadRequest({ field: "payload", rule, message: `payload: say which dead letters (${rule})` }))
}

const cancelOutcome = (asked: ReadonlyArray<string>, results: ReadonlyArray<{ readonly id: string; readonly result: "cancelled" | "cancelling" }>) => {
  const found = new Set(results.map((r) => String(r.id)))
  return {
    results: results.map((r) => ({ id: String(r.id), result: r.result })),
    unknown: [...new Set(asked.map((id) => String(BigInt(id))))].filter((id) => !found.has(id))
  }
}

const limitOf = (text: string | undefined, fallback: number) => text === undefined ? fallback : Number(text)

/** The handlers of {@link AdminGroup} over the `QueueStore` in context (consumers read when the store is on PostgreSQL). */
export const handlers = HttpApiBuilder.group(AdminApi, "admin", (handlers) =>
  Effect.gen(function*() {
    const store = yield* QueueStore
    const sql = yield* Effect.serviceOption(SqlClient.SqlClient)
    const settings = yield* Effect.serviceOption(StoreSettings)
    const flow = flowRoutes(store)
    const dash = insightRoutes(store, yield* Effect.serviceOption(Insights))
    const workflows = workflowRoutes(sql, Option.map(settings, (s) => s.schema))
    const queueRow = (queue: string) =>
      Effect.map(store.queues(), (all) =>
        all.find((q) => q.queue === queue) ?? { queue, ready: 0, delayed: 0, inFlight: 0, dead: 0, oldestReadyAgeMs: 0, paused: false, pausedAt: null })
    return handlers
      .handle("queues", () => Effect.mapError(store.queues(), storeFailure))
      .handle("pause", ({ params }) => store.pause(params.queue).pipe(Effect.andThen(queueRow(params.queue)), Effect.mapError(storeFailure)))
      .handle("resume", ({ params }) => store.resume(params.queue).pipe(Effect.andThen(queueRow(params.queue)), Effect.mapError(storeFailure)))
      .handle("messages", ({ params, query }) => {
        const limit = limitOf(query.limit, 100)
        return store.messages(params.queue, { state: query.state, limit, after: query.after }).pipe(
          Effect.map((messages) => ({ messages, next: messages.length === limit ? messages[messages.length - 1]!.id : null })),
          Effect.mapError(storeFailure)
        )
      })
      .handle("cancelWhere", ({ params, payload }) =>
        store.cancelWhere({ queue: params.queue, task: payload.task }).pipe(
          Effect.map((results) => cancelOutcome([], results)),
          Effect.mapError(storeFailure)
        ))
      .handle("consumers", () =>
        Option.isSome(sql) && Option.isSome(settings)
          ? Effect.mapError(ConsumerPresence.listConsumers(sql.value, settings.value.schema), storeFailure)
          : Effect.succeed([]))
      .handle("inFlight", ({ query }) =>
        store.queues().pipe(
          Effect.flatMap((queues) =>
            Effect.forEach(queues.filter((q) => q.inFlight > 0), (q) =>
              store.messages(q.queue, { state: "in-flight", limit: limitOf(query.limit, 100) }))
          ),
          Effect.map((pages) => pages.flat()),
          Effect.mapError(storeFailure)
        ))
      .handle("message", ({ params }) =>
        Effect.gen(function*() {
          const found = yield* store.get(params.id)
          if (Option.isNone(found)) {
            return yield* new NotFound({ message: `no message with id ${params.id} (finished and deleted, or never sent)` })
          }
          return { message: found.value, attempts: yield* store.attempts(params.id) }
        }).pipe(Effect.catchTags({ ConnectionDead: (e) => Effect.fail(storeFailure(e)), QueryFailed: (e) => Effect.fail(storeFailure(e)) })))
      .handle("attempts", ({ params }) => Effect.mapError(store.attempts(params.id), storeFailure))
      .handle("cancel", ({ payload }) =>
        store.cancel(payload.ids).pipe(
          Effect.map((results) => cancelOutcome(payload.ids, results)),
          Effect.mapError(storeFailure)
        ))
      .handle("deadLetters", ({ query }) =>
        Effect.mapError(store.deadLetters({ queue: query.queue, limit: limitOf(query.limit, 100) }), storeFailure))
      .handle("redrive", ({ payload }) =>
        selection(payload).pipe(
          Effect.flatMap((filter) => Effect.mapError(store.redrive(filter), storeFailure)),
          Effect.map((ids) => ({ redriven: ids.map(String) }))
        ))
      .handle("purge", ({ payload }) =>
        selection(payload).pipe(
          Effect.flatMap((filter) => Effect.mapError(store.purge(filter), storeFailure)),
          Effect.map((ids) => ({ purged: ids.map(String) }))
        ))
      .handle("limits", () => Effect.mapError(flow.limits, storeFailure))
      .handle("queueLimits", ({ params }) => Effect.mapError(flow.queueLimits(params.queue), storeFailure))
      .handle("setLimits", ({ params, query, payload }) => Effect.mapError(flow.setLimits(params.queue, query.task, payload), storeFailure))
      .handle("clearLimits", ({ params, query }) => Effect.mapError(flow.clearLimits(params.queue, query.task), storeFailure))
      .handle("keyWeight", ({ params, payload }) => Effect.mapError(flow.keyWeight(params.queue, payload), storeFailure))
      .handle("flow", ({ params }) => Effect.mapError(flow.flow(params.queue), storeFailure))
      .handle("workflows", ({ query }) => Effect.mapError(workflows.list({ ...query, limit: limitOf(query.limit, 100) }), storeFailure))
      .handle("workflow", ({ params }) =>
        workflows.show(params.workflow, params.executionId).pipe(
          Effect.catchTags({ ConnectionDead: (e) => Effect.fail(storeFailure(e)), QueryFailed: (e) => Effect.fail(storeFailure(e)) }),
          Effect.mapError((e) => (e._tag === "InvalidInput" ? storeFailure(e) : e))
        ))
      .handle("counters", () => counters)
      .handle("throughput", ({ query }) => Effect.mapError(dash.throughput(query), storeFailure))
      .handle("depthHistory", ({ query }) => Effect.mapError(dash.depthHistory(query), storeFailure))
      .handle("search", ({ query }) => Effect.mapError(dash.search(query), storeFailure))
      .handle("retry", ({ payload }) => Effect.mapError(dash.retry(payload.ids), storeFailure))
      .handle("bulkCount", ({ params, query }) => Effect.mapError(dash.bulkCount(params.action, query), storeFailure))
      .handle("bulk", ({ params, payload }) => Effect.mapError(dash.bulk(params.action, payload), storeFailure))
      .handle("schedules", () => Effect.mapError(dash.schedules, storeFailure))
      .handle("trigger", ({ params }) =>
        dash.trigger(params.key).pipe(Effect.catchTags({
          ConnectionDead: (e) => Effect.fail(storeFailure(e)),
          QueryFailed: (e) => Effect.fail(storeFailure(e)),
          InvalidInput: (e) => Effect.fail(new NotFound({ message: e.message }))
        })))
  }))
