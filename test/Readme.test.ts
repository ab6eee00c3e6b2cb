/**
 * The claims of README.md and the guide pages in docs/ that code can check:
 *
 * - every log line they quote (after WARN, ERROR, INFO, "DEBUG lines" or "warns") is one the code
 *   writes, word for word;
 * - every ```ts block type-checks (written to .tmp/snippets/ as a module of its own, where
 *   `./tasks.ts` is examples/tasks.ts, and checked by `tsc` with the project's settings);
 * - a block introduced by a link to one of examples/*.ts is that file, line for line (the files
 *   test/Examples.test.ts and vitest run);
 * - every relative link and #anchor points at a file and heading that exist;
 * - the Node version the README states is the one package.json requires;
 * - every variable of `QueueConfig.env` (the one list of `LEASEHOLD_*` names) is documented in
 *   docs/configuration.md or docs/operating.md, and every `LEASEHOLD_*` name a page mentions is in it;
 * - the README's table against other queues is copied from the result file of a real `npm run bench`
 *   (bench/results/*.md, written by the run) that the section links: every row, word for word.
 *
 * A quoted line may stand in for variable parts with `<...>` (e.g. `<message>`); the literal
 * parts between them must appear, in order, in one log call of src/.
 */
import { execFileSync } from "node:child_process"
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { dirname, join, resolve } from "node:path"
import { assert, describe, it } from "vitest"
import * as ConsumerPresence from "../src/ConsumerPresence.ts"
import * as QueueConfig from "../src/QueueConfig.ts"

const readme = readFileSync("README.md", "utf8")

/** README.md and every docs/*.md page, by path. */
const pages: ReadonlyArray<{ readonly path: string; readonly text: string }> = [
  "README.md",
  ...readdirSync("docs").filter((name) => name.endsWith(".md")).sort().map((name) => `docs/${name}`)
].map((path) => ({ path, text: readFileSync(path, "utf8") }))

const sourceFiles = (dir: string): Array<string> =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? sourceFiles(join(dir, entry.name)) : entry.name.endsWith(".ts") ? [join(dir, entry.name)] : []
  )

/**
 * The source with adjacent string literals joined (`"a " +\n "b"` reads `"a b"`) and the
 * environment-variable constants that log lines interpolate replaced by their values.
 */
