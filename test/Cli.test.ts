/**
 * The `leasehold` command (src/bin/leasehold.ts, on effect/cli) as a real process
 * against the shared test server: migrate, send, stats (--json, every queue,
 * --watch until SIGINT), get, messages, attempts and the dead-letter commands, --help; the
 * read-only commands under a role that may only read, and on a schema not
 * (fully) migrated (exit 1, SchemaNotMigrated); unknown ids (exit 1, UnknownIds,
 * naming them); and how it refuses: a
 * dead-letter command with no filter, a bad or unknown flag (exit 2, the error
 * and the command's help on stderr, before connecting), a hostile queue or
 * schema name (exit 1, InvalidInput), no database URL (exit 1, naming the
 * variable), an unreachable server (exit 1, the password nowhere in the output).
 */
import { spawn } from "node:child_process"
import { existsSync, readFileSync } from "node:fs"
import { resolve } from "node:path"
import { Effect, ManagedRuntime } from "effect"
import { SqlClient } from "effect/sql"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import type { Claim } from "../src/Message.ts"
import { freePort } from "../dev/EmbeddedPostgres.ts"
import * as Migrations from "../src/Migrations.ts"
import * as PgQueueStore from "../src/PgQueueStore.ts"
import type { QueueStoreShape } from "../src/QueueStore.ts"
import * as Finish from "./support/Finish.ts"
import * as PgTest from "./support/PgTest.ts"

/** Node 22 (type stripping): vitest runs on it through node_modules/.bin/node; fall back to that binary otherwise. */
const nodeBinary = (() => {
  const major = Number(process.versions.node.split(".")[0])
  if (major >= 22) return process.execPath
  const local = resolve("node_modules/.bin/node")
  if (existsSync(local)) return local
  throw new Error(`Node >= 22 needed to run src/bin/leasehold.ts; this is ${process.version} at ${process.execPath}`)
})()

const CLI = resolve("src/bin/leasehold.ts")

interface Result {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
  readonly ms: number
}

/** The environment without any LEASEHOLD_* variable of the caller's, plus `extra`. */
const envWith = (extra: Record<string, string>): NodeJS.ProcessEnv => {
  const env: NodeJS.ProcessEnv = {}
  for (const [key, value] of Object.entries(process.env)) if (!key.startsWith("LEASEHOLD_")) env[key] = value
  return { ...env, ...extra }
}

/** Run the CLI to completion (killed after `timeoutMs`). */
const run = (args: ReadonlyArray<string>, env: NodeJS.ProcessEnv, timeoutMs = 50_000): Promise<Result> =>
  new Promise((done, fail) => {
    const startedAt = Date.now()
    const proc = spawn(nodeBinary, [CLI, ...args], { env, stdio: ["ignore", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    proc.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")))
    proc.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")))
    const timer = setTimeout(() => proc.kill("SIGKILL"), timeoutMs)
    proc.on("error", (error) => {
      clearTimeout(timer)
      fail(error)
    })
    proc.on("close", (code, signal) => {
      clearTimeout(timer)
      done({ code, signal, stdout, stderr, ms: Date.now() - startedAt })
    })
  })

/** A CLI process left running: its output so far, a wait for a condition on it, and its end. */
const start = (args: ReadonlyArray<string>, env: NodeJS.ProcessEnv) => {
  const startedAt = Date.now()
  const proc = spawn(nodeBinary, [CLI, ...args], { env, stdio: ["ignore", "pipe", "pipe"] })
  const out = { stdout: "", stderr: "" }
  proc.stdout.on("data", (chunk: Buffer) => (out.stdout += chunk.toString("utf8")))
  proc.stderr.on("data", (chunk: Buffer) => (out.stderr += chunk.toString("utf8")))
  const ended = new Promise<Result>((done) =>
    proc.on("close", (code, signal) => done({ code, signal, ...out, ms: Date.now() - startedAt }))
  )
  /** Resolves once `f(stdout)` holds; rejects (with the output) after `timeoutMs`. */
  const until = async (what: string, f: (stdout: string) => boolean, timeoutMs = 15_000) => {
    const deadline = Date.now() + timeoutMs
    while (!f(out.stdout)) {
      if (Date.now() > deadline || proc.exitCode !== null) {
        throw new Error(`waiting for ${what}: exit ${proc.exitCode}\n--- stdout ---\n${out.stdout}\n--- stderr ---\n${out.stderr}`)
      }
      await new Promise((r) => setTimeout(r, 50))
    }
  }
  return { proc, out, ended, until }
}

const zip = <A, B>(as: ReadonlyArray<A>, bs: ReadonlyArray<B>): Array<[A, B]> => as.map((a, i) => [a, bs[i]!])

const show = (r: Result) => `exit ${r.code} (signal ${r.signal}) after ${r.ms} ms\n--- stdout ---\n${r.stdout}\n--- stderr ---\n${r.stderr}`

/** Run the CLI and expect exit 0; returns stdout parsed as JSON (or the text when it is not JSON). */
const ok = async (args: ReadonlyArray<string>, env: NodeJS.ProcessEnv): Promise<any> => {
  const r = await run(args, env)
  assert.strictEqual(r.code, 0, `leasehold ${args.join(" ")}: ${show(r)}`)
  try {
    return JSON.parse(r.stdout)
  } catch {
    return r.stdout
  }
}

let runtime: ManagedRuntime.ManagedRuntime<SqlClient.SqlClient, unknown>
const schemas: Array<string> = []

beforeAll(() => {
  runtime = ManagedRuntime.make(PgTest.clientLayer({ maxConnections: 4 }))
})

afterAll(async () => {
  for (const schema of schemas) {
    await query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined)
  }
  await runtime?.dispose()
})

const query = <A extends object>(text: string, params: ReadonlyArray<unknown> = []) =>
  runtime.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe<A>(text, params)))

/** A fresh schema name, dropped after the file; `migrated` creates its tables first. */
const freshSchema = async (migrated: boolean) => {
  const schema = PgTest.uniqueSchema("cli")
  schemas.push(schema)
  if (migrated) await runtime.runPromise(Migrations.run({ schema }))
  return schema
}

/** Use the store on `schema` from the test, as an application would. */
const withStore = <A>(schema: string, f: (store: QueueStoreShape) => Effect.Effect<A, unknown>) =>
  runtime.runPromise(Effect.scoped(Effect.flatMap(PgQueueStore.make({ schema, migrate: false, leasePool: false }), f)))

