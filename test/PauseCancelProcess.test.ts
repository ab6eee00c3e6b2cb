/**
 * Pause, resume and cancel across real processes: a worker (test/fixtures/worker.ts) on the
 * shared test server, steered by the `leasehold` command (src/bin/leasehold.ts) as an operator
 * would. A running message cancelled from the CLI has its handler interrupted (its finalizer
 * runs) within the renew interval (at once: the worker hears of the cancel and renews; and by
 * the next renewal when no notification comes) and is deleted, never run again, while the
 * worker's other messages run on; a queue paused from the CLI is not claimed, and resuming it
 * wakes the idle worker at once (NOTIFY), well before its poll interval.
 */
import { afterAll, afterEach, assert, beforeAll, describe, it } from "vitest"
import type { MessageId } from "../src/Message.ts"
import { cli } from "./support/CliProcess.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitForAsync as waitFor } from "./support/Wait.ts"
import { dumpOnFailure, killAll, spawnWorker, sqlRuntime, waitExit, waitReady, type Worker } from "./support/WorkerProcess.ts"

const QUEUE = "steered"

let db: ReturnType<typeof sqlRuntime>
let workers: Array<Worker> = []
const schemas: Array<string> = []

beforeAll(() => {
  db = sqlRuntime()
})

afterEach(async () => {
  const done = workers
  workers = []
  await killAll(done)
})

afterAll(async () => {
  for (const schema of schemas) await db.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined)
  await db?.dispose()
})

const freshSchema = async () => {
  const schema = PgTest.uniqueSchema("steer")
  schemas.push(schema)
  await db.migrateWithLedger(schema)
  // When a cancel flags a message and a resume unpauses a queue, by the database's clock (written
  // just before the operator's command commits): what the latencies below are measured from.
  await db.query(`CREATE FUNCTION ${schema}.record_steering() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_TABLE_NAME = 'messages' THEN
        INSERT INTO ${schema}.ledger (message_id, event) VALUES (NEW.id::text, 'cancel-flagged');
      ELSE
        INSERT INTO ${schema}.ledger (message_id, event) VALUES (NEW.name, 'resumed');
      END IF;
      RETURN NEW;
    END $$`)
  await db.query(`CREATE TRIGGER record_cancel AFTER UPDATE ON ${schema}.messages FOR EACH ROW
    WHEN (OLD.cancel_requested_at IS NULL AND NEW.cancel_requested_at IS NOT NULL) EXECUTE FUNCTION ${schema}.record_steering()`)
  await db.query(`CREATE TRIGGER record_resume AFTER UPDATE ON ${schema}.queues FOR EACH ROW
    WHEN (OLD.paused AND NOT NEW.paused) EXECUTE FUNCTION ${schema}.record_steering()`)
  return schema
}

const send = (schema: string, messages: ReadonlyArray<{ readonly task: string; readonly payload: unknown }>) =>
  db.send(schema, QUEUE, messages)

interface LedgerRow {
  readonly message_id: string
  readonly event: string
  readonly at: Date
}

const ledger = (schema: string) => db.query<LedgerRow>(`SELECT message_id, event, at FROM ${schema}.ledger ORDER BY at`)
const eventsOf = (rows: ReadonlyArray<LedgerRow>, id: MessageId) => rows.filter((r) => r.message_id === id).map((r) => r.event)

const worker = (schema: string, env: Record<string, string>) =>
  spawnWorker("W", { LEASEHOLD_SCHEMA: schema, LEASEHOLD_QUEUES: QUEUE, LEASEHOLD_SHUTDOWN_GRACE: "1000ms", ...env }, workers)

