/**
 * The admin API's routes as an `effect/http-api` group ({@link AdminGroup}, under `/api`) with
 * the middleware that guards them; `Admin` implements the handlers and re-exports these.
 *
 * @since 0.1.0
 */
import * as HttpApi from "effect/http-api/HttpApi"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiMiddleware from "effect/http-api/HttpApiMiddleware"
import * as HttpApiSecurity from "effect/http-api/HttpApiSecurity"
import * as OpenApi from "effect/http-api/OpenApi"
import { Schema } from "effect"
import { Attempt, DeadLetter, MessageInfo } from "../Message.ts"
import { BulkActionInput, BulkCount, BulkInput, BulkOutcomeSchema, DepthAnswer, FilterFields, MinutesInput, ScheduleRow, ThroughputAnswer, TriggerOutcome } from "./adminInsightsSchema.ts"
import { BadRequest, Unauthorized, Forbidden, NotFound, Unavailable, QueueName, TaskName, MessageIdInput, Limit, StateInput, Ids, DeadLetterSelection, QueueRow, ConsumerRow, MessageDetail, MessagePage, CancelOutcome, Counters, LimitsInput, LimitsRow, WeightInput, FlowStatusRow } from "./adminSchema.ts"
import { ExecutionDetail, ExecutionIdInput, ExecutionRow, WorkflowName, WorkflowStatusInput } from "./adminWorkflows.ts"

// ---------------------------------------------------------------------------
// Middleware

/** Guards the changing routes: a bearer token compared in constant time. */
export class AdminAuth extends HttpApiMiddleware.Service<AdminAuth>()("leasehold/Admin/AdminAuth", {
  error: [Unauthorized, Forbidden],
  security: { bearer: HttpApiSecurity.bearer }
}) {}

/** Guards the reading routes: the same token once one is set; none set, open only on a server for this machine. */
export class ReadAuth extends HttpApiMiddleware.Service<ReadAuth>()("leasehold/Admin/ReadAuth", {
  error: [Unauthorized, Forbidden],
  security: { bearer: HttpApiSecurity.bearer }
}) {}

/** Turns a request that fails its schema into a {@link BadRequest} naming the field and the rule. */
export class InputErrors extends HttpApiMiddleware.Service<InputErrors>()("leasehold/Admin/InputErrors", {
  error: BadRequest
}) {}

// ---------------------------------------------------------------------------
// The group

const queueParams = { queue: QueueName }
const readErrors = [Unavailable] as const

/** An endpoint with its one-line summary in the OpenAPI document. */
const summarized = <E extends { readonly annotate: (key: typeof OpenApi.Summary, value: string) => unknown }>(
  endpoint: E,
  summary: string
): E => endpoint.annotate(OpenApi.Summary, summary) as E

