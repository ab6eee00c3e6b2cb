/**
 * vitest globalSetup: one PostgreSQL server for the whole run.
 *
 * `LEASEHOLD_TEST_DATABASE_URL` points the tests at an existing database instead; otherwise a
 * throwaway server (fast, non-durable settings) is started here and destroyed in the teardown.
 * Test files read the URL with `inject("databaseUrl")`.
 */
import type { TestProject } from "vitest/node"
import { startPostgres } from "../../dev/EmbeddedPostgres.ts"

declare module "vitest" {
  export interface ProvidedContext {
    databaseUrl: string
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const external = process.env["LEASEHOLD_TEST_DATABASE_URL"]
  if (external !== undefined && external !== "") {
    project.provide("databaseUrl", external)
    return async () => {}
  }
  const server = await startPostgres({ forTests: true })
  project.provide("databaseUrl", server.url)
  return () => server.destroy()
}
