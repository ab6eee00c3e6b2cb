/**
 * `leasehold schedules list|trigger|remove` as a real process against the test server:
 * list shows every schedule with its last and next slot and whether a worker still declares
 * it (a schedule not seen for 5 minutes shows NOT SEEN); trigger sends one message now; remove
 * deletes it; an unknown key fails (exit 1, UnknownSchedule), a malformed one is refused before
 * connecting (exit 2); list never migrates (exit 1, SchemaNotMigrated on a bare schema).
 */
import { Effect, ManagedRuntime } from "effect"
import { SqlClient } from "effect/sql"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import * as Migrations from "../src/Migrations.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import type { QueueStoreShape } from "../src/QueueStore.ts"
import { cli as run, type CliResult as Result } from "./support/CliProcess.ts"
import * as PgTest from "./support/PgTest.ts"

const show = (r: Result) => `exit ${r.code}\n--- stdout ---\n${r.stdout}\n--- stderr ---\n${r.stderr}`

let runtime: ManagedRuntime.ManagedRuntime<SqlClient.SqlClient, unknown>
const schemas: Array<string> = []
beforeAll(() => {
  runtime = ManagedRuntime.make(PgTest.clientLayer({ maxConnections: 2 }))
})
afterAll(async () => {
  for (const schema of schemas) {
    await runtime.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)))
  }
  await runtime?.dispose()
})

const freshSchema = async (migrated: boolean) => {
  const schema = PgTest.uniqueSchema("cs")
  schemas.push(schema)
  if (migrated) await runtime.runPromise(Migrations.run({ schema }))
  return schema
}

const withStore = <A>(schema: string, f: (store: QueueStoreShape) => Effect.Effect<A, unknown>) =>
  runtime.runPromise(Effect.scoped(Effect.flatMap(PgQueueStore.make({ schema, migrate: false, leasePool: false }), f)))

const spec = (key: string) => ({ key, cron: "*/5 * * * *", tz: "UTC", queue: "q", task: "tick", payload: { key }, nextSlot: new Date(Date.now() + 60_000) })

describe("leasehold schedules", () => {
  it("list shows declared and no longer seen schedules; trigger sends now; remove deletes; unknown keys exit 1", async () => {
    const schema = await freshSchema(true)
    await withStore(schema, (store) =>
      Effect.gen(function*() {
        yield* store.upsertSchedules([spec("fresh")], { seenBy: "worker-a", now: new Date() })
        yield* store.upsertSchedules([spec("gone")], { seenBy: "worker-b", now: new Date(Date.now() - 3_600_000) })
      }))
    const list = await run(["schedules", "list"], schema)
    assert.strictEqual(list.code, 0, show(list))
    const lines = list.stdout.trim().split("\n")
    assert.match(lines[0]!, /^KEY\s+CRON\s+TZ\s+QUEUE\s+TASK\s+LAST SLOT\s+NEXT SLOT\s+LAST SEEN\s+BY\s+DECLARED$/)
    assert.match(lines.find((l) => l.startsWith("fresh"))!, /\*\/5 \* \* \* \*\s+UTC\s+q\s+tick\s+-\s+\S+Z\s+.*worker-a\s+yes$/)
    assert.match(lines.find((l) => l.startsWith("gone"))!, /worker-b\s+NOT SEEN for 1h/)
    const json = JSON.parse((await run(["schedules", "list", "--json"], schema)).stdout) as Array<{ key: string; declared: boolean }>
    assert.deepStrictEqual(json.map((r) => [r.key, r.declared]), [["fresh", true], ["gone", false]])

    const trigger = await run(["schedules", "trigger", "fresh"], schema)
    assert.strictEqual(trigger.code, 0, show(trigger))
    const sent = JSON.parse(trigger.stdout) as { id: string; deduplicated: boolean }
    const message = await withStore(schema, (store) => store.get(sent.id as never))
    assert.strictEqual(message._tag, "Some")
    if (message._tag === "Some") {
      assert.deepStrictEqual([message.value.task, message.value.payload, message.value.headers["leasehold-slot"]], ["tick", { key: "fresh" }, "manual"])
    }

    const remove = await run(["schedules", "remove", "gone"], schema)
    assert.strictEqual(remove.code, 0, show(remove))
    assert.deepStrictEqual(JSON.parse(remove.stdout), { removed: "gone" })
    assert.deepStrictEqual((await withStore(schema, (store) => store.schedules)).map((r) => r.key), ["fresh"])

    for (const args of [["schedules", "remove", "gone"], ["schedules", "trigger", "nope"]]) {
      const r = await run(args, schema)
      assert.strictEqual(r.code, 1, show(r))
      assert.match(r.stderr, /^leasehold: UnknownSchedule: no schedule with key "(gone|nope)"/)
    }
  }, 60_000)

  it("a malformed key is refused before connecting (exit 2); list never migrates (exit 1 on a bare schema)", async () => {
    const bare = await freshSchema(false)
    const bad = await run(["schedules", "trigger", "a b"], bare)
    assert.strictEqual(bad.code, 2, show(bad))
    assert.match(bad.stderr, /key "a b" is not a schedule key \(rule: 1-128 characters/)
    const list = await run(["schedules", "list"], bare)
    assert.strictEqual(list.code, 1, show(list))
    assert.match(list.stderr, new RegExp(`SchemaNotMigrated: schema ${bare} has no leasehold tables`))
    const [row] = await runtime.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql<{ present: boolean }>`SELECT to_regclass(${`${bare}.schedules`}) IS NOT NULL AS present`))
    assert.isFalse(row!.present, "nothing created")
  }, 60_000)
})
