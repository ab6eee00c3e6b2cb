/**
 * What importing leasehold costs a worker. Every module a process loads stays in its heap (source
 * and code) and in its RSS: importing leasehold's index was 122 MB of RSS, 507 modules, before the
 * parts a worker does not run were made to load when their layer is built (106 MB, 462 modules;
 * docs/benchmarks.md, "Import cost"). These checks keep them out of the import:
 * `@effect/platform-node`'s index and HTTP server, what serves HTTP (effect's `HttpApiBuilder`,
 * the API reference, the dashboard page, the handlers), the metric exporters and the workflow
 * engine. Checked in a child process with a module resolve hook that lists what was loaded.
 */
import { assert, describe, it } from "@effect/vitest"
import { execFileSync } from "node:child_process"

const loaded = (specifier: string): ReadonlyArray<string> =>
  JSON.parse(
    execFileSync(process.execPath, ["--conditions=leasehold-source", "test/fixtures/loaded-modules.mjs", specifier], {
      encoding: "utf8",
      timeout: 60_000
    })
  )

/**
 * What a worker that serves no HTTP, exports no metrics and runs no workflows must not load, by
 * the module whose import (in a layer's construction) loads it.
 */
const lazy: ReadonlyArray<{ readonly loadedBy: string; readonly files: ReadonlyArray<string> }> = [
  {
    loadedBy: "../../src/http/serve.ts",
    files: [
      "@effect/platform-node/dist/NodeHttpServer.js",
      "node:http",
      "effect/dist/http-api/HttpApiBuilder.js",
      "effect/dist/http-api/HttpApiScalar.js",
      "src/http/serve.ts",
      "src/http/health.ts",
      "src/http/dashboard.ts"
    ]
  },
  { loadedBy: "../../src/http/adminHandlers.ts", files: ["src/http/adminHandlers.ts", "src/http/adminInsights.ts", "src/http/adminFlow.ts"] },
  // Observability.layerPrometheus loads it on the first scrape, not when the layer is built.
  { loadedBy: "effect/observability/PrometheusMetrics", files: ["effect/dist/observability/PrometheusMetrics.js"] },
  { loadedBy: "effect/observability/Otlp", files: ["effect/dist/observability/Otlp.js"] },
  { loadedBy: "effect/http/FetchHttpClient", files: ["effect/dist/http/FetchHttpClient.js"] },
  {
    loadedBy: "../../src/workflow/engine.ts",
    files: ["src/workflow/engine.ts", "src/workflow/signals.ts", "effect/dist/workflow/WorkflowEngine.js"]
  },
  { loadedBy: "../../src/workflow/runner.ts", files: ["src/workflow/runner.ts"] }
]

const present = (files: ReadonlyArray<string>, wanted: ReadonlyArray<string>) => wanted.filter((file) => files.includes(file))

describe("the cost of importing leasehold", () => {
  it("the hook sees what a module loads (so the checks below can fail)", () => {
    assert.include(loaded("@effect/platform-node/NodeHttpServer"), "@effect/platform-node/dist/NodeHttpServer.js")
    for (const { files, loadedBy } of lazy) assert.deepStrictEqual(present(loaded(loadedBy), files), files, loadedBy)
  })

  it("importing leasehold loads nothing of @effect/platform-node (no HTTP server until Http's layer is built)", () => {
    assert.deepStrictEqual(loaded("leasehold").filter((file) => file.startsWith("@effect/platform-node/")), [])
  })

  it("importing leasehold loads no serving code, exporter or workflow engine until their layers are built", () => {
    assert.deepStrictEqual(present(loaded("leasehold"), lazy.flatMap(({ files }) => files)), [])
  })
})
