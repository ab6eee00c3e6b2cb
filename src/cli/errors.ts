/**
 * The failures the commands add to the store's (exit 1), and how a failure is printed:
 * `leasehold: Tag: message`.
 */
import { Data } from "effect"
import type { MessageId } from "../Message.ts"
import * as Migrations from "../Migrations.ts"

/**
 * A read-only command found LEASEHOLD_SCHEMA without leasehold's tables, or with migrations not run:
 * it says which and how to fix it instead of failing on a missing table (read-only commands never migrate).
 */
export class SchemaNotMigrated extends Data.TaggedError("SchemaNotMigrated")<{
  readonly schema: string
  readonly pending: ReadonlyArray<readonly [id: number, name: string]>
}> {
  override get message(): string {
    const fix = "run `leasehold migrate` (or a command that migrates: send, dead-letters redrive or purge) with a role that may create tables; read-only commands never migrate"
    return this.pending.length === Migrations.known.length
      ? `schema ${this.schema} has no leasehold tables: ${fix}`
      : `schema ${this.schema} is not fully migrated (missing ${this.pending.map(([id, name]) => `${id} ${name}`).join(", ")}): ${fix}`
  }
}

/** Message ids a command was given that match nothing (no such message, or not a dead letter for redrive and purge). */
export class UnknownIds extends Data.TaggedError("UnknownIds")<{
  readonly what: string
  readonly ids: ReadonlyArray<MessageId>
}> {
  override get message(): string {
    return `${this.what}: ${this.ids.join(", ")}`
  }
}


/** Queues `stats` was asked for that the store knows nothing of (no messages, no history, no pause). */
export class UnknownQueues extends Data.TaggedError("UnknownQueues")<{
  readonly queues: ReadonlyArray<string>
}> {
  override get message(): string {
    return `no queue named ${this.queues.join(", ")}: no messages, no attempt history and no pause row (see \`leasehold queues list\`)`
  }
}


/** A schedule key the command names that no stored schedule has. */
export class UnknownSchedule extends Data.TaggedError("UnknownSchedule")<{
  readonly key: string
}> {
  override get message(): string {
    return `no schedule with key ${JSON.stringify(this.key)} (see \`leasehold schedules list\`)`
  }
}


/** `Tag: message` of a failure, as the command prints it (with a hint when the tables are missing). */
export const describe = (error: unknown): string => {
  if (typeof error !== "object" || error === null || !("message" in error)) return String(error)
  const { _tag, code, message } = error as { _tag?: string; code?: string; message: string }
  // 42P01 undefined_table, 3F000 invalid_schema_name: the read-only commands do not migrate.
  const hint = code === "42P01" || code === "3F000" ? " (no leasehold tables in LEASEHOLD_SCHEMA: run `leasehold migrate` first)" : ""
  return `${_tag ?? "Error"}: ${message}${hint}`
}
