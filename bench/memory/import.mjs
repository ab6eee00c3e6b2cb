// One measurement of bench/memory/imports.ts: imports every argument in turn, collects garbage, and
// prints (JSON) the process's RSS, V8's used heap and how many modules were loaded (a resolve hook
// counts them; LIST=1 also prints each one's URL on stderr). Run with --expose-gc.
import { registerHooks } from "node:module"
const seen = new Set()
registerHooks({
  resolve(specifier, context, next) {
    const resolved = next(specifier, context)
    seen.add(resolved.url)
    return resolved
  }
})
for (const specifier of process.argv.slice(2)) await import(specifier)
for (let i = 0; i < 3; i++) globalThis.gc()
await new Promise((resolve) => setTimeout(resolve, 50))
globalThis.gc()
const mb = (bytes) => +(bytes / 2 ** 20).toFixed(1)
const { heapUsed, rss } = process.memoryUsage()
console.log(JSON.stringify({ rss: mb(rss), heap: mb(heapUsed), modules: seen.size }))
if (process.env.LIST === "1") for (const url of seen) console.error(url)
