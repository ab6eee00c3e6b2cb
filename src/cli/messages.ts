/**
 * The message commands: `send` one, read one (`get`, `attempts`), list a queue's (`messages`),
 * `cancel` some. Only `send` and `cancel` write (and may migrate).
 */
import { Effect, Option } from "effect"
import * as Argument from "effect/cli/Argument"
import * as CliError from "effect/cli/CliError"
import * as Command from "effect/cli/Command"
import * as Flag from "effect/cli/Flag"
import type { MessageId } from "../Message.ts"
import * as QueueConfig from "../QueueConfig.ts"
import * as Validate from "../internal/validate.ts"
import { intFlag, jsonFlag, limitFlag, messageIdArgument, messageIdPattern, refuse } from "./args.ts"
import { connect, print } from "./connect.ts"
import { UnknownIds } from "./errors.ts"
import * as Out from "./output.ts"

/** `leasehold send <queue> <task> <json>`: one message; prints its id as JSON. */
export const send = Command.make("send", {
  queue: Argument.String("queue").pipe(Argument.withDescription("The queue to send to")),
  task: Argument.String("task").pipe(Argument.withDescription("The task name its worker knows")),
  payload: Argument.String("json").pipe(
    Argument.withDescription("The payload, as JSON: '{\"to\":\"ada@example.com\"}'"),
    Argument.mapEffect((text) =>
      Effect.try({ try: () => JSON.parse(text) as unknown, catch: (e) => (e as Error).message }).pipe(
        Effect.catch((reason) => refuse(`payload is not valid JSON: ${reason}`))
      )
    )
  ),
  delay: Flag.String("delay").pipe(
    Flag.withMetavar("DURATION"),
    Flag.withDescription("Hide it until then: 500ms, 30s, 2m, 1h, 7d or \"30 seconds\""),
    Flag.mapEffect((text) => Effect.mapError(QueueConfig.parseDuration("--delay", text), (e) => new CliError.ValidationError({ message: e.message }))),
    Flag.optional
  ),
  priority: intFlag("priority", "Lower runs first (default 0)", -2_147_483_647, 2_147_483_647),
  dedup: Flag.String("dedup").pipe(
    Flag.withMetavar("KEY"),
    Flag.withDescription("Send nothing if a live message of the queue has this key; print its id instead"),
    Flag.optional
  ),
  key: Flag.String("key").pipe(
    Flag.withMetavar("KEY"),
    Flag.withDescription("The flow key (a tenant, an account): per-key limits, fair claiming and FIFO order go by it"),
    Flag.optional
  ),
  maxAttempts: intFlag(
    "max-attempts",
    `Attempts before it is dead-lettered (at most ${Validate.MAX_ATTEMPTS}). Default 25, the store's: this command does not know the task's maxAttempts, so pass it here`,
    1,
    Validate.MAX_ATTEMPTS
  )
}, (input) =>
  Effect.scoped(Effect.gen(function*() {
    const { store } = yield* connect({ migrate: true })
    const [result] = yield* store.send(input.queue, [{
      task: input.task,
      payload: input.payload,
      delay: Option.getOrUndefined(input.delay),
      priority: Option.getOrUndefined(input.priority),
      dedupKey: Option.getOrUndefined(input.dedup),
      key: Option.getOrUndefined(input.key),
      maxAttempts: Option.getOrUndefined(input.maxAttempts)
    }])
    yield* print(Out.json(result))
  }))).pipe(
    Command.withDescription("Send one message; prints its id as JSON ({\"id\", \"deduplicated\"})"),
    Command.withExamples([
      { command: "leasehold send default send-email '{\"to\":\"ada@example.com\"}' --delay 10s", description: "Send in ten seconds" }
    ])
  )


/** `leasehold attempts <message-id>`: the attempt history of a message. */
export const attempts = Command.make("attempts", {
  id: messageIdArgument("attempts"),
  json: jsonFlag
}, (input) =>
  Effect.scoped(Effect.gen(function*() {
    const { store } = yield* connect({ migrate: false })
    const history = yield* store.attempts(input.id)
    // No attempts: a message not yet claimed, or no such message (attempts outlive their message, so only now look).
    if (history.length === 0 && Option.isNone(yield* store.get(input.id))) {
      return yield* Effect.fail(new UnknownIds({ what: "no message and no recorded attempts with id", ids: [input.id] }))
    }
    yield* print(input.json ? Out.json(history) : Out.attemptsTable(history))
  }))).pipe(Command.withDescription("The attempt history of a message, oldest first"))

