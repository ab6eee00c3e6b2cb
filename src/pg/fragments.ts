/**
 * SQL fragments written once and shared by the statements (the store's, the reaper's):
 * the time a statement runs at, the attempt-history row, typed array parameters.
 *
 * Fragments are inlined where they are interpolated: the statement the server sees is
 * the one written out in full (each interpolated value is a parameter of its own).
 * They are built without a client, so any client's statement can take them.
 *
 * @since 0.1.0
 */
import * as PgTypes from "@effect/sql-pg/PgTypes"
import { Result } from "effect"
import * as Statement from "effect/sql/Statement"

/**
 * The time a statement runs at, `coalesce($now::timestamptz, now())`: `now` is the store's
 * clock (`clock: "effect"`, so tests can drive leases with `TestClock`), or `null` for the
 * server's `now()` (the default: workers with skewed clocks agree).
 */
export const storeTime = (now: Date | null): Statement.Fragment =>
  Statement.fragment([Statement.literal("coalesce("), Statement.parameter(now), Statement.literal("::timestamptz, now())")])

/** The columns of an attempt-history row, in the order every history INSERT writes them. */
const historyColumns = "message_id, queue, task, attempt, consumer, started_at, ended_at, outcome, error"

/**
 * The head of every attempt-history write, `INSERT INTO <attempts> (message_id, queue, task,
 * attempt, consumer, started_at, ended_at, outcome, error)`, with `result` last when the
 * write records the attempt's result (`{ result: true }`). Number the `attempt` column with
 * {@link attemptNumber} (or, for an attempt numbered by its drive, add the redrive base).
 */
export const historyInsert = (attempts: Statement.Identifier, options?: { readonly result?: boolean }): Statement.Fragment =>
  Statement.fragment([
    Statement.literal("INSERT INTO "),
    attempts,
    Statement.literal(` (${historyColumns}${options?.result === true ? ", result" : ""})`)
  ])

/**
 * The number the history gives the attempt a message row (`alias`: the messages table's
 * alias in the statement) is on, `<alias>.attempt_base + <alias>.attempts` (migration 4):
 * `attempts` counts the attempts of the current drive (what `max_attempts` bounds),
 * `attempt_base` the attempts before its last redrive, and the history numbers on across
 * redrives. A row's alias is code, never input.
 */
export const attemptNumber = (alias: string): Statement.Fragment =>
  Statement.fragment([Statement.literal(`${alias}.attempt_base + ${alias}.attempts`)])

/**
 * An array parameter of one element type, named rather than inferred: inference fails on
 * arrays of nulls, and a fixed type keeps one prepared statement per SQL text.
 */
export const array = (values: ReadonlyArray<unknown>, elementOid: number): PgTypes.Parameter =>
  Result.getOrThrow(PgTypes.array(values, elementOid))

/** A `text[]` parameter (see {@link array}). */
export const textArray = (values: ReadonlyArray<string | null>) => array(values, PgTypes.OID.text)
