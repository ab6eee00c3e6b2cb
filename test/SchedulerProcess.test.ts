/**
 * Exactly one message per slot with real processes: three scheduler processes
 * (test/fixtures/scheduler.ts, an every-second schedule) race for every slot; one is
 * SIGKILLed a few milliseconds after a slot began, while the three are firing it. The
 * messages must still name every second from the first slot to the last exactly once.
 */
import { afterAll, afterEach, assert, beforeAll, describe, it } from "vitest"
import * as Migrations from "../src/Migrations.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitForAsync as waitFor } from "./support/Wait.ts"
import { dumpOnFailure, killAll, spawnWorker, sqlRuntime, waitExit, waitReady, type Worker } from "./support/WorkerProcess.ts"

const FIXTURE = "test/fixtures/scheduler.ts"

let db: ReturnType<typeof sqlRuntime>
beforeAll(() => {
  db = sqlRuntime()
})
afterAll(async () => {
  await db?.dispose()
})

let workers: Array<Worker> = []
let schema: string | undefined
afterEach(async () => {
  await killAll(workers)
  workers = []
  if (schema !== undefined) await db.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)
  schema = undefined
})

/** Each fired slot and how many messages it has. */
const slots = (s: string) =>
  db.query<{ slot: string; n: number }>(
    `SELECT headers->>'leasehold-slot' AS slot, count(*)::int AS n FROM ${s}.messages WHERE queue = 'ticks' GROUP BY 1 ORDER BY 1`
  )

describe("Scheduler with real processes", () => {
  it("three processes, one SIGKILLed as a slot begins: every slot has exactly one message", async () => {
    schema = PgTest.uniqueSchema("sp")
    const s = schema
    await db.runPromise(Migrations.run({ schema: s }))
    for (const name of ["s1", "s2", "s3"]) spawnWorker(name, { LEASEHOLD_SCHEMA: s }, workers, FIXTURE)
    dumpOnFailure(workers)
    await Promise.all(workers.map((w) => waitReady(w, 30_000)))
    await waitFor("three slots fired", async () => ((await slots(s)).length >= 3 ? true : undefined), { timeoutMs: 15_000 })

    // Kill s1 2 ms into a second: the three are waking for that slot and racing to fire it.
    await new Promise((done) => setTimeout(done, 1000 - (Date.now() % 1000) + 2))
    const victim = workers[0]!
    victim.proc.kill("SIGKILL")
    const killedAt = Date.now()
    await waitExit(victim, 5_000)
    // The other two go on: five more seconds of slots after the kill.
    const after = new Date(Math.floor(killedAt / 1000) * 1000 + 5_000).toISOString()
    await waitFor("five slots after the kill", async () => ((await slots(s)).at(-1)!.slot >= after ? true : undefined), {
      timeoutMs: 20_000
    })
    await killAll(workers)

    const fired = await slots(s)
    const twice = fired.filter((r) => r.n !== 1)
    assert.deepStrictEqual(twice, [], "no slot fired twice")
    // Every second from the first fired slot to the last: none skipped by the kill.
    const first = Date.parse(fired[0]!.slot)
    const last = Date.parse(fired.at(-1)!.slot)
    const expected: Array<string> = []
    for (let t = first; t <= last; t += 1000) expected.push(new Date(t).toISOString())
    assert.deepStrictEqual(fired.map((r) => r.slot), expected)
    assert.isAtLeast(expected.length, 8)
    assert.isAtLeast(last, killedAt + 4_000, "slots went on after the kill")
  }, 60_000)
})
