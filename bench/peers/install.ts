/**
 * What `npm run bench` installs and builds before it measures (bench/peers/run.ts):
 *
 * - leasehold as an application gets it: `npm pack` (its `prepack` runs `npm run build`, so dist/
 *   is fresh from the working tree), and the tarball installed under `.tmp/peers` with the Effect
 *   packages it peers on, at the checkout's versions (one copy of effect);
 * - the peers, `graphile-worker@0.18` and `pg-boss@12`, installed beside it for the benchmark only
 *   (never dependencies of the package); a peer whose install fails is skipped with a message;
 * - the adapter scripts, compiled by `tsc -p bench/peers/tsconfig.json` into `.tmp/peers/app`, so
 *   that leasehold's worker imports `leasehold` from `.tmp/peers/node_modules/leasehold` through the
 *   package's `exports` (`dist/index.js`), as an installed app does.
 */
import { execFileSync } from "node:child_process"
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { join, relative } from "node:path"
import { nodeBinary, repoRoot } from "../chaos/lib.ts"
import { type Adapter, ALL, appDir, config, log, PEER_SPECS, PEERS, prefix } from "./config.ts"
import { peerVersion } from "./common.ts"

/** The Effect packages leasehold peers on, installed at the versions this checkout runs. */
const EFFECT_PEERS = ["effect", "@effect/sql-pg", "@effect/platform-node"] as const
const versionOf = (name: string): string =>
  (JSON.parse(readFileSync(join(repoRoot, "node_modules", name, "package.json"), "utf8")) as { version: string }).version

const run = (file: string, args: ReadonlyArray<string>, cwd: string) =>
  execFileSync(file, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], maxBuffer: 64 * 1024 * 1024 })

const npmInstall = (specs: ReadonlyArray<string>) =>
  run("npm", ["install", "--prefix", prefix, "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error", ...specs], prefix)

const seconds = (since: number) => `${((Date.now() - since) / 1000).toFixed(1)} s`

/** `npm pack` into .tmp/peers/pack (prepack builds dist/); the tarball's path. */
const packLeasehold = (): string => {
  const started = Date.now()
  const packDir = join(prefix, "pack")
  rmSync(packDir, { recursive: true, force: true })
  mkdirSync(packDir, { recursive: true })
  run("npm", ["pack", "--pack-destination", packDir, "--loglevel=error"], repoRoot)
  const tarball = readdirSync(packDir).find((f) => f.endsWith(".tgz"))
  if (tarball === undefined) throw new Error(`npm pack left no tarball in ${packDir}`)
  log(`built dist/ and packed ${tarball} (${seconds(started)})`)
  return join(packDir, tarball)
}

/**
 * Install leasehold's tarball with its Effect peers and the peers asked for; the adapters that
 * are there afterwards (leasehold and raw-pg always: without leasehold's install the run stops).
 */
export const install = (wanted: ReadonlyArray<Adapter>): Set<Adapter> => {
  mkdirSync(prefix, { recursive: true })
  if (!existsSync(join(prefix, "package.json"))) writeFileSync(join(prefix, "package.json"), `${JSON.stringify({ name: "leasehold-bench-peers", private: true })}\n`)
  const peers = wanted.filter((a) => PEERS.includes(a))
  if (!config.skipInstall) {
    const started = Date.now()
    const base = [packLeasehold(), ...EFFECT_PEERS.map((name) => `${name}@${versionOf(name)}`)]
    try {
      npmInstall([...base, ...peers.map((n) => PEER_SPECS[n]!)])
    } catch {
      npmInstall(base) // leasehold's own install must work; the peers are tried one by one
      for (const name of peers) {
        try {
          npmInstall([PEER_SPECS[name]!])
        } catch (error) {
          const e = error as { stderr?: string; message?: string }
          console.log(`skipping ${name}: npm install ${PEER_SPECS[name]} failed: ${(e.stderr ?? e.message ?? "").trim().split("\n").slice(-3).join(" / ")}`)
        }
      }
    }
    log(`installed leasehold (the tarball), ${EFFECT_PEERS.join(", ")} and ${peers.map((n) => PEER_SPECS[n]).join(", ")} under ${relative(repoRoot, prefix)} (${seconds(started)}; for the benchmark only)`)
  }
  if (peerVersion(prefix, "leasehold") === undefined) throw new Error(`leasehold is not installed under ${relative(repoRoot, prefix)} (PEERS_SKIP_INSTALL=1 needs an earlier install)`)
  const present = new Set<Adapter>(["raw-pg", "leasehold"])
  for (const name of peers) {
    if (peerVersion(prefix, name) !== undefined) present.add(name)
    else console.log(`skipping ${name}: not installed under ${relative(repoRoot, prefix)}`)
  }
  return present
}

/** The roles an adapter script is started in (common.ts). */
export type Role = "send" | "single" | "work" | "hang"

/** The compiled script of an adapter (one script per adapter but leasehold's, which has a sender of its own). */
export const scriptOf = (adapter: Adapter, role: Role) =>
  join(appDir, "bench", "peers", adapter === "leasehold" ? (role === "send" || role === "single" ? "leasehold-send.js" : "leasehold-worker.js") : `${adapter}.js`)

/**
 * Where `import "leasehold"` from the compiled adapters leads (Node's own resolution, run in
 * .tmp/peers/app): the installed package's dist/index.js, or the run stops.
 */
export const leaseholdEntry = (): string => {
  const url = run(nodeBinary, ["--input-type=module", "-e", "console.log(import.meta.resolve('leasehold'))"], appDir).trim()
  const expected = join(prefix, "node_modules", "leasehold", "dist", "index.js")
  if (url !== `file://${expected}`) throw new Error(`import "leasehold" from ${appDir} resolves to ${url}, not ${expected}`)
  return relative(repoRoot, expected)
}

/** The adapter scripts compiled into .tmp/peers/app; how long it took. */
export const compile = (): number => {
  const started = Date.now()
  rmSync(appDir, { recursive: true, force: true })
  mkdirSync(appDir, { recursive: true })
  try {
    run(nodeBinary, [join(repoRoot, "node_modules", ".bin", "tsc"), "-p", join(repoRoot, "bench", "peers", "tsconfig.json"), "--outDir", appDir], repoRoot)
  } catch (error) {
    const e = error as { stdout?: string; stderr?: string }
    log(`tsc reported errors; the emitted JavaScript runs anyway:\n${`${e.stdout ?? ""}${e.stderr ?? ""}`.trimEnd()}`)
  }
  writeFileSync(join(appDir, "package.json"), `${JSON.stringify({ type: "module", private: true })}\n`)
  for (const a of ALL) for (const role of ["send", "work"] as const) if (!existsSync(scriptOf(a, role))) throw new Error(`tsc did not emit ${scriptOf(a, role)}`)
  if (existsSync(join(appDir, "src"))) throw new Error(`the adapters import src/ (${join(appDir, "src")} was emitted): leasehold must come from its package`)
  return Date.now() - started
}