/** A port nothing listens on: bind one, then close it. */
const closedPort = freePort

const envFor = (schema: string) => envWith({ LEASEHOLD_DATABASE_URL: PgTest.databaseUrl(), LEASEHOLD_SCHEMA: schema })

/** Make dead letters on `queue`: send, claim and dead-letter each, with a reason naming it. */
const makeDeadLetters = (schema: string, queue: string, n: number) =>
  withStore(schema, (store) =>
    Effect.gen(function*() {
      const sent = yield* store.send(queue, Array.from({ length: n }, (_, i) => ({ task: "poisoned", payload: { n: i } })))
      const claims: Array<Claim> = []
      while (claims.length < n) claims.push(...(yield* store.claim(queue, { lease: "10 seconds", limit: n, consumer: "cli-test" })))
      for (const claim of claims) {
        const written = yield* Finish.deadLetter(store, claim, { reason: `poisoned ${claim.payload && (claim.payload as { n: number }).n}`, error: "Error: boom" })
        assert.strictEqual(written, "written")
      }
      return sent.map((s) => s.id)
    }))

describe("leasehold CLI (a real process)", () => {
  it("migrate creates the tables in LEASEHOLD_SCHEMA; a second run is a no-op", async () => {
    const schema = await freshSchema(false)
    const env = envFor(schema)
    const first = await run(["migrate"], env)
    assert.strictEqual(first.code, 0, show(first))
    assert.include(first.stdout, `schema ${schema} is up to date`)
    const tables = await query<{ name: string }>(
      `SELECT table_name AS name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`,
      [schema]
    )
    assert.includeMembers(tables.map((t) => t.name), ["attempts", "messages"])
    const second = await run(["migrate"], env)
    assert.strictEqual(second.code, 0, show(second))
    assert.include(second.stdout, `schema ${schema} is up to date`)
  })

  it("send enqueues (with delay, priority, dedup key); stats shows ready and delayed", async () => {
    const schema = await freshSchema(true)
    const env = envFor(schema)
    const a = await ok(["send", "cli-q", "greet", '{"to":"ada"}'], env)
    assert.deepStrictEqual(Object.keys(a).sort(), ["deduplicated", "id"])
    assert.isFalse(a.deduplicated)
    const later = await ok(["send", "cli-q", "greet", '{"to":"bob"}', "--delay", "1h", "--priority", "3", "--max-attempts", "7"], env)
    const keyed = await ok(["send", "cli-q", "greet", '{"to":"cy"}', "--dedup", "welcome:cy"], env)
    const again = await ok(["send", "cli-q", "greet", '{"to":"cy"}', "--dedup", "welcome:cy"], env)
    assert.strictEqual(again.id, keyed.id, "the dedup key finds the live message")
    assert.isTrue(again.deduplicated)

    const rows = await query<{ id: string; payload: unknown; priority: number; max_attempts: number; delayed: boolean }>(
      `SELECT id::text AS id, payload, priority, max_attempts, visible_at > now() + interval '50 minutes' AS delayed
       FROM ${schema}.messages ORDER BY id`
    )
    assert.deepStrictEqual(rows, [
      { id: a.id, payload: { to: "ada" }, priority: 0, max_attempts: 25, delayed: false },
      { id: later.id, payload: { to: "bob" }, priority: 3, max_attempts: 7, delayed: true },
      { id: keyed.id, payload: { to: "cy" }, priority: 0, max_attempts: 25, delayed: false }
    ])

    // A known clock for the age: the oldest ready message became visible 90 s ago by the server's clock.
    await query(`UPDATE ${schema}.messages SET visible_at = now() - interval '90 seconds' WHERE id = $1::bigint`, [a.id])
    const stats = await ok(["stats", "cli-q", "--json"], env)
    assert.lengthOf(stats, 1)
    assert.deepInclude(stats[0], { queue: "cli-q", ready: 2, delayed: 1, inFlight: 0, dead: 0 })
    assert.isAtLeast(stats[0].oldestReadyAgeMs, 90_000)
    assert.isBelow(stats[0].oldestReadyAgeMs, 90_000 + 60_000, "the age is measured from visibility, by the server's clock")

    // Not JSON: a usage error, nothing sent.
    const bad = await run(["send", "cli-q", "greet", "{not json"], env)
    assert.strictEqual(bad.code, 2, show(bad))
    assert.include(bad.stderr, "payload is not valid JSON")
    assert.include(bad.stderr, "USAGE")
    assert.strictEqual(bad.stdout, "")
    const [n] = await query<{ n: number }>(`SELECT count(*)::int AS n FROM ${schema}.messages`)
    assert.strictEqual(n!.n, 3)
  })

  it("dead-letters list shows them with their reason; redrive returns them to ready with attempts 0; purge deletes them", async () => {
    const schema = await freshSchema(true)
    const env = envFor(schema)
    const ids = await makeDeadLetters(schema, "dlq", 3)
    const [elsewhere] = await makeDeadLetters(schema, "dlq-other", 1)

    const listed = await ok(["dead-letters", "list", "--queue", "dlq", "--json"], env)
    assert.deepStrictEqual(listed.map((d: { id: string }) => d.id), ids, "the queue's dead letters, oldest death first")
    for (const [i, d] of (listed as Array<any>).entries()) {
      assert.strictEqual(d.queue, "dlq")
      assert.strictEqual(d.task, "poisoned")
      assert.deepStrictEqual(d.payload, { n: i })
      assert.strictEqual(d.reason, `poisoned ${i}`)
      assert.strictEqual(d.lastError, "Error: boom")
      assert.strictEqual(d.attempts, 1)
      assert.isString(d.deadAt)
    }
    const all = await ok(["dead-letters", "list", "--json"], env)
    assert.sameMembers(all.map((d: { id: string }) => d.id), [...ids, elsewhere])
    const limited = await ok(["dead-letters", "list", "--queue", "dlq", "--limit", "2", "--json"], env)
    assert.lengthOf(limited, 2)

    // Redrive two by id: back to ready, with a fresh attempt budget.
    const redriven = await ok(["dead-letters", "redrive", "--ids", `${ids[0]},${ids[1]}`], env)
    assert.sameMembers(redriven.redriven, [ids[0], ids[1]])
    const [stats] = await ok(["stats", "dlq", "--json"], env)
    assert.deepInclude(stats, { queue: "dlq", ready: 2, delayed: 0, inFlight: 0, dead: 1 })
    const rows = await query<{ id: string; state: string; attempts: number; dead_reason: string | null }>(
      `SELECT id::text AS id, state, attempts, dead_reason FROM ${schema}.messages WHERE queue = 'dlq' ORDER BY id`
    )
    assert.deepStrictEqual(rows, [
      { id: ids[0]!, state: "ready", attempts: 0, dead_reason: null },
      { id: ids[1]!, state: "ready", attempts: 0, dead_reason: null },
      { id: ids[2]!, state: "dead", attempts: 1, dead_reason: "poisoned 2" }
    ])
    const claimed = await withStore(schema, (store) => store.claim("dlq", { lease: "10 seconds", limit: 10, consumer: "cli-test" }))
    assert.sameMembers(claimed.map((c) => c.id), [ids[0]!, ids[1]!], "a consumer gets the redriven ones")
    for (const c of claimed) assert.strictEqual(c.attempts, 1, "claimed as a first attempt")

    // Purge the queue's remaining dead letter; the other queue's stays.
    const purged = await ok(["dead-letters", "purge", "--queue", "dlq"], env)
    assert.deepStrictEqual(purged, { purged: [ids[2]] })
    assert.deepStrictEqual(await ok(["dead-letters", "list", "--queue", "dlq", "--json"], env), [])
    const left = await query<{ id: string; state: string }>(`SELECT id::text AS id, state FROM ${schema}.messages ORDER BY id`)
    assert.deepStrictEqual(left, [
      { id: ids[0]!, state: "ready" },
      { id: ids[1]!, state: "ready" },
      { id: elsewhere!, state: "dead" }
    ], "purge deleted only the dead letter of its queue; redriven (live) messages are untouched")
  })

  it("attempts <id> prints a message's attempt history, oldest first; a bad id is a usage error", async () => {
    const schema = await freshSchema(true)
    const env = envFor(schema)
    // Two runs of one message by worker w1: a retry, then a dead letter.
    const id = await withStore(schema, (store) =>
      Effect.gen(function*() {
        const [sent] = yield* store.send("hist", [{ task: "poisoned", payload: {} }])
        const claimOne = Effect.map(store.claim("hist", { lease: "10 seconds", limit: 1, consumer: "w1" }), (claims) => claims[0]!)
        assert.strictEqual(yield* Finish.retry(store, yield* claimOne, { delay: 0, error: "Error: boom" }), "written")
        assert.strictEqual(yield* Finish.deadLetter(store, yield* claimOne, { reason: "poisoned", error: "Error: boom again" }), "written")
        return sent!.id
      }))
    const history = await ok(["attempts", id!, "--json"], env)
    assert.deepStrictEqual(
      history.map((a: { attempt: number; outcome: string; consumer: string; error: string }) => [a.attempt, a.outcome, a.consumer, a.error]),
      [[1, "retried", "w1", "Error: boom"], [2, "dead-lettered", "w1", "Error: boom again"]]
    )
    const bad = await run(["attempts", "1; drop table x"], env)
    assert.strictEqual(bad.code, 2, show(bad))
    assert.include(bad.stderr, "attempts needs a message id")
    assert.include(bad.stderr, "USAGE")
    assert.strictEqual(bad.stdout, "")
  })

  it("get <id> shows a message's state, fields and history with results, also once finished; messages lists a queue by pages and state", async () => {
    const schema = await freshSchema(true)
    const env = envFor(schema)
    const queue = "pages"
    const { leased, delayed, ready, done } = await withStore(schema, (store) =>
      Effect.gen(function*() {
        const [leased] = yield* store.send(queue, [{ task: "job", payload: { n: 1 } }])
        const [claim] = yield* store.claim(queue, { lease: "1 minute", limit: 1, consumer: "cli-test" })
        assert.isTrue(yield* store.setProgress(claim!, { done: 1, of: 2 }))
        const [delayed] = yield* store.send(queue, [{ task: "job", payload: { n: 2 }, delay: 3_600_000 }])
        const [ready] = yield* store.send(queue, [{ task: "job", payload: { n: 3 }, priority: 4 }])
        // Acked with a kept result: deleted, its history (with the result) stays.
        const [done] = yield* store.send("elsewhere", [{ task: "report", payload: { n: 4 } }])
        const [doneClaim] = yield* store.claim("elsewhere", { lease: "1 minute", limit: 1, consumer: "cli-test" })
        const held = yield* store.complete([{
          ref: doneClaim!,
          finish: { _tag: "Ack" },
          queue: "elsewhere",
          task: "report",
          attempt: 1,
          consumer: "cli-test",
          startedAt: new Date(),
          outcome: "acked",
          error: null,
          result: JSON.stringify({ total: 42 })
        }])
        assert.deepStrictEqual(held, { held: [done!.id], cancelled: [] })
        assert.strictEqual(claim!.id, leased!.id)
        return { leased: leased!.id, delayed: delayed!.id, ready: ready!.id, done: done!.id }
      }))
    const [dead] = await makeDeadLetters(schema, queue, 1)

    // Three processes at a time: the machine may be shared.
    const [inFlight, finished, finishedTable] = await Promise.all([
      ok(["get", leased, "--json"], env),
      ok(["get", done, "--json"], env),
      run(["get", done], env)
    ])
    const [unknown, badId, all] = await Promise.all([
      run(["get", "99999999"], env),
      run(["get", "abc"], env),
      ok(["messages", queue, "--json"], env)
    ])
    const [deadOnly, firstPage, table] = await Promise.all([
      ok(["messages", queue, "--state", "dead", "--json"], env),
      ok(["messages", queue, "--limit", "2", "--json"], env),
      run(["messages", queue, "--limit", "2"], env)
    ])
    assert.strictEqual(inFlight.id, leased)
    assert.deepStrictEqual(
      [inFlight.message.state, inFlight.message.leasedBy, inFlight.message.payload, inFlight.message.attempts, inFlight.attempts],
      ["in-flight", "cli-test", { n: 1 }, 1, []]
    )
    assert.deepStrictEqual(inFlight.message.progress, { done: 1, of: 2 })
    assert.isNull(finished.message, "finished: deleted")
    assert.deepStrictEqual(finished.attempts.map((a: { outcome: string; result: unknown }) => [a.outcome, a.result]), [["acked", { total: 42 }]])
    assert.strictEqual(finishedTable.code, 0, show(finishedTable))
    assert.include(finishedTable.stdout, `message ${done}: not in the queue (finished and deleted)`)
    assert.match(finishedTable.stdout, /RESULT/)
    assert.include(finishedTable.stdout, `{"total":42}`)
    assert.strictEqual(unknown.code, 1, show(unknown))
    assert.strictEqual(unknown.stderr.trim(), "leasehold: UnknownIds: no message and no recorded attempts with id: 99999999")
    assert.strictEqual(unknown.stdout, "")
    assert.strictEqual(badId.code, 2, show(badId))
    assert.include(badId.stderr, "get needs a message id")

    assert.deepStrictEqual(
      all.map((m: { id: string; state: string }) => [m.id, m.state]),
      [[leased, "in-flight"], [delayed, "delayed"], [ready, "ready"], [dead, "dead"]]
    )
    assert.deepStrictEqual(deadOnly.map((m: { id: string; deadReason: string }) => [m.id, m.deadReason]), [[dead, "poisoned 0"]])
    assert.deepStrictEqual(firstPage.map((m: { id: string }) => m.id), [leased, delayed])
    const secondPage = await ok(["messages", queue, "--limit", "2", "--after", delayed, "--json"], env)
    assert.deepStrictEqual(secondPage.map((m: { id: string }) => m.id), [ready, dead])
    assert.strictEqual(table.code, 0, show(table))
    assert.match(table.stdout, /^ID\s+TASK\s+STATE/)
    assert.strictEqual(table.stdout.trim().split("\n").at(-1), `more: --after ${delayed}`)
    const table2 = await ok(["messages", queue, "--state", "ready"], env)
    assert.include(table2, `${ready}  job`)
    assert.notInclude(table2, "more:")

    // Refused before connecting (exit 2, the flag named); a hostile queue name is the store's InvalidInput (exit 1).
    const refusals = [
      ...await Promise.all([
        run(["messages", queue, "--state", "gone"], env),
        run(["messages", queue, "--limit", "0"], env),
        run(["messages", queue, "--after", "x"], env)
      ]),
      ...await Promise.all([run(["messages", queue, "--bogus"], env), run(["messages"], env)])
    ]
    for (const r of refusals) {
      assert.strictEqual(r.code, 2, show(r))
      assert.include(r.stderr, "USAGE")
      assert.strictEqual(r.stdout, "")
    }
    assert.include(refusals[1]!.stderr, "--limit: 0 is out of range")
    assert.include(refusals[2]!.stderr, `--after: "x" is not a message id`)
    const hostile = await run(["messages", "a'; drop table x; --"], env)
    assert.strictEqual(hostile.code, 1, show(hostile))
    assert.match(hostile.stderr, /^leasehold: InvalidInput: /)
  }, 120_000)

  it("dead-letters purge or redrive with no filter refuses: exit 2 and the usage, before connecting; nothing touched", async () => {
    const schema = await freshSchema(true)
    const env = envFor(schema)
    const ids = await makeDeadLetters(schema, "keep", 2)
    const verbs = ["purge", "redrive"]
    for (const [verb, r] of zip(verbs, await Promise.all(verbs.map((verb) => run(["dead-letters", verb], env))))) {
      assert.strictEqual(r.code, 2, `${verb}: ${show(r)}`)
      assert.include(r.stderr, "say which dead letters: --queue Q, --ids 1,2 or --all")
      assert.include(r.stderr, "USAGE")
      assert.strictEqual(r.stdout, "")
    }
    const rows = await query<{ id: string; state: string }>(`SELECT id::text AS id, state FROM ${schema}.messages ORDER BY id`)
    assert.deepStrictEqual(rows, ids.map((id) => ({ id, state: "dead" })))

    const unknown = await run(["frobnicate"], env)
    assert.strictEqual(unknown.code, 2, show(unknown))
    assert.include(unknown.stderr, 'Unknown subcommand "frobnicate"')
    assert.strictEqual(unknown.stdout, "")

    // Arguments are checked before connecting: a usage error needs no database (and migrates nothing).
    const unmigrated = await freshSchema(false)
    const noServer = envWith({ LEASEHOLD_DATABASE_URL: `postgres://u:p@127.0.0.1:${await closedPort()}/db`, LEASEHOLD_SCHEMA: unmigrated })
    const offline: ReadonlyArray<[NodeJS.ProcessEnv, ReadonlyArray<string>, string]> = [
      [noServer, ["dead-letters", "purge"], "say which dead letters"],
      [noServer, ["send", "q", "t"], "Missing required argument: json"],
      [noServer, ["send", "q", "t", "{}", "--delay", "soon"], `--delay: "soon" is invalid; expected a duration such as 500ms, 30s, 2m, 1h, 7d or "30 seconds"`],
      [noServer, ["send", "q", "t", "{}", "--delay=-5s"], `--delay: "-5s" is invalid; expected a duration`],
      [noServer, ["stats", "q", "--bogus"], "Unrecognized flag: --bogus"],
      // Not a flag of stats (queues are its arguments): refused, not ignored with `default` shown instead.
      [noServer, ["stats", "--queue", "emails"], "Unrecognized flag: --queue in command leasehold stats"],
      [noServer, ["attempts", "1", "--queue", "emails"], "Unrecognized flag: --queue in command leasehold attempts"],
      [noServer, ["dead-letters", "list", "--frob", "1"], "Unrecognized flag: --frob"],
      [noServer, ["dead-letters", "redrive", "--all", "--json"], "Unrecognized flag: --json"],
      [envWith({}), ["dead-letters", "redrive"], "say which dead letters"],
      [envWith({}), ["frobnicate"], 'Unknown subcommand "frobnicate"']
    ]
    for (let i = 0; i < offline.length; i += 4) {
      const batch = offline.slice(i, i + 4)
      for (const [[, args, message], r] of zip(batch, await Promise.all(batch.map(([env, args]) => run(args, env))))) {
        assert.strictEqual(r.code, 2, `${args.join(" ")}: ${show(r)}`)
        assert.include(r.stderr, message)
        assert.include(r.stderr, "USAGE")
        assert.strictEqual(r.stdout, "", args.join(" "))
        assert.notInclude(r.stderr, "ConnectionDead", "refused before connecting")
      }
    }
    const [created] = await query<{ n: number }>(`SELECT count(*)::int AS n FROM information_schema.schemata WHERE schema_name = $1`, [unmigrated])
    assert.strictEqual(created!.n, 0, "nothing was migrated")
  })

  it("a hostile queue or schema name exits 1 with InvalidInput; nothing is touched", async () => {
    const schema = await freshSchema(true)
    const env = envFor(schema)
    const hostile = `q'; DROP SCHEMA ${schema} CASCADE; --`
    const [dead] = await makeDeadLetters(schema, "q", 1)
    const refused = [["stats", hostile], ["send", hostile, "t", "{}"], ["send", "q", "bad task", "{}"]]
    for (const [args, r] of zip(refused, await Promise.all(refused.map((args) => run(args, env))))) {
      assert.strictEqual(r.code, 1, `${args.join(" ")}: ${show(r)}`)
      assert.match(r.stderr, /^leasehold: InvalidInput: (queue|task) /, args.join(" "))
      assert.include(r.stderr, "not a valid name")
    }
    // The dead-letter filters are checked like every other input: refused, not run as a filter matching nothing.
    const verbs = ["purge", "redrive", "list"]
    for (const [verb, r] of zip(verbs, await Promise.all(verbs.map((verb) => run(["dead-letters", verb, "--queue", hostile], env))))) {
      assert.strictEqual(r.code, 1, `${verb}: ${show(r)}`)
      assert.match(r.stderr, /^leasehold: InvalidInput: queue /, show(r))
      assert.include(r.stderr, "not a valid name")
      assert.strictEqual(r.stdout, "", `${verb} printed a result`)
    }
    const badSchema = await run(["stats", "q"], envWith({ LEASEHOLD_DATABASE_URL: PgTest.databaseUrl(), LEASEHOLD_SCHEMA: "x; DROP TABLE y" }))
    assert.strictEqual(badSchema.code, 1, show(badSchema))
    assert.match(badSchema.stderr, /^leasehold: InvalidInput: schema /)
    const rows = await query<{ id: string; state: string }>(`SELECT id::text AS id, state FROM ${schema}.messages`)
    assert.deepStrictEqual(rows, [{ id: dead!, state: "dead" }], "the schema, its table and its one dead letter are untouched")
  })

  it("--ids with a part that is not a message id refuses, naming it, before connecting; nothing redriven or purged", async () => {
    const schema = await freshSchema(true)
    const env = envFor(schema)
    const ids = await makeDeadLetters(schema, "ids", 2)
    const noServer = envWith({ LEASEHOLD_DATABASE_URL: `postgres://u:p@127.0.0.1:${await closedPort()}/db`, LEASEHOLD_SCHEMA: schema })
    const cases: ReadonlyArray<[NodeJS.ProcessEnv, ReadonlyArray<string>, string]> = [
      [env, ["dead-letters", "redrive", "--ids", `${ids[0]},x`], `--ids: "x" is not a message id`],
      [env, ["dead-letters", "redrive", "--ids", "x"], `--ids: "x" is not a message id`],
      [env, ["dead-letters", "purge", "--ids", `${ids[0]},${ids[1]}, -3`], `--ids: "-3" is not a message id`],
      [env, ["dead-letters", "purge", "--ids", `${ids[0]},,${ids[1]}`], "--ids: an empty id is not a message id"],
      [env, ["dead-letters", "list", "--ids", "1 OR 1=1"], `--ids: "1 OR 1=1" is not a message id`],
      [env, ["dead-letters", "list", "--limit", "ten"], `--limit: "ten" is not a whole number`],
      [env, ["send", "q", "t", "{}", "--priority", "high"], `--priority: "high" is not a whole number`],
      [env, ["dead-letters", "list", "--limit", "0"], "--limit: 0 is out of range (a whole number from 1 to 10000)"],
      [env, ["send", "q", "t", "{}", "--max-attempts", "20000"], "--max-attempts: 20000 is out of range (a whole number from 1 to 10000)"],
      [noServer, ["send", "q", "t", "{}", "--priority", "3000000000"], "--priority: 3000000000 is out of range"],
      // Before connecting: no server is needed to refuse them.
      [noServer, ["dead-letters", "redrive", "--ids", "17,x"], `--ids: "x" is not a message id`],
      [noServer, ["dead-letters", "purge", "--ids", "x"], `--ids: "x" is not a message id`]
    ]
    // Three processes at a time: each is a Node start, and this machine may be busy.
    for (let i = 0; i < cases.length; i += 3) {
      const batch = cases.slice(i, i + 3)
      for (const [[, args, message], r] of zip(batch, await Promise.all(batch.map(([e, args]) => run(args, e))))) {
        assert.strictEqual(r.code, 2, `${args.join(" ")}: ${show(r)}`)
        assert.include(r.stderr, message, args.join(" "))
        assert.include(r.stderr, "USAGE")
        assert.notInclude(r.stderr, "ConnectionDead", "refused before connecting")
        assert.strictEqual(r.stdout, "")
      }
    }
    const rows = await query<{ id: string; state: string }>(`SELECT id::text AS id, state FROM ${schema}.messages ORDER BY id`)
    assert.deepStrictEqual(rows, ids.map((id) => ({ id, state: "dead" })), "nothing redriven or purged")
    const [sent] = await query<{ n: number }>(`SELECT count(*)::int AS n FROM ${schema}.messages WHERE queue = 'q'`)
    assert.strictEqual(sent!.n, 0, "nothing sent")
  }, 180_000)

  it("no LEASEHOLD_DATABASE_URL: exit 1 naming the variable", async () => {
    const r = await run(["stats", "q"], envWith({}))
    assert.strictEqual(r.code, 1, show(r))
    assert.include(r.stderr, "LEASEHOLD_DATABASE_URL")
    assert.include(r.stderr, "ConfigInvalid")
  })

  it("a server that is not there: exit 1, and the password appears nowhere in the output", async () => {
    const port = await closedPort()
    const password = "S3cret-Pa55word-xyzzy"
    const env = envWith({
      LEASEHOLD_DATABASE_URL: `postgres://leasehold:${password}@127.0.0.1:${port}/leasehold`,
      LEASEHOLD_SCHEMA: "nowhere"
    })
    const commands = [["migrate"], ["stats", "q"], ["send", "q", "t", "{}"]]
    for (const [args, r] of zip(commands, await Promise.all(commands.map((args) => run(args, env))))) {
      assert.strictEqual(r.code, 1, `${args.join(" ")}: ${show(r)}`)
      assert.isBelow(r.ms, 15_000, "fails, does not hang")
      assert.include(r.stderr, "ConnectionDead", show(r))
      for (const text of [r.stdout, r.stderr]) {
        assert.notInclude(text, password, `${args.join(" ")}: the password leaked`)
        assert.notInclude(text, encodeURIComponent(password))
      }
    }
  })
})

