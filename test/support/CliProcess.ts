/**
 * The `leasehold` command (src/bin/leasehold.ts) as a real process against the test server,
 * with LEASEHOLD_SCHEMA set and no other LEASEHOLD_* variable of the caller's; or run in this
 * process ({@link inProcess}: the command's own code and exit code, without a process start).
 */
import { NodeServices } from "@effect/platform-node"
import { ConfigProvider, Effect } from "effect"
import { TestConsole } from "effect/testing"
import { spawn } from "node:child_process"
import { resolve } from "node:path"
import * as Cli from "../../src/cli/cli.ts"
import * as PgTest from "./PgTest.ts"

/** How a run of the command ended. */
export interface CliResult {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
  /** When it exited (ms, this machine's clock): whatever it wrote had committed by then. */
  readonly exitedAt: number
}

/** Run `leasehold <args>` on `schema` to its end (killed after 30 s). */
export const cli = (args: ReadonlyArray<string>, schema: string) =>
  new Promise<CliResult>((done, fail) => {
    const env: NodeJS.ProcessEnv = {}
    for (const [key, value] of Object.entries(process.env)) if (!key.startsWith("LEASEHOLD_")) env[key] = value
    const proc = spawn(process.execPath, [resolve("src/bin/leasehold.ts"), ...args], {
      env: { ...env, LEASEHOLD_DATABASE_URL: PgTest.databaseUrl(), LEASEHOLD_SCHEMA: schema },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    proc.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")))
    proc.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")))
    const timer = setTimeout(() => proc.kill("SIGKILL"), 30_000)
    proc.on("error", fail)
    proc.on("close", (code) => {
      clearTimeout(timer)
      done({ code, stdout, stderr, exitedAt: Date.now() })
    })
  })

/** Run `leasehold <args>` on `schema` in this process, its output captured: the exit code the command would exit with. */
export const inProcess = (args: ReadonlyArray<string>, schema: string) =>
  Effect.runPromise(Effect.gen(function*() {
    const exit = yield* Effect.exit(Cli.run(args))
    let code = -1
    Cli.teardown(exit, (c) => {
      code = c
    })
    const stdout = (yield* TestConsole.logLines).map(String).join("\n")
    const stderr = (yield* TestConsole.errorLines).map(String).join("\n")
    return { code, stdout, stderr }
  }).pipe(
    Effect.provide(TestConsole.layer),
    Effect.provide(NodeServices.layer),
    Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnv({
      env: { LEASEHOLD_DATABASE_URL: PgTest.databaseUrl(), LEASEHOLD_SCHEMA: schema }
    })))
  ))
