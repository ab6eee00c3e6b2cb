/**
 * `npm run test:package`: leasehold as an application gets it, from the packed tarball.
 *
 * 1. `npm pack` (its `prepack` builds dist/) into a temp folder; the tarball ships dist/ (ESM
 *    JavaScript importing `.js`, `.d.ts`, source maps), src/, README.md, LICENSE, and no tests,
 *    bench, examples or CI files; the CLI keeps its `#!/usr/bin/env node` line.
 * 2. A scratch app outside the checkout (mktemp) depends on the tarball and the peers only, at the
 *    checkout's versions; `npm install` there; `npm ls effect` finds a single copy of effect.
 * 3. The app's worker and producer (test/package/app/) type-check against the published types with
 *    the checkout's tsc (a payload of the wrong type is refused).
 * 4. Against a PostgreSQL of its own (or LEASEHOLD_TEST_DATABASE_URL, else LEASEHOLD_DATABASE_URL,
 *    when set; a fresh schema either way, dropped after), on the checkout's Node 22: the producer sends typed tasks, the worker (`Consumer.launch` +
 *    `NodeRuntime.runMain`) runs them and dead-letters the unrecoverable one; from the app's
 *    node_modules/.bin, `leasehold stats` and `dead-letters list` exit 0 and name the queue / the
 *    dead message, `stats --json` parses, `--help` and `dead-letters redrive --help` exit 0; the
 *    worker's `/healthz` and `/readyz` answer 200 and its `/metrics` counts the acks (modules the
 *    package loads only when the HTTP layer is built); a SIGTERM while a 1.5 s task runs lets it
 *    finish, and the worker exits 0.
 *
 * Prints `test:package PASS` or `test:package FAIL: <why>` last; exits 1 on failure (the scratch
 * folder is then kept and named). Run by .ci/run after vitest, counted as one test.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process"
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { createServer } from "node:net"
import { dirname, join, resolve } from "node:path"
import { Effect, Layer, ManagedRuntime, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { type PostgresServer, startPostgres } from "../../dev/EmbeddedPostgres.ts"
import * as PgQueueStore from "../../src/PgQueueStore.ts"
import * as QueueConfig from "../../src/QueueConfig.ts"
import { QueueStore } from "../../src/QueueStore.ts"

const repo = resolve(import.meta.dirname, "../..")
const node = process.execPath
const tsc = join(repo, "node_modules/.bin/tsc")
const PEERS = ["effect", "@effect/sql-pg", "@effect/platform-node"] as const
const QUEUE = "package_test"
const started = Date.now()

const elapsed = () => `${((Date.now() - started) / 1000).toFixed(1)}s`
const step = (text: string) => console.log(`[test:package ${elapsed()}] ${text}`)

class Failure extends Error {}
function check(condition: unknown, message: string): asserts condition {
  if (!condition) throw new Failure(message)
}

/** Runs a command to completion; resolves with its output, rejects with it on a non-zero exit. */
const exec = (file: string, args: ReadonlyArray<string>, options: { cwd: string; env?: NodeJS.ProcessEnv; timeoutMs?: number }) =>
  new Promise<string>((resolvePromise, reject) => {
    execFile(file, args, {
      cwd: options.cwd,
      env: options.env ?? process.env,
      encoding: "utf8",
      maxBuffer: 64 * 1024 * 1024,
      timeout: options.timeoutMs ?? 120_000,
      killSignal: "SIGKILL"
    }, (error, stdout, stderr) => {
      if (error) reject(new Failure(`${file} ${args.join(" ")} failed (${error.code ?? error.signal ?? error.message}):\n${stdout}${stderr}`))
      else resolvePromise(stdout + stderr)
    })
  })

/** A long-running program, its output kept. */
interface Program {
  readonly name: string
  readonly proc: ChildProcess
  output: string
  exit: { code: number | null; signal: NodeJS.Signals | null } | undefined
}
const programs: Array<Program> = []

