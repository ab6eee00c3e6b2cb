/**
 * Real worker processes (test/fixtures/worker.ts) against the shared test
 * server: a SIGTERM drains and releases, a SIGKILL is redelivered once the
 * lease expires.
 *
 * Every test gets a fresh schema with the messages table, a ledger the workers
 * write to (`start`/`end` per handler run) and a history table fed by a
 * trigger on the messages table, so each claim, renewal, release and ack of a
 * message can be read back with its database time. Times measured in the test
 * (`Date.now()` at a signal or an exit) and database times come from the same
 * machine's clock.
 */
import { afterAll, afterEach, assert, beforeAll, describe, it } from "vitest"
import type { MessageId } from "../src/Message.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitForAsync as waitFor } from "./support/Wait.ts"
import { dumpOnFailure, killAll, spawnWorker as spawnProcess, sqlRuntime, waitExit, waitReady, type Worker } from "./support/WorkerProcess.ts"

const QUEUE = "lifecycle"

let db: ReturnType<typeof sqlRuntime>

beforeAll(() => {
  db = sqlRuntime()
})

afterAll(async () => {
  await db?.dispose()
})

/** Run one statement on the test's own pool. */
const query = <A extends object>(text: string, params: ReadonlyArray<unknown> = []) => db.query<A>(text, params)

// ---------------------------------------------------------------------------------------------
// Schema per test
// ---------------------------------------------------------------------------------------------

const createSchema = async (schema: string) => {
  await db.migrateWithLedger(schema)
  await query(`CREATE TABLE ${schema}.history (
    message_id text, op text, attempts int, lease_token uuid, leased_by text, visible_at timestamptz,
    at timestamptz DEFAULT clock_timestamp())`)
  await query(`CREATE FUNCTION ${schema}.record_history() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'DELETE' THEN
        INSERT INTO ${schema}.history (message_id, op, attempts, lease_token, leased_by, visible_at)
        VALUES (OLD.id::text, 'delete', OLD.attempts, OLD.lease_token, OLD.leased_by, OLD.visible_at);
        RETURN OLD;
      END IF;
      INSERT INTO ${schema}.history (message_id, op, attempts, lease_token, leased_by, visible_at)
      VALUES (NEW.id::text, 'update', NEW.attempts, NEW.lease_token, NEW.leased_by, NEW.visible_at);
      RETURN NEW;
    END $$`)
  await query(`CREATE TRIGGER record_history AFTER UPDATE OR DELETE ON ${schema}.messages
    FOR EACH ROW EXECUTE FUNCTION ${schema}.record_history()`)
}

const send = (schema: string, messages: ReadonlyArray<{ readonly task: string; readonly payload: unknown }>) =>
  db.send(schema, QUEUE, messages)

interface LedgerRow {
  readonly message_id: string
  readonly consumer: string
  readonly event: string
  readonly at: Date
}

const ledger = (schema: string) =>
  query<LedgerRow>(`SELECT message_id, consumer, event, at FROM ${schema}.ledger ORDER BY at`)

interface HistoryRow {
  readonly message_id: string
  readonly op: string
  readonly attempts: number
  readonly lease_token: string | null
  readonly leased_by: string | null
  readonly visible_at: Date
  readonly at: Date
}

const history = (schema: string, id: MessageId) =>
  query<HistoryRow>(
    `SELECT message_id, op, attempts, lease_token::text, leased_by, visible_at, at FROM ${schema}.history
     WHERE message_id = $1 ORDER BY at`,
    [id]
  )

interface MessageRow {
  readonly id: string
  readonly attempts: number
  readonly lease_token: string | null
  readonly leased_by: string | null
}

const messageRow = async (schema: string, id: MessageId): Promise<MessageRow | undefined> =>
  (await query<MessageRow>(
    `SELECT id::text, attempts, lease_token::text, leased_by FROM ${schema}.messages WHERE id = $1::bigint`,
    [id]
  ))[0]

