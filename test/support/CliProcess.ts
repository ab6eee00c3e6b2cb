/**
 * The `leasehold` command (src/bin/leasehold.ts) as a real process against the test server,
 * with LEASEHOLD_SCHEMA set and no other LEASEHOLD_* variable of the caller's.
 */
import { spawn } from "node:child_process"
import { resolve } from "node:path"
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
