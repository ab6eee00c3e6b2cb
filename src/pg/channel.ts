/**
 * The schema's NOTIFY channel and writes that announce themselves: a leaf both the store's
 * context record and the LISTEN loop (`notify.ts`) import. A write whose NOTIFY is refused
 * because the queue is full runs again silently.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import * as SqlError from "effect/sql/SqlError"
import { hash31 } from "../internal/hash.ts"

/** PostgreSQL's limit on identifiers, channel names included (NAMEDATALEN - 1 bytes). */
const MAX_IDENTIFIER_BYTES = 63

/**
 * The NOTIFY channel of `schema`: sends announce their queue on it.
 * `leasehold_<schema>` when that fits in an identifier; otherwise the schema is
 * cut short and a hash of the whole name keeps channels of different schemas apart.
 */
export const notifyChannel = (schema: string): string => channelNamed("leasehold_", schema)

/**
 * The completion-event channel of `schema`: finishing writes and cancels announce the runs that
 * ended on it (`completed`, `retried`, `dead-lettered`, `cancelled`), apart from the sends'
 * channel, so consumers, which listen for sends, never hear them. `leasehold_ended_<schema>`,
 * cut short with a hash as {@link notifyChannel} is.
 */
export const endedChannel = (schema: string): string => channelNamed("leasehold_ended_", schema)

/** `<prefix><schema>`, within PostgreSQL's identifier length: cut short, with a hash of the whole schema name, when too long. */
const channelNamed = (prefix: string, schema: string): string => {
  const plain = `${prefix}${schema}`
  if (Buffer.byteLength(plain) <= MAX_IDENTIFIER_BYTES) return plain
  const suffix = `_${hash31(schema).toString(36)}`
  return `${prefix}${schema.slice(0, MAX_IDENTIFIER_BYTES - prefix.length - suffix.length)}${suffix}`
}

/**
 * Whether `error` is PostgreSQL refusing a NOTIFY because its queue is full ("too many
 * notifications in the NOTIFY queue", 54000, raised at commit): a listening session stopped
 * reading (a frozen consumer, a session left in a transaction) and the queue filled behind it.
 * The failing transaction wrote nothing, so its statement can be run again without the NOTIFY.
 */
const notifyQueueFull = (error: unknown): boolean => {
  if (!SqlError.isSqlError(error)) return false
  const cause = error.reason.cause as { readonly code?: unknown; readonly message?: unknown } | undefined
  return cause?.code === "54000" && /NOTIFY queue/i.test(String(cause.message ?? ""))
}

/** How often, at most, a full NOTIFY queue is logged. */
const NOTIFY_FULL_WARN_MS = 60_000

/** Runs a statement that announces what it wrote; `announce` false: the same write, silent. */
export type Announcing = <A, E, R>(statement: (announce: boolean) => Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>

/**
 * The store's {@link Announcing} (one per store: it remembers when it last warned).
 * Run a statement that announces what it wrote (a NOTIFY inside its own transaction), or,
 * when the NOTIFY queue is full, run it again without the announcement: the write matters,
 * the wake-up is best effort (consumers poll). Warned about at most once a minute.
 */
export const makeAnnouncing = (): Announcing => {
  let notifyFullWarnedAt = -Infinity
  return (statement) =>
    statement(true).pipe(Effect.catchIf(notifyQueueFull, () =>
      Effect.andThen(
        Effect.suspend(() => {
          const at = Date.now()
          if (at - notifyFullWarnedAt < NOTIFY_FULL_WARN_MS) return Effect.void
          notifyFullWarnedAt = at
          return Effect.logWarning(
            "the NOTIFY queue is full (a listening session stopped reading; see pg_notification_queue_usage()): " +
              "writing without waking listeners, consumers find the messages by polling"
          ).pipe(Effect.annotateLogs({ module: "PgQueueStore" }))
        }),
        statement(false)
      )))
}
