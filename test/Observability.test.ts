/**
 * The export layers against real receivers:
 *
 * - `layerOtlp` pushes a span, a log line and a metric to an OTLP/HTTP
 *   collector (a plain Node HTTP server here, recording what it is sent), with
 *   the service name, and flushes when its scope closes;
 * - `layerOtlpFromEnv` exports nothing without `OTEL_EXPORTER_OTLP_ENDPOINT`,
 *   exports with `OTEL_SERVICE_NAME` when it is set, and refuses an endpoint
 *   that is not an http(s) URL with `ConfigInvalid`, without echoing a password;
 * - `layerPrometheus` scrapes effect's default registry, leasehold's metrics included.
 */
import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Exit, Metric } from "effect"
import { createServer, type Server } from "node:http"
import * as Observability from "../src/Observability.ts"
import * as QueueMetrics from "../src/QueueMetrics.ts"

interface Received {
  readonly path: string
  readonly body: string
}

/** A stand-in OTLP/HTTP collector on an ephemeral port: answers 200 and records every request. */
const collector = Effect.acquireRelease(
  Effect.callback<{ readonly url: string; readonly received: Array<Received> }>((resume) => {
    const received: Array<Received> = []
    const server: Server = createServer((request, response) => {
      const chunks: Array<Buffer> = []
      request.on("data", (chunk: Buffer) => chunks.push(chunk))
      request.on("end", () => {
        received.push({ path: request.url ?? "", body: Buffer.concat(chunks).toString("utf8") })
        response.writeHead(200, { "content-type": "application/json" }).end("{}")
      })
    })
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      resume(Effect.succeed({ url: `http://127.0.0.1:${port}`, received, server } as const))
    })
  }),
  (c) => Effect.callback<void>((resume) => { (c as unknown as { server: Server }).server.close(() => resume(Effect.void)) })
)

const withEnv = (env: Record<string, string>) => Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env })))

const probe = Metric.counter("leasehold_test_otlp_probe", { description: "a metric the OTLP test exports" })

/** A span with a log line inside, and a counter moved: one of each signal. */
const signals = (name: string) =>
  Effect.gen(function*() {
    yield* Metric.update(probe, 1)
    yield* Effect.logInfo(`log line of ${name}`)
  }).pipe(Effect.withSpan(name))

const sentTo = (received: ReadonlyArray<Received>, path: string) =>
  received.filter((r) => r.path === path).map((r) => r.body).join("\n")

describe("Observability", () => {
  it.live("layerOtlp pushes traces, logs and metrics with the service name, flushed when its scope closes", () =>
    Effect.gen(function*() {
      const { url, received } = yield* collector
      yield* signals("otlp.test.span").pipe(
        Effect.provide(Observability.layerOtlp({ url, serviceName: "leasehold-otlp-test", shutdownTimeout: "5 seconds" }))
      )
      const traces = sentTo(received, "/v1/traces")
      assert.include(traces, "otlp.test.span", `traces sent: ${received.map((r) => r.path).join(", ")}`)
      assert.include(traces, "leasehold-otlp-test")
      assert.include(sentTo(received, "/v1/logs"), "log line of otlp.test.span")
      assert.include(sentTo(received, "/v1/metrics"), "leasehold_test_otlp_probe")
    }).pipe(Effect.scoped), { timeout: 30_000 })

  it.live("layerOtlpFromEnv: nothing without OTEL_EXPORTER_OTLP_ENDPOINT; OTEL_SERVICE_NAME when set; a bad endpoint is ConfigInvalid", () =>
    Effect.gen(function*() {
      const { url, received } = yield* collector
      yield* signals("otlp.env.unset").pipe(Effect.provide(Observability.layerOtlpFromEnv()), withEnv({ OTEL_SERVICE_NAME: "nope" }))
      assert.deepStrictEqual(received, [], "no endpoint, no export")

      yield* signals("otlp.env.set").pipe(
        Effect.provide(Observability.layerOtlpFromEnv()),
        withEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: url, OTEL_SERVICE_NAME: "from-env-service" })
      )
      const traces = sentTo(received, "/v1/traces")
      assert.include(traces, "otlp.env.set")
      assert.include(traces, "from-env-service")

      for (const endpoint of ["localhost:4318", "ftp://collector:21", "postgres://u:hunter2-secret@db:5432/x"]) {
        const exit = yield* Effect.void.pipe(Effect.provide(Observability.layerOtlpFromEnv()), withEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: endpoint }), Effect.exit)
        assert.isTrue(Exit.isFailure(exit), endpoint)
        const reason = Exit.isFailure(exit) ? exit.cause.reasons.find((r) => r._tag === "Fail") : undefined
        const error = reason?._tag === "Fail" ? reason.error : undefined
        assert.strictEqual(error?._tag, "ConfigInvalid", endpoint)
        assert.strictEqual(error?.variable, "OTEL_EXPORTER_OTLP_ENDPOINT")
        assert.strictEqual(error?.rule, "an http(s) URL")
        assert.notInclude(error?.message ?? "", "hunter2-secret")
      }
    }).pipe(Effect.scoped), { timeout: 30_000 })

  it.effect("layerPrometheus scrapes effect's default registry, leasehold's metrics included, with an optional prefix", () =>
    Effect.gen(function*() {
      yield* Metric.update(QueueMetrics.acked, 0)
      const plain = yield* Effect.flatMap(Observability.Prometheus, (p) => p.scrape).pipe(Effect.provide(Observability.layerPrometheus()))
      assert.match(plain, /^# TYPE leasehold_messages_acked counter$/m)
      const prefixed = yield* Effect.flatMap(Observability.Prometheus, (p) => p.scrape).pipe(
        Effect.provide(Observability.layerPrometheus({ prefix: "myapp" }))
      )
      assert.match(prefixed, /^# TYPE myapp_leasehold_messages_acked counter$/m)
    }))
})
