import { assert, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Consumer, MemoryQueueStore, QueueStore, Task, TaskClient, Testing } from "leasehold"
import { sendWelcomeEmail } from "./tasks.ts"

// The worker's task with a handler that records instead of mailing.
const delivered: Array<string> = []
const welcomeEmail = Task.implement(sendWelcomeEmail, (email) =>
  email.to.endsWith("@invalid")
    ? Task.unrecoverable(`cannot deliver to ${email.to}`)
    : Effect.sync(() => delivered.push(email.to)))

// A consumer and a sender on the memory store: no database; leases and delays run on the TestClock.
const TestLayer = Layer.merge(Consumer.layer(Task.dispatcher(welcomeEmail)), TaskClient.layer).pipe(
  Layer.provideMerge(MemoryQueueStore.layer())
)

it.effect("a welcome email is delivered; an undeliverable one is dead-lettered", () =>
  Effect.gen(function*() {
    yield* TaskClient.send(sendWelcomeEmail, { to: "ada@example.com", name: "Ada" }, { delay: "10s" })
    yield* TaskClient.send(sendWelcomeEmail, { to: "bob@invalid", name: "Bob" })
    yield* Testing.awaitIdle({ queues: ["emails"] }) // moves the TestClock past the delay, runs both
    assert.deepStrictEqual(delivered, ["ada@example.com"])
    const store = yield* QueueStore.QueueStore
    const dead = yield* store.messages("emails", { state: "dead" })
    assert.deepStrictEqual(dead.map((message) => message.deadReason), ["unrecoverable: cannot deliver to bob@invalid"])
  }).pipe(Effect.provide(TestLayer)))
