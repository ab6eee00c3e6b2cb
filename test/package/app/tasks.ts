/**
 * The scratch app's tasks (test/package/run.ts copies app/ into an app outside the checkout that
 * installs the packed tarball): typed payloads from `effect/Schema`.
 */
import { Effect, Schema } from "effect"
import { Task } from "leasehold"

export const QUEUE = "package_test"

export const greet = Task.make({
  name: "package.greet",
  queue: QUEUE,
  payload: Schema.Struct({ n: Schema.Number, to: Schema.String }),
  handler: (greeting) => Effect.logInfo(`handled greet ${greeting.n} for ${greeting.to}`)
})

export const reject = Task.make({
  name: "package.reject",
  queue: QUEUE,
  payload: Schema.Struct({ reason: Schema.String }),
  handler: (payload) => Effect.andThen(Effect.logInfo("rejecting"), Task.unrecoverable(payload.reason))
})

/** Runs for 1.5 s: the test sends SIGTERM while it runs, and the worker lets it finish. */
export const slow = Task.make({
  name: "package.slow",
  queue: QUEUE,
  payload: Schema.Struct({ ms: Schema.Number }),
  handler: (payload) =>
    Effect.logInfo("slow started").pipe(
      Effect.andThen(Effect.sleep(payload.ms)),
      Effect.andThen(Effect.logInfo("slow done"))
    )
})
