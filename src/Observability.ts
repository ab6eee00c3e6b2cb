/**
 * Exporting what leasehold measures: its metrics (Effect `Metric`s in effect's
 * default registry, see `QueueMetrics`), its spans and its logs. One layer each:
 *
 * - {@link layerPrometheus}: Prometheus pulls. The `/metrics` route of
 *   leasehold's HTTP server (`Http.layer`) serves every metric in Prometheus
 *   text format while this layer is provided.
 * - {@link layerOtlp} / {@link layerOtlpFromEnv}: OTLP/HTTP pushes traces,
 *   metrics and logs to a collector, with effect's own `Otlp` modules.
 *
 * Both are built on `effect/observability` and need nothing else installed.
 *
 * @since 0.1.0
 */
import { Config, Context, type Duration, Effect, Layer } from "effect"
import type { OtlpExporter } from "effect/observability"
import * as Read from "./config/read.ts"
import { redactSecrets } from "./internal/redact.ts"
import { ConfigInvalid } from "./QueueError.ts"

/** How metrics are rendered for Prometheus. */
export interface PrometheusOptions {
  /** Prepended to every metric name with an underscore (`myapp` gives `myapp_leasehold_messages_acked`). */
  readonly prefix?: string | undefined
}

/** The Prometheus export: what `Http.layer` serves on `GET /metrics` while it is provided. */
export class Prometheus extends Context.Service<Prometheus, {
  /** Every metric of effect's default registry (leasehold's and the application's) in Prometheus text format. */
  readonly scrape: Effect.Effect<string>
}>()("leasehold/Prometheus") {}

/** The content type of the Prometheus text exposition format. */
export const prometheusContentType = "text/plain; version=0.0.4; charset=utf-8"

/**
 * Turn on the Prometheus export. Use it when Prometheus (or an agent that
 * scrapes like it) collects your metrics: provide it next to `Http.layer`,
 * whose `GET /metrics` then answers with every metric of effect's default
 * registry, leasehold's counters, gauges and histograms and your own, rendered
 * by effect's `PrometheusMetrics`. Without it, `/metrics` answers 404.
 *
 * Serving metrics on a router of your own instead: effect's
 * `PrometheusMetrics.layerHttp()` adds the same route to any `HttpRouter`.
 */
export const layerPrometheus = (options: PrometheusOptions = {}): Layer.Layer<Prometheus> =>
  // effect's PrometheusMetrics is loaded by the first scrape: a worker that provides this layer
  // but serves no HTTP (LEASEHOLD_HTTP_PORT unset) never loads it (test/ImportCost.test.ts).
  Layer.succeed(
    Prometheus,
    Prometheus.of({
      scrape: Effect.flatMap(
        Effect.promise(() => import("effect/observability/PrometheusMetrics")),
        (PrometheusMetrics) => PrometheusMetrics.format({ prefix: options.prefix })
      )
    })
  )

/** Where and how to push over OTLP/HTTP. */
export interface OtlpOptions {
  /**
   * The collector's base URL, e.g. `http://localhost:4318`: traces go to
   * `<url>/v1/traces`, metrics to `<url>/v1/metrics`, logs to `<url>/v1/logs`.
   */
  readonly url: string
  /** `service.name` of every span, metric and log record. */
  readonly serviceName: string
  readonly serviceVersion?: string | undefined
  /** More resource attributes (`deployment.environment`, ...). */
  readonly attributes?: Record<string, unknown> | undefined
  /** Headers of every export request (an API key of a hosted collector). */
  readonly headers?: Record<string, string> | undefined
  /** How often metrics are pushed (default: effect's, 10 s). */
  readonly metricsInterval?: Duration.Input | undefined
  /** How often buffered spans and logs are pushed (default: effect's, 1 s). */
  readonly exportInterval?: Duration.Input | undefined
  /** How long the final export may take when the worker stops (default: effect's). */
  readonly shutdownTimeout?: Duration.Input | undefined
}

