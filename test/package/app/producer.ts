/**
 * The scratch app's producer: typed sends from the installed package. PACKAGE_TEST_SEND picks what
 * to send: `greetings` (5 greets and 1 message for dead letters) or `slow` (one 1.5 s task).
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Config, Effect, Layer } from "effect"
import { PgQueueStore, QueueConfig, Task } from "leasehold"
import { greet, reject, slow } from "./tasks.ts"

const program = Effect.gen(function*() {
  const what = yield* Config.Literals(["greetings", "slow"], "PACKAGE_TEST_SEND")
  if (what === "slow") {
    const sent = yield* Task.send(slow, { ms: 1500 })
    yield* Effect.logInfo(`sent slow ${sent.id}`)
    return
  }
  const greetings = yield* Task.sendMany(greet, [1, 2, 3, 4, 5].map((n) => ({ n, to: `user${n}@example.com` })))
  const dead = yield* Task.send(reject, { reason: "rejected on purpose" })
  yield* Effect.logInfo(`sent ${greetings.length} greetings; dead letter ${dead.id}`)
})

/** Never run: the published types refuse a payload that does not match the task's schema. */
export const typed = () => {
  // @ts-expect-error `n` is a number
  return Task.send(greet, { n: "one", to: "x@example.com" })
}

program.pipe(
  Effect.provide(PgQueueStore.layer().pipe(Layer.provideMerge(QueueConfig.pgLayerFromEnv()))),
  NodeRuntime.runMain
)
