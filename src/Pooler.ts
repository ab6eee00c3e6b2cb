/**
 * What stands between leasehold and PostgreSQL: nothing, a session-mode pooler
 * or a transaction-mode pooler (PgBouncer `pool_mode=session|transaction`, or a
 * provider's pooler), and the optional direct URL that session-bound features
 * use behind a transaction-mode one.
 *
 * - `none` (default): a direct connection. Everything as documented.
 * - `session`: each client connection keeps one server session for its life,
 *   so session locks, `LISTEN` and prepared statements work. PgBouncer refuses
 *   startup parameters it does not know, so the extra pools (lease traffic,
 *   presence) connect without their `statement_timeout` startup parameter.
 * - `transaction`: a client has a server session only inside a transaction.
 *   Prepared statements are off (a statement prepared on one backend is not on
 *   the next), no startup parameters, and what needs a session (the presence
 *   lock of session liveness, `LISTEN` wake-ups) uses the direct URL when one
 *   is given, else is left out: claims end by lease expiry, idle consumers poll.
 *
 * Provide it with `QueueConfig.pgLayer` / `pgLayerFromEnv` (from
 * `LEASEHOLD_POOLER` and `LEASEHOLD_DIRECT_DATABASE_URL`); without it in
 * context, `none` is assumed.
 *
 * @since 0.1.0
 */
import type { PgClient } from "@effect/sql-pg"
import { Context, Effect, Layer, Option, type Redacted } from "effect"

/** What the main URL connects through. */
export type Mode = "none" | "session" | "transaction"

/** Every mode, in the order docs/poolers.md lists them. */
export const modes: ReadonlyArray<Mode> = ["none", "session", "transaction"]

/** The pooler setting of the application: use it where a connection needs a real session. */
export class Pooler extends Context.Service<Pooler, {
  readonly mode: Mode
  /** `LEASEHOLD_DIRECT_DATABASE_URL`: a connection straight to PostgreSQL, if given. */
  readonly direct: Option.Option<Redacted.Redacted>
}>()("leasehold/Pooler") {}

/**
 * The pooler setting as a layer, for an application that builds its `PgClient`
 * itself instead of with `QueueConfig.pgLayer` (which provides it): then turn
 * prepared statements off on that client too (`prepare: false`) for `transaction`.
 */
export const layer = (options: { readonly mode: Mode; readonly directUrl?: Redacted.Redacted | undefined }): Layer.Layer<Pooler> =>
  Layer.succeed(Pooler, Pooler.of({ mode: options.mode, direct: Option.fromUndefinedOr(options.directUrl) }))

/** The pooler setting in context, `none` (a direct connection) without one. */
export const current: Effect.Effect<Pooler["Service"]> = Effect.map(
  Effect.serviceOption(Pooler),
  Option.getOrElse(() => ({ mode: "none" as Mode, direct: Option.none() }))
)

/** Where a session-bound connection goes, and what is between it and PostgreSQL. */
export interface SessionTarget {
  readonly config: PgClient.PgClientConfig
  /** `none` for the direct URL; the main URL's mode otherwise. */
  readonly mode: Mode
}

/**
 * Connection settings for a session-bound feature (a session advisory lock,
 * `LISTEN`): the direct URL's when given, else the main client's unless it
 * goes through a transaction-mode pooler (then none: the feature is left out).
 */
export const sessionTarget = (main: PgClient.PgClientConfig): Effect.Effect<Option.Option<SessionTarget>> =>
  Effect.map(current, (pooler): Option.Option<SessionTarget> =>
    Option.isSome(pooler.direct)
      ? Option.some({
        // The direct URL alone says where to connect: no host, port or credentials of the main one.
        config: {
          ...main,
          url: pooler.direct.value,
          host: undefined,
          port: undefined,
          path: undefined,
          database: undefined,
          username: undefined,
          password: undefined,
          prepare: undefined
        },
        mode: "none"
      })
      : pooler.mode === "transaction"
      ? Option.none()
      : Option.some({ config: main, mode: pooler.mode }))

/**
 * Startup parameters (such as `statement_timeout`) for a client on `mode`:
 * kept on a direct connection, dropped through a pooler, which refuses
 * parameters it does not track (PgBouncer: "unsupported startup parameter").
 * Statements there are bounded by the caller's own timeouts, which cancel the
 * query (PgBouncer forwards the cancel to the backend running it).
 */
export const startupParameters = (
  mode: Mode,
  base: Readonly<Record<string, string>> | undefined,
  extra: Readonly<Record<string, string>>
): Readonly<Record<string, string>> | undefined => (mode === "none" ? { ...base, ...extra } : base)
