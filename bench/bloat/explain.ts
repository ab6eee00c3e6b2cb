/**
 * What one claim scans: the adapter's claim SELECT (adapters.ts) run under
 * EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) as a prepared statement with a generic plan (as the
 * workers run theirs), in a READ ONLY transaction rolled back afterwards, so it locks and writes
 * nothing. In the same transaction, the index entries the scan read (the index's
 * `tuples_returned` of this transaction, pg_stat_get_xact_tuples_returned): the entries read
 * beyond the rows the scan kept point at row versions this snapshot cannot see, the dead entries
 * a claim steps over.
 */
import type { ClaimSelect } from "./adapters.ts"
import type { PgSession } from "./pg.ts"

/** What one claim's scan did. */
export interface ClaimScan {
  readonly ms: number
  readonly hit: number
  readonly read: number
  readonly rows: number
  /** The scan node of the queue table: its index (undefined: a sequential scan), node type. */
  readonly index: string | undefined
  readonly node: string
  readonly removedByFilter: number
  readonly heapFetches: number
  /** Index entries read on the queue table's indexes. */
  readonly entriesRead: number
  /** Entries read that led to no row the scan kept: row versions invisible to the claim. */
  readonly deadEntries: number
}

interface PlanNode {
  readonly "Node Type": string
  readonly "Relation Name"?: string
  readonly "Index Name"?: string
  readonly "Actual Rows"?: number
  readonly "Actual Loops"?: number
  readonly "Rows Removed by Filter"?: number
  readonly "Rows Removed by Index Recheck"?: number
  readonly "Heap Fetches"?: number
  readonly "Shared Hit Blocks"?: number
  readonly "Shared Read Blocks"?: number
  readonly Plans?: ReadonlyArray<PlanNode>
}

const nodes = (node: PlanNode): Array<PlanNode> => [node, ...(node.Plans ?? []).flatMap(nodes)]

const literal = (value: unknown) => (typeof value === "number" ? String(value) : `'${String(value).replace(/'/g, "''")}'`)

/** Prepare the claim SELECT on `session` as `bloat_claim` (once per run). */
export const prepareClaim = async (session: PgSession, claim: ClaimSelect): Promise<void> => {
  await session.query("DEALLOCATE ALL")
  await session.query(`PREPARE bloat_claim AS ${claim.text}`)
}

/** EXPLAIN ANALYZE the prepared claim once, read-only, and read what it scanned. */
export const explainClaim = async (session: PgSession, claim: ClaimSelect, queueTable: string): Promise<ClaimScan> => {
  await session.query("BEGIN READ ONLY")
  try {
    await session.query("SET LOCAL plan_cache_mode = force_generic_plan")
    const args = claim.values.length === 0 ? "" : `(${claim.values.map(literal).join(", ")})`
    const out = (await session.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE bloat_claim${args}`)).rows[0]?.["QUERY PLAN"]
    const plan = (out as Array<{ Plan: PlanNode; "Execution Time": number }>)[0]!
    const table = queueTable.split(".").pop()
    const scan = nodes(plan.Plan).find((n) => n["Relation Name"] === table)
    const entries = (await session.query(
      `SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(indexrelid)), 0)::bigint AS n FROM pg_index WHERE indrelid = $1::regclass`,
      [queueTable]
    )).rows[0]
    const entriesRead = Number(entries?.["n"] ?? 0)
    const scanned = (scan?.["Actual Rows"] ?? 0) * (scan?.["Actual Loops"] ?? 1) + (scan?.["Rows Removed by Filter"] ?? 0)
    return {
      ms: plan["Execution Time"],
      hit: plan.Plan["Shared Hit Blocks"] ?? 0,
      read: plan.Plan["Shared Read Blocks"] ?? 0,
      rows: plan.Plan["Actual Rows"] ?? 0,
      index: scan?.["Index Name"],
      node: scan?.["Node Type"] ?? "?",
      removedByFilter: scan?.["Rows Removed by Filter"] ?? 0,
      heapFetches: scan?.["Heap Fetches"] ?? 0,
      entriesRead,
      deadEntries: scan?.["Index Name"] === undefined ? 0 : Math.max(0, entriesRead - scanned)
    }
  } finally {
    await session.query("ROLLBACK")
  }
}