/** The admin routes, under `/api`. Add it to an `HttpApi` named `leasehold` (as `Http` does). */
export const AdminGroup = HttpApiGroup.make("admin")
  .add(summarized(
    HttpApiEndpoint.get("queues", "/api/queues", { success: Schema.Array(QueueRow), error: readErrors }).middleware(ReadAuth),
    "Every queue with messages, history or a pause: counts and whether it is paused"
  ))
  .add(summarized(
    HttpApiEndpoint.post("pause", "/api/queues/:queue/pause", { params: queueParams, success: QueueRow, error: readErrors })
      .middleware(AdminAuth),
    "Stop consumers claiming from a queue (running messages finish); needs the admin token"
  ))
  .add(summarized(
    HttpApiEndpoint.post("resume", "/api/queues/:queue/resume", { params: queueParams, success: QueueRow, error: readErrors })
      .middleware(AdminAuth),
    "Let consumers claim from a paused queue again; needs the admin token"
  ))
  .add(summarized(
    HttpApiEndpoint.get("messages", "/api/queues/:queue/messages", {
      params: queueParams,
      query: { state: Schema.optionalKey(StateInput), limit: Schema.optionalKey(Limit), after: Schema.optionalKey(MessageIdInput) },
      success: MessagePage,
      error: readErrors
    }).middleware(ReadAuth),
    "A page of a queue's messages in id order, optionally in one state; next is the after of the next page"
  ))
  .add(summarized(
    HttpApiEndpoint.post("cancelWhere", "/api/queues/:queue/cancel", {
      params: queueParams,
      payload: Schema.Struct({ task: Schema.optionalKey(TaskName) }),
      success: CancelOutcome,
      error: readErrors
    }).middleware(AdminAuth),
    "Cancel every message of a queue, or of one task in it; needs the admin token"
  ))
  .add(summarized(
    HttpApiEndpoint.get("consumers", "/api/consumers", { success: Schema.Array(ConsumerRow), error: readErrors }).middleware(ReadAuth),
    "Registered consumers: host, pid, heartbeat age, messages in flight"
  ))
  .add(summarized(
    HttpApiEndpoint.get("inFlight", "/api/in-flight", {
      query: { limit: Schema.optionalKey(Limit) },
      success: Schema.Array(MessageInfo),
      error: readErrors
    }).middleware(ReadAuth),
    "Messages in flight on every queue (at most limit per queue), with their holder and lease"
  ))
  .add(summarized(
    HttpApiEndpoint.get("message", "/api/messages/:id", {
      params: { id: MessageIdInput },
      success: MessageDetail,
      error: [Unavailable, NotFound]
    }).middleware(ReadAuth),
    "One message, live or dead, with its attempt history"
  ))
  .add(summarized(
    HttpApiEndpoint.get("attempts", "/api/messages/:id/attempts", {
      params: { id: MessageIdInput },
      success: Schema.Array(Attempt),
      error: readErrors
    }).middleware(ReadAuth),
    "A message's attempt history, oldest first, also once the message finished and was deleted (until retention prunes it)"
  ))
  .add(summarized(
    HttpApiEndpoint.post("cancel", "/api/messages/cancel", {
      payload: Schema.Struct({ ids: Ids }),
      success: CancelOutcome,
      error: readErrors
    }).middleware(AdminAuth),
    "Cancel messages by id: waiting ones are deleted, running ones stopped at once; needs the admin token"
  ))
  .add(summarized(
    HttpApiEndpoint.get("deadLetters", "/api/dead-letters", {
      query: { queue: Schema.optionalKey(QueueName), limit: Schema.optionalKey(Limit) },
      success: Schema.Array(DeadLetter),
      error: readErrors
    }).middleware(ReadAuth),
    "Dead letters, oldest death first, with their reason and last error"
  ))
  .add(summarized(
    HttpApiEndpoint.post("redrive", "/api/dead-letters/redrive", {
      payload: DeadLetterSelection,
      success: Schema.Struct({ redriven: Schema.Array(Schema.String) }),
      error: readErrors
    }).middleware(AdminAuth),
    "Return dead letters (a queue's, some ids, or all) to ready with a fresh attempt budget; needs the admin token"
  ))
  .add(summarized(
    HttpApiEndpoint.post("purge", "/api/dead-letters/purge", {
      payload: DeadLetterSelection,
      success: Schema.Struct({ purged: Schema.Array(Schema.String) }),
      error: readErrors
    }).middleware(AdminAuth),
    "Delete dead letters (a queue's, some ids, or all) for good; needs the admin token"
  ))
  .add(summarized(
    HttpApiEndpoint.get("limits", "/api/limits", { success: Schema.Array(LimitsRow), error: readErrors }).middleware(ReadAuth),
    "The stored flow limits of every queue (its own, then its tasks'), who wrote them (code or operator) and when"
  ))
  .add(summarized(
    HttpApiEndpoint.get("queueLimits", "/api/queues/:queue/limits", { params: queueParams, success: Schema.Array(LimitsRow), error: readErrors })
      .middleware(ReadAuth),
    "The stored flow limits of one queue: its own, then its tasks'"
  ))
  .add(summarized(
    HttpApiEndpoint.put("setLimits", "/api/queues/:queue/limits", {
      params: queueParams,
      query: { task: Schema.optionalKey(TaskName) },
      payload: LimitsInput,
      success: Schema.Array(LimitsRow),
      error: readErrors
    }).middleware(AdminAuth).annotate(HttpApi.PayloadParseOptions, { onExcessProperty: "error" }),
    "Store the flow limits of a queue, or of one task (task in the body or the query), as an operator's: they replace the stored ones and no declaration in code overwrites them; answers the queue's limits; needs the admin token"
  ))
  .add(summarized(
    HttpApiEndpoint.delete("clearLimits", "/api/queues/:queue/limits", {
      params: queueParams,
      query: { task: Schema.optionalKey(TaskName) },
      success: Schema.Array(LimitsRow),
      error: readErrors
    }).middleware(AdminAuth),
    "Clear the flow limits of a queue, or of one task (?task=); answers the queue's limits left; needs the admin token"
  ))
  .add(summarized(
    HttpApiEndpoint.put("keyWeight", "/api/queues/:queue/weight", {
      params: queueParams,
      payload: WeightInput,
      success: Schema.Struct({ queue: Schema.String, key: Schema.String, weight: Schema.Number }),
      error: readErrors
    }).middleware(AdminAuth).annotate(HttpApi.PayloadParseOptions, { onExcessProperty: "error" }),
    "Set a key's weight in fair claiming (1 to 100; messages sent from now on); needs the admin token"
  ))
  .add(summarized(
    HttpApiEndpoint.get("flow", "/api/queues/:queue/flow", { params: queueParams, success: FlowStatusRow, error: readErrors })
      .middleware(ReadAuth),
    "What holds a queue back now: its limits, messages in flight, keys at their limit, blocked FIFO keys, full rate windows"
  ))
  .add(summarized(
    HttpApiEndpoint.get("workflows", "/api/workflows", {
      query: {
        status: Schema.optionalKey(WorkflowStatusInput),
        workflow: Schema.optionalKey(WorkflowName),
        limit: Schema.optionalKey(Limit)
      },
      success: Schema.Array(ExecutionRow),
      error: readErrors
    }).middleware(ReadAuth),
    "Workflow executions, newest first (at most limit, default 100), optionally of one status or workflow: what each is suspended on, its clocks, runs and recorded activities"
  ))
  .add(summarized(
    HttpApiEndpoint.get("workflow", "/api/workflows/:workflow/:executionId", {
      params: { workflow: WorkflowName, executionId: ExecutionIdInput },
      success: ExecutionDetail,
      error: [Unavailable, NotFound]
    }).middleware(ReadAuth),
    "One workflow execution: its payload and last result, its activity attempts, done deferreds and clocks"
  ))
  .add(summarized(
    HttpApiEndpoint.get("counters", "/api/counters", { success: Counters }).middleware(ReadAuth),
    "Counters of this process (the serving one, not the fleet): leases lost by reason, double runs, claims reaped, cancels"
  ))
  .add(summarized(
    HttpApiEndpoint.get("throughput", "/api/stats/throughput", {
      query: { minutes: Schema.optionalKey(MinutesInput), queue: Schema.optionalKey(QueueName) },
      success: ThroughputAnswer,
      error: readErrors
    }).middleware(ReadAuth),
    "Fleet-wide finished attempts per minute, per queue and task (completed, retried, dead-lettered, lease-lost, cancelled), from the attempt history; default the last 60 minutes"
  ))
  .add(summarized(
    HttpApiEndpoint.get("depthHistory", "/api/stats/depth", {
      query: { minutes: Schema.optionalKey(MinutesInput), queue: Schema.optionalKey(QueueName) },
      success: DepthAnswer,
      error: readErrors
    }).middleware(ReadAuth),
    "Queue depths over time, as sampled into the database every 10 s by one worker at a time; default the last 180 minutes"
  ))
  .add(summarized(
    HttpApiEndpoint.get("search", "/api/messages", {
      query: { ...FilterFields, before: Schema.optionalKey(MessageIdInput), limit: Schema.optionalKey(Limit) },
      success: MessagePage,
      error: readErrors
    }).middleware(ReadAuth),
    "Search messages by queue, task, state, key, id range (from, to) and a payload field (payload=customer.id = 42), newest first; next is the before of the next page"
  ))
  .add(summarized(
    HttpApiEndpoint.post("retry", "/api/messages/retry", {
      payload: Schema.Struct({ ids: Ids }),
      success: Schema.Struct({ retried: Schema.Array(Schema.String) }),
      error: readErrors
    }).middleware(AdminAuth),
    "Make delayed messages (waiting for a retry backoff or a delay) ready now; needs the admin token"
  ))
  .add(summarized(
    HttpApiEndpoint.get("bulkCount", "/api/bulk/:action/count", {
      params: { action: BulkActionInput },
      query: FilterFields,
      success: BulkCount,
      error: readErrors
    }).middleware(ReadAuth),
    "How many messages a bulk action (redrive, purge, cancel, retry) would touch now, for the filter given"
  ))
  .add(summarized(
    HttpApiEndpoint.post("bulk", "/api/bulk/:action", {
      params: { action: BulkActionInput },
      payload: BulkInput,
      success: BulkOutcomeSchema,
      error: readErrors
    }).middleware(AdminAuth),
    "Run a bulk action on every message the filter selects, in batches of 500 (idempotent: run it again to finish one cut short); needs the admin token"
  ))
  .add(summarized(
    HttpApiEndpoint.get("schedules", "/api/schedules", { success: Schema.Array(ScheduleRow), error: readErrors }).middleware(ReadAuth),
    "Every stored schedule: cron, last and next slot, when a worker last declared it (seen false: NOT SEEN)"
  ))
  .add(summarized(
    HttpApiEndpoint.post("trigger", "/api/schedules/:key/trigger", {
      params: { key: QueueName },
      success: TriggerOutcome,
      error: [Unavailable, NotFound]
    }).middleware(AdminAuth),
    "Send a schedule's message now, outside its slots; needs the admin token"
  ))
  .middleware(InputErrors)

/** An API of the admin group alone (the handlers are built against it; any `leasehold` API holding the group can serve them). */
export const AdminApi = HttpApi.make("leasehold").add(AdminGroup)