describe("pause, resume and cancel from the CLI, with a real worker", () => {
  it("cancel of a running message interrupts its handler within the renew interval; the others run on", async () => {
    dumpOnFailure(workers)
    const LEASE_MS = 6_000
    const RENEW_EVERY_MS = LEASE_MS / 3
    const schema = await freshSchema()
    const [doomed, short, later, quiet] = await send(schema, [
      { task: "cancellable", payload: { ms: 60_000 } },
      { task: "sleep", payload: { ms: 3_000 } },
      { task: "cancellable", payload: { ms: 60_000 } },
      { task: "cancellable", payload: { ms: 60_000 } }
    ])
    const w = worker(schema, { LEASEHOLD_LEASE: `${LEASE_MS}ms`, LEASEHOLD_POLL_INTERVAL: "200ms" })
    await waitReady(w)
    await waitFor("all four to start", async () => {
      const rows = await ledger(schema)
      return [doomed!, short!, later!, quiet!].every((id) => eventsOf(rows, id).includes("start")) ? true : undefined
    })

    // An id of no message is named (exit 1) after the known one was acted on.
    const cancelled = await cli(["cancel", doomed!, "987654321", "--json"], schema)
    assert.strictEqual(cancelled.code, 1, cancelled.stderr)
    assert.deepStrictEqual(JSON.parse(cancelled.stdout), [{ id: doomed!, result: "cancelling" }])
    assert.match(cancelled.stderr, /UnknownIds: no message with id: 987654321/)

    const interrupted = await waitFor("the cancelled handler to be interrupted", async () => {
      const row = (await ledger(schema)).find((r) => r.message_id === doomed && r.event === "interrupted")
      return row
    }, { timeoutMs: 3 * RENEW_EVERY_MS + 5_000 })
    // From the flag's write (just before the command's commit) to the handler's finalizer, both by the database's clock.
    const flagged = (await ledger(schema)).find((r) => r.message_id === doomed && r.event === "cancel-flagged")!
    const tookMs = interrupted.at.getTime() - flagged.at.getTime()
    console.log(`cancel of a running message: handler interrupted ${tookMs} ms after the cancel (renew interval ${RENEW_EVERY_MS} ms)`)
    // The notification wakes the renewer (measured 15-41 ms): a quarter of the renew interval, which a renewal
    // alone meets only when it happens to fall due that soon.
    assert.isAtMost(tookMs, RENEW_EVERY_MS / 4, "the cancel's notification, not the next renewal, stopped the handler")

    await waitFor("the cancelled message to be deleted", async () => {
      const rows = await db.query(`SELECT 1 FROM ${schema}.messages WHERE id = $1::bigint`, [doomed])
      return rows.length === 0 ? true : undefined
    })
    const history = await db.query<{ outcome: string; consumer: string; error: string | null }>(
      `SELECT outcome, consumer, error FROM ${schema}.attempts WHERE message_id = $1::bigint ORDER BY id`,
      [doomed]
    )
    assert.deepStrictEqual(history.map((h) => [h.outcome, h.consumer]), [["cancelled", w.consumerId]])
    assert.match(w.output.join("\n"), /cancelled while running/)

    // The others were not touched: the short one finishes and is acked, the long one still runs.
    await waitFor("the short message to be acked", async () => {
      const rows = await db.query(`SELECT 1 FROM ${schema}.messages WHERE id = $1::bigint`, [short])
      return rows.length === 0 && eventsOf(await ledger(schema), short!).includes("end") ? true : undefined
    })
    const [stillRunning] = await db.query<{ leased_by: string | null }>(
      `SELECT leased_by FROM ${schema}.messages WHERE id = $1::bigint`,
      [later]
    )
    assert.strictEqual(stillRunning?.leased_by, w.consumerId)
    assert.deepStrictEqual(eventsOf(await ledger(schema), later!), ["start"], "not flagged, not interrupted")

    // A flag set without the notification (as if it were lost): the next renewal carries it.
    await db.query(`UPDATE ${schema}.messages SET cancel_requested_at = now() WHERE id = $1::bigint`, [quiet])
    const quietStop = await waitFor("the handler flagged without a notification to be interrupted", async () => {
      const rows = (await ledger(schema)).filter((r) => r.message_id === quiet)
      const stop = rows.find((r) => r.event === "interrupted")
      return stop && { flaggedAt: rows.find((r) => r.event === "cancel-flagged")!.at, at: stop.at }
    }, { timeoutMs: 3 * RENEW_EVERY_MS + 5_000 })
    const quietMs = quietStop.at.getTime() - quietStop.flaggedAt.getTime()
    console.log(`cancel without its notification: handler interrupted ${quietMs} ms after the flag (renew interval ${RENEW_EVERY_MS} ms)`)
    assert.isAtMost(quietMs, RENEW_EVERY_MS + 2_000, "by the next renewal (plus two seconds for a loaded machine)")

    // Bulk cancel by queue and task: the long one is stopped the same way.
    const bulk = await cli(["cancel", "--queue", QUEUE, "--task", "cancellable", "--json"], schema)
    assert.strictEqual(bulk.code, 0, bulk.stderr)
    assert.deepStrictEqual(JSON.parse(bulk.stdout), [{ id: later!, result: "cancelling" }])
    await waitFor("the second cancelled handler to be interrupted", async () =>
      eventsOf(await ledger(schema), later!).includes("interrupted") ? true : undefined, { timeoutMs: 3 * RENEW_EVERY_MS + 5_000 })
    await waitFor("the queue to be empty", async () => {
      const [n] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${schema}.messages`)
      return n!.n === 0 ? true : undefined
    })

    // Never run again: one start each, no end for the cancelled ones; the worker shuts down cleanly.
    const rows = await ledger(schema)
    assert.deepStrictEqual(eventsOf(rows, doomed!), ["start", "cancel-flagged", "interrupted"])
    assert.deepStrictEqual(eventsOf(rows, short!), ["start", "end"])
    assert.deepStrictEqual(eventsOf(rows, later!), ["start", "cancel-flagged", "interrupted"])
    assert.deepStrictEqual(eventsOf(rows, quiet!), ["start", "cancel-flagged", "interrupted"])
    w.proc.kill("SIGTERM")
    assert.strictEqual((await waitExit(w, 15_000)).code, 0)
  })

  it("a queue paused from the CLI is not claimed; resume wakes the idle worker at once, not at its next poll", async () => {
    dumpOnFailure(workers)
    const schema = await freshSchema()
    const paused = await cli(["queues", "pause", QUEUE], schema)
    assert.strictEqual(paused.code, 0, paused.stderr)
    // Polls every 30 s: only a notification wakes it sooner.
    const w = worker(schema, { LEASEHOLD_LEASE: "6000ms", LEASEHOLD_POLL_INTERVAL: "30s" })
    await waitReady(w)
    // The send's notification wakes the worker, whose claim finds the queue paused: for two seconds, nothing starts.
    const [id] = await send(schema, [{ task: "sleep", payload: { ms: 0 } }])
    const observedUntil = Date.now() + 2_000
    while (Date.now() < observedUntil) {
      assert.deepStrictEqual(eventsOf(await ledger(schema), id!), [], "not claimed while paused")
      await new Promise((r) => setTimeout(r, 100))
    }
    const listed = await cli(["queues", "list", "--json"], schema)
    assert.strictEqual(listed.code, 0, listed.stderr)
    assert.deepInclude(JSON.parse(listed.stdout)[0], { queue: QUEUE, ready: 1, paused: true })

    const resumed = await cli(["queues", "resume", QUEUE], schema)
    assert.strictEqual(resumed.code, 0, resumed.stderr)
    const started = await waitFor("the message to run after the resume", async () =>
      (await ledger(schema)).find((r) => r.message_id === id && r.event === "end"), { timeoutMs: 10_000 })
    const resumedAt = (await ledger(schema)).find((r) => r.event === "resumed")!.at
    const tookMs = started.at.getTime() - resumedAt.getTime()
    console.log(`resume: the paused message ran ${tookMs} ms after the resume (poll interval 30 s)`)
    assert.isAtMost(tookMs, 5_000, "woken by the resume, not by a poll 30 s later")
  })
})
