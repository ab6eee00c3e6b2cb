/**
 * `leasehold limits show|set|clear|weight` and `leasehold flow` against the test server:
 * - set writes the operator's limits (exactly those named), show lists them as a table and as
 *   JSON, a worker's declaration in code does not overwrite them, clear removes them, weight
 *   stores a key's weight (one run as a real process: the command as users run it);
 * - bad values are refused naming the rule (exit 2, the usage on stderr, nothing on stdout)
 *   before connecting, and nothing is written; a bad queue name is the store's InvalidInput (exit 1);
 * - flow shows what holds a FIFO, rate-limited queue back: in flight, keys at their limit, a
 *   blocked key with its head's id, attempts, last error and when it is due, the full window.
 */
import { Effect } from "effect"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import type { FlowLimits } from "../src/FlowControl.ts"
import * as Migrations from "../src/Migrations.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import type { QueueStoreShape } from "../src/QueueStore.ts"
import { cli, inProcess } from "./support/CliProcess.ts"
import * as Finish from "./support/Finish.ts"
import * as PgTest from "./support/PgTest.ts"
import { sqlRuntime } from "./support/WorkerProcess.ts"

let db: ReturnType<typeof sqlRuntime>
const schemas: Array<string> = []

beforeAll(() => {
  db = sqlRuntime()
})

afterAll(async () => {
  for (const schema of schemas) await db.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined)
  await db?.dispose()
})

const freshSchema = async () => {
  const schema = PgTest.uniqueSchema("clilim")
  schemas.push(schema)
  await db.runPromise(Migrations.run({ schema }))
  return schema
}

/** Run `f` on a store over `schema` (the database's clock, as the CLI's). */
const withStore = <A, E>(schema: string, f: (store: QueueStoreShape) => Effect.Effect<A, E>) =>
  db.runPromise(Effect.scoped(Effect.flatMap(PgQueueStore.make({ schema, migrate: false, leasePool: false }), f)))

/** The JSON a command printed. */
const printed = (stdout: string) => JSON.parse(stdout) as any