const launch = (name: string, file: string, args: ReadonlyArray<string>, cwd: string, env: NodeJS.ProcessEnv): Program => {
  const proc = spawn(file, args, { cwd, env, stdio: ["ignore", "pipe", "pipe"] })
  const program: Program = { name, proc, output: "", exit: undefined }
  programs.push(program)
  proc.stdout!.on("data", (chunk: Buffer) => (program.output += chunk.toString("utf8")))
  proc.stderr!.on("data", (chunk: Buffer) => (program.output += chunk.toString("utf8")))
  proc.on("exit", (code, signal) => (program.exit = { code, signal }))
  return program
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

const waitFor = async <A>(what: string, poll: () => A | undefined | Promise<A | undefined>, timeoutMs: number, program?: Program): Promise<A> => {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await poll()
    if (value !== undefined) return value
    if (program?.exit !== undefined) throw new Failure(`${program.name} exited ${JSON.stringify(program.exit)} while waiting for ${what}:\n${program.output}`)
    if (Date.now() > deadline) throw new Failure(`timed out after ${timeoutMs} ms waiting for ${what}${program ? `; ${program.name} printed:\n${program.output}` : ""}`)
    await sleep(100)
  }
}

const waitExit = (program: Program, timeoutMs: number) => waitFor(`${program.name} to exit`, () => program.exit, timeoutMs)

/** A TCP port free on 127.0.0.1 now (for the worker's HTTP server). */
const freePort = () =>
  new Promise<number>((resolvePromise, reject) => {
    const probe = createServer()
    probe.once("error", reject)
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address()
      probe.close(() => typeof address === "object" && address !== null ? resolvePromise(address.port) : reject(new Error("no port")))
    })
  })

/** GET `path` of the worker's server: its status and body. */
const get = async (port: number, path: string) => {
  const response = await fetch(`http://127.0.0.1:${port}${path}`)
  return { status: response.status, body: await response.text() }
}

const versionOf = (name: string): string =>
  (JSON.parse(readFileSync(join(repo, "node_modules", name, "package.json"), "utf8")) as { version: string }).version

const listFiles = (dir: string): Array<string> =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? listFiles(join(dir, entry.name)) : [join(dir, entry.name)]
  )

let work: string | undefined
let server: PostgresServer | undefined
let schema: string | undefined
let admin: ManagedRuntime.ManagedRuntime<QueueStore | SqlClient.SqlClient, unknown> | undefined

