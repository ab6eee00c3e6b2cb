/**
 * test/support/RequireTool.ts: a suite that needs PgBouncer or Chromium skips with one line
 * (what, and the install command) where the tool is missing, and runs under CI whatever.
 */
import { afterEach, assert, describe, it, vi } from "vitest"
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { findTool, isCi, requireTool } from "./support/RequireTool.ts"

const dirs: Array<string> = []
afterEach(() => {
  vi.restoreAllMocks()
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true })
})

/** A folder holding an executable (or, with `mode` 0o644, a plain file) named `name`. */
const folderWith = (name: string, mode = 0o755) => {
  const dir = mkdtempSync(join(tmpdir(), "leasehold-tool-"))
  dirs.push(dir)
  writeFileSync(join(dir, name), "#!/bin/sh\n")
  chmodSync(join(dir, name), mode)
  return dir
}

const nowhere = { knownPaths: [] as Array<string> }

describe("requireTool", () => {
  it("CI: set and not false/0/empty", () => {
    assert.isTrue(isCi({ CI: "true" }))
    assert.isTrue(isCi({ CI: "1" }))
    assert.isFalse(isCi({}))
    assert.isFalse(isCi({ CI: "" }))
    assert.isFalse(isCi({ CI: "false" }))
    assert.isFalse(isCi({ CI: " 0 " }))
  })

  it("missing outside CI: skips, printing one line with what is skipped and the install command", () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined)
    const tool = requireTool("pgbouncer", "the pooler tests", { ...nowhere, env: { PATH: folderWith("other") } })
    assert.isFalse(tool.runs)
    assert.isUndefined(tool.path)
    assert.strictEqual(tool.skipNote, " (skipped: pgbouncer is not installed; apt-get install -y pgbouncer)")
    assert.strictEqual(warn.mock.calls.length, 1)
    const line = String(warn.mock.calls[0]![0])
    assert.notInclude(line, "\n")
    assert.include(line, "skipped the pooler tests")
    assert.include(line, "apt-get install -y pgbouncer")
  })

  it("missing under CI=true: runs (so the suite fails loudly), prints nothing", () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined)
    const tool = requireTool("chromium", "the browser test", { ...nowhere, env: { PATH: "", CI: "true" } })
    assert.isTrue(tool.runs)
    assert.isUndefined(tool.path)
    assert.strictEqual(tool.skipNote, "")
    assert.strictEqual(tool.install, "apt-get install -y chromium")
    assert.strictEqual(warn.mock.calls.length, 0)
  })

  it("present: found on the PATH (executables only) or at its Debian path, and runs", () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined)
    const plain = folderWith("pgbouncer", 0o644)
    const bin = folderWith("pgbouncer")
    assert.strictEqual(findTool("pgbouncer", { ...nowhere, env: { PATH: plain } }), undefined)
    const tool = requireTool("pgbouncer", "the pooler tests", { ...nowhere, env: { PATH: `${plain}:${bin}` } })
    assert.strictEqual(tool.path, join(bin, "pgbouncer"))
    assert.isTrue(tool.runs)
    const known = join(folderWith("chromium"), "chromium")
    assert.strictEqual(findTool("chromium", { knownPaths: [known], env: { PATH: bin } }), known)
    assert.strictEqual(warn.mock.calls.length, 0)
  })
})
