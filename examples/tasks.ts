/**
 * Task declarations shared by producers and workers (see README): each a name, a queue, a payload
 * schema and policies, without a handler. A producer imports this module only, never the worker's
 * handlers or their services; the worker gives each declaration its handler (examples/worker.ts).
 */
import { Schema } from "effect"
import { Task } from "leasehold"

/** Send a welcome email; retried with backoff when the mail server fails. */
export const sendWelcomeEmail = Task.define({
  name: "email.welcome",
  queue: "emails",
  payload: Schema.Struct({ to: Schema.String, name: Schema.String }),
  retry: { base: "5s", max: "1h" },   // jittered exponential backoff
  maxAttempts: 10,                    // then dead letters
  maxRuntime: "2m"                    // a hung handler is interrupted and retried
})