const main = async () => {
  work = mkdtempSync(join(tmpdir(), "leasehold-package-"))
  const packDir = join(work, "pack")
  const app = join(work, "app")
  mkdirSync(packDir)

  // -- 1. pack -------------------------------------------------------------------------------
  step("npm pack (prepack builds dist/)")
  await exec("npm", ["pack", "--pack-destination", packDir], { cwd: repo, timeoutMs: 120_000 })
  const tarballs = readdirSync(packDir).filter((f) => f.endsWith(".tgz"))
  check(tarballs.length === 1, `npm pack made ${tarballs.length} tarballs: ${tarballs.join(", ")}`)
  const tarball = join(packDir, tarballs[0]!)
  const listing = (await exec("tar", ["-tzf", tarball], { cwd: work })).split("\n").filter((l) => l !== "")
    .map((l) => l.replace(/^package\//, ""))
  const unwanted = listing.filter((f) => /^(test|bench|examples|scripts|dev|\.ci|\.tmp|node_modules)\//.test(f) || /^tsconfig|^vitest\.config/.test(f))
  check(unwanted.length === 0, `the tarball ships files users do not need: ${unwanted.join(", ")}`)
  // docs/: the README shows docs/dashboard-overview.png and links the guide's pages, on npm too.
  for (const needed of ["package.json", "README.md", "docs/dashboard-overview.png", "docs/workers.md", "LICENSE", "dist/index.js", "dist/index.d.ts", "dist/index.js.map", "dist/bin/leasehold.js", "src/index.ts"]) {
    check(listing.includes(needed), `the tarball lacks ${needed} (has: ${listing.slice(0, 20).join(", ")}...)`)
  }
  // The build leaves the checkout's bin executable: `npx leasehold` there runs it (not "Permission denied").
  const binMode = statSync(join(repo, "dist/bin/leasehold.js")).mode
  check((binMode & 0o111) !== 0, `dist/bin/leasehold.js is not executable after the build (mode ${(binMode & 0o777).toString(8)})`)
  // `npm pack --dry-run` lists the same files (scripts skipped: dist/ is built by now).
  const dryRun = await exec("npm", ["pack", "--dry-run", "--ignore-scripts", "--json"], { cwd: repo })
  const dryFiles = (JSON.parse(dryRun.slice(dryRun.indexOf("["))) as Array<{ files: Array<{ path: string }> }>)[0]!.files.map((f) => f.path)
  const dryUnwanted = dryFiles.filter((f) => /^(test|bench|examples|dev|\.ci)\//.test(f))
  check(dryUnwanted.length === 0, `npm pack --dry-run lists ${dryUnwanted.join(", ")}`)
  step(`packed ${tarballs[0]} (${listing.length} files; no test/, bench/, examples/, dev/, .ci/)`)

  // -- 2. the scratch app --------------------------------------------------------------------
  cpSync(join(repo, "test/package/app"), app, { recursive: true })
  const peers = Object.fromEntries(PEERS.map((name) => [name, versionOf(name)]))
  writeFileSync(join(app, "package.json"), JSON.stringify({
    name: "leasehold-package-test-app",
    private: true,
    type: "module",
    dependencies: { leasehold: `file:${tarball}`, ...peers },
    // platform-node 4.1.0 asks for platform-node-shared ^4.1.0, whose newest (4.1.5) wants effect
    // ^4.1.5: pinned at the checkout's version, as the peers are, so one effect 4.1.0 satisfies all.
    overrides: { "@effect/platform-node-shared": versionOf("@effect/platform-node-shared") }
  }, null, 2))
  writeFileSync(join(app, "tsconfig.json"), JSON.stringify({
    compilerOptions: {
      target: "ES2023",
      module: "NodeNext",
      moduleResolution: "NodeNext",
      lib: ["ES2024"],
      types: [],
      strict: true,
      exactOptionalPropertyTypes: true,
      verbatimModuleSyntax: true,
      allowImportingTsExtensions: true,
      skipLibCheck: true,
      noEmit: true
    },
    include: ["*.ts"]
  }, null, 2))
  step(`npm install in ${app}: the tarball + ${Object.entries(peers).map(([n, v]) => `${n}@${v}`).join(", ")}`)
  await exec("npm", ["install", "--no-audit", "--no-fund", "--ignore-scripts", "--prefer-offline"], { cwd: app, timeoutMs: 150_000 })
  const installed = JSON.parse(readFileSync(join(app, "node_modules/leasehold/package.json"), "utf8")) as Record<string, unknown>
  check(installed["dependencies"] === undefined, `the installed leasehold has dependencies of its own: ${JSON.stringify(installed["dependencies"])}`)
  // A single copy of effect: every dependent's effect is the app's (npm ls prints each path once).
  const lsPaths = (await exec("npm", ["ls", "effect", "--all", "--parseable"], { cwd: app })).split("\n").filter((l) => l.trim() !== "")
  const effectCopies = [...new Set(lsPaths.filter((p) => /node_modules\/effect$/.test(p)))]
  check(effectCopies.length === 1, `npm ls effect finds ${effectCopies.length} copies: ${effectCopies.join(", ")}`)
  const effectNested = listFiles(join(app, "node_modules")).filter((f) => /node_modules\/.+\/node_modules\/effect\/package\.json$/.test(f))
  check(effectNested.length === 0, `nested copies of effect: ${effectNested.join(", ")}`)
  step(`npm ls effect: a single copy (${effectCopies[0]})`)

  // Emitted JavaScript imports `.js`, never `.ts`; the CLI keeps its shebang.
  const dist = join(app, "node_modules/leasehold/dist")
  const tsImports = listFiles(dist).filter((f) => f.endsWith(".js"))
    .filter((f) => /(?:from|import)\s*\(?\s*["']\.{1,2}\/[^"']*\.ts["']/.test(readFileSync(f, "utf8")))
  check(tsImports.length === 0, `built JavaScript imports .ts files: ${tsImports.join(", ")}`)
  const cli = join(app, "node_modules/.bin/leasehold")
  check(existsSync(cli), "node_modules/.bin/leasehold is missing")
  check(readFileSync(cli, "utf8").startsWith("#!/usr/bin/env node\n"), "the built CLI lost its #!/usr/bin/env node line")

  // -- 3. type-check against the published types -----------------------------------------------
  step("tsc --noEmit in the app (published .d.ts)")
  const resolvedTypes = await exec(tsc, ["--noEmit", "-p", "tsconfig.json", "--traceResolution"], { cwd: app })
  check(/Module name 'leasehold' was successfully resolved to '[^']*node_modules\/leasehold\/dist\/index\.d\.ts'/.test(resolvedTypes),
    "tsc did not resolve `leasehold` to node_modules/leasehold/dist/index.d.ts")

  // -- 4. run it ---------------------------------------------------------------------------------
  let url = [process.env["LEASEHOLD_TEST_DATABASE_URL"], process.env["LEASEHOLD_DATABASE_URL"]].find((u) => u !== undefined && u !== "")
  if (url === undefined) {
    step("starting PostgreSQL")
    server = await startPostgres({ forTests: true })
    url = server.url
  }
  schema = `package_test_${process.pid}_${Date.now().toString(36)}`
  // The checkout's Node 22 first on PATH: the CLI's `#!/usr/bin/env node` runs on it.
  const env: NodeJS.ProcessEnv = {
    ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("LEASEHOLD_") && k !== "NODE_OPTIONS")),
    PATH: `${dirname(node)}:${process.env["PATH"] ?? ""}`,
    LEASEHOLD_DATABASE_URL: url,
    LEASEHOLD_SCHEMA: schema
  }
  admin = ManagedRuntime.make(
    PgQueueStore.layer({ schema }).pipe(
      Layer.provideMerge(QueueConfig.pgLayer(Redacted.make(url), { maxConnections: 2, applicationName: "leasehold-package-test" }))
    )
  )
  const stats = () => admin!.runPromise(Effect.gen(function*() {
    const store = yield* QueueStore
    return yield* store.stats(QUEUE)
  }))

  step(`producer: 5 typed greetings and 1 unrecoverable (schema ${schema})`)
  const produced = await exec(node, ["producer.ts"], { cwd: app, env: { ...env, PACKAGE_TEST_SEND: "greetings" }, timeoutMs: 60_000 })
  const deadId = /dead letter (\S+?)"?$/m.exec(produced)?.[1]
  check(deadId !== undefined, `the producer did not report its sends:\n${produced}`)

  step("worker: runs them")
  const port = await freePort()
  const worker = launch("worker", node, ["worker.ts"], app, { ...env, LEASEHOLD_HTTP_PORT: String(port) })
  await waitFor("5 greetings handled", () => (worker.output.match(/handled greet \d/g)?.length ?? 0) >= 5 ? true : undefined, 60_000, worker)
  const settled = await waitFor("the queue to settle (ready 0, in flight 0, dead 1)", async () => {
    const s = await stats()
    return s.ready === 0 && s.delayed === 0 && s.inFlight === 0 && s.dead === 1 ? s : undefined
  }, 30_000, worker)
  step(`queue settled: ${JSON.stringify(settled)}`)

  step(`the worker's HTTP server (port ${port}): /healthz, /readyz, /metrics`)
  const health = await get(port, "/healthz")
  check(health.status === 200, `/healthz answered ${health.status}: ${health.body}\n${worker.output}`)
  const ready = await get(port, "/readyz")
  check(ready.status === 200, `/readyz answered ${ready.status}: ${ready.body}\n${worker.output}`)
  const metrics = await get(port, "/metrics")
  check(metrics.status === 200 && /^leasehold_messages_acked(?:{[^}]*})? [1-9]/m.test(metrics.body), `/metrics answered ${metrics.status} without the acks counted:\n${metrics.body.slice(0, 2000)}`)

  step("node_modules/.bin/leasehold: stats, dead-letters list, stats --json, --help, dead-letters redrive --help")
  const statsOut = await exec(cli, ["stats", QUEUE], { cwd: app, env, timeoutMs: 30_000 })
  check(statsOut.includes(QUEUE), `leasehold stats ${QUEUE} does not mention the queue:\n${statsOut}`)
  const deadOut = await exec(cli, ["dead-letters", "list"], { cwd: app, env, timeoutMs: 30_000 })
  check(deadOut.includes(deadId) || deadOut.includes("package.reject"), `leasehold dead-letters list does not show message ${deadId}:\n${deadOut}`)
  const statsJson = await exec(cli, ["stats", QUEUE, "--json"], { cwd: app, env, timeoutMs: 30_000 })
  let parsed: unknown
  try {
    parsed = JSON.parse(statsJson)
  } catch {
    throw new Failure(`leasehold stats ${QUEUE} --json is not JSON:\n${statsJson}`)
  }
  check(JSON.stringify(parsed).includes(`"${QUEUE}"`), `leasehold stats ${QUEUE} --json does not name the queue:\n${statsJson}`)
  const help = await exec(cli, ["--help"], { cwd: app, env, timeoutMs: 30_000 })
  check(help.includes("dead-letters"), `leasehold --help does not list dead-letters:\n${help}`)
  await exec(cli, ["dead-letters", "redrive", "--help"], { cwd: app, env, timeoutMs: 30_000 })

  step("SIGTERM while a 1.5 s task runs: it finishes, the worker exits 0")
  await exec(node, ["producer.ts"], { cwd: app, env: { ...env, PACKAGE_TEST_SEND: "slow" }, timeoutMs: 60_000 })
  await waitFor("the slow task to start", () => worker.output.includes("slow started") ? true : undefined, 30_000, worker)
  worker.proc.kill("SIGTERM")
  const exit = await waitExit(worker, 45_000)
  step(`worker exited ${JSON.stringify(exit)}`)
  check(exit.code === 0, `the worker exited ${JSON.stringify(exit)} after SIGTERM:\n${worker.output}`)
  check(worker.output.includes("slow done"), `the running task did not finish before the worker exited:\n${worker.output}`)
  const drained = await stats()
  check(drained.ready === 0 && drained.inFlight === 0 && drained.delayed === 0 && drained.dead === 1,
    `after the drain the queue is ${JSON.stringify(drained)}`)
}

const cleanup = async (keep: boolean) => {
  for (const program of programs) if (program.exit === undefined) program.proc.kill("SIGKILL")
  if (admin !== undefined && server === undefined && schema !== undefined) {
    // An outside database: drop the test's schema.
    const drop = Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql.unsafe(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
    })
    await admin.runPromise(drop).catch(() => undefined)
  }
  await admin?.dispose().catch(() => undefined)
  await server?.destroy().catch(() => undefined)
  if (work !== undefined && !keep) rmSync(work, { recursive: true, force: true })
}

main().then(
  async () => {
    await cleanup(false)
    console.log(`test:package PASS (${elapsed()})`)
  },
  async (error: unknown) => {
    await cleanup(true)
    console.error(error instanceof Failure ? error.message : error)
    if (work !== undefined) console.error(`scratch folder kept: ${work}`)
    console.log(`test:package FAIL: ${error instanceof Error ? error.message.split("\n")[0] : String(error)} (${elapsed()})`)
    process.exitCode = 1
  }
)
