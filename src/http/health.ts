/**
 * The handlers of leasehold's health and metrics routes (`Http.healthHandlers`,
 * `Http.metricsHandlers`): liveness from the consumer, readiness from the database, the
 * migrations and session liveness, and the Prometheus scrape. Loaded when a server layer is
 * built, with the rest of the serving code (`Http` stays light to import).
 */
import { Duration, Effect, Option } from "effect"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import * as SqlClient from "effect/sql/SqlClient"
import { Consumer } from "../Consumer.ts"
import { ConsumerPresence } from "../ConsumerPresence.ts"
import { seconds } from "../internal/format.ts"
import { redactSecrets } from "../internal/redact.ts"
import * as Migrations from "../Migrations.ts"
import { Prometheus } from "../Observability.ts"
import * as Probe from "../pg/probe.ts"
import { classify } from "../QueueError.ts"
import { StoreSettings } from "../StoreSettings.ts"
import { Api, type Check, MetricsOff, NotReady, Unhealthy } from "./api.ts"

/** How the HTTP server checks readiness. */
export interface ProbeOptions {
  /** Longest wait for the database's answer to `SELECT 1` (default 2 s). */
  readonly databaseTimeout?: Duration.Input | undefined
}

const detail = (error: { readonly message: string }) => redactSecrets(error.message)

/** `/healthz`: the consumer's own view of its liveness. */
const liveness = (consumer: Consumer["Service"]) =>
  Effect.gen(function*() {
    const health = yield* consumer.health
    const lastProgressAt = health.lastProgressAt.toISOString()
    if (health.healthy && !health.stopping) return { status: "live" as const, lastProgressAt, inFlight: health.inFlight }
    const fields = { lastProgressAt, inFlight: health.inFlight }
    // A failed loop has completed `failure`: it answers at once.
    const failure = yield* consumer.failure.pipe(Effect.flip, Effect.timeoutOption(10))
    if (Option.isSome(failure)) {
      return yield* new Unhealthy({ ...fields, reason: "failed", message: `claim loop failed: ${detail(failure.value)}` })
    }
    if (health.stopping) return yield* new Unhealthy({ ...fields, reason: "stopping", message: "the consumer is shutting down" })
    const stale = Date.now() - health.lastProgressAt.getTime()
    return yield* new Unhealthy({
      ...fields,
      reason: "stale",
      message: `no claim loop progress since ${lastProgressAt} (${seconds(stale)} ago; stale after ${seconds(consumer.settings.healthStaleMs)})`
    })
  })

type CheckResult = typeof Check.Type

const check = (name: CheckResult["name"], ok: boolean | "skipped", text: string): CheckResult => ({
  name,
  status: ok === "skipped" ? ok : ok ? "ok" : "failed",
  detail: redactSecrets(text)
})

/** What readiness looks at besides the consumer: each optional. */
interface Probed {
  readonly sql: Option.Option<SqlClient.SqlClient>
  readonly store: Option.Option<StoreSettings["Service"]>
  readonly presence: Option.Option<ConsumerPresence["Service"]>
}

/** `/readyz`: the database, the migrations, and presence when configured. */
const readiness = (consumer: Consumer["Service"], { presence, sql, store }: Probed, options: ProbeOptions) =>
  Effect.gen(function*() {
    const timeout = Duration.fromInputUnsafe(options.databaseTimeout ?? "2 seconds")
    const checks: Array<CheckResult> = []
    if (Option.isNone(sql)) {
      checks.push(check("database", true, "no SQL client (in-memory store)"), check("migrations", true, "no SQL client"))
    } else {
      const client = sql.value
      const answered = yield* Probe.ping(client).pipe(classify("readiness probe"), Effect.timeoutOption(timeout), Effect.result)
      const database = answered._tag === "Failure"
        ? check("database", false, detail(answered.failure))
        : Option.isNone(answered.success)
        ? check("database", false, `no answer to SELECT 1 within ${seconds(Duration.toMillis(timeout))}`)
        : check("database", true, "SELECT 1 answered")
      checks.push(database)
      if (database.status !== "ok") {
        checks.push(check("migrations", "skipped", "not checked: the database is unreachable"))
      } else {
        const schema = Option.isSome(store) ? store.value.schema : Migrations.defaultSchema
        const pending = yield* Migrations.pending({ schema }).pipe(
          Effect.provideService(SqlClient.SqlClient, client),
          Effect.timeoutOption(timeout),
          Effect.result
        )
        checks.push(
          pending._tag === "Failure"
            ? check("migrations", false, detail(pending.failure))
            : Option.isNone(pending.success)
            ? check("migrations", false, `no answer within ${seconds(Duration.toMillis(timeout))}`)
            : pending.success.value.length > 0
            ? check("migrations", false, `schema ${schema}: ${pending.success.value.length} migration(s) not applied (${pending.success.value.map(([id, name]) => `${id} ${name}`).join(", ")})`)
            : check("migrations", true, `schema ${schema}: all ${Migrations.known.length} applied`)
        )
      }
    }
    checks.push(yield* presenceCheck(consumer, presence))
    const failed = checks.filter((c) => c.status === "failed")
    if (failed.length === 0) return { status: "ready" as const, checks }
    return yield* new NotReady({
      failed: failed.map((c) => c.name),
      message: `not ready: ${failed.map((c) => `${c.name} (${c.detail})`).join("; ")}`,
      checks
    })
  })

const presenceCheck = (consumer: Consumer["Service"], presence: Option.Option<ConsumerPresence["Service"]>) =>
  Effect.gen(function*() {
    if (Option.isNone(presence)) return check("presence", true, "session liveness not configured")
    if (presence.value.registration === undefined) return check("presence", true, "registration not observable")
    const id = consumer.settings.consumerId
    const registration = yield* presence.value.registration(id)
    if (Option.isNone(registration)) return check("presence", false, `consumer ${id} is not registered`)
    const status = yield* registration.value.status
    switch (status.liveness) {
      case "active":
        return check("presence", true, `registered, lock held by backend ${status.backendPid}`)
      case "off":
        return check("presence", true, "session liveness off")
      case "unavailable":
        return check("presence", true, "session liveness unavailable (transaction-mode pooler?): lease expiry only")
      case "reconnecting":
        return check("presence", false, "the presence session is being re-established (its claims stay protected by their leases)")
    }
  })

/** The handlers of {@link HealthGroup} over the `Consumer` in context. */
export const healthHandlers = (options: ProbeOptions = {}) =>
  HttpApiBuilder.group(Api, "health", (handlers) =>
    Effect.gen(function*() {
      const consumer = yield* Consumer
      // Optional services, read once: the readiness checks skip what is not there.
      const probed: Probed = {
        sql: yield* Effect.serviceOption(SqlClient.SqlClient),
        store: yield* Effect.serviceOption(StoreSettings),
        presence: yield* Effect.serviceOption(ConsumerPresence)
      }
      return handlers
        .handle("healthz", () => liveness(consumer))
        .handle("readyz", () => readiness(consumer, probed, options))
    }))

/** The handler of {@link MetricsGroup}: the Prometheus export in context, if any. */
export const metricsHandlers = HttpApiBuilder.group(Api, "metrics", (handlers) =>
  Effect.gen(function*() {
    const prometheus = yield* Effect.serviceOption(Prometheus)
    return handlers.handle("metrics", () =>
      Option.isSome(prometheus)
        ? prometheus.value.scrape
        : Effect.fail(new MetricsOff({ message: "Prometheus export is off: provide Observability.layerPrometheus()" })))
  }))
