/**
 * The README's claims that code can check: every log line it quotes (after WARN, ERROR, INFO,
 * "DEBUG lines" or "warns") is one the code writes, word for word, its worker snippet is the
 * example that test/Examples.test.ts runs, and the Node version it states is the one
 * package.json requires.
 *
 * A quoted line may stand in for variable parts with `<...>` (e.g. `<message>`); the literal
 * parts between them must appear, in order, in one log call of src/.
 */
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { assert, describe, it } from "vitest"
import * as ConsumerPresence from "../src/ConsumerPresence.ts"
import * as QueueConfig from "../src/QueueConfig.ts"

const readme = readFileSync("README.md", "utf8")

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

/** The log lines the README quotes, whitespace folded. */
const quotedLogLines = (): Array<string> => {
  const folded = readme.replace(/\s+/g, " ")
  return [...folded.matchAll(/\b(?:WARN|ERROR|INFO|DEBUG lines|warns)\s+"([^"]+)"/g)].map((m) => m[1]!)
}

describe("README", () => {
  it("every log line it quotes is written by the code, word for word", () => {
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
    assert.deepStrictEqual(missing, [], "quoted in README.md but written by no log call in src/")
  })

  it("its worker snippet is examples/worker.ts (which test/Examples.test.ts runs), line for line", () => {
    const snippet = /A worker \(\[examples\/worker\.ts\]\(examples\/worker\.ts\)\)[^]*?```ts\n([^]*?)```/.exec(readme)?.[1]
    assert.isDefined(snippet, "the README's worker snippet")
    const program = readFileSync("examples/worker.ts", "utf8").replace(/^\/\*\*[^]*?\*\/\n/, "")
    assert.strictEqual(snippet!.trim(), program.trim())
  })

  it("states the Node version package.json requires", () => {
    const pkg = JSON.parse(readFileSync("package.json", "utf8")) as { engines: { node: string } }
    const required = /^>=\s*(\d+\.\d+)/.exec(pkg.engines.node)?.[1]
    assert.isDefined(required)
    assert.include(readme, `Node.js >= ${required}`)
    assert.notMatch(readme, /Node\.js 20\+/)
  })
})
