/**
 * One sample of a run, every BLOAT_SAMPLE: messages finished so far (the queue table's
 * cumulative statistics, adapters.ts), the watched tables' live and dead tuples
 * (pg_stat_user_tables), their heap and index sizes and autovacuum runs, and what one claim
 * scans (explain.ts).
 */
import { loadavg } from "node:os"
import type { AdapterSpec, ClaimSelect, Watched } from "./adapters.ts"
import { type ClaimScan, explainClaim } from "./explain.ts"
import { type PgSession, scalar } from "./pg.ts"

/** One watched table at one sample. */
export interface TableStats {
  readonly role: Watched["role"]
  readonly name: string
  readonly live: number
  readonly dead: number
  readonly heapBytes: number
  readonly indexBytes: number
  readonly autovacuums: number
}

/** One sample: `t` seconds after the first handler started. */
export interface Sample {
  readonly t: number
  readonly finished: number
  /** Messages finished a second since the previous sample. */
  readonly rate: number
  readonly load1: number
  readonly tables: ReadonlyArray<TableStats>
  readonly claim: ClaimScan
  /** Size of the claim's index (bytes). */
  readonly claimIndexBytes: number
}

/** The sampler of one run: its session (no transaction left open), what to read. */
export interface Sampler {
  readonly session: PgSession
  readonly spec: AdapterSpec
  readonly tables: ReadonlyArray<Watched>
  readonly claim: ClaimSelect
  /** The queue table's count before the worker started (subtracted). */
  readonly base: number
}

const tableStats = async (session: PgSession, table: Watched): Promise<TableStats> => {
  const row = (await session.query(
    `SELECT n_live_tup, n_dead_tup, autovacuum_count, pg_relation_size(relid) AS heap, pg_indexes_size(relid) AS idx
     FROM pg_stat_user_tables WHERE relid = $1::regclass`,
    [table.name]
  )).rows[0] ?? {}
  return {
    role: table.role,
    name: table.name,
    live: Number(row["n_live_tup"] ?? 0),
    dead: Number(row["n_dead_tup"] ?? 0),
    heapBytes: Number(row["heap"] ?? 0),
    indexBytes: Number(row["idx"] ?? 0),
    autovacuums: Number(row["autovacuum_count"] ?? 0)
  }
}

/** Messages finished so far, by the queue table's statistics. */
export const finishedSoFar = async (sampler: Sampler): Promise<number> =>
  (await scalar(sampler.session, sampler.spec.finishedSql(sampler.tables[0]!.name))) - sampler.base

/** Take one sample at `t` (seconds), `previous` giving the interval's start. */
export const takeSample = async (sampler: Sampler, t: number, previous: { readonly t: number; readonly finished: number }): Promise<Sample> => {
  const finished = await finishedSoFar(sampler)
  const tables = []
  for (const table of sampler.tables) tables.push(await tableStats(sampler.session, table))
  const claim = await explainClaim(sampler.session, sampler.claim, sampler.tables[0]!.name)
  const claimIndexBytes = claim.index === undefined
    ? 0
    : await scalar(sampler.session, "SELECT pg_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relname = $1 AND n.nspname = $2", [
      claim.index,
      sampler.tables[0]!.name.split(".")[0]
    ])
  const dt = t - previous.t
  return { t, finished, rate: dt > 0 ? (finished - previous.finished) / dt : 0, load1: loadavg()[0] ?? 0, tables, claim, claimIndexBytes }
}
