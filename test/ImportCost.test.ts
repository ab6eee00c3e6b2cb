/**
 * What importing leasehold costs a worker: `@effect/platform-node`'s index (HTTP server, undici,
 * websockets, cluster, ...) adds ~30-40 MB of RSS to a process that imports it. leasehold's index
 * must not pull it in: `Http` loads the Node HTTP server when its layer is built. Checked in a
 * child process with a module resolve hook that lists what was loaded.
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

describe("the cost of importing leasehold", () => {
  it("the hook sees what a module loads (so the next check can fail)", () => {
    const files = loaded("@effect/platform-node/NodeHttpServer")
    assert.include(files, "@effect/platform-node/dist/NodeHttpServer.js")
  })

  it("importing leasehold loads nothing of @effect/platform-node (no HTTP server until Http's layer is built)", () => {
    assert.deepStrictEqual(loaded("leasehold"), [])
  })
})
