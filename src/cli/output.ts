/**
 * What the `leasehold` command prints: plain tables for people, JSON for
 * scripts (`--json`). Stored text (errors, reasons, payloads, keys) can hold
 * terminal escapes: every cell and field is printed with its control
 * characters escaped ({@link printable}), and JSON carries them as `\u` escapes.
 */
import { Duration } from "effect"
import { type Attempt, type CancelResult, type DeadLetter, isResultTooLarge, type MessageInfo, type QueueInfo, type QueueStats } from "../Message.ts"
import type { ScheduleInfo } from "../QueueStore.ts"

/**
 * Characters a terminal may act on rather than show: C0 controls (escape, bell, backspace,
 * carriage return...), DEL, C1 controls (U+009B is a one-byte CSI to some terminals), and the
 * bidirectional overrides and isolates that reorder what is shown.
 */
const controlCharacters = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g

/** Those JSON.stringify leaves as they are (it escapes only U+0000 to U+001F). */
const unescapedByJson = /[\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g

const hex = (c: string, digits: number) => c.charCodeAt(0).toString(16).padStart(digits, "0")

/** `text` with every control character written as an escape (`\x1b`, `\u202e`), so printing it never drives the terminal. */
export const printable = (text: string): string =>
  text.replace(controlCharacters, (c) => (c.charCodeAt(0) < 0x100 ? `\\x${hex(c, 2)}` : `\\u${hex(c, 4)}`))

/** JSON of command output: bigint ids as text (they are message ids), dates as ISO text, no raw control character. */
export const json = (value: unknown, pretty = true): string =>
  JSON.stringify(value, (_key, v: unknown) => (typeof v === "bigint" ? v.toString() : v), pretty ? 2 : undefined)
    .replace(unescapedByJson, (c) => `\\u${hex(c, 4)}`)

/** A left-aligned text table, every cell {@link printable}; columns listed in `right` are right-aligned (numbers). */
export const table = (
  headers: ReadonlyArray<string>,
  rows: ReadonlyArray<ReadonlyArray<string>>,
  right: ReadonlySet<number> = new Set()
): string => {
  const safe = rows.map((row) => row.map(printable))
  const widths = headers.map((h, i) => Math.max(h.length, ...safe.map((r) => (r[i] ?? "").length)))
  const line = (cells: ReadonlyArray<string>) =>
    cells.map((c, i) => (right.has(i) ? c.padStart(widths[i]!) : i === cells.length - 1 ? c : c.padEnd(widths[i]!))).join("  ")
  return [line(headers), ...safe.map(line)].join("\n")
}

/** Milliseconds as people read an age: `-` for none, else whole seconds (`1m 30s`), or ms below one second. */
export const age = (ms: number): string =>
  ms <= 0 ? "-" : ms < 1_000 ? `${Math.round(ms)}ms` : Duration.format(Duration.seconds(Math.floor(ms / 1_000)))

/** One line of free text, cut to `max` characters. */
const oneLine = (text: string | null | undefined, max = 60): string => {
  if (text === null || text === undefined) return ""
  const flat = text.replace(/\s+/g, " ").trim()
  return flat.length > max ? `${flat.slice(0, max - 3)}...` : flat
}

const iso = (d: Date) => d.toISOString()

export const statsTable = (stats: ReadonlyArray<QueueStats>): string =>
  stats.length === 0
    ? "no queue has messages"
    : table(
      ["QUEUE", "READY", "DELAYED", "IN FLIGHT", "DEAD", "OLDEST READY"],
      stats.map((s) => [s.queue, String(s.ready), String(s.delayed), String(s.inFlight), String(s.dead), age(s.oldestReadyAgeMs)]),
      new Set([1, 2, 3, 4, 5])
    )

/** An attempt's kept result on one line: its JSON (cut), a note for one too large to keep, "" for none. */
const resultCell = (result: unknown): string =>
  result === undefined ? "" : isResultTooLarge(result) ? `(too large: ${result.bytes} bytes, not kept)` : oneLine(JSON.stringify(result), 40)

export const attemptsTable = (attempts: ReadonlyArray<Attempt>): string => {
  if (attempts.length === 0) return "no attempts recorded"
  // A RESULT column only when some attempt kept one.
  const results = attempts.some((a) => a.result !== undefined)
  return table(
    ["ATTEMPT", "OUTCOME", "CONSUMER", "STARTED", "TOOK", ...(results ? ["RESULT"] : []), "ERROR"],
    attempts.map((a) => [
      String(a.attempt),
      a.outcome,
      a.consumer,
      iso(a.startedAt),
      `${Math.max(0, a.endedAt.getTime() - a.startedAt.getTime())}ms`,
      ...(results ? [resultCell(a.result)] : []),
      oneLine(a.error)
    ]),
    new Set([0, 4])
  )
}

/** `get`: the message's fields, one per line (or a line saying it is finished), then its history. */
export const messageDetail = (id: string, message: MessageInfo | undefined, attempts: ReadonlyArray<Attempt>): string => {
  const head = message === undefined
    ? [`message ${printable(id)}: not in the queue (finished and deleted); its recorded attempts follow`]
    : [
      ["id", message.id],
      ["queue", message.queue],
      ["task", message.task],
      ["state", message.cancelRequestedAt === null ? message.state : `${message.state}, cancelling (asked ${iso(message.cancelRequestedAt)})`],
      ["attempts", `${message.attempts} of ${message.maxAttempts}`],
      ["priority", String(message.priority)],
      ["enqueued at", iso(message.enqueuedAt)],
      [message.state === "in-flight" ? "lease ends" : "visible at", message.visibleAt === null ? "-" : iso(message.visibleAt)],
      ["leased by", message.leasedBy ?? "-"],
      ["dedup key", message.dedupKey ?? "-"],
      ["key", message.key ?? "-"],
      ["lease expiries", String(message.leaseExpiries)],
      ["dead at", message.deadAt === null ? "-" : iso(message.deadAt)],
      ["dead reason", oneLine(message.deadReason, 200) || "-"],
      ["last error", oneLine(message.lastError, 200) || "-"],
      ["progress", message.progress == null ? "-" : `${oneLine(json(message.progress, false), 200)} (at ${message.progressAt == null ? "-" : iso(message.progressAt)})`],
      ["headers", json(message.headers, false)],
      ["payload", oneLine(json(message.payload, false), 200)]
    ].map(([key, value]) => `${`${key}:`.padEnd(16)}${printable(value!)}`)
  return `${head.join("\n")}\n\n${attemptsTable(attempts)}`
}

/** `messages`: one row per message; a last line naming the next page when this one is full. */
export const messagesTable = (page: ReadonlyArray<MessageInfo>, limit: number): string => {
  if (page.length === 0) return "no messages"
  const rows = table(
    ["ID", "TASK", "STATE", "ATTEMPTS", "PRIORITY", "ENQUEUED", "VISIBLE/LEASE END", "LAST ERROR"],
    page.map((m) => [
      m.id,
      m.task,
      m.cancelRequestedAt === null ? m.state : `${m.state} (cancelling)`,
      `${m.attempts}/${m.maxAttempts}`,
      String(m.priority),
      iso(m.enqueuedAt),
      m.visibleAt === null ? "-" : iso(m.visibleAt),
      oneLine(m.state === "dead" ? (m.deadReason ?? m.lastError) : m.lastError)
    ]),
    new Set([0, 3, 4])
  )
  return page.length < limit ? rows : `${rows}\nmore: --after ${page.at(-1)!.id}`
}

export const queuesTable = (queues: ReadonlyArray<QueueInfo>): string =>
  queues.length === 0
    ? "no queues"
    : table(
      ["QUEUE", "READY", "DELAYED", "IN FLIGHT", "DEAD", "OLDEST READY", "PAUSED"],
      queues.map((q) => [
        q.queue,
        String(q.ready),
        String(q.delayed),
        String(q.inFlight),
        String(q.dead),
        age(q.oldestReadyAgeMs),
        q.pausedAt === null ? (q.paused ? "yes" : "-") : `since ${iso(q.pausedAt)}`
      ]),
      new Set([1, 2, 3, 4, 5])
    )

export const cancelTable = (results: ReadonlyArray<CancelResult>): string =>
  results.length === 0
    ? "nothing to cancel"
    : table(["ID", "RESULT"], results.map((r) => [String(r.id), r.result === "cancelled" ? "cancelled" : "cancelling (running: its consumer is notified and stops it)"]), new Set([0]))

export const deadLettersTable = (dead: ReadonlyArray<DeadLetter>): string =>
  dead.length === 0
    ? "no dead letters"
    : table(
      ["ID", "QUEUE", "TASK", "ATTEMPTS", "DEAD AT", "REASON"],
      dead.map((d) => [String(d.id), d.queue, d.task, String(d.attempts), iso(d.deadAt), oneLine(d.reason)]),
      new Set([0, 3])
    )

/**
 * A schedule no worker has declared for this long is shown as NOT SEEN: workers record that
 * they still declare their schedules every minute (the Scheduler's default heartbeat).
 */
export const scheduleStaleAfter = "5 minutes"
const staleAfterMs = 5 * 60_000

/** Whether a running worker still declares the schedule, as of `now`. */
export const declared = (row: ScheduleInfo, now: number): boolean => now - row.lastSeenAt.getTime() <= staleAfterMs

export const schedulesTable = (rows: ReadonlyArray<ScheduleInfo>, now: number): string =>
  rows.length === 0
    ? "no schedules"
    : table(
      ["KEY", "CRON", "TZ", "QUEUE", "TASK", "LAST SLOT", "NEXT SLOT", "LAST SEEN", "BY", "DECLARED"],
      rows.map((r) => [
        r.key,
        r.cron,
        r.tz,
        r.queue,
        r.task,
        r.firedAt === null ? "-" : iso(r.lastSlot),
        r.nextSlot === null ? "-" : iso(r.nextSlot),
        now - r.lastSeenAt.getTime() < 1_000 ? "just now" : `${age(now - r.lastSeenAt.getTime())} ago`,
        r.lastSeenBy,
        declared(r, now) ? "yes" : `NOT SEEN for ${age(now - r.lastSeenAt.getTime())}`
      ])
    )
