/**
 * A real PgBouncer in front of a PostgreSQL server, for the pooler tests and
 * the chaos run behind a pooler (bench/chaos/run.ts --pooler): started
 * as a child process on a free local port, in `pool_mode=transaction` or
 * `session`, with a small pool (3 server connections) so that clients really
 * share backends. Config and userlist live in a temp folder removed on stop.
 *
 * PgBouncer refuses to run as root: as root it is started with `-u postgres`
 * (it drops to that user after reading its config), the user the test server
 * runs as.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Context, Effect, Layer } from "effect"
import { freePort } from "../../dev/EmbeddedPostgres.ts"
import { findTool } from "./RequireTool.ts"

/** Where Debian's package installs it, else the first on the PATH; else a spawn that fails naming it. */
const binary = findTool("pgbouncer") ?? "pgbouncer"

export type PoolMode = "transaction" | "session"

/** A running PgBouncer. */
export interface PgBouncer {
  /** The pooled URL: same user, password and database as the server's, PgBouncer's port. */
  readonly url: string
  readonly port: number
  readonly mode: PoolMode
  /** Its log so far (printed by the tests when they fail). */
  readonly log: ReadonlyArray<string>
  readonly stop: () => Promise<void>
}

export interface PgBouncerOptions {
  readonly mode: PoolMode
  /** The server's URL (postgres://user[:password]@host:port/db). */
  readonly serverUrl: string
  /** Server connections per user/database pair (default 3). */
  readonly poolSize?: number
  /**
   * Startup parameters to accept and drop (PgBouncer's `ignore_startup_parameters`), as some
   * deployments do; by default only `extra_float_digits`, and any other is refused.
   */
  readonly ignoreStartupParameters?: ReadonlyArray<string>
}

/** A quoted value of pgbouncer.ini / the userlist: no newline, quote doubled. */
const quote = (value: string): string => {
  if (/[\r\n]/.test(value)) throw new Error("PgBouncer settings cannot contain a newline")
  return `"${value.replaceAll("\"", "\"\"")}"`
}

/** A database or host name written into pgbouncer.ini as it is: letters, digits, `_.-` only. */
const plain = (value: string): string => {
  if (!/^[A-Za-z0-9_.-]+$/.test(value)) throw new Error(`PgBouncer helper: unsupported name ${JSON.stringify(value)}`)
  return value
}

/** Start PgBouncer and resolve once it listens ("process up" in its log). */
export const start = async (options: PgBouncerOptions): Promise<PgBouncer> => {
  const server = new URL(options.serverUrl)
  const user = decodeURIComponent(server.username || "postgres")
  const password = decodeURIComponent(server.password)
  const database = decodeURIComponent(server.pathname.slice(1) || user)
  const dir = await mkdtemp(join(tmpdir(), "leasehold-pgbouncer-"))
  await chmod(dir, 0o755)
  const root = process.getuid?.() === 0
  const log: Array<string> = []
  let child: ChildProcess | undefined
  for (let attempt = 1; ; attempt++) {
    const port = await freePort()
    // The test server trusts local connections (EmbeddedPostgres runs initdb --auth=trust): the
    // client side trusts the userlist's users too. A password in the URL: scram for both sides.
    const ini = [
      "[databases]",
      `${plain(database)} = host=${plain(server.hostname)} port=${server.port || "5432"} dbname=${plain(database)}`,
      "[pgbouncer]",
      "listen_addr = 127.0.0.1",
      `listen_port = ${port}`,
      "unix_socket_dir =",
      `auth_type = ${password === "" ? "trust" : "scram-sha-256"}`,
      `auth_file = ${join(dir, "users.txt")}`,
      `pool_mode = ${options.mode}`,
      `default_pool_size = ${options.poolSize ?? 3}`,
      "max_client_conn = 200",
      // application_name is tracked by PgBouncer itself; any other parameter not listed is refused.
      `ignore_startup_parameters = ${["extra_float_digits", ...(options.ignoreStartupParameters ?? [])].map(plain).join(",")}`,
      "server_login_retry = 1",
      "log_connections = 0",
      "log_disconnections = 0"
    ].join("\n")
    await writeFile(join(dir, "pgbouncer.ini"), `${ini}\n`, { mode: 0o644 })
    await writeFile(join(dir, "users.txt"), `${quote(user)} ${quote(password)}\n`, { mode: 0o644 })
    const args = root ? ["-u", "postgres", join(dir, "pgbouncer.ini")] : [join(dir, "pgbouncer.ini")]
    const proc = spawn(binary, args, { stdio: ["ignore", "pipe", "pipe"] })
    child = proc
    const ready = await new Promise<boolean>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`PgBouncer did not start within 10 s:\n${log.join("\n")}`)), 10_000)
      const onData = (chunk: Buffer) => {
        for (const line of chunk.toString("utf8").split("\n")) {
          if (line === "") continue
          log.push(line)
          if (line.includes("process up")) {
            clearTimeout(timer)
            resolve(true)
          }
        }
      }
      proc.stdout!.on("data", onData)
      proc.stderr!.on("data", onData)
      proc.on("error", (error) => {
        clearTimeout(timer)
        reject(new Error(`could not run ${binary}: ${error.message} (apt-get install -y pgbouncer)`))
      })
      proc.on("exit", () => {
        clearTimeout(timer)
        resolve(false)
      })
    })
    if (ready) {
      const url = new URL(options.serverUrl)
      url.hostname = "127.0.0.1"
      url.port = String(port)
      const stop = async () => {
        const running = child
        child = undefined
        if (running !== undefined && running.exitCode === null && running.signalCode === null) {
          const exited = new Promise<void>((resolve) => running.once("exit", () => resolve()))
          running.kill("SIGTERM") // immediate shutdown: a session-mode client would hold a safe one up
          const timer = setTimeout(() => running.kill("SIGKILL"), 5_000)
          await exited
          clearTimeout(timer)
        }
        await rm(dir, { recursive: true, force: true })
      }
      return { url: url.toString(), port, mode: options.mode, log, stop }
    }
    const bindRace = log.some((line) => line.includes("Address already in use"))
    if (!bindRace || attempt >= 3) {
      await rm(dir, { recursive: true, force: true })
      throw new Error(`PgBouncer exited before it was ready:\n${log.join("\n")}`)
    }
  }
}

/** PgBouncer as a scoped resource: started on acquire, stopped when the scope closes. */
export const acquire = (options: PgBouncerOptions) =>
  Effect.acquireRelease(Effect.promise(() => start(options)), (bouncer) => Effect.promise(() => bouncer.stop()))

/** A layer that runs PgBouncer for its lifetime and provides it. */
export class Bouncer extends Context.Service<Bouncer, PgBouncer>()("test/PgBouncer") {}

/** {@link Bouncer} in `mode` in front of the server at `serverUrl` (tests: `PgTest.databaseUrl()`). */
export const layer = (mode: PoolMode, options: Omit<PgBouncerOptions, "mode">): Layer.Layer<Bouncer> =>
  Layer.effect(Bouncer, acquire({ ...options, mode }))
