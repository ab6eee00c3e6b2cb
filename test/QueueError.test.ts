/**
 * The classifier and the redaction, on errors shaped exactly as @effect/sql-pg 4 reports them
 * (checked against a real server in test/ConnectionDeath.test.ts): a refusal at connect is the
 * startup's ErrorResponse, an `UnknownError` (or the driver's own reason for its SQLSTATE) with
 * `operation: "connect"`; a statement's error has `operation: "query"`.
 */
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Redacted } from "effect"
import { SqlClient, SqlError } from "effect/sql"
import { redactSecrets } from "../src/internal/redact.ts"
import { classifySqlError, isConnectionDead } from "../src/QueueError.ts"

type ReasonName = "UnknownError" | "AuthenticationError" | "AuthorizationError" | "SqlSyntaxError" | "DeadlockError" |
  "SerializationError" | "LockTimeoutError" | "StatementTimeoutError" | "ConnectionError"

/** A `SqlError` as the driver builds one from an ErrorResponse carrying `code`. */
const pgError = (reason: ReasonName, code: string, operation: "connect" | "query", text = `server says ${code}`) => {
  const props = {
    cause: Object.assign(new Error(text), { code, severity: "FATAL" }),
    message: operation === "connect" ? "PgConnection: Failed to connect" : "PgConnection: Query failed",
    operation
  }
  return new SqlError.SqlError({ reason: new SqlError[reason](props) })
}

