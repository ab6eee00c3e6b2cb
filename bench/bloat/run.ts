/**
 * `npm run bench:bloat` (issue 29, part 4): throughput with a REPEATABLE READ transaction idle in
 * the queue's database for the whole run, against the same run without it, per adapter of
 * bench/peers (leasehold's README worker, the raw node-postgres worker, graphile-worker and
 * pg-boss when installed under .tmp/peers), on one durable embedded PostgreSQL, and what the
 * claim scans as dead tuples accumulate. Defaults: 1,000,000 messages or 10 minutes per run,
 * C=50; BLOAT_QUICK=1 for a smoke check. Knobs: settings.ts; a run: runOne.ts; samples:
 * sample.ts, explain.ts; tables: report.ts. Worker logs and results.json go to BLOAT_LOG_DIR.
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { type PostgresServer, startPostgres } from "../../dev/EmbeddedPostgres.ts"
import { stopOnSignal, runAsProcess, shutDown } from "../support/orchestrator.ts"
import { connect, type PgSession } from "./pg.ts"
import { minuteTable, progressTable, runTable, summaryTable } from "./report.ts"
import { type RunResult, runOne } from "./runOne.ts"
import { besideLines, availableAdapters, compileAdapters, headerLines } from "./setup.ts"
import { type Mode, settings } from "./settings.ts"

const t0 = Date.now()
const log = (text: string) => console.log(`[bloat +${((Date.now() - t0) / 1000).toFixed(1)}s] ${text}`)

/** Every run: per adapter its modes, the order flipped for every other adapter. */
const runAll = async (admin: PgSession, server: PostgresServer, buildDir: string, adapters: ReadonlyArray<string>) => {
  const results: Array<RunResult> = []
  const failures: Array<string> = []
  for (const [i, adapter] of adapters.entries()) {
    const modes: ReadonlyArray<Mode> = i % 2 === 0 ? settings.modes : [...settings.modes].reverse()
    for (const mode of modes) {
      try {
        const result = await runOne({ admin, serverUrl: server.url, buildDir, log }, adapter as RunResult["adapter"], mode)
        results.push(result)
        // Each run's table and the results so far as soon as it ends (a long run stopped early keeps them).
        console.log(`\n${runTable(result, Math.max(1, Math.round(30_000 / settings.sampleMs)))}\n`)
        writeFileSync(join(settings.logDir, "results.json"), `${JSON.stringify({ settings, results }, null, 2)}\n`)
        for (const line of besideLines()) log(line)
      } catch (error) {
        failures.push(`${adapter} ${mode}: ${error instanceof Error ? error.message : String(error)}`)
        log(`FAILED ${failures.at(-1)}`)
      }
    }
  }
  return { results, failures }
}

const print = (results: ReadonlyArray<RunResult>) => {
  for (const adapter of [...new Set(results.map((r) => r.adapter))]) {
    const clean = results.find((r) => r.adapter === adapter && r.mode === "clean")
    const bloated = results.find((r) => r.adapter === adapter && r.mode === "bloated")
    if (clean === undefined || bloated === undefined) continue
    console.log(`\n${progressTable(clean, bloated)}\n\n${minuteTable(clean, bloated)}`)
  }
  console.log(`\n${summaryTable(results)}`)
}

/** BLOAT_REPORT=<results.json>: print the tables of a saved run (one stopped early included). */
const reprint = (file: string): number => {
  print((JSON.parse(readFileSync(file, "utf8")) as { results: ReadonlyArray<RunResult> }).results)
  return 0
}

const main = async (): Promise<number> => {
  if (process.env["BLOAT_REPORT"] !== undefined) return reprint(process.env["BLOAT_REPORT"])
  let server: PostgresServer | undefined
  let admin: PgSession | undefined
  stopOnSignal("bench:bloat", () => server)
  mkdirSync(settings.logDir, { recursive: true })
  try {
    const adapters = availableAdapters(log)
    const buildDir = compileAdapters(log)
    server = await startPostgres()
    admin = await connect(server.url, "bloat-orchestrator")
    const header = [...await headerLines(admin, adapters), ...besideLines()]
    for (const h of header) console.log(h)
    console.log(`worker logs: ${settings.logDir}`)
    const { results, failures } = await runAll(admin, server, buildDir, adapters)
    writeFileSync(join(settings.logDir, "results.json"), `${JSON.stringify({ header, settings, results }, null, 2)}\n`)
    print(results)
    for (const line of besideLines()) console.log(line)
    for (const f of failures) console.log(`failed: ${f}`)
    console.log(failures.length === 0 ? "DONE" : "FAIL")
    return failures.length === 0 ? 0 : 1
  } finally {
    await shutDown(admin, server)
  }
}

runAsProcess("bench:bloat", main)