const source = (() => {
  let text = sourceFiles("src").map((file) => readFileSync(file, "utf8")).join("\n")
  text = text.replace(/(["`])\s*\+\s*(["`])/g, "")
  const constants: Record<string, string> = {}
  for (const [key, value] of Object.entries(ConsumerPresence.variables)) constants[`variables.${key}`] = value
  for (const [key, value] of Object.entries(QueueConfig.variables)) constants[`QueueConfig.variables.${key}`] = value
  return text.replace(/\$\{([A-Za-z.]+)\}/g, (whole, name: string) => constants[name] ?? whole)
})()

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")

/** The log lines the pages quote, whitespace folded. */
const quotedLogLines = (): Array<string> =>
  pages.flatMap(({ text }) => {
    const folded = text.replace(/\s+/g, " ").replaceAll("&lt;", "<").replaceAll("&gt;", ">")
    return [...folded.matchAll(/\b(?:WARN|ERROR|INFO|DEBUG lines|warns)\s+"([^"]+)"/g)].map((m) => m[1]!)
  })

/** The ```ts blocks of a page, with the line each starts on. */
const tsBlocks = (text: string): Array<{ readonly line: number; readonly code: string }> =>
  [...text.matchAll(/^```ts\n([^]*?)^```$/gm)].map((m) => ({
    line: text.slice(0, m.index).split("\n").length + 1,
    code: m[1]!
  }))

/** An example file as a page shows it: without its leading doc comment. */
const exampleProgram = (file: string) => readFileSync(file, "utf8").replace(/^\/\*\*[^]*?\*\/\n/, "").trim()

/** GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces as `-`. */
const slug = (heading: string) =>
  heading.trim().toLowerCase().replace(/`/g, "").replace(/[^\p{L}\p{N}\s_-]/gu, "").replace(/\s/g, "-")

const anchorsOf = (text: string) =>
  new Set(text.replace(/^```[^]*?^```$/gm, "").split("\n").filter((line) => /^#{1,6} /.test(line)).map((line) => slug(line.replace(/^#+ /, ""))))

describe("README.md and docs/*.md", () => {
  it("every log line they quote is written by the code, word for word", () => {
    const quotes = quotedLogLines()
    assert.isAtLeast(quotes.length, 10, `found only ${quotes.length} quoted log lines: the pattern above no longer matches the README`)
    const missing = quotes.filter((quote) => {
      const parts = quote.split(/<[^>]+>/).map((part) => part.trim()).filter((part) => part !== "")
      // The literal parts in order, within one log call (no line break between them in the joined source);
      // the whole line, not a piece of it: from the opening of a string literal to its end (a closing
      // quote, a "\n", or an interpolation), unless the quote starts or ends with a variable part.
      const start = /^\s*</.test(quote) ? "" : "(?<=[\"`])"
      const end = />\s*$/.test(quote) ? "" : "(?=[\"`]|\\\\n|\\$\\{)"
      const pattern = new RegExp(start + parts.map(escape).join("[^\\n]*?") + end)
      return !pattern.test(source)
    })
    assert.deepStrictEqual(missing, [], "quoted in a page but written by no log call in src/")
  })

  it("every ```ts block type-checks with the project's settings", () => {
    const dir = resolve(".tmp/snippets")
    rmSync(dir, { recursive: true, force: true })
    mkdirSync(dir, { recursive: true })
    writeFileSync(join(dir, "tasks.ts"), `export * from "../../examples/tasks.ts"\n`)
    writeFileSync(join(dir, "tsconfig.json"), JSON.stringify({
      extends: "../../tsconfig.json",
      // A snippet may declare what it shows without using it.
      compilerOptions: { noUnusedLocals: false, noUnusedParameters: false, noEmit: true },
      include: ["*.ts"]
    }))
    const where = new Map<string, string>()
    for (const page of pages) {
      for (const block of tsBlocks(page.text)) {
        const file = `${page.path.replace(/[/.]/g, "_")}_line${block.line}.ts`
        where.set(file, `${page.path}:${block.line}`)
        writeFileSync(join(dir, file), block.code)
      }
    }
    assert.isAtLeast(where.size, 15, "the pages' ```ts blocks")
    let output = ""
    try {
      execFileSync(resolve("node_modules/.bin/tsc"), ["-p", join(dir, "tsconfig.json")], { encoding: "utf8", stdio: "pipe" })
    } catch (error) {
      const failed = error as { stdout?: string; stderr?: string }
      output = `${failed.stdout ?? ""}${failed.stderr ?? ""}`
      for (const [file, at] of where) output = output.replaceAll(file, `${file} (${at})`)
    }
    assert.strictEqual(output, "", "type errors in the pages' ```ts blocks (each is checked as a module of its own: give it its imports)")
  }, 180_000)

  it("a block introduced by a link to examples/*.ts is that file, line for line", () => {
    let compared = 0
    for (const page of pages) {
      const link = /\[examples\/([\w.]+\.ts)\]\((?:\.\.\/)?examples\/\1\)((?:(?!```)[^])*?)```ts\n([^]*?)^```$/gm
      for (const m of page.text.matchAll(link)) {
        if ((m[2]!.match(/\n[ \t]*\n/g) ?? []).length > 1) continue // a paragraph between: not the link's block
        assert.strictEqual(m[3]!.trim(), exampleProgram(`examples/${m[1]}`), `${page.path}: the block after its link to examples/${m[1]}`)
        compared++
      }
    }
    // The README's quick start shows the worker, the producer and the test; docs/tasks.md the API.
    for (const file of ["worker.ts", "producer.ts", "worker.test.ts", "tasks.ts"]) {
      const name = file.replaceAll(".", "\\.")
      assert.match(readme, new RegExp(`\\[examples/${name}\\]\\(examples/${name}\\)[^]*?\`\`\`ts`), `README shows examples/${file}`)
    }
    assert.isAtLeast(compared, 5)
  })

  it("every relative link points at a file that exists, and every #anchor at a heading of it", () => {
    const broken: Array<string> = []
    for (const page of pages) {
      const prose = page.text.replace(/^```[^]*?^```$/gm, "")
      for (const m of prose.matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = m[1]!
        if (/^[a-z]+:/.test(target)) continue // http(s):, mailto:
        const [file, anchor] = target.split("#") as [string, string | undefined]
        const path = file === "" ? page.path : join(dirname(page.path), file)
        if (!existsSync(path)) {
          broken.push(`${page.path}: ${target} (no ${path})`)
          continue
        }
        if (anchor !== undefined && path.endsWith(".md") && !anchorsOf(readFileSync(path, "utf8")).has(anchor)) {
          broken.push(`${page.path}: ${target} (no heading #${anchor} in ${path})`)
        }
      }
    }
    assert.deepStrictEqual(broken, [])
  })

  it("the README links every docs/*.md page", () => {
    const unlinked = pages.map((page) => page.path).filter((path) => path.startsWith("docs/") && !readme.includes(`](${path}`))
    assert.deepStrictEqual(unlinked, [], "docs pages the README's \"Guides and reference\" does not link")
  })

  it("states the Node version package.json requires", () => {
    const pkg = JSON.parse(readFileSync("package.json", "utf8")) as { engines: { node: string } }
    const required = /^>=\s*(\d+\.\d+)/.exec(pkg.engines.node)?.[1]
    assert.isDefined(required)
    assert.include(readme, `Node.js >= ${required}`)
    assert.notMatch(readme, /Node\.js 20\+/)
  })

  it("documents every variable of QueueConfig.env, and mentions no LEASEHOLD_ variable that is not in it", () => {
    const reference = pages.filter((page) => page.path === "docs/configuration.md" || page.path === "docs/operating.md")
      .map((page) => page.text).join("\n")
    const undocumented = Object.values(QueueConfig.env).filter((name) => !new RegExp(`\\b${name}\\b`).test(reference))
    assert.deepStrictEqual(undocumented, [], "in QueueConfig.env but in neither docs/configuration.md nor docs/operating.md")
    // Not leasehold's settings: the test suite's database and the dev tools' PostgreSQL binaries.
    const devAndTest = new Set(["LEASEHOLD_TEST_DATABASE_URL", "LEASEHOLD_PG_BIN"])
    const known = new Set<string>(Object.values(QueueConfig.env))
    const unknown = pages.flatMap((page) =>
      [...page.text.matchAll(/\bLEASEHOLD_[A-Z][A-Z_]*[A-Z]\b/g)].map((m) => m[0]).filter((name) => !known.has(name) && !devAndTest.has(name))
        .map((name) => `${page.path}: ${name}`)
    )
    assert.deepStrictEqual([...new Set(unknown)], [], "mentioned in a page but read by nothing (not in QueueConfig.env)")
  })

  it("the README's table against other queues is copied from the bench/results file it links", () => {
    const section = /^## Against other queues\n([^]*?)^## /m.exec(readme)?.[1]
    assert.isDefined(section, "README: no \"## Against other queues\" section")
    const links = [...section.matchAll(/\]\((bench\/results\/[^)#\s]+\.md)\)/g)].map((m) => m[1]!)
    assert.lengthOf(links, 1, "the section links exactly one result file of npm run bench under bench/results/")
    const result = readFileSync(links[0]!, "utf8")
    assert.match(result, /^# npm run bench, /, `${links[0]} is not a result file written by npm run bench`)
    const rows = section.split("\n").filter((line) => line.startsWith("|"))
    assert.isAtLeast(rows.length, 3, "the section's table")
    const copied = new Set(result.split("\n"))
    assert.deepStrictEqual(rows.filter((row) => !copied.has(row)), [], `rows of the README's table not in ${links[0]}`)
  })
})