// ---------------------------------------------------------------------------------------------
// Waiting and processes
// ---------------------------------------------------------------------------------------------


/** The workers of the current test (a new array per test, so a failure report still has them after afterEach). */
let workers: Array<Worker> = []

const spawnWorker = (
  name: string,
  options: { readonly schema: string; readonly lease: string; readonly shutdownGrace: string }
): Worker =>
  spawnProcess(name, {
    LEASEHOLD_SCHEMA: options.schema,
    LEASEHOLD_QUEUES: QUEUE,
    LEASEHOLD_LEASE: options.lease,
    LEASEHOLD_POLL_INTERVAL: "100ms",
    LEASEHOLD_SHUTDOWN_GRACE: options.shutdownGrace
  }, workers)

let schemas: Array<string> = []

const freshSchema = async () => {
  const schema = PgTest.uniqueSchema("pl")
  schemas.push(schema)
  await createSchema(schema)
  return schema
}

afterEach(async () => {
  // Kill whatever still runs, wait for it to be gone, then drop the schema.
  const done = workers
  workers = []
  await killAll(done)
  for (const schema of schemas.splice(0)) {
    await query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined)
  }
})

const startsOf = (rows: ReadonlyArray<LedgerRow>, id: MessageId) => rows.filter((r) => r.message_id === id && r.event === "start")
const endsOf = (rows: ReadonlyArray<LedgerRow>, id: MessageId) => rows.filter((r) => r.message_id === id && r.event === "end")

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