describe("classifySqlError: what is a dead connection", () => {
  it("a connection the server refuses is ConnectionDead: class 53 at connect, 57P03", () => {
    const refused: ReadonlyArray<readonly [ReasonName, string, "connect" | "query"]> = [
      ["UnknownError", "53300", "connect"], // too many connections (server-wide, or the role's CONNECTION LIMIT)
      ["UnknownError", "53000", "connect"], // insufficient resources
      ["UnknownError", "53200", "connect"], // out of memory while starting the backend
      ["UnknownError", "53400", "connect"], // configuration limit exceeded
      ["UnknownError", "57P03", "connect"], // cannot connect now (starting up, shutting down)
      ["UnknownError", "57P03", "query"],
      ["UnknownError", "57P01", "query"],
      ["ConnectionError", "08006", "query"]
    ]
    for (const [reason, code, operation] of refused) {
      const error = pgError(reason, code, operation)
      assert.isTrue(isConnectionDead(error), `${code} at ${operation}`)
      const classified = classifySqlError("claim", error)
      assert.strictEqual(classified._tag, "ConnectionDead", `${code} at ${operation}`)
      assert.strictEqual(classified.code, code)
      assert.isTrue(classified.retryable)
    }
  })

  it("a statement's error is QueryFailed, class 53 included; so are auth, permission and a missing database at connect", () => {
    const answered: ReadonlyArray<readonly [ReasonName, string, "connect" | "query"]> = [
      ["StatementTimeoutError", "57014", "query"],
      ["DeadlockError", "40P01", "query"],
      ["SerializationError", "40001", "query"],
      ["LockTimeoutError", "55P03", "query"],
      ["SqlSyntaxError", "42601", "query"],
      ["SqlSyntaxError", "42P01", "query"],
      ["AuthorizationError", "42501", "query"],
      // A statement the server took and failed for want of resources: the statement's failure.
      ["UnknownError", "53100", "query"], // disk full
      ["UnknownError", "53200", "query"], // out of memory
      ["UnknownError", "53300", "query"], // raised by a function, not a refused connection
      // Refusals that waiting does not cure: configuration, not a dead connection.
      ["AuthenticationError", "28P01", "connect"], // password authentication failed
      ["AuthenticationError", "28000", "connect"], // no such role / no pg_hba entry
      ["UnknownError", "3D000", "connect"], // database does not exist
      ["AuthorizationError", "42501", "connect"] // no CONNECT privilege
    ]
    for (const [reason, code, operation] of answered) {
      const error = pgError(reason, code, operation)
      assert.isFalse(isConnectionDead(error), `${code} at ${operation}`)
      const classified = classifySqlError("claim", error)
      assert.strictEqual(classified._tag, "QueryFailed", `${code} at ${operation}`)
      assert.strictEqual(classified.code, code)
      assert.isFalse(classified.retryable)
    }
  })

  it.effect("the driver's refusal of a URL it cannot parse is QueryFailed, not a dead connection retried forever", () =>
    Effect.gen(function*() {
      for (const url of ["not-a-url", "mysql://u:pw@db/x", "postgres://u:pw@db/x?sslmode=sometimes"]) {
        const error = yield* Effect.flip(Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SELECT 1`).pipe(
          Effect.provide(PgClient.layer({ url: Redacted.make(url), maxConnections: 1 }))
        ))
        assert.isTrue(SqlError.isSqlError(error), String(error))
        const sqlError = error as SqlError.SqlError
        assert.deepStrictEqual([sqlError.reason._tag, sqlError.reason.operation], ["ConnectionError", "connect"], url)
        const classified = classifySqlError("claim", sqlError)
        assert.strictEqual(classified._tag, "QueryFailed", `${url}: ${classified.message}`)
        assert.notInclude(classified.message, "pw", url)
      }
      // A real ConnectionError at connect (nothing listening) stays dead.
      assert.isTrue(isConnectionDead(new SqlError.SqlError({
        reason: new SqlError.ConnectionError({
          cause: Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" }),
          message: "PgConnection: Failed to connect",
          operation: "connect"
        })
      })))
    }))

  it("a refusal's message says what the server said, with the operation", () => {
    const classified = classifySqlError("claim", pgError("UnknownError", "53300", "connect", "too many connections for role \"app\""))
    assert.strictEqual(classified.message, "claim: PgConnection: Failed to connect: too many connections for role \"app\"")
  })
})

describe("redactSecrets", () => {
  it("hides a URL's password even when it holds an unencoded @ or /", () => {
    const cases: ReadonlyArray<readonly [string, string, string]> = [
      ["postgres://app:p@ss@db:5432/x", "p@ss", "postgres://***@db:5432/x"],
      ["postgres://app:pa/ss@db:5432/x", "pa/ss", "postgres://***@db:5432/x"],
      ["postgres://app:a/b@c@db/x failed", "a/b@c", "postgres://***@db/x failed"],
      ["connect postgresql://app:s3cret@db/x: refused", "s3cret", "connect postgresql://***@db/x: refused"]
    ]
    for (const [text, secret, expected] of cases) {
      const redacted = redactSecrets(text)
      assert.notInclude(redacted, secret, text)
      assert.strictEqual(redacted, expected)
    }
  })

  it("hides keyword/value passwords, quoted or not, and URL parameters", () => {
    const cases: ReadonlyArray<readonly [string, string, string]> = [
      ["host=db password=s3cret user=u", "s3cret", "host=db password=*** user=u"],
      ["host=db password='a b' user=u", "a b", "host=db password=*** user=u"],
      ["host=db password = 'it\\'s here' user=u", "here", "host=db password = *** user=u"],
      ["host=db password='unterminated secret", "secret", "host=db password=***"],
      ["PGPASSWORD=hunter2 psql", "hunter2", "PGPASSWORD=*** psql"],
      ["postgres://db/x?sslmode=require&password=s3cret&a=b", "s3cret", "postgres://db/x?sslmode=require&password=***&a=b"],
      ['{"user":"u","password":"s3 cr\\"et"}', "cr", '{"user":"u","password":"***"}']
    ]
    for (const [text, secret, expected] of cases) {
      const redacted = redactSecrets(text)
      assert.notInclude(redacted, secret, text)
      assert.strictEqual(redacted, expected)
    }
  })

  it("leaves text without credentials alone", () => {
    for (const clean of ["postgres://db:5432/x", "user@example.com wrote", "no secrets here", "", "password policy"]) {
      assert.strictEqual(redactSecrets(clean), clean)
    }
  })
})
