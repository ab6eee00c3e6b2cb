/**
 * The rules of ARCHITECTURE.md that code can check, read from src/ as text:
 *
 * - SQL (a `sql` tagged template, `sql.literal`, `sql.unsafe`) appears only under src/pg/ and
 *   src/migrations/;
 * - store-agnostic modules import neither the PostgreSQL store (src/PgQueueStore.ts, src/pg/)
 *   nor `@effect/sql-pg`;
 * - src/Task.ts, src/task/ and src/TaskClient.ts (what a producer imports) import no consumer module;
 * - no import circle among the modules of src/ (type-only imports included);
 * - no module over 500 lines and no function over 150 lines, except where the file says why
 *   (a line with `long on purpose:` in it).
 */
import { readdirSync, readFileSync } from "node:fs"
import { dirname, join, normalize } from "node:path"
import { assert, describe, it } from "vitest"

const sourceFiles = (dir: string): Array<string> =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? sourceFiles(join(dir, entry.name)) : entry.name.endsWith(".ts") ? [join(dir, entry.name)] : []
  ).sort()

const files = sourceFiles("src")
const text = new Map(files.map((file) => [file, readFileSync(file, "utf8")]))

/** The relative imports of a module, resolved to paths under src/, and its package imports. */
const importsOf = (file: string): { readonly local: Array<string>; readonly packages: Array<string> } => {
  const local: Array<string> = [], packages: Array<string> = []
  for (const m of text.get(file)!.matchAll(/^\s*(?:import|export)\b[^"';]*?from\s+"([^"]+)"/gm)) {
    const spec = m[1]!
    if (spec.startsWith(".")) local.push(normalize(join(dirname(file), spec)))
    else packages.push(spec)
  }
  return { local, packages }
}

const under = (file: string, ...prefixes: ReadonlyArray<string>) =>
  prefixes.some((prefix) => file === prefix || file.startsWith(prefix.endsWith("/") ? prefix : `${prefix}/`))

/** The modules that work on any store: they see only the QueueStore contract. */
const storeAgnostic = files.filter((file) =>
  under(
    file,
    "src/consumer/",
    "src/Consumer.ts",
    "src/Handler.ts",
    "src/Task.ts",
    "src/task/",
    "src/TaskClient.ts",
    "src/Scheduler.ts",
    "src/Testing.ts",
    "src/QueueStore.ts",
    "src/FlowControl.ts",
    "src/FlowDeclaration.ts",
    "src/Lifecycle.ts",
    "src/MemoryQueueStore.ts",
    "src/memory/",
    "src/StoreSettings.ts",
    "src/Message.ts",
    "src/QueueError.ts",
    "src/QueueMetrics.ts",
    "src/Admin.ts"
  )
)

/** Where a statement may be written. */
const sqlHome = (file: string) => under(file, "src/pg/", "src/migrations/")

const SQL = /\bsql(?:<[^>`]*>)?`|\bsql\.(?:literal|unsafe)\(/

/** Lines of code with comments and string contents blanked, so braces in them count for nothing. */
const code = (source: string): string => {
  let out = ""
  let i = 0
  const templates: Array<number> = [] // brace depth at which each open template's `${` began
  let depth = 0
  const copyBlank = (from: number, to: number) => {
    for (let k = from; k < to; k++) out += source[k] === "\n" ? "\n" : " "
  }
  const skipString = (quote: string) => {
    const start = i++
    while (i < source.length && source[i] !== quote && source[i] !== "\n") i += source[i] === "\\" ? 2 : 1
    i++
    copyBlank(start, i)
  }
  const skipTemplate = () => {
    // from just after a backtick or a closing `}` of `${`: up to the closing backtick or the next `${`
    const start = i
    while (i < source.length && source[i] !== "`") {
      if (source[i] === "\\") i += 2
      else if (source[i] === "$" && source[i + 1] === "{") {
        copyBlank(start, i)
        out += "${"
        i += 2
        templates.push(depth++)
        return
      } else i++
    }
    copyBlank(start, i)
    out += "`"
    i++
  }
  while (i < source.length) {
    const c = source[i]!
    if (c === "/" && source[i + 1] === "/") {
      const end = source.indexOf("\n", i)
      const stop = end === -1 ? source.length : end
      copyBlank(i, stop)
      i = stop
    } else if (c === "/" && source[i + 1] === "*") {
      const end = source.indexOf("*/", i + 2)
      const stop = end === -1 ? source.length : end + 2
      copyBlank(i, stop)
      i = stop
    } else if (c === "\"" || c === "'") skipString(c)
    else if (c === "`") {
      out += "`"
      i++
      skipTemplate()
    } else if (c === "{") {
      depth++
      out += c
      i++
    } else if (c === "}") {
      depth--
      out += c
      i++
      if (templates.length > 0 && templates[templates.length - 1] === depth) {
        templates.pop()
        skipTemplate()
      }
    } else {
      out += c
      i++
    }
  }
  return out
}

/** The functions of a module with a block body, by the line they start on and their length in lines. */
const functionLengths = (source: string): Array<{ readonly line: number; readonly lines: number }> => {
  const blanked = code(source)
  const found: Array<{ line: number; lines: number }> = []
  const braces: Array<{ readonly at: number; readonly fn: boolean }> = []
  const parens: Array<number> = []
  let lastParenOpener = -1 // where the last closed `(` was
  const lineOf = (at: number) => blanked.slice(0, at).split("\n").length
  const before = (at: number) => blanked.slice(Math.max(0, at - 40), at).trimEnd()
  for (let i = 0; i < blanked.length; i++) {
    const c = blanked[i]
    if (c === "(") parens.push(i)
    else if (c === ")") lastParenOpener = parens.pop() ?? -1
    else if (c === "{") {
      const prefix = before(i)
      const arrow = prefix.endsWith("=>")
      const afterParen = prefix.endsWith(")") && lastParenOpener >= 0 &&
        /\bfunction\s*\*?\s*[A-Za-z0-9_$]*\s*(?:<[^()]*>)?\s*$/.test(blanked.slice(Math.max(0, lastParenOpener - 60), lastParenOpener))
      braces.push({ at: i, fn: arrow || afterParen })
    } else if (c === "}") {
      const open = braces.pop()
      if (open?.fn === true) found.push({ line: lineOf(open.at), lines: lineOf(i) - lineOf(open.at) + 1 })
    }
  }
  return found
}

const explainsLength = (file: string) => /long on purpose:/.test(text.get(file)!)

describe("architecture", () => {
  it("finds the rules' subjects (the checks below read real files)", () => {
    assert.isAbove(files.length, 40)
    assert.include(storeAgnostic, "src/Consumer.ts")
    assert.isTrue(SQL.test("yield* sql`SELECT 1`") && SQL.test("sql<{ id: string }>`SELECT 1`"))
    assert.deepStrictEqual(functionLengths("const f = () => {\n  const s = `${1}}`\n}\nfunction* g() {\n}\n"), [
      { line: 1, lines: 3 },
      { line: 4, lines: 2 }
    ])
  })

  it("SQL is written only under src/pg/ and src/migrations/", () => {
    const outside = files.filter((file) => !sqlHome(file)).flatMap((file) =>
      text.get(file)!.split("\n").flatMap((line, k) => SQL.test(line) && !/^\s*(?:\*|\/\/)/.test(line) ? [`${file}:${k + 1}`] : [])
    )
    assert.deepStrictEqual(outside, [])
  })

  it("store-agnostic modules import neither the PostgreSQL store nor @effect/sql-pg", () => {
    const offenders = storeAgnostic.flatMap((file) => {
      const { local, packages } = importsOf(file)
      return [
        ...local.filter((target) => target === "src/PgQueueStore.ts" || under(target, "src/pg/")),
        ...packages.filter((spec) => spec.startsWith("@effect/sql-pg"))
      ].map((target) => `${file} -> ${target}`)
    })
    assert.deepStrictEqual(offenders, [])
  })

  it("Task and TaskClient (what a producer imports) import no consumer module", () => {
    const offenders = ["src/Task.ts", "src/TaskClient.ts", ...files.filter((file) => under(file, "src/task/"))].flatMap((file) =>
      importsOf(file).local.filter((target) => target === "src/Consumer.ts" || under(target, "src/consumer/")).map((t) => `${file} -> ${t}`)
    )
    assert.deepStrictEqual(offenders, [])
  })

  it("no import circle among the modules of src/", () => {
    const graph = new Map(files.map((file) => [file, importsOf(file).local.filter((target) => text.has(target))]))
    // Tarjan's strongly connected components: any component of two or more modules is a circle.
    let index = 0
    const indices = new Map<string, number>(), low = new Map<string, number>(), stack: Array<string> = [], onStack = new Set<string>()
    const circles: Array<Array<string>> = []
    const visit = (node: string) => {
      indices.set(node, index)
      low.set(node, index++)
      stack.push(node)
      onStack.add(node)
      for (const next of graph.get(node)!) {
        if (!indices.has(next)) {
          visit(next)
          low.set(node, Math.min(low.get(node)!, low.get(next)!))
        } else if (onStack.has(next)) low.set(node, Math.min(low.get(node)!, indices.get(next)!))
      }
      if (low.get(node) === indices.get(node)) {
        const component: Array<string> = []
        let member: string
        do {
          member = stack.pop()!
          onStack.delete(member)
          component.push(member)
        } while (member !== node)
        if (component.length > 1) circles.push(component.sort())
      }
    }
    for (const file of files) if (!indices.has(file)) visit(file)
    assert.deepStrictEqual(circles, [])
  })

  it("no module over 500 lines, no function over 150, except where the file says why", () => {
    const long = files.filter((file) => !explainsLength(file)).flatMap((file) => {
      const source = text.get(file)!
      const lines = source.split("\n").length
      return [
        ...(lines > 500 ? [`${file}: ${lines} lines`] : []),
        ...functionLengths(source).filter((f) => f.lines > 150).map((f) => `${file}:${f.line}: a function of ${f.lines} lines`)
      ]
    })
    assert.deepStrictEqual(long, [])
  })
})
