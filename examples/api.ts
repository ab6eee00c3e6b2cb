/**
 * An HTTP API that sends a task (see docs/tasks.md): `POST /users` enqueues the welcome email.
 * `LEASEHOLD_DATABASE_URL=... PORT=3000 node --conditions=leasehold-source examples/api.ts`.
 *
 * The layer order is the point: the server is provided *with* the store, so the store's layer
 * (which creates or migrates leasehold's tables) is built before the server listens, and a
 * request that arrives at start waits for nothing. test/ApiWiring.test.ts holds the migration
 * back and checks that the port does not accept connections until it is done.
 */
import { createServer } from "node:http"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Config, Effect, Layer, Schema } from "effect"
import { HttpRouter } from "effect/http"
import { HttpApi, HttpApiBuilder, HttpApiEndpoint, HttpApiGroup } from "effect/http-api"
import { PgQueueStore, QueueConfig, type Task, TaskClient } from "leasehold"
import { sendWelcomeEmail } from "./tasks.ts"

class SignUpFailed extends Schema.TaggedError<SignUpFailed>()("SignUpFailed", { reason: Schema.String }) {}

const Api = HttpApi.make("app").add(
  HttpApiGroup.make("users").add(
    HttpApiEndpoint.post("signUp", "/users", {
      payload: Schema.Struct({ name: Schema.String, email: Schema.String }),
      success: Schema.Struct({ messageId: Schema.String }),
      error: SignUpFailed
    })
  )
)

const UsersLive = HttpApiBuilder.group(Api, "users", (handlers) =>
  handlers.handle("signUp", ({ payload }) =>
    TaskClient.send(sendWelcomeEmail, { to: payload.email, name: payload.name }, { dedupKey: `welcome:${payload.email}` }).pipe(
      Effect.map((sent) => ({ messageId: sent.id })),
      Effect.mapError((error: Task.SendError) => new SignUpFailed({ reason: `${error._tag}: ${error.message}` }))
    )))

// TaskClient on the store on one Pg client; the store migrates LEASEHOLD_SCHEMA when built.
const SenderLayer = TaskClient.layer.pipe(
  Layer.provideMerge(PgQueueStore.layer()),
  Layer.provideMerge(QueueConfig.pgLayerFromEnv())
)

const ServerLayer = HttpRouter.serve(HttpApiBuilder.layer(Api).pipe(Layer.provide(UsersLive))).pipe(
  Layer.provide(NodeHttpServer.layerConfig(createServer, { port: Config.Port("PORT").pipe(Config.withDefault(3000)) })),
  // Provided last, so built first: the tables are ready before the server above listens.
  Layer.provide(SenderLayer)
)

Layer.launch(ServerLayer).pipe(NodeRuntime.runMain)
