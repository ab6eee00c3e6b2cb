/**
 * Task definitions shared by producers and workers (see README).
 */
import { Effect, Schema } from "effect"
import { Task } from "leasehold"

/** Send a welcome email; retried with backoff when the mail server fails. */
export const sendWelcomeEmail = Task.make({
  name: "email.welcome",
  queue: "emails",
  payload: Schema.Struct({ to: Schema.String, name: Schema.String }),
  retry: { base: "5s", max: "1h" },
  maxAttempts: 10,
  maxRuntime: "2m",
  handler: (email, context) =>
    email.to.endsWith("@invalid")
      ? Task.unrecoverable(`cannot deliver to ${email.to}`) // straight to dead letters
      : Effect.logInfo(`welcoming ${email.name} <${email.to}>, attempt ${context.attempt}`)
})
