/**
 * What importing leasehold costs a process (issue 29, peak RSS): RSS and V8's used heap after a
 * full GC, and the modules loaded, for Node alone, effect's index, `@effect/sql-pg`,
 * platform-node's `NodeRuntime`, the modules a worker uses (README's worker: `Consumer`,
 * `ConsumerPresence`, `PgQueueStore`, `QueueConfig`), leasehold's index, and each module of the
 * index on top of the worker's. Each in a fresh process (bench/memory/import.mjs), five times;
 * the median (and the range) printed as a markdown table. Reads the compiled `dist/` (run
 * `npm run build` first), as an installed app loads it.
 *
 *   node bench/memory/imports.ts [dist directory, default ./dist]
 */
import { execFileSync } from "node:child_process"
import { readdirSync } from "node:fs"
import { join, resolve } from "node:path"

const dist = resolve(process.argv[2] ?? "dist")
const here = import.meta.dirname
const runs = 5

interface Sample {
  readonly rss: number
  readonly heap: number
  readonly modules: number
}

const measure = (specifiers: ReadonlyArray<string>): Sample =>
  JSON.parse(execFileSync(process.execPath, ["--expose-gc", join(here, "import.mjs"), ...specifiers], { encoding: "utf8" }))

const median = (values: ReadonlyArray<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!

const row = (label: string, specifiers: ReadonlyArray<string>) => {
  const samples = Array.from({ length: runs }, () => measure(specifiers))
  const rss = samples.map((s) => s.rss)
  console.log(`| ${label} | ${median(rss)} (${Math.min(...rss)}-${Math.max(...rss)}) | ${median(samples.map((s) => s.heap))} | ${samples[0]!.modules} |`)
}

const effectPackages = ["effect", "@effect/sql-pg", "@effect/platform-node/NodeRuntime"]
const worker = [...effectPackages, ...["Consumer", "ConsumerPresence", "PgQueueStore", "QueueConfig"].map((m) => join(dist, `${m}.js`))]
const index = join(dist, "index.js")

console.log(`import cost of ${dist} (node ${process.version}; ${runs} processes each, median RSS (range), heap used after GC)\n`)
console.log("| what is imported | RSS MB | heap MB | modules |")
console.log("|---|---|---|---|")
row("nothing (node:fs)", ["node:fs"])
for (const specifier of effectPackages) row(specifier, [specifier])
row("those three", effectPackages)
row("a worker's modules (and those three)", worker)
row("leasehold's index", [index])
row("a worker's app (effect, NodeRuntime, leasehold's index)", ["effect", "@effect/platform-node/NodeRuntime", index])
const modules = readdirSync(dist).filter((f) => /^[A-Z].*\.js$/.test(f)).map((f) => f.replace(/\.js$/, ""))
for (const module of modules) row(`a worker's modules + ${module}`, [...worker, join(dist, `${module}.js`)])
