/**
 * `leasehold serve`: the admin API and the dashboard against LEASEHOLD_DATABASE_URL, until Ctrl-C.
 */
import { Console, Context, Effect, Layer, Option } from "effect"
import * as Command from "effect/cli/Command"
import * as Flag from "effect/cli/Flag"
import * as QueueConfig from "../QueueConfig.ts"
import { intFlag } from "./args.ts"
import { connect, endOnInterrupt, print } from "./connect.ts"

/** Port `leasehold serve` listens on when neither --port nor LEASEHOLD_HTTP_PORT says. */
const defaultServePort = 9464
/** `leasehold serve [--port N] [--host H] [--base-path /P]`. */
export const serve = Command.make("serve", {
  port: intFlag("port", `Port to listen on (default LEASEHOLD_HTTP_PORT, else ${defaultServePort}; 0 picks a free one)`, 0, 65_535),
  host: Flag.String("host").pipe(
    Flag.withMetavar("HOST"),
    Flag.withDescription("Interface to bind (default LEASEHOLD_HTTP_HOST, else 127.0.0.1: this machine only)"),
    Flag.optional
  ),
  basePath: Flag.String("base-path").pipe(
    Flag.withMetavar("PATH"),
    Flag.withDescription("The path a reverse proxy serves the dashboard under, e.g. /leasehold (default LEASEHOLD_HTTP_BASE_PATH; the root answers too)"),
    Flag.optional
  )
}, (input) =>
  Effect.scoped(Effect.gen(function*() {
    const fromEnv = yield* QueueConfig.httpFromEnv
    const port = Option.getOrElse(input.port, () => Option.match(fromEnv, { onNone: () => defaultServePort, onSome: (a) => a.port }))
    const hostFromEnv = yield* QueueConfig.httpHostFromEnv
    const host = Option.getOrElse(input.host, () => Option.getOrElse(hostFromEnv, () => QueueConfig.defaultHttpHost))
    // Loaded here, not at the top: the other commands start without the HTTP stack.
    const Http = yield* Effect.promise(() => import("../Http.ts"))
    // A few connections: the overview asks eight routes at once every 2 s (and one per queue with flow limits).
    const { context } = yield* connect({ migrate: false, maxConnections: 4 })
    const served = yield* Layer.build(Http.layerAdminServer({ port, host, basePath: Option.getOrUndefined(input.basePath) }).pipe(Layer.provide(Layer.succeedContext(context))))
    const url = Context.get(served, Http.Listening).url
    const token = yield* QueueConfig.adminTokenFromEnv
    yield* print(`leasehold: dashboard at ${url}/ , API reference at ${url}/docs (Ctrl-C to stop)`)
    if (Option.isNone(token)) {
      const reads = Http.servesThisMachineOnly(host) ? "" : " (and so do the reading routes: this server is reachable from other machines)"
      yield* Console.error(`leasehold: ${QueueConfig.adminVariables.token} is not set: pause, resume, cancel, redrive and purge answer 403${reads}`)
    }
    // Ctrl-C ends the server normally (exit 0).
    yield* endOnInterrupt
    return yield* Effect.never
  }))).pipe(
    Command.withDescription(
      "Serve the admin API and the dashboard against LEASEHOLD_DATABASE_URL; with LEASEHOLD_ADMIN_TOKEN set, every /api route needs Authorization: Bearer <it> (see docs/admin.md)"
    ),
    Command.withExamples([
      { command: "LEASEHOLD_ADMIN_TOKEN=$(openssl rand -hex 24) leasehold serve --port 8080", description: "Dashboard on http://127.0.0.1:8080/" }
    ])
  )