describe("leasehold CLI on effect/cli: help, --json, every queue, --watch, read-only", () => {
  it("--help lists the commands and a command's flags, exit 0, without a database", async () => {
    const env = envWith({}) // no LEASEHOLD_DATABASE_URL: help needs none
    const [top, redrive, stats] = await Promise.all([
      run(["--help"], env),
      run(["dead-letters", "redrive", "--help"], env),
      run(["stats", "--help"], env)
    ])
    assert.strictEqual(top.code, 0, show(top))
    assert.strictEqual(top.stderr, "")
    assert.include(top.stdout, "USAGE")
    assert.include(top.stdout, "leasehold <subcommand>")
    for (const command of ["migrate", "send", "stats", "get", "messages", "attempts", "dead-letters"]) {
      assert.match(top.stdout, new RegExp(`^  ${command}\\s`, "m"), `${command} listed`)
    }
    assert.include(top.stdout, "LEASEHOLD_DATABASE_URL")

    assert.strictEqual(redrive.code, 0, show(redrive))
    assert.strictEqual(redrive.stderr, "")
    assert.include(redrive.stdout, "leasehold dead-letters redrive [flags]")
    assert.include(redrive.stdout, "fresh attempt budget")
    for (const flag of ["--queue QUEUE", "--ids ID,ID", "--all"]) assert.include(redrive.stdout, flag)
    assert.include(redrive.stdout, "leasehold dead-letters redrive --ids 17,18", "an example")

    assert.strictEqual(stats.code, 0, show(stats))
    for (const flag of ["--json", "--watch"]) assert.include(stats.stdout, flag)

    const versioned = await run(["--version"], env)
    assert.strictEqual(versioned.code, 0, show(versioned))
    assert.strictEqual(versioned.stdout.trim(), `leasehold v${JSON.parse(readFileSync(resolve("package.json"), "utf8")).version}`)

    const word = await run(["help", "stats"], env)
    assert.strictEqual(word.code, 0, show(word))
    assert.strictEqual(word.stdout, stats.stdout, "leasehold help stats is leasehold stats --help")
  })

  it("stats --json counts every queue that has messages when none is named; a table without --json; --delay takes effect's durations", async () => {
    const schema = await freshSchema(true)
    const env = envFor(schema)
    assert.deepStrictEqual(await ok(["stats", "--json"], env), [], "no messages, no queues")
    const empty = await run(["stats"], env)
    assert.strictEqual(empty.code, 0, show(empty))
    assert.strictEqual(empty.stdout.trim(), "no queue has messages")

    await ok(["send", "beta", "t", "{}"], env)
    await ok(["send", "beta", "t", "{}", "--delay", "30 seconds"], env)
    await ok(["send", "beta", "t", "{}", "--delay", "2m"], env)
    for (let i = 0; i < 3; i++) await ok(["send", "alpha", "t", `{"n":${i}}`, "--delay", "500ms"], env)
    await makeDeadLetters(schema, "gamma", 2)
    const delays = await query<{ queue: string; s: number }>(
      `SELECT queue, round(extract(epoch FROM visible_at - enqueued_at))::int AS s FROM ${schema}.messages WHERE queue = 'beta' ORDER BY id`
    )
    assert.deepStrictEqual(delays.map((d) => d.s), [0, 30, 120], "--delay 30 seconds and 2m")
    await new Promise((r) => setTimeout(r, 600)) // alpha's 500 ms delays are over

    const stats = await ok(["stats", "--json"], env)
    assert.deepStrictEqual(stats.map((s: { queue: string }) => s.queue), ["alpha", "beta", "gamma"])
    assert.deepInclude(stats[0], { queue: "alpha", ready: 3, delayed: 0, inFlight: 0, dead: 0 })
    assert.deepInclude(stats[1], { queue: "beta", ready: 1, delayed: 2, inFlight: 0, dead: 0 })
    assert.deepInclude(stats[2], { queue: "gamma", ready: 0, delayed: 0, inFlight: 0, dead: 2 })

    const table = await run(["stats"], env)
    assert.strictEqual(table.code, 0, show(table))
    const lines = table.stdout.trim().split("\n")
    assert.match(lines[0]!, /^QUEUE\s+READY\s+DELAYED\s+IN FLIGHT\s+DEAD\s+OLDEST READY$/)
    assert.match(lines[1]!, /^alpha\s+3\s+0\s+0\s+0\s+\S+$/)
    assert.match(lines[2]!, /^beta\s+1\s+2\s+0\s+0\s+\S+$/)
    assert.match(lines[3]!, /^gamma\s+0\s+0\s+0\s+2\s+-$/)
    assert.lengthOf(lines, 4)
  })

  it("stats --watch refreshes every second (seeing new messages) until SIGINT, then exits 0", async () => {
    const schema = await freshSchema(true)
    const env = envFor(schema)
    await ok(["send", "watched", "t", "{}"], env)
    const watch = start(["stats", "watched", "--watch"], env)
    const header = /^leasehold stats at \S+ \(every second; Ctrl-C to stop\)$/gm
    const refreshes = (stdout: string) => stdout.match(header)?.length ?? 0
    try {
      await watch.until("a first table", (o) => /^watched\s+1\s+0\s+0\s+0\s/m.test(o))
      await withStore(schema, (store) => store.send("watched", [{ task: "t", payload: {} }]))
      await watch.until("a refresh showing the new message", (o) => /^watched\s+2\s+0\s+0\s+0\s/m.test(o))
      await watch.until("two refreshes", (o) => refreshes(o) >= 2)
    } finally {
      watch.proc.kill("SIGINT")
    }
    const r = await watch.ended
    assert.strictEqual(r.code, 0, `SIGINT ends the watch with exit 0: ${show(r)}`)
    assert.isAtLeast(refreshes(r.stdout), 2)
    assert.strictEqual(r.stderr, "")

    // --json --watch: one JSON document per line and refresh.
    const json = start(["stats", "watched", "--watch", "--json"], env)
    try {
      await json.until("two JSON lines", (o) => o.split("\n").filter((l) => l.startsWith("[")).length >= 2)
    } finally {
      json.proc.kill("SIGINT")
    }
    const j = await json.ended
    assert.strictEqual(j.code, 0, show(j))
    const docs = j.stdout.split("\n").filter((l) => l !== "").map((l) => JSON.parse(l))
    for (const doc of docs) assert.deepInclude(doc[0], { queue: "watched", ready: 2 })
  }, 60_000)

  it("read-only commands work under a role that may only read; they create nothing in an unmigrated schema", async () => {
    const schema = await freshSchema(true)
    const [dead] = await makeDeadLetters(schema, "ro", 1)
    const role = `leasehold_ro_${Math.random().toString(36).slice(2, 8)}`
    await query(`CREATE ROLE ${role} LOGIN`)
    try {
      await query(`GRANT USAGE ON SCHEMA ${schema} TO ${role}`)
      await query(`GRANT SELECT ON ALL TABLES IN SCHEMA ${schema} TO ${role}`)
      const url = new URL(PgTest.databaseUrl())
      url.username = role
      url.password = ""
      const env = envWith({ LEASEHOLD_DATABASE_URL: url.toString(), LEASEHOLD_SCHEMA: schema })
      const [stats, listed, history] = await Promise.all([
        ok(["stats", "--json"], env),
        ok(["dead-letters", "list", "--json"], env),
        ok(["attempts", dead!, "--json"], env)
      ])
      const [got, page] = await Promise.all([ok(["get", dead!, "--json"], env), ok(["messages", "ro", "--json"], env)])
      assert.strictEqual(got.message.state, "dead")
      assert.deepStrictEqual(page.map((m: { id: string }) => m.id), [dead])
      assert.deepStrictEqual(stats.map((s: { queue: string; dead: number }) => [s.queue, s.dead]), [["ro", 1]])
      assert.deepStrictEqual(listed.map((d: { id: string }) => d.id), [dead])
      assert.isArray(history)
      // A writing command may migrate, and this role may not write: refused by the server, exit 1.
      const write = await run(["dead-letters", "purge", "--all"], env)
      assert.strictEqual(write.code, 1, show(write))
    } finally {
      await query(`REVOKE ALL ON ALL TABLES IN SCHEMA ${schema} FROM ${role}`).catch(() => undefined)
      await query(`REVOKE ALL ON SCHEMA ${schema} FROM ${role}`).catch(() => undefined)
      await query(`DROP ROLE IF EXISTS ${role}`).catch(() => undefined)
    }
    const [left] = await query<{ n: number }>(`SELECT count(*)::int AS n FROM ${schema}.messages WHERE id = $1::bigint`, [dead])
    assert.strictEqual(left!.n, 1, "nothing purged")

    // No tables at all, and tables with a migration not run: each read-only command says so (which schema,
    // what is missing, how to fix it) and exits 1; no raw SQL error, nothing created or migrated.
    const unmigrated = await freshSchema(false)
    const partial = await freshSchema(true)
    await query(`DELETE FROM ${partial}.migrations WHERE migration_id = 3`)
    const readOnly = [["stats", "--json"], ["stats", "q"], ["attempts", "1"], ["dead-letters", "list"], ["get", "1"], ["messages", "q"]]
    const cases = [
      ...readOnly.map((args) => [unmigrated, args, `schema ${unmigrated} has no leasehold tables: run \`leasehold migrate\``] as const),
      ...readOnly.map((args) => [partial, args, `schema ${partial} is not fully migrated (missing 3 consumers): run \`leasehold migrate\``] as const)
    ]
    for (let i = 0; i < cases.length; i += 4) {
      const batch = cases.slice(i, i + 4)
      for (const [[, args, message], r] of zip(batch, await Promise.all(batch.map(([s, args]) => run(args, envFor(s)))))) {
        assert.strictEqual(r.code, 1, `${args.join(" ")}: ${show(r)}`)
        assert.isTrue(r.stderr.startsWith(`leasehold: SchemaNotMigrated: ${message}`), `${args.join(" ")}: ${show(r)}`)
        assert.include(r.stderr, "read-only commands never migrate")
        assert.notInclude(r.stderr, "QueryFailed")
        assert.notInclude(r.stderr, "does not exist", "no raw SQL error")
        assert.strictEqual(r.stdout, "")
      }
    }
    const [created] = await query<{ n: number }>(`SELECT count(*)::int AS n FROM information_schema.schemata WHERE schema_name = $1`, [unmigrated])
    assert.strictEqual(created!.n, 0, "the read-only commands migrated nothing")
    const [notRun] = await query<{ n: number }>(`SELECT count(*)::int AS n FROM ${partial}.migrations WHERE migration_id = 3`)
    assert.strictEqual(notRun!.n, 0, "nor recorded a migration")
    // The fix the message names works.
    await ok(["migrate"], envFor(unmigrated))
    assert.deepStrictEqual(await ok(["stats", "--json"], envFor(unmigrated)), [])
  }, 120_000)

  it("unknown ids: attempts of a message that never existed and redrive or purge --ids matching no dead letter exit 1 naming them", async () => {
    const schema = await freshSchema(true)
    const env = envFor(schema)
    const [dead, other] = await makeDeadLetters(schema, "unk", 2)
    const ready = (await ok(["send", "unk", "t", "{}"], env)).id as string
    // The history of a message completed (and so deleted) outlives it: still known.
    const gone = await withStore(schema, (store) =>
      Effect.gen(function*() {
        yield* store.send("unk-done", [{ task: "t", payload: {} }])
        const [claim] = yield* store.claim("unk-done", { lease: "10 seconds", limit: 1, consumer: "w1" })
        assert.isTrue(yield* Finish.ack(store, claim!))
        return claim!.id
      }))
    const [never, attempted, notYet, redriveNone, purgeSome, redriveReady, completed] = await Promise.all([
      run(["attempts", "99999999"], env),
      run(["attempts", other!, "--json"], env),
      run(["attempts", ready], env),
      run(["dead-letters", "redrive", "--ids", "99999998"], env),
      run(["dead-letters", "purge", "--ids", `${dead},99999997,099999997`], env),
      run(["dead-letters", "redrive", "--ids", ready], env),
      run(["attempts", gone, "--json"], env)
    ])
    assert.strictEqual(never.code, 1, show(never))
    assert.strictEqual(never.stderr.trim(), "leasehold: UnknownIds: no message and no recorded attempts with id: 99999999")
    assert.strictEqual(never.stdout, "", "no [] printed")
    // Known messages: a dead letter with its one run (the one that dead-lettered it), and one not yet claimed, with no
    // recorded attempts: exit 0.
    assert.strictEqual(attempted.code, 0, show(attempted))
    assert.deepStrictEqual(JSON.parse(attempted.stdout).map((a: { outcome: string }) => a.outcome), ["dead-lettered"])
    assert.strictEqual(notYet.code, 0, show(notYet))
    assert.strictEqual(notYet.stdout.trim(), "no attempts recorded")
    assert.strictEqual(completed.code, 0, show(completed))
    assert.deepStrictEqual(JSON.parse(completed.stdout).map((a: { outcome: string }) => a.outcome), ["acked"])

    assert.strictEqual(redriveNone.code, 1, show(redriveNone))
    assert.strictEqual(redriveNone.stderr.trim(), "leasehold: UnknownIds: no dead letter with id: 99999998")
    assert.deepStrictEqual(JSON.parse(redriveNone.stdout), { redriven: [] })
    // The ids that matched are acted on and printed; the one that did not is named once, and the exit is 1.
    assert.strictEqual(purgeSome.code, 1, show(purgeSome))
    assert.strictEqual(purgeSome.stderr.trim(), "leasehold: UnknownIds: no dead letter with id: 99999997")
    assert.deepStrictEqual(JSON.parse(purgeSome.stdout), { purged: [dead] })
    assert.strictEqual(redriveReady.code, 1, show(redriveReady))
    assert.strictEqual(redriveReady.stderr.trim(), `leasehold: UnknownIds: no dead letter with id: ${ready}`)

    const rows = await query<{ id: string; state: string }>(`SELECT id::text AS id, state FROM ${schema}.messages ORDER BY id`)
    assert.deepStrictEqual(rows, [{ id: other!, state: "dead" }, { id: ready, state: "ready" }])
    // A filter without --ids that matches nothing is not an error.
    assert.deepStrictEqual(await ok(["dead-letters", "redrive", "--queue", "nothing-here"], env), { redriven: [] })
  }, 120_000)

  it("stats works on a reserved-word schema (user): every queue that has messages, none with only history or a pause", async () => {
    // A name PostgreSQL reserves: only a quoted identifier reaches it.
    const schema = "user"
    await query(`DROP SCHEMA IF EXISTS "user" CASCADE`)
    schemas.push(`"${schema}"`)
    const env = envFor(schema)
    const migrated = await run(["migrate"], env)
    assert.strictEqual(migrated.code, 0, show(migrated))
    await ok(["send", "beta", "t", "{}"], env)
    await ok(["send", "alpha", "t", "{}", "--delay", "1h"], env)
    await makeDeadLetters(schema, "gamma", 1)
    // A queue with history only (its message acked) and a paused queue without messages.
    await withStore(schema, (store) =>
      Effect.gen(function*() {
        yield* store.send("done", [{ task: "t", payload: {} }])
        const [claim] = yield* store.claim("done", { lease: "10 seconds", limit: 1, consumer: "cli-test" })
        assert.isTrue(yield* Finish.ack(store, claim!))
        yield* store.pause("idle")
      }))
    const stats = await ok(["stats", "--json"], env)
    assert.deepStrictEqual(stats.map((s: { queue: string }) => s.queue), ["alpha", "beta", "gamma"])
    assert.deepInclude(stats[0], { queue: "alpha", ready: 0, delayed: 1, dead: 0 })
    assert.deepInclude(stats[2], { queue: "gamma", ready: 0, dead: 1 })
    const table = await run(["stats"], env)
    assert.strictEqual(table.code, 0, show(table))
    assert.match(table.stdout, /^beta\s+1\s+0\s+0\s+0\s+\S+$/m)
    const queues = await ok(["queues", "list", "--json"], env)
    assert.includeMembers(queues.map((q: { queue: string }) => q.queue), ["done", "idle"], "the store still lists them")
  })

  it("tables escape control characters of stored text (terminal escapes, bell, C1, bidi overrides); --json carries them as \\u escapes", async () => {
    const schema = await freshSchema(true)
    const env = envFor(schema)
    // Clear the screen, set the window title, a C1 CSI, a right-to-left override.
    const hostile = "boom \x1b[2J\x1b]0;pwned\x07 \x9b31m \u202eevil\x08"
    const [id] = await withStore(schema, (store) =>
      Effect.gen(function*() {
        const sent = yield* store.send("esc", [{ task: "t", payload: { text: hostile }, dedupKey: `key\x1b[1m` }])
        const [claim] = yield* store.claim("esc", { lease: "10 seconds", limit: 1, consumer: "cli-test" })
        // Its history row carries the hostile error too.
        assert.strictEqual(yield* Finish.deadLetter(store, claim!, { reason: hostile, error: hostile }), "written")
        return sent.map((s) => s.id)
      }))
    const raw = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/
    for (const args of [["dead-letters", "list"], ["messages", "esc"], ["get", id!], ["attempts", id!]]) {
      const r = await run(args, env)
      assert.strictEqual(r.code, 0, show(r))
      assert.notMatch(r.stdout, raw, `leasehold ${args.join(" ")} prints no control character`)
      assert.include(r.stdout, "boom \\x1b[2J\\x1b]0;pwned\\x07 \\x9b31m \\u202eevil", args.join(" "))
    }
    for (const args of [["dead-letters", "list", "--json"], ["get", id!, "--json"], ["attempts", id!, "--json"]]) {
      const r = await run(args, env)
      assert.strictEqual(r.code, 0, show(r))
      assert.notMatch(r.stdout, raw, `leasehold ${args.join(" ")} prints no control character`)
      assert.include(JSON.stringify(JSON.parse(r.stdout)), JSON.stringify(hostile).slice(1, -1), "the same text, escaped")
    }
  })
})
