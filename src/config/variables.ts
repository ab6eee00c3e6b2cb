/**
 * Every `LEASEHOLD_*` environment variable leasehold reads, in one record: the consumer's,
 * the connection's, the HTTP server's, the admin token, the log level, session liveness and the
 * workflow engine's.
 * Every other map of variable names (`QueueConfig.variables`, `QueueConfig.httpVariables`, ...)
 * is a view of this one; docs/configuration.md and docs/operating.md list each (test/Readme.test.ts
 * checks both ways).
 *
 * @since 0.1.0
 */

/** Every `LEASEHOLD_*` variable, by the key the code names it with. */
export const env = {
  // How leasehold reaches PostgreSQL (QueueConfig.pgLayerFromEnv) and where its tables live.
  databaseUrl: "LEASEHOLD_DATABASE_URL",
  pooler: "LEASEHOLD_POOLER",
  directDatabaseUrl: "LEASEHOLD_DIRECT_DATABASE_URL",
  schema: "LEASEHOLD_SCHEMA",
  // The consumer (QueueConfig.fromEnv).
  queues: "LEASEHOLD_QUEUES",
  consumerId: "LEASEHOLD_CONSUMER_ID",
  concurrency: "LEASEHOLD_CONCURRENCY",
  batchSize: "LEASEHOLD_BATCH_SIZE",
  prefetch: "LEASEHOLD_PREFETCH",
  lease: "LEASEHOLD_LEASE",
  // Per queue (queue=value pairs): each overrides the consumer's for the queues it names.
  queueConcurrency: "LEASEHOLD_QUEUE_CONCURRENCY",
  queueBatchSize: "LEASEHOLD_QUEUE_BATCH_SIZE",
  queueLease: "LEASEHOLD_QUEUE_LEASE",
  leaseMargin: "LEASEHOLD_LEASE_MARGIN",
  maxRuntime: "LEASEHOLD_MAX_RUNTIME",
  pollInterval: "LEASEHOLD_POLL_INTERVAL",
  backoffMax: "LEASEHOLD_BACKOFF_MAX",
  shutdownGrace: "LEASEHOLD_SHUTDOWN_GRACE",
  renewerStopTimeout: "LEASEHOLD_RENEWER_STOP_TIMEOUT",
  healthStale: "LEASEHOLD_HEALTH_STALE",
  onLeaseLost: "LEASEHOLD_ON_LEASE_LOST",
  retryBase: "LEASEHOLD_RETRY_BASE",
  retryMax: "LEASEHOLD_RETRY_MAX",
  quarantineAfter: "LEASEHOLD_QUARANTINE_AFTER",
  unknownTaskAttempts: "LEASEHOLD_UNKNOWN_TASK_ATTEMPTS",
  unknownTaskDelay: "LEASEHOLD_UNKNOWN_TASK_DELAY",
  attemptRetention: "LEASEHOLD_ATTEMPT_RETENTION",
  // The worker's process (QueueConfig.processFromEnv): HTTP server, admin token, log level.
  httpPort: "LEASEHOLD_HTTP_PORT",
  httpHost: "LEASEHOLD_HTTP_HOST",
  httpAllowedHosts: "LEASEHOLD_HTTP_ALLOWED_HOSTS",
  httpBasePath: "LEASEHOLD_HTTP_BASE_PATH",
  adminToken: "LEASEHOLD_ADMIN_TOKEN",
  logLevel: "LEASEHOLD_LOG_LEVEL",
  // Session liveness (ConsumerPresence.modeFromEnv).
  sessionLiveness: "LEASEHOLD_SESSION_LIVENESS",
  // The workflow engine (LeaseholdWorkflow.layerFromEnv).
  workflowLease: "LEASEHOLD_WORKFLOW_LEASE",
  workflowPollInterval: "LEASEHOLD_WORKFLOW_POLL_INTERVAL",
  workflowConcurrency: "LEASEHOLD_WORKFLOW_CONCURRENCY",
  workflowShutdownGrace: "LEASEHOLD_WORKFLOW_SHUTDOWN_GRACE",
  workflowRetention: "LEASEHOLD_WORKFLOW_RETENTION"
} as const

/** The key of a variable in {@link env}. */
export type Variable = keyof typeof env