describe("leasehold limits and flow", () => {
  it("set writes the operator's limits, show lists them, code does not overwrite them, clear removes them, weight is stored", async () => {
    const schema = await freshSchema()
    const queued = await inProcess(["limits", "set", "emails", "--concurrency", "20", "--key-concurrency", "2", "--rate", "100/1m", "--fair"], schema)
    assert.strictEqual(queued.code, 0, queued.stderr)
    assert.deepInclude(printed(queued.stdout), {
      queue: "emails",
      task: null,
      limits: { concurrency: 20, keyConcurrency: 2, rate: { count: 100, periodMs: 60_000 }, fair: true },
      source: "operator"
    })
    const task = await inProcess(["limits", "set", "emails", "--task", "send", "--rate", "5/1s", "--concurrency", "3"], schema)
    assert.strictEqual(task.code, 0, task.stderr)
    assert.deepStrictEqual(printed(task.stdout).limits, { concurrency: 3, rate: { count: 5, periodMs: 1_000 } })

    // As a real process: the table, a row per record, rates as they are written.
    const table = await cli(["limits", "show"], schema)
    assert.strictEqual(table.code, 0, table.stderr)
    assert.match(table.stdout, /^QUEUE\s+TASK\s+CONCURRENCY\s+RATE\s+KEY CONCURRENCY\s+KEY RATE\s+FIFO\s+FAIR\s+SOURCE\s+UPDATED$/m)
    assert.match(table.stdout, /^emails\s+-\s+20\s+100\/1m\s+2\s+-\s+-\s+yes\s+operator\s+\d{4}-\d\d-\d\dT/m)
    assert.match(table.stdout, /^emails\s+send\s+3\s+5\/1s\s+-\s+-\s+-\s+-\s+operator\s+\d{4}-/m)

    // set replaces: the limits named, none else.
    const replaced = await inProcess(["limits", "set", "emails", "--concurrency", "10"], schema)
    assert.strictEqual(replaced.code, 0, replaced.stderr)
    assert.deepStrictEqual(printed(replaced.stdout).limits, { concurrency: 10 })
    // A worker's declaration in code leaves the operator's limits as they are.
    const declared = await withStore(schema, (store) => store.setLimits({ queue: "emails" }, { concurrency: 99 }, { source: "code" }))
    assert.isFalse(declared)
    const shown = await inProcess(["limits", "show", "emails", "--json"], schema)
    assert.strictEqual(shown.code, 0, shown.stderr)
    assert.deepStrictEqual(printed(shown.stdout).map((r: any) => [r.task, r.limits, r.source]), [
      [null, { concurrency: 10 }, "operator"],
      ["send", { concurrency: 3, rate: { count: 5, periodMs: 1_000 } }, "operator"]
    ])

    const cleared = await inProcess(["limits", "clear", "emails", "--task", "send"], schema)
    assert.strictEqual(cleared.code, 0, cleared.stderr)
    assert.deepStrictEqual(printed(cleared.stdout), { cleared: { queue: "emails", task: "send" } })
    const left = await withStore(schema, (store) => store.limits())
    assert.deepStrictEqual(left.map((r) => [r.queue, r.task]), [["emails", null]])
    // Cleared, the queue's own limits are the code's to declare again.
    assert.strictEqual((await inProcess(["limits", "clear", "emails"], schema)).code, 0)
    assert.isTrue(await withStore(schema, (store) => store.setLimits({ queue: "emails" }, { concurrency: 99 }, { source: "code" })))
    const none = await inProcess(["limits", "show", "other"], schema)
    assert.strictEqual(none.stdout, "no flow limits stored")

    const weighed = await inProcess(["limits", "weight", "emails", "tenant:a b", "3"], schema)
    assert.strictEqual(weighed.code, 0, weighed.stderr)
    assert.deepStrictEqual(printed(weighed.stdout), { queue: "emails", key: "tenant:a b", weight: 3 })
    const keys = await db.query<{ key: string; weight: number }>(`SELECT key, weight FROM ${schema}.flow_keys`)
    assert.deepStrictEqual(keys.map((k) => [k.key, k.weight]), [["tenant:a b", 3]])
  })

  it("bad values are refused naming the rule (exit 2, before connecting) and nothing is written; a bad queue name exits 1", async () => {
    const schema = await freshSchema()
    const kept: FlowLimits = { concurrency: 4 }
    await withStore(schema, (store) => store.setLimits({ queue: "emails" }, kept))
    const refusals: ReadonlyArray<readonly [ReadonlyArray<string>, RegExp]> = [
      [["limits", "set", "emails", "--concurrency", "0"], /--concurrency: 0 is out of range \(a whole number from 1 to 100000\)/],
      [["limits", "set", "emails", "--concurrency", "100001"], /out of range \(a whole number from 1 to 100000\)/],
      [["limits", "set", "emails", "--concurrency", "2.5"], /--concurrency: "2.5" is not a whole number/],
      [["limits", "set", "emails", "--key-concurrency", "10001"], /a whole number from 1 to 10000/],
      [["limits", "set", "emails", "--rate", "5"], /--rate: .*rule: COUNT\/PERIOD such as 100\/1m/],
      [["limits", "set", "emails", "--rate", "0/1s"], /rate\.count 0 is refused \(rule: an integer from 1 to 10000\)/],
      [["limits", "set", "emails", "--key-rate", "5/5ms"], /rate\.periodMs 5 is refused \(rule: whole milliseconds from 10 to 86400000/],
      [["limits", "set", "emails", "--rate", "5/2d"], /rule: whole milliseconds from 10 to 86400000 \(one day\)/],
      [["limits", "set", "emails", "--task", "send", "--key-concurrency", "2"], /keyConcurrency 2 is refused \(rule: a limit of the whole queue, not of a task\)/],
      [["limits", "set", "emails", "--task", "send", "--fifo"], /fifo true is refused \(rule: a limit of the whole queue, not of a task\)/],
      [["limits", "set", "emails", "--fifo", "--key-concurrency", "2"], /rule: 1 or absent with fifo/],
      [["limits", "set", "emails"], /limits set needs at least one limit/],
      [["limits", "set", "emails", "--concurency", "2"], /concurency/],
      [["limits", "weight", "emails", "k", "0"], /weight 0 is refused \(rule: an integer from 1 to 100\)/],
      [["limits", "weight", "emails", "k", "101"], /weight 101 is refused \(rule: an integer from 1 to 100\)/],
      [["limits", "weight", "emails", "k", "two"], /weight "two" is refused \(rule: an integer from 1 to 100\)/],
      [["limits", "weight", "emails", "bad\u0007key", "2"], /rule: 1 to 200 characters, no control characters/],
      [["limits", "weight", "emails", "x".repeat(201), "2"], /rule: 1 to 200 characters/],
      [["flow"], /queue/]
    ]
    for (const [args, why] of refusals) {
      const r = await inProcess(args, schema)
      const what = `leasehold ${args.join(" ").slice(0, 60)}`
      assert.strictEqual(r.code, 2, `${what}: ${r.stderr}`)
      assert.match(r.stderr, why, what)
      assert.include(r.stderr, "USAGE", what)
      assert.strictEqual(r.stdout, "", what)
    }
    for (const args of [["limits", "set", "no spaces", "--concurrency", "2"], ["limits", "set", "emails", "--task", "no spaces", "--rate", "1/1s"], ["flow", "no spaces"]]) {
      const r = await inProcess(args, schema)
      assert.strictEqual(r.code, 1, `leasehold ${args.join(" ")}: ${r.stderr}`)
      assert.match(r.stderr, /InvalidInput: (queue|task) /)
    }
    // Nothing was written.
    const stored = await withStore(schema, (store) => store.limits())
    assert.deepStrictEqual(stored.map((r) => [r.queue, r.task, r.limits]), [["emails", null, kept]])
    assert.lengthOf(await db.query(`SELECT 1 FROM ${schema}.flow_keys`), 0)
  })

  it("flow shows in flight, keys at their limit, a blocked FIFO key with its head, and the full rate window", async () => {
    const schema = await freshSchema()
    const set = await inProcess(["limits", "set", "ledger", "--fifo", "--rate", "3/1h"], schema)
    assert.strictEqual(set.code, 0, set.stderr)
    const sentAt = Date.now()
    const [a1, , b1, , c1] = await withStore(schema, (store) =>
      store.send("ledger", ["a", "a", "b", "b", "c"].map((key, n) => ({ task: "post", payload: { n }, key }))))
    // The heads of a and b run; b's fails and backs off an hour: b is blocked. Then c's head: the window (3 an hour) is full.
    await withStore(schema, (store) =>
      Effect.gen(function*() {
        const first = yield* store.claim("ledger", { lease: "10 minutes", limit: 2, consumer: "cli-test" })
        assert.deepStrictEqual(first.map((c) => c.id), [a1!.id, b1!.id])
        assert.strictEqual(yield* Finish.retry(store, first[1]!, { delay: "1 hour", error: "ledger\u001b[31m down" }), "written")
        const second = yield* store.claim("ledger", { lease: "10 minutes", limit: 5, consumer: "cli-test" })
        assert.deepStrictEqual(second.map((c) => c.id), [c1!.id])
      }))

    const json = await inProcess(["flow", "ledger", "--json"], schema)
    assert.strictEqual(json.code, 0, json.stderr)
    const status = printed(json.stdout)
    assert.strictEqual(status.inFlight, 2)
    assert.sameDeepMembers(status.keysAtLimit, [{ key: "a", inFlight: 1 }, { key: "c", inFlight: 1 }])
    assert.deepInclude(status.blockedKeys[0], { key: "b", headId: b1!.id, attempts: 1, lastError: "ledger\u001b[31m down" })
    assert.lengthOf(status.throttles, 1)
    assert.deepInclude(status.throttles[0], { task: null, key: null })
    const frees = Date.parse(status.throttles[0].nextAt)
    assert.isAtLeast(frees, sentAt + 3_600_000 - 60_000, "the window frees an hour after its first start")

    const report = await cli(["flow", "ledger"], schema)
    assert.strictEqual(report.code, 0, report.stderr)
    assert.match(report.stdout, /^queue ledger: 2 in flight$/m)
    assert.match(report.stdout, /^ledger\s+-\s+-\s+3\/1h\s+-\s+-\s+yes\s+-\s+operator/m)
    assert.match(report.stdout, /^keys at their limit \(1 in flight each\):\nKEY\s+IN FLIGHT\n/m)
    assert.match(report.stdout, /^a\s+1$/m)
    assert.match(report.stdout, /^FIFO keys blocked by a waiting head:\nKEY\s+HEAD ID\s+ATTEMPTS\s+DUE AT\s+DUE\s+LAST ERROR$/m)
    assert.match(report.stdout, new RegExp(`^b\\s+${b1!.id}\\s+1\\s+\\d{4}-\\S+\\s+in (59m|1h)\\b.*ledger\\\\x1b\\[31m down$`, "m"))
    assert.match(report.stdout, /^full rate windows:\nTASK\s+KEY\s+NEXT START AT\s+NEXT START\n-\s+-\s+\d{4}-\S+\s+in (59m|1h)/m)
    assert.notInclude(report.stdout, "\u001b", "stored text cannot drive the terminal")

    const quiet = await inProcess(["flow", "idle"], schema)
    assert.strictEqual(quiet.code, 0, quiet.stderr)
    assert.include(quiet.stdout, "limits: none")
    assert.include(quiet.stdout, "keys at their limit: none")
    assert.include(quiet.stdout, "full rate windows: none")
  })
})
