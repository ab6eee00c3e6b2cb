/**
 * `leasehold queues list|pause|resume` and `leasehold cancel` as real processes against the
 * test server: the queue table (read-only: an unmigrated schema is refused, nothing created),
 * each cancel's result; and the refusals, run in-process (the command's own code and exit
 * codes, without a process start each): missing or contradictory arguments and an id that is
 * no number (exit 2 with the usage, before connecting), a bad queue or task name (exit 1);
 * nothing touched by any of them.
 */
import { Effect } from "effect"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import * as Out from "../src/cli/output.ts"
import type { MessageId } from "../src/Message.ts"
import * as Migrations from "../src/Migrations.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import { cli, inProcess } from "./support/CliProcess.ts"
import * as PgTest from "./support/PgTest.ts"
import { sqlRuntime } from "./support/WorkerProcess.ts"

const QUEUE = "steered"

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
  const schema = PgTest.uniqueSchema("clipc")
  schemas.push(schema)
  await db.runPromise(Migrations.run({ schema }))
  return schema
}

const send = (schema: string, messages: ReadonlyArray<{ readonly task: string; readonly payload: unknown }>) =>
  db.runPromise(Effect.scoped(Effect.gen(function*() {
    const store = yield* PgQueueStore.make({ schema, migrate: false, leasePool: false })
    return (yield* store.send(QUEUE, messages)).map((r) => r.id)
  })))

describe("leasehold queues and cancel: output and refusals", () => {
  it("queues list prints a table (read-only: refuses an unmigrated schema); cancel prints each result; ready, delayed and dead go at once", async () => {
    const schema = await freshSchema()
    const [ready, delayed] = await send(schema, [{ task: "t", payload: 1 }, { task: "t", payload: 2 }])
    await db.query(`UPDATE ${schema}.messages SET visible_at = now() + interval '1 hour' WHERE id = $1::bigint`, [delayed])
    assert.strictEqual((await cli(["queues", "pause", QUEUE], schema)).code, 0)
    const table = await cli(["queues", "list"], schema)
    assert.strictEqual(table.code, 0, table.stderr)
    assert.match(table.stdout, /^QUEUE\s+READY\s+DELAYED\s+IN FLIGHT\s+DEAD\s+OLDEST READY\s+PAUSED$/m)
    assert.match(table.stdout, new RegExp(`^${QUEUE}\\s+1\\s+1\\s+0\\s+0\\s+\\S+\\s+since \\d{4}-`, "m"))

    const done = await cli(["cancel", ready!, delayed!], schema)
    assert.strictEqual(done.code, 0, done.stderr)
    assert.match(done.stdout, new RegExp(`^\\s*${ready}\\s+cancelled$`, "m"))
    assert.match(done.stdout, new RegExp(`^\\s*${delayed}\\s+cancelled$`, "m"))
    const left = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${schema}.messages`)
    assert.strictEqual(left[0]!.n, 0)
    const history = await db.query<{ outcome: string }>(`SELECT outcome FROM ${schema}.attempts ORDER BY message_id`)
    assert.deepStrictEqual(history.map((h) => h.outcome), ["cancelled", "cancelled"])

    // Read-only: on a schema without leasehold's tables, queues list creates nothing and says so.
    const bare = PgTest.uniqueSchema("steer_bare")
    schemas.push(bare)
    const refused = await cli(["queues", "list"], bare)
    assert.strictEqual(refused.code, 1, refused.stdout)
    assert.match(refused.stderr, /SchemaNotMigrated: schema \S+ has no leasehold tables/)
    const created = await db.query(`SELECT 1 FROM information_schema.schemata WHERE schema_name = $1`, [bare])
    assert.lengthOf(created, 0)
  })

  it("refuses before connecting: no ids, ids and --queue, --task alone, an id that is no number (exit 2); a bad queue or task name (exit 1)", async () => {
    const schema = await freshSchema()
    const [kept] = await send(schema, [{ task: "t", payload: 1 }])
    const refusals: ReadonlyArray<readonly [ReadonlyArray<string>, RegExp]> = [
      [["cancel"], /say which messages: cancel ID\.\.\. or cancel --queue Q/],
      [["cancel", kept!, "--queue", QUEUE], /cancel takes message ids or --queue, not both/],
      [["cancel", kept!, "--task", "t"], /--task needs --queue/],
      [["cancel", "12x"], /cancel needs message ids \(numbers\): "12x" is not one/],
      [["queues", "pause"], /queue/]
    ]
    for (const [args, why] of refusals) {
      const r = await inProcess(args, schema)
      assert.strictEqual(r.code, 2, `leasehold ${args.join(" ")}: ${r.stderr}`)
      assert.match(r.stderr, why)
      assert.include(r.stderr, "USAGE")
      assert.strictEqual(r.stdout, "")
    }
    for (const args of [["queues", "pause", "no spaces"], ["cancel", "--queue", QUEUE, "--task", "no spaces"]]) {
      const r = await inProcess(args, schema)
      assert.strictEqual(r.code, 1, `leasehold ${args.join(" ")}: ${r.stderr}`)
      assert.match(r.stderr, /InvalidInput/)
    }
    // Nothing was touched.
    const rows = await db.query<{ id: string }>(`SELECT id::text AS id FROM ${schema}.messages`)
    assert.deepStrictEqual(rows.map((r) => r.id), [kept])
    const paused = await db.query(`SELECT 1 FROM ${schema}.queues`)
    assert.lengthOf(paused, 0)
  })

  it("cancel's help and output say a running message is stopped by the notification; send's help says --max-attempts is not the task's", async () => {
    const schema = await freshSchema()
    const help = await inProcess(["cancel", "--help"], schema)
    assert.strictEqual(help.code, 0, help.stderr)
    assert.include(help.stdout, "its consumer, notified at once, interrupts its handler")
    const cancelling = Out.cancelTable([{ id: "7" as MessageId, result: "cancelling" }])
    assert.include(cancelling, "cancelling (running: its consumer is notified and stops it)")
    for (const text of [help.stdout, cancelling]) assert.notMatch(text, /interrupts its handler at the next|at its next renewal/)
    const sendHelp = await inProcess(["send", "--help"], schema)
    assert.include(sendHelp.stdout.replace(/\s+/g, " "), "this command does not know the task's maxAttempts, so pass it here")
  })

  it("stats of a queue that does not exist (a typo) says so and exits 1; a known one, emptied, still shows its row", async () => {
    const schema = await freshSchema()
    const [id] = await send(schema, [{ task: "t", payload: 1 }])
    const typo = await inProcess(["stats", QUEUE, "steerd"], schema)
    assert.strictEqual(typo.code, 1, typo.stdout)
    assert.include(typo.stderr, "UnknownQueues: no queue named steerd: no messages, no attempt history and no pause row")
    assert.strictEqual(typo.stdout, "", "no zero row printed")
    await inProcess(["cancel", id!], schema) // emptied: only its history is left
    const known = await inProcess(["stats", QUEUE, "--json"], schema)
    assert.strictEqual(known.code, 0, known.stderr)
    assert.deepInclude(JSON.parse(known.stdout.slice(known.stdout.indexOf("[")))[0], { queue: QUEUE, ready: 0 })
  })
})
