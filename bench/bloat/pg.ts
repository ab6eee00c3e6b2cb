/**
 * The orchestrator's node-postgres clients (`pg` is in node_modules without types: imported
 * loosely): one per role (admin, sampler, the idle snapshot holder), each a single session, so
 * a transaction opened on one stays on it.
 */

/** One node-postgres session. */
export interface PgSession {
  readonly query: (text: string, values?: ReadonlyArray<unknown>) => Promise<{ readonly rows: Array<Record<string, unknown>> }>
  readonly end: () => Promise<void>
}

const pgModule = "pg"
const pg = (await import(pgModule)).default as {
  Client: new(options: { connectionString: string; application_name?: string }) => PgSession & {
    connect: () => Promise<void>
    on: (event: "error", listener: (error: Error) => void) => void
  }
}

/** Connect one session to `url` as `applicationName`. */
export const connect = async (url: string, applicationName: string): Promise<PgSession> => {
  const client = new pg.Client({ connectionString: url, application_name: applicationName })
  // A session the server ends (the server stopped on a signal) reports it on its next query, not as a crash.
  client.on("error", () => undefined)
  await client.connect()
  return client
}

/** `serverUrl` with its database replaced by `db`. */
export const databaseUrl = (serverUrl: string, db: string): string => {
  const u = new URL(serverUrl)
  u.pathname = `/${db}`
  return u.toString()
}

/** The first column of the first row `text` answers, as a number. */
export const scalar = async (session: PgSession, text: string, values: ReadonlyArray<unknown> = []): Promise<number> => {
  const row = (await session.query(text, values)).rows[0]
  return Number(row === undefined ? 0 : Object.values(row)[0] ?? 0)
}
