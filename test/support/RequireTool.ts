/**
 * Suites that need a program the package cannot install (PgBouncer, Chromium):
 * `requireTool("pgbouncer")` finds it, and when it is missing outside CI says
 * so in one line (what is skipped, the command that installs it), so that
 * `npm test` passes on a machine with only Node and npm. Under CI (`CI` set and
 * not `false`/`0`; `.ci/run` sets `CI=true` and installs both) the suites always
 * run, so a missing tool fails there loudly instead of skipping quietly.
 *
 *     const pgbouncer = requireTool("pgbouncer", "the PgBouncer tests of Pooler.test.ts")
 *     describe.skipIf(!pgbouncer.runs)(`through PgBouncer${pgbouncer.skipNote}`, () => { ... })
 */
import { accessSync, constants } from "node:fs"
import { delimiter, join } from "node:path"

/** The programs some suites need, where Debian puts them, and how to install them. */
const tools = {
  pgbouncer: { paths: ["/usr/sbin/pgbouncer"], install: "apt-get install -y pgbouncer" },
  chromium: { paths: ["/usr/bin/chromium"], install: "apt-get install -y chromium" }
} as const

/** A program a suite needs. */
export type ToolName = keyof typeof tools

/** What a suite knows about a tool it needs. */
export interface Tool {
  readonly name: ToolName
  /** The executable to run: the Debian path or the first on the PATH; undefined when missing. */
  readonly path: string | undefined
  /** Whether the suite runs: the tool is there, or CI requires it (then a missing tool fails the suite). */
  readonly runs: boolean
  /** `""` when the suite runs, else ` (skipped: <tool> is not installed; <install command>)` for a suite's name. */
  readonly skipNote: string
  /** The command that installs it. */
  readonly install: string
}

/** Whether the environment says this is CI (`CI=true`, `CI=1`, ...; not `false`, `0` or empty). */
export const isCi = (env: NodeJS.ProcessEnv = process.env): boolean => {
  const value = env["CI"]?.trim().toLowerCase()
  return value !== undefined && value !== "" && value !== "false" && value !== "0"
}

const executable = (path: string): boolean => {
  try {
    accessSync(path, constants.X_OK)
    return true
  } catch {
    return false
  }
}

/** Where to look, besides the PATH (tests of this helper replace the Debian paths). */
export interface Search {
  readonly env?: NodeJS.ProcessEnv
  readonly knownPaths?: ReadonlyArray<string>
}

/** Where `name` is: its Debian path, else the first executable of that name on the PATH. */
export const findTool = (name: ToolName, search: Search = {}): string | undefined => {
  const env = search.env ?? process.env
  const onPath = (env["PATH"] ?? "").split(delimiter).filter((dir) => dir !== "").map((dir) => join(dir, name))
  return [...(search.knownPaths ?? tools[name].paths), ...onPath].find(executable)
}

/**
 * The tool `name` for the suites described by `what` (e.g. "the PgBouncer tests of Pooler.test.ts").
 * When it is missing and this is not CI, prints one line naming `what` and the install command, and
 * `runs` is false: skip those suites with `describe.skipIf(!tool.runs)`.
 */
export const requireTool = (name: ToolName, what: string, search: Search = {}): Tool => {
  const path = findTool(name, search)
  const install = tools[name].install
  const runs = path !== undefined || isCi(search.env ?? process.env)
  const reason = `${name} is not installed; ${install}`
  if (!runs) console.warn(`skipped ${what}: ${reason} (with CI=true they run, and fail without it)`)
  return { name, path, runs, skipNote: runs ? "" : ` (skipped: ${reason})`, install }
}