/**
 * Push traces, metrics and logs over OTLP/HTTP (JSON) to a collector (the
 * OpenTelemetry Collector, Jaeger, Tempo, Honeycomb, ...), with effect's
 * `Otlp.layerJson` over `fetch`. Use it when you run a collector, or when you
 * want spans: Prometheus carries metrics only. Provide it above the worker's
 * layer so the consumer's spans (`leasehold.claim`, `leasehold.handle`, ...),
 * its metrics and its log lines all go out; the last batch is flushed when the
 * worker stops. It does not replace the console logger.
 */
export const layerOtlp = (options: OtlpOptions): Layer.Layer<OtlpExporter.Flusher> =>
  // effect's Otlp and its HTTP client are loaded when the layer is built (as layerPrometheus).
  Layer.unwrap(Effect.map(
    Effect.promise(() => Promise.all([import("effect/observability/Otlp"), import("effect/http/FetchHttpClient")])),
    ([Otlp, FetchHttpClient]) => otlpLayer(Otlp, FetchHttpClient, options)
  ))

const otlpLayer = (
  Otlp: typeof import("effect/observability/Otlp"),
  FetchHttpClient: typeof import("effect/http/FetchHttpClient"),
  options: OtlpOptions
) =>
  Otlp.layerJson({
    baseUrl: options.url,
    resource: {
      serviceName: options.serviceName,
      serviceVersion: options.serviceVersion,
      ...(options.attributes === undefined ? {} : { attributes: options.attributes })
    },
    headers: options.headers,
    metricsExportInterval: options.metricsInterval,
    tracerExportInterval: options.exportInterval,
    loggerExportInterval: options.exportInterval,
    shutdownTimeout: options.shutdownTimeout
  }).pipe(Layer.provide(FetchHttpClient.layer))

/** The standard OpenTelemetry variables {@link layerOtlpFromEnv} reads. */
export const variables = {
  endpoint: "OTEL_EXPORTER_OTLP_ENDPOINT",
  serviceName: "OTEL_SERVICE_NAME"
} as const

/** What {@link layerOtlpFromEnv} reads: the collector's endpoint (none: no export) and the service name. */
export interface OtlpSettings {
  readonly endpoint: string | undefined
  readonly serviceName: string
}

/**
 * The OpenTelemetry variables as one `Config` description: `OTEL_EXPORTER_OTLP_ENDPOINT` (an
 * http(s) URL; unset or blank: none) and `OTEL_SERVICE_NAME` (default `leasehold`).
 */
export const otlpConfig: Config.Config<OtlpSettings> = Config.all({
  endpoint: Read.text(variables.endpoint, { trim: true }).pipe(Read.check((endpoint) => {
    if (endpoint === undefined) return Effect.succeed(undefined)
    const url = URL.canParse(endpoint) ? new URL(endpoint) : undefined
    return url !== undefined && (url.protocol === "http:" || url.protocol === "https:")
      ? Effect.succeed(endpoint)
      : Effect.fail(
        new ConfigInvalid({
          variable: variables.endpoint,
          rule: "an http(s) URL",
          message: `${variables.endpoint}: ${JSON.stringify(redactSecrets(endpoint))} is invalid; expected an http(s) URL such as http://localhost:4318`
        })
      )
  })),
  serviceName: Config.map(Read.text(variables.serviceName, { trim: true }), (name) => name ?? "leasehold")
})

/**
 * {@link layerOtlp} configured by the standard OpenTelemetry variables:
 * `OTEL_EXPORTER_OTLP_ENDPOINT` (the collector's base URL; unset or empty: no
 * export at all, so the same worker runs with or without a collector) and
 * `OTEL_SERVICE_NAME` (default `leasehold`). Use it in a worker whose
 * deployment decides whether to export. An endpoint that is not an http(s) URL
 * fails with `ConfigInvalid` naming the variable (credentials in it are never
 * echoed).
 */
export const layerOtlpFromEnv = (
  options: Omit<OtlpOptions, "url" | "serviceName"> = {}
): Layer.Layer<never, ConfigInvalid> =>
  Layer.unwrap(Effect.map(Read.load(otlpConfig), ({ endpoint, serviceName }) =>
    endpoint === undefined ? Layer.empty : layerOtlp({ ...options, url: endpoint, serviceName })))
