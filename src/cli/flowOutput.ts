/**
 * What the flow-control commands print: the stored limits as a table, and a queue's flow
 * status (`leasehold flow`) as sections of tables. Every cell goes through `output.ts`'s
 * {@link table}, so stored text (keys, errors) cannot drive the terminal.
 */
import { type FlowLimits, type FlowStatus, formatRate, keyConcurrencyOf, type StoredLimits } from "../FlowControl.ts"
import { age, json, printable, table } from "./output.ts"

export { json }

/** How many rows of each list `flowStatus` answers at most: a full list says there may be more. */
const statusCap = 100

const iso = (d: Date) => d.toISOString()

/** When `at` is, seen from `now`: `in 1m 30s`, or `now` once it is past. */
const due = (at: Date, now: number): string => {
  const left = at.getTime() - now
  return left <= 0 ? "now" : `in ${age(left)}`
}

const orDash = (value: number | undefined | null) => (value === undefined || value === null ? "-" : String(value))
const rateCell = (rate: FlowLimits["rate"]) => (rate === undefined || rate === null ? "-" : formatRate(rate))

/** The limits of one row as the table's cells (concurrency to fair). */
const limitCells = (limits: FlowLimits): Array<string> => [
  orDash(limits.concurrency),
  rateCell(limits.rate),
  orDash(limits.keyConcurrency),
  rateCell(limits.keyRate),
  limits.fifo === true ? "yes" : "-",
  limits.fair === true ? "yes" : "-"
]

/** `limits show`: one row per stored record (a queue's own limits show task `-`). */
export const limitsTable = (rows: ReadonlyArray<StoredLimits>): string =>
  rows.length === 0
    ? "no flow limits stored"
    : table(
      ["QUEUE", "TASK", "CONCURRENCY", "RATE", "KEY CONCURRENCY", "KEY RATE", "FIFO", "FAIR", "SOURCE", "UPDATED"],
      rows.map((r) => [r.queue, r.task ?? "-", ...limitCells(r.limits), r.source, iso(r.updatedAt)]),
      new Set([2, 4])
    )

/** A section: its title, then its table or a line saying there is nothing; a full list says there may be more. */
const section = (title: string, count: number, body: () => string, none: string): string =>
  count === 0 ? `${title}: ${none}` : `${title}${count >= statusCap ? ` (the first ${statusCap})` : ""}:\n${body()}`

/** `leasehold flow`: the queue's limits, then what holds it back now. */
export const flowReport = (status: FlowStatus, now: number): string => {
  const own = status.limits.find((l) => l.task === null)?.limits
  const keyLimit = own === undefined ? undefined : keyConcurrencyOf(own)
  return [
    `queue ${printable(status.queue)}: ${status.inFlight} in flight`,
    section("limits", status.limits.length, () => limitsTable(status.limits), "none (claimed as fast as consumers ask)"),
    section(
      `keys at their limit${keyLimit === undefined ? "" : ` (${keyLimit} in flight each)`}`,
      status.keysAtLimit.length,
      () => table(["KEY", "IN FLIGHT"], status.keysAtLimit.map((k) => [k.key, String(k.inFlight)]), new Set([1])),
      "none"
    ),
    section(
      "FIFO keys blocked by a waiting head",
      status.blockedKeys.length,
      () =>
        table(
          ["KEY", "HEAD ID", "ATTEMPTS", "DUE AT", "DUE", "LAST ERROR"],
          status.blockedKeys.map((b) => [
            b.key,
            b.headId,
            String(b.attempts),
            iso(b.visibleAt),
            due(b.visibleAt, now),
            (b.lastError ?? "-").replace(/\s+/g, " ").slice(0, 80)
          ]),
          new Set([1, 2])
        ),
      "none"
    ),
    section(
      "full rate windows",
      status.throttles.length,
      () =>
        table(
          ["TASK", "KEY", "NEXT START AT", "NEXT START"],
          status.throttles.map((t) => [t.task ?? "-", t.key ?? "-", iso(t.nextAt), due(t.nextAt, now)])
        ),
      "none"
    )
  ].join("\n\n")
}
