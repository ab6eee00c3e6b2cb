import { existsSync } from "node:fs"
import { PgClient } from "@effect/sql-pg"
import { Effect, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { describe, expect, inject, it } from "vitest"
import { startPostgres } from "../src/internal/EmbeddedPostgres.ts"

/** Opens a pool on `url`, runs `SELECT 1`, closes the pool. */
const selectOne = (url: string) =>
  Effect.runPromise(
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const rows = yield* sql<{ one: number }>`SELECT 1 AS one`
      return rows[0]?.one
    }).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(url) })))
  )

describe("EmbeddedPostgres", () => {
  it("starts, restarts and destroys a throwaway server", async () => {
    const server = await startPostgres({ forTests: true })
    try {
      expect(server.url).toBe(`postgres://postgres@127.0.0.1:${server.port}/postgres`)
      expect(existsSync(server.dataDir)).toBe(true)
      expect(await selectOne(server.url)).toBe(1)

      await server.restart()
      expect(await selectOne(server.url)).toBe(1)
    } finally {
      await server.destroy()
    }
    expect(existsSync(server.dataDir)).toBe(false)
    await server.destroy() // idempotent
  })

  it("provides the shared database URL to test files", async () => {
    const url = inject("databaseUrl")
    expect(url).toMatch(/^postgres(ql)?:\/\//)
    expect(await selectOne(url)).toBe(1)
  })
})