describe("worker process lifecycle", () => {
  it("a claim failing with a non-connection-dead error (a column it needs is gone) ends the worker: exit 1, the error at ERROR, its running message released", async () => {
    dumpOnFailure(workers)
    const schema = await freshSchema()
    const [id] = await send(schema, [{ task: "sleep", payload: { ms: 60_000 } }])
    const a = spawnWorker("A", { schema, lease: "2000ms", shutdownGrace: "1000ms" })
    await waitReady(a)
    await waitFor("A to start the message", async () => startsOf(await ledger(schema), id!).length === 1 ? true : undefined)
    // Break the claim statement only (renew and release do not use this column): the next claim
    // fails with an error from the database, not a dead connection.
    await query(`ALTER TABLE ${schema}.messages DROP COLUMN lease_expiries`)
    const exit = await waitExit(a, 20_000)
    assert.strictEqual(exit.signal, null)
    assert.strictEqual(exit.code, 1, "a failed consumer fails the program")
    const output = a.output.join("\n")
    assert.match(output, /ERROR.*claim loop failed/)
    assert.match(output, /lease_expiries|cached plan/)
    // Its running message was interrupted at the end of the grace and released.
    const row = await messageRow(schema, id!)
    assert.deepStrictEqual(row && [row.attempts, row.lease_token], [0, null], "released: attempt given back, no token")
  })


  it("SIGTERM: the short task finishes and is acked, the long one is released and taken over at once", async () => {
    dumpOnFailure(workers)
    const LEASE_MS = 2_000
    const GRACE_MS = 3_000
    const schema = await freshSchema()
    const [shortId, longId] = await send(schema, [
      { task: "sleep", payload: { ms: 1_000 } },
      { task: "sleep", payload: { ms: 60_000 } }
    ])
    assert.isDefined(shortId)
    assert.isDefined(longId)

    const a = spawnWorker("A", { schema, lease: `${LEASE_MS}ms`, shutdownGrace: `${GRACE_MS}ms` })
    await waitReady(a)
    // Both handlers run on A before the signal.
    await waitFor("A to start both messages", async () => {
      const rows = await ledger(schema)
      return startsOf(rows, shortId!).length === 1 && startsOf(rows, longId!).length === 1 ? rows : undefined
    })
    const before = await ledger(schema)
    assert.deepStrictEqual(before.filter((r) => r.event === "start").map((r) => r.consumer), [a.consumerId, a.consumerId])
    assert.strictEqual(endsOf(before, shortId!).length, 0, "the short task must still be running at SIGTERM")

    const sigtermAt = Date.now()
    assert.isTrue(a.proc.kill("SIGTERM"))
    const b = spawnWorker("B", { schema, lease: `${LEASE_MS}ms`, shutdownGrace: `${GRACE_MS}ms` })

    // A drains: exit code 0 within the grace plus a margin.
    const aExit = await waitExit(a, GRACE_MS + 5_000)
    assert.strictEqual(aExit.signal, null, "A must exit by itself, not die of the signal")
    assert.strictEqual(aExit.code, 0)
    const exitAfterSigterm = aExit.at - sigtermAt
    assert.isAtMost(exitAfterSigterm, GRACE_MS + 5_000)

    // The short one completed on A during the grace and was acked.
    const afterExit = await ledger(schema)
    assert.strictEqual(endsOf(afterExit, shortId!).length, 1, "the short task must complete during the grace period")
    assert.strictEqual(endsOf(afterExit, shortId!)[0]!.consumer, a.consumerId)
    assert.isUndefined(await messageRow(schema, shortId!), "the short message must be acked (deleted)")
    assert.strictEqual(startsOf(afterExit, shortId!).length, 1, "the short task ran once")

    // The long one was released by A at the end of the grace: visible at once, attempt given back, no token.
    const longHistory = await history(schema, longId!)
    const releaseIndex = longHistory.findIndex((h) => h.op === "update" && h.lease_token === null)
    assert.isAtLeast(releaseIndex, 1, `no release in the history of the long message: ${JSON.stringify(longHistory)}`)
    const release = longHistory[releaseIndex]!
    assert.strictEqual(release.attempts, 0, "release gives the attempt back")
    assert.isNull(release.leased_by)
    assert.isAtMost(release.visible_at.getTime(), release.at.getTime(), "a released message is visible at once")
    const heldByA = longHistory.slice(0, releaseIndex)
    assert.isTrue(heldByA.every((h) => h.leased_by === a.consumerId && h.attempts === 1), JSON.stringify(heldByA))
    const renewalsByA = heldByA.length - 1 // the first update is the claim
    const aLeaseEnd = heldByA[heldByA.length - 1]!.visible_at.getTime()
    const releaseAfterSigterm = release.at.getTime() - sigtermAt
    assert.isAtLeast(releaseAfterSigterm, GRACE_MS - 250, "the long task keeps its grace before it is released")
    assert.isAtMost(release.at.getTime(), aExit.at, "released before A exited")

    // B, started after the SIGTERM, takes it over right away: long before A's lease would have ended.
    const bStart = await waitFor("B to start the long message", async () => {
      const rows = await ledger(schema)
      return startsOf(rows, longId!).find((r) => r.consumer === b.consumerId)
    }, { timeoutMs: 15_000 })
    const bStartAfterExit = bStart.at.getTime() - aExit.at
    const bStartAfterRelease = bStart.at.getTime() - release.at.getTime()
    const bStartBeforeLeaseEnd = aLeaseEnd - bStart.at.getTime()
    console.log(
      `SIGTERM drain: A exited ${exitAfterSigterm} ms after SIGTERM (grace ${GRACE_MS} ms), released the long message ` +
        `${releaseAfterSigterm} ms after SIGTERM (A renewed it ${renewalsByA} times); B (ready ${
          b.readyAt === undefined ? "?" : b.readyAt - sigtermAt
        } ms after SIGTERM) started it ${bStartAfterRelease} ms after the release, ${bStartAfterExit} ms after A's exit, ` +
        `${bStartBeforeLeaseEnd} ms before A's lease would have expired`
    )
    // Generous: on a loaded machine B's next poll can come late; what proves the release is the
    // check below (B ran it before A's lease would have ended) and the attempt given back.
    assert.isAtMost(bStartAfterExit, 3_000, "B must get the released message within a few seconds of A's exit")
    assert.isAtLeast(bStartBeforeLeaseEnd, 500, "B must get it well before A's lease would have expired")

    // B's claim: a fresh lease, and the attempt count shows A's attempt was given back.
    const row = await messageRow(schema, longId!)
    assert.isDefined(row)
    assert.strictEqual(row!.leased_by, b.consumerId)
    assert.strictEqual(row!.attempts, 1)
    const final = await ledger(schema)
    assert.deepStrictEqual(startsOf(final, longId!).map((r) => r.consumer), [a.consumerId, b.consumerId])
    assert.strictEqual(endsOf(final, longId!).length, 0)
  })

  it("SIGKILL: the message comes back once the lease expires and the surviving worker completes it", async () => {
    dumpOnFailure(workers)
    const LEASE_MS = 2_000
    const schema = await freshSchema()
    // Two idle workers; whichever claims the message is the one killed.
    const one = spawnWorker("W1", { schema, lease: `${LEASE_MS}ms`, shutdownGrace: "3s" })
    const two = spawnWorker("W2", { schema, lease: `${LEASE_MS}ms`, shutdownGrace: "3s" })
    await Promise.all([waitReady(one), waitReady(two)])

    const [id] = await send(schema, [{ task: "sleep", payload: { ms: 3_000 } }])
    assert.isDefined(id)
    const first = await waitFor("a worker to start the message", async () => startsOf(await ledger(schema), id!)[0])
    const victim = first.consumer === one.consumerId ? one : two
    const survivor = victim === one ? two : one
    assert.strictEqual(first.consumer, victim.consumerId)
    assert.isUndefined(survivor.exit, "the surviving worker must be running")

    const killedAt = Date.now()
    assert.isTrue(victim.proc.kill("SIGKILL"))
    const victimExit = await waitExit(victim, 5_000)
    assert.strictEqual(victimExit.signal, "SIGKILL")

    const redelivered = await waitFor("the surviving worker to start the message", async () => {
      const rows = await ledger(schema)
      return startsOf(rows, id!).find((r) => r.consumer === survivor.consumerId)
    }, { timeoutMs: LEASE_MS + 10_000 })
    const killToStart = redelivered.at.getTime() - killedAt
    console.log(`SIGKILL redelivery: kill -> survivor start ${killToStart} ms (lease ${LEASE_MS} ms)`)
    assert.isAtMost(killToStart, LEASE_MS + 2_000, "redelivery within lease + 2 s of the kill")

    // Not early either: the survivor claimed only after the victim's last lease had run out.
    const h = await history(schema, id!)
    const byVictim = h.filter((x) => x.leased_by === victim.consumerId)
    const claimBySurvivor = h.find((x) => x.leased_by === survivor.consumerId)
    assert.isAtLeast(byVictim.length, 1)
    assert.isDefined(claimBySurvivor)
    const victimLeaseEnd = byVictim[byVictim.length - 1]!.visible_at.getTime()
    assert.isAtLeast(claimBySurvivor!.at.getTime(), victimLeaseEnd, "claimed while the victim's lease was still valid")
    assert.strictEqual(claimBySurvivor!.attempts, 2, "the killed run counts as an attempt")

    // The survivor completes it, and acks it.
    await waitFor("the surviving worker to finish the message", async () => {
      const rows = await ledger(schema)
      return endsOf(rows, id!).length > 0 ? rows : undefined
    }, { timeoutMs: 15_000 })
    await waitFor("the message to be acked", async () => (await messageRow(schema, id!)) === undefined ? true : undefined, {
      timeoutMs: 5_000
    })
    const rows = await ledger(schema)
    assert.deepStrictEqual(endsOf(rows, id!).map((r) => r.consumer), [survivor.consumerId])
    assert.deepStrictEqual(startsOf(rows, id!).map((r) => r.consumer), [victim.consumerId, survivor.consumerId])
    assert.isUndefined(survivor.exit, "the survivor keeps running")
  })
})
