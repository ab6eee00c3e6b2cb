/**
 * `node bench/send/pairs.ts` (issue 29): the bulk send of one or more checkouts and the raw insert
 * of `npm run bench`, call by call in one process, so a loaded machine's drift falls on all of them
 * alike. One durable embedded PostgreSQL (fsync, synchronous_commit, full_page_writes on); each
 * checkout's `PgQueueStore` (imported from its `src/`, on one `@effect/sql-pg` pool of 3) in a schema
 * of its own, the raw insert (bench/peers/raw-pg.ts's statement, on node-postgres, a pool of 3) into
 * its own table. Each round sends 1,000 jobs through each sender, in an order that rotates every
 * round; every call is timed. Prints the median ms per call, each sender's rate over the raw
 * insert's (of the medians), and the median of the per-round ratios.
 *
 * Knobs (environment):
 *   SEND_CHECKOUTS   comma-separated checkout folders (default: this one)
 *   SEND_ROUNDS      rounds (default 100: 100,000 jobs per sender, as `npm run bench` sends)
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Redacted } from "effect"
import { join, resolve } from "node:path"
import { pathToFileURL } from "node:url"
import { startPostgres } from "../../dev/EmbeddedPostgres.ts"
import type * as Store from "../../src/PgQueueStore.ts"
import { repoRoot } from "../chaos/lib.ts"
import { payloads } from "../peers/common.ts"

const checkouts = (process.env["SEND_CHECKOUTS"] ?? repoRoot).split(",").map((dir) => resolve(dir))
const rounds = Number(process.env["SEND_ROUNDS"] ?? "100")
const CHUNK = 1_000

const pgModule = "pg"
const pg = (await import(pgModule)).default
const median = (values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

const server = await startPostgres()
const pool = new pg.Pool({ connectionString: server.url, max: 3 })
try {
  await pool.query(`CREATE TABLE q (id bigserial PRIMARY KEY, vt timestamptz NOT NULL DEFAULT now(), read_ct int NOT NULL DEFAULT 0,
    enqueued_at timestamptz NOT NULL DEFAULT now(), payload jsonb)`)
  const modules: Array<typeof Store> = []
  for (const dir of checkouts) modules.push(await import(pathToFileURL(join(dir, "src/PgQueueStore.ts")).href))
  const times = await Effect.runPromise(Effect.gen(function*() {
    const stores = []
    for (const [k, mod] of modules.entries()) stores.push(yield* mod.make({ schema: `send_${k + 1}`, leasePool: false }))
    const senders: Array<{ readonly name: string; readonly send: (from: number) => Effect.Effect<unknown, unknown> }> = [
      {
        name: "raw",
        send: (from) =>
          Effect.promise(() =>
            pool.query({
              name: "send",
              text: "INSERT INTO q (vt, read_ct, enqueued_at, payload) SELECT now(), 0, now(), p FROM unnest($1::jsonb[]) AS p",
              values: [payloads(from, CHUNK).map((p) => JSON.stringify(p))]
            })
          )
      },
      ...stores.map((store, k) => ({
        name: checkouts.length === 1 ? "leasehold" : `leasehold#${k + 1}`,
        send: (from: number) => Effect.suspend(() => store.send("bench", payloads(from, CHUNK).map((payload) => ({ task: "noop", payload }))))
      }))
    ]
    const times = new Map<string, Array<number>>(senders.map((s) => [s.name, []]))
    for (let round = 0; round < rounds; round++) {
      for (let k = 0; k < senders.length; k++) {
        const sender = senders[(round + k) % senders.length]!
        const started = performance.now()
        yield* sender.send(round * CHUNK)
        times.get(sender.name)!.push(performance.now() - started)
      }
    }
    return times
  }).pipe(
    Effect.scoped,
    Effect.provide(PgClient.layer({ url: Redacted.make(server.url), maxConnections: 3 }))
  ))
  const raw = times.get("raw")!
  for (const [name, ms] of times) {
    const perRound = ms.map((m, k) => raw[k]! / m)
    console.log(
      `${name}: median ${median(ms).toFixed(2)} ms per 1,000 (${Math.round(CHUNK / (median(ms) / 1000))} jobs/s), ` +
        `${(median(raw) / median(ms)).toFixed(2)} of raw; per-round ratio median ${median(perRound).toFixed(2)}`
    )
  }
} finally {
  await pool.end()
  await server.destroy()
}
