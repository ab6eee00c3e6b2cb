/**
 * leasehold: a durable job queue on PostgreSQL for Effect v4, where a claim is
 * a renewable, fenced lease.
 *
 * @since 0.1.0
 */
export * as Admin from "./Admin.ts"
export * as Consumer from "./Consumer.ts"
export * as ConsumerPresence from "./ConsumerPresence.ts"
export * as FlowControl from "./FlowControl.ts"
export * as FlowDeclaration from "./FlowDeclaration.ts"
export * as Handler from "./Handler.ts"
export * as Http from "./Http.ts"
export * as LeaseholdWorkflow from "./LeaseholdWorkflow.ts"
export * as Lifecycle from "./Lifecycle.ts"
export * as MemoryQueueStore from "./MemoryQueueStore.ts"
export * as Message from "./Message.ts"
export * as Migrations from "./Migrations.ts"
export * as Observability from "./Observability.ts"
export * as PgQueueStore from "./PgQueueStore.ts"
export * as Pooler from "./Pooler.ts"
export * as QueueConfig from "./QueueConfig.ts"
export * as QueueDepth from "./QueueDepth.ts"
export * as QueueError from "./QueueError.ts"
export * as QueueMetrics from "./QueueMetrics.ts"
export * as QueueStore from "./QueueStore.ts"
export * as Scheduler from "./Scheduler.ts"
export * as StoreSettings from "./StoreSettings.ts"
export * as Task from "./Task.ts"
export * as TaskClient from "./TaskClient.ts"
export * as Testing from "./Testing.ts"