/** `leasehold get <message-id>`: one message, its fields and history. */
export const get = Command.make("get", {
  id: messageIdArgument("get"),
  json: jsonFlag
}, (input) =>
  Effect.scoped(Effect.gen(function*() {
    const { store } = yield* connect({ migrate: false })
    const message = yield* store.get(input.id)
    // Acked messages are deleted, their history kept (for the retention): still known by it.
    const history = yield* store.attempts(input.id)
    if (Option.isNone(message) && history.length === 0) {
      return yield* Effect.fail(new UnknownIds({ what: "no message and no recorded attempts with id", ids: [input.id] }))
    }
    yield* print(
      input.json
        ? Out.json({ id: input.id, message: Option.getOrNull(message), attempts: history })
        : Out.messageDetail(input.id, Option.getOrUndefined(message), history)
    )
  }))).pipe(
    Command.withDescription(
      "One message: its state, fields and attempt history with results; a finished (deleted) message shows its history"
    ),
    Command.withExamples([{ command: "leasehold get 17 --json", description: "For scripts: { id, message (null once finished), attempts }" }])
  )

/** `leasehold messages <queue>`: a page of a queue's messages. */
export const messages = Command.make("messages", {
  queue: Argument.String("queue").pipe(Argument.withDescription("The queue to list")),
  state: Flag.Literals("state", ["ready", "delayed", "in-flight", "dead"]).pipe(
    Flag.withDescription("Only messages in this state"),
    Flag.optional
  ),
  limit: limitFlag,
  after: Flag.String("after").pipe(
    Flag.withMetavar("ID"),
    Flag.withDescription("Only ids after this one: the last id of the previous page"),
    Flag.mapEffect((text) =>
      messageIdPattern.test(text) ? Effect.succeed(text as MessageId) : refuse(`--after: ${JSON.stringify(text)} is not a message id (a number)`)
    ),
    Flag.optional
  ),
  json: jsonFlag
}, (input) =>
  Effect.scoped(Effect.gen(function*() {
    const { store } = yield* connect({ migrate: false })
    const page = yield* store.messages(input.queue, {
      state: Option.getOrUndefined(input.state),
      limit: input.limit,
      // "007" names message 7: the store takes ids as it writes them.
      after: Option.getOrUndefined(Option.map(input.after, (id) => String(BigInt(id)) as MessageId))
    })
    yield* print(input.json ? Out.json(page) : Out.messagesTable(page, input.limit))
  }))).pipe(
    Command.withDescription("A page of a queue's messages (live and dead) in id order, with their state"),
    Command.withExamples([
      { command: "leasehold messages emails --state dead", description: "The dead letters of a queue" },
      { command: "leasehold messages emails --limit 50 --after 1200", description: "The next page after id 1200" }
    ])
  )


/** `leasehold cancel ID...` or `cancel --queue Q [--task T]`. */
export const cancel = Command.make("cancel", {
  ids: Argument.String("message-id").pipe(
    Argument.withDescription("Ids of the messages to cancel"),
    Argument.mapEffect((text) =>
      messageIdPattern.test(text)
        ? Effect.succeed(text as MessageId)
        : refuse(`cancel needs message ids (numbers): ${JSON.stringify(text)} is not one`)
    ),
    Argument.variadic()
  ),
  queue: Flag.String("queue").pipe(
    Flag.withMetavar("QUEUE"),
    Flag.withDescription("Cancel every message of this queue (instead of ids)"),
    Flag.optional
  ),
  task: Flag.String("task").pipe(
    Flag.withMetavar("TASK"),
    Flag.withDescription("With --queue: only the messages of this task"),
    Flag.optional
  ),
  json: jsonFlag
}, (input) =>
  Effect.scoped(Effect.gen(function*() {
    const { store } = yield* connect({ migrate: true })
    const results = Option.isSome(input.queue)
      ? yield* store.cancelWhere({ queue: input.queue.value, task: Option.getOrUndefined(input.task) })
      : yield* store.cancel(input.ids)
    yield* print(input.json ? Out.json(results) : Out.cancelTable(results))
    // Ids that matched no message fail the command, named, after the others were cancelled.
    const seen = new Set(results.map((r) => String(r.id)))
    const missing = [...new Set(input.ids.map((id) => String(BigInt(id))))].filter((id) => !seen.has(id)) as Array<MessageId>
    if (missing.length > 0) return yield* Effect.fail(new UnknownIds({ what: "no message with id", ids: missing }))
  }))).pipe(
    Command.validate((input) =>
      Option.isSome(input.queue)
        ? input.ids.length > 0 ? refuse("cancel takes message ids or --queue, not both") : Effect.void
        : input.ids.length === 0
        ? refuse("say which messages: cancel ID... or cancel --queue Q [--task T]")
        : Option.isSome(input.task)
        ? refuse("--task needs --queue")
        : Effect.void
    ),
    Command.withDescription(
      "Cancel messages: a ready, delayed or dead one is deleted at once; a running one is flagged and its consumer, notified at once, interrupts its handler (at the next lease renewal only if the notification is lost)"
    ),
    Command.withExamples([
      { command: "leasehold cancel 17 18", description: "Two messages" },
      { command: "leasehold cancel --queue emails --task send-newsletter", description: "Every message of one task of a queue" }
    ])
  )
