/**
 * The `leasehold` command on `effect/cli`: commands, typed flags, `--help` on
 * each, `--json` for scripts. Every argument is parsed and checked by the
 * command's flags before its handler runs, so a bad one is refused (exit 2,
 * naming the flag and the rule) before anything connects; unknown flags are
 * refused too. Only `migrate`, `send`, `dead-letters redrive`, `dead-letters purge`,
 * `queues pause|resume`, `cancel`, `schedules trigger` and `schedules remove` may
 * migrate the schema; the read-only commands work with a read-only role, and on
 * a schema not (fully) migrated they fail with
 * `SchemaNotMigrated` (exit 1). Message ids that match nothing fail with
 * `UnknownIds` (exit 1), schedule keys that match nothing with `UnknownSchedule` (exit 1).
 */
import { createRequire } from "node:module"
import { Cause, Console, Context, Data, Effect, Exit, Layer, Option, Runtime } from "effect"
import { Argument, CliConfig, CliError, CliOutput, Command, Flag, GlobalFlag } from "effect/cli"
import { SqlClient } from "effect/sql"
import type { MessageId, QueueStats } from "../Message.ts"
import * as Migrations from "../Migrations.ts"
import * as PgQueueStore from "../PgQueueStore.ts"
import { StoreSettings } from "../StoreSettings.ts"
import * as QueueConfig from "../QueueConfig.ts"
import type { DeadLetterFilter } from "../QueueStore.ts"
import { QueueStore } from "../QueueStore.ts"
import * as Out from "./cliOutput.ts"
import * as Validate from "./validate.ts"

/**
 * The version `leasehold --version` prints: the package's. `../../package.json` is the package root
 * from src/internal/ (running the TypeScript) and from dist/internal/ (the built package) alike.
 */
export const version: string = (() => {
  try {
    return String((createRequire(import.meta.url)("../../package.json") as { version?: unknown }).version ?? "unknown")
  } catch {
    return "unknown"
  }
})()

/** Exit code of an invocation refused before running: a bad flag, argument or command. */
export const usageExitCode = 2

// ---------------------------------------------------------------------------
// Checked flags and arguments: each failure names the flag and the rule.

const refuse = (message: string) => Effect.fail(new CliError.ValidationError({ message }))

/** A whole number from `min` to `max` (the bounds the store enforces, checked here before connecting). */
const wholeNumber = (flag: string, min: number, max: number) => (text: string) => {
  if (!/^\s*-?\d{1,10}\s*$/.test(text)) return refuse(`--${flag}: ${JSON.stringify(text)} is not a whole number`)
  const n = Number(text)
  return n >= min && n <= max ? Effect.succeed(n) : refuse(`--${flag}: ${n} is out of range (a whole number from ${min} to ${max})`)
}

const messageIdPattern = /^\d{1,19}$/

/** `--ids 1,2,3`: every one a message id (a decimal number). */
const parseIds = (text: string) => {
  const ids = text.split(",").map((s) => s.trim())
  const bad = ids.find((id) => !messageIdPattern.test(id))
  return bad === undefined
    ? Effect.succeed(ids as ReadonlyArray<string> as ReadonlyArray<MessageId>)
    : refuse(`--ids: ${bad === "" ? "an empty id" : JSON.stringify(bad)} is not a message id (ids are numbers, comma-separated: --ids 17,18)`)
}

const intFlag = (name: string, description: string, min: number, max: number) =>
  Flag.String(name).pipe(Flag.withMetavar("N"), Flag.withDescription(description), Flag.mapEffect(wholeNumber(name, min, max)), Flag.optional)

const jsonFlag = Flag.Boolean("json").pipe(Flag.withDescription("Print JSON (for scripts) instead of a table"), Flag.withDefault(false))

const queueFilter = Flag.String("queue").pipe(
  Flag.withMetavar("QUEUE"),
  Flag.withDescription("Only the dead letters of this queue"),
  Flag.optional
)

const idsFilter = Flag.String("ids").pipe(
  Flag.withMetavar("ID,ID"),
  Flag.withDescription("Only these message ids, comma-separated: --ids 17,18"),
  Flag.mapEffect(parseIds),
  Flag.optional
)

// ---------------------------------------------------------------------------
// Connecting: after the arguments were checked.

/**
 * A read-only command found LEASEHOLD_SCHEMA without leasehold's tables, or with migrations not run:
 * it says which and how to fix it instead of failing on a missing table (read-only commands never migrate).
 */
export class SchemaNotMigrated extends Data.TaggedError("SchemaNotMigrated")<{
  readonly schema: string
  readonly pending: ReadonlyArray<readonly [id: number, name: string]>
}> {
  override get message(): string {
    const fix = "run `leasehold migrate` (or a command that migrates: send, dead-letters redrive or purge) with a role that may create tables; read-only commands never migrate"
    return this.pending.length === Migrations.known.length
      ? `schema ${this.schema} has no leasehold tables: ${fix}`
      : `schema ${this.schema} is not fully migrated (missing ${this.pending.map(([id, name]) => `${id} ${name}`).join(", ")}): ${fix}`
  }
}

/** Message ids a command was given that match nothing (no such message, or not a dead letter for redrive and purge). */
export class UnknownIds extends Data.TaggedError("UnknownIds")<{
  readonly what: string
  readonly ids: ReadonlyArray<MessageId>
}> {
  override get message(): string {
    return `${this.what}: ${this.ids.join(", ")}`
  }
}

/**
 * The store (and its SQL client and validated schema) from LEASEHOLD_DATABASE_URL and
 * LEASEHOLD_SCHEMA, for the current scope. `migrate` only for the commands that write.
 */
const connect = (options: { readonly migrate: boolean; readonly maxConnections?: number }) =>
  Effect.gen(function*() {
    const schema = yield* QueueConfig.schemaFromEnv
    const layer = PgQueueStore.layer({ schema, leasePool: false, migrate: options.migrate }).pipe(
      Layer.provideMerge(QueueConfig.pgLayerFromEnv({ maxConnections: options.maxConnections ?? 2, applicationName: "leasehold-cli" }))
    )
    const context = yield* Layer.build(layer)
    const sql = Context.get(context, SqlClient.SqlClient)
    const validated = Context.get(context, StoreSettings).schema
    if (!options.migrate) {
      const pending = yield* Effect.provideService(Migrations.pending({ schema: validated }), SqlClient.SqlClient, sql)
      if (pending.length > 0) return yield* Effect.fail(new SchemaNotMigrated({ schema: validated, pending }))
    }
    return { store: Context.get(context, QueueStore), sql, schema: validated, context }
  })

const print = (text: string) => Console.log(text)

// ---------------------------------------------------------------------------
// Commands

const migrate = Command.make("migrate", {}, () =>
  Effect.scoped(Effect.gen(function*() {
    const { schema } = yield* connect({ migrate: true })
    yield* print(`schema ${schema} is up to date`)
  }))).pipe(
    Command.withDescription("Create or upgrade leasehold's tables in LEASEHOLD_SCHEMA (default leasehold); a no-op when up to date")
  )

const send = Command.make("send", {
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
      maxAttempts: Option.getOrUndefined(input.maxAttempts)
    }])
    yield* print(Out.json(result))
  }))).pipe(
    Command.withDescription("Send one message; prints its id as JSON ({\"id\", \"deduplicated\"})"),
    Command.withExamples([
      { command: "leasehold send default send-email '{\"to\":\"ada@example.com\"}' --delay 10s", description: "Send in ten seconds" }
    ])
  )

/** Queues `stats` was asked for that the store knows nothing of (no messages, no history, no pause). */
export class UnknownQueues extends Data.TaggedError("UnknownQueues")<{
  readonly queues: ReadonlyArray<string>
}> {
  override get message(): string {
    return `no queue named ${this.queues.join(", ")}: no messages, no attempt history and no pause row (see \`leasehold queues list\`)`
  }
}

/**
 * Fail with {@link UnknownQueues} naming each of `named` that the store does not list. Names
 * are checked first, so a name that breaks the rule is `InvalidInput`, never "unknown".
 */
const requireKnownQueues = (store: QueueStore["Service"], named: ReadonlyArray<string>) =>
  Effect.forEach(named, (q) => Validate.name("queue", q), { discard: true }).pipe(
    Effect.andThen(store.queues()),
    Effect.flatMap((known) => {
      const names = new Set(known.map((q) => q.queue))
      const missing = [...new Set(named)].filter((q) => !names.has(q))
      return missing.length === 0 ? Effect.void : Effect.fail(new UnknownQueues({ queues: missing }))
    })
  )

/** Set while `stats --watch` refreshes or `serve` serves: Ctrl-C then ends the command normally (exit 0). */
let watching = false

const stats = Command.make("stats", {
  queues: Argument.String("queue").pipe(
    Argument.withDescription("Queues to show (default: every queue that has messages)"),
    Argument.variadic()
  ),
  json: jsonFlag,
  watch: Flag.Boolean("watch").pipe(Flag.withDescription("Refresh every second until Ctrl-C"), Flag.withDefault(false))
}, (input) =>
  Effect.scoped(Effect.gen(function*() {
    const { store } = yield* connect({ migrate: false })
    const collect = Effect.gen(function*() {
      const queues = input.queues.length > 0
        ? input.queues
        : yield* queuesWithMessages(store)
      // One statement for all of them (depths answers each distinct queue once; every argument gets its row).
      const counted = yield* store.depths(queues)
      return queues.map((q) => counted.find((row) => row.queue === q)!)
    })
    const show = (rows: ReadonlyArray<QueueStats>) =>
      input.json
        ? print(Out.json(rows, !input.watch))
        : print(input.watch ? `${clearScreen()}${watchHeader()}\n${Out.statsTable(rows)}\n` : Out.statsTable(rows))
    // The first read must work (a bad or unknown queue name or a missing table fails the command);
    // while watching, a failed (or stuck: 10 s) refresh is reported and the next one tried.
    if (input.queues.length > 0) yield* requireKnownQueues(store, input.queues)
    yield* Effect.flatMap(collect, show)
    if (!input.watch) return
    watching = true
    yield* Effect.forever(
      Effect.sleep("1 second").pipe(
        Effect.andThen(Effect.timeout(collect, "10 seconds")),
        Effect.flatMap(show),
        Effect.catch((e) => Console.error(`leasehold: ${describe(e)} (retrying every second)`))
      )
    )
  }))).pipe(
    Command.withDescription("Ready, delayed, in-flight and dead counts and the oldest ready age of queues"),
    Command.withExamples([
      { command: "leasehold stats", description: "Every queue that has messages" },
      { command: "leasehold stats emails reports --watch", description: "Two queues, refreshed every second" },
      { command: "leasehold stats default --json", description: "For scripts" }
    ])
  )

/**
 * Every queue that has messages (ready, in flight, delayed or dead), in name order: the store's
 * own listing (its statements quote the schema, so any valid schema name works, `user` too),
 * without the queues that only have history or a pause row.
 */
const queuesWithMessages = (store: QueueStore["Service"]) =>
  Effect.map(store.queues(), (queues) =>
    queues.filter((q) => q.ready + q.delayed + q.inFlight + q.dead > 0).map((q) => q.queue))

const clearScreen = () => (process.stdout.isTTY ? "\x1b[2J\x1b[H" : "")
const watchHeader = () => `leasehold stats at ${new Date().toISOString()} (every second; Ctrl-C to stop)`

/** The `<message-id>` argument of `command`: a decimal number, refused otherwise before connecting. */
const messageIdArgument = (command: string) =>
  Argument.String("message-id").pipe(
    Argument.withDescription("The id of the message"),
    Argument.mapEffect((text) =>
      messageIdPattern.test(text)
        ? Effect.succeed(text as MessageId)
        : refuse(`${command} needs a message id (a number): ${JSON.stringify(text)} is not one`)
    )
  )

const attempts = Command.make("attempts", {
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

const get = Command.make("get", {
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

const messages = Command.make("messages", {
  queue: Argument.String("queue").pipe(Argument.withDescription("The queue to list")),
  state: Flag.Literals("state", ["ready", "delayed", "in-flight", "dead"]).pipe(
    Flag.withDescription("Only messages in this state"),
    Flag.optional
  ),
  limit: Flag.String("limit").pipe(
    Flag.withMetavar("N"),
    Flag.withDescription("At most this many (default 100, at most 10000)"),
    Flag.mapEffect(wholeNumber("limit", 1, 10_000)),
    Flag.withDefault(100)
  ),
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

const filterOf = (input: { readonly queue: Option.Option<string>; readonly ids: Option.Option<ReadonlyArray<MessageId>> }): DeadLetterFilter => ({
  queue: Option.getOrUndefined(input.queue),
  ids: Option.getOrUndefined(input.ids)
})

const list = Command.make("list", {
  queue: queueFilter,
  ids: idsFilter,
  limit: Flag.String("limit").pipe(
    Flag.withMetavar("N"),
    Flag.withDescription("At most this many (default 100, at most 10000)"),
    Flag.mapEffect(wholeNumber("limit", 1, 10_000)),
    Flag.withDefault(100)
  ),
  json: jsonFlag
}, (input) =>
  Effect.scoped(Effect.gen(function*() {
    const { store } = yield* connect({ migrate: false })
    const dead = yield* store.deadLetters({ ...filterOf(input), limit: input.limit })
    yield* print(input.json ? Out.json(dead) : Out.deadLettersTable(dead))
  }))).pipe(Command.withDescription("Dead letters, oldest death first, with their reason and last error"))

/** redrive and purge act on the dead letters named by --queue, --ids or --all; one of them is required. */
const writingFilter = {
  queue: queueFilter,
  ids: idsFilter,
  all: Flag.Boolean("all").pipe(Flag.withDescription("Every dead letter of every queue"), Flag.withDefault(false))
}

const sayWhich = (input: { readonly queue: Option.Option<string>; readonly ids: Option.Option<ReadonlyArray<MessageId>>; readonly all: boolean }) =>
  Option.isNone(input.queue) && Option.isNone(input.ids) && !input.all
    ? refuse("say which dead letters: --queue Q, --ids 1,2 or --all")
    : Effect.void

/**
 * After redrive or purge with --ids: the ids that matched no dead letter (of --queue, when given) fail the
 * command, named, after the ones that did match were acted on and printed.
 */
const unmatched = (ids: Option.Option<ReadonlyArray<MessageId>>, done: ReadonlyArray<MessageId>) => {
  if (Option.isNone(ids)) return Effect.void
  const seen = new Set(done.map(String))
  const missing = [...new Set(ids.value.map((id) => String(BigInt(id))))].filter((id) => !seen.has(id)) as Array<MessageId>
  return missing.length === 0 ? Effect.void : Effect.fail(new UnknownIds({ what: "no dead letter with id", ids: missing }))
}

const redrive = Command.make("redrive", writingFilter, (input) =>
  Effect.scoped(Effect.gen(function*() {
    const { store } = yield* connect({ migrate: true })
    const redriven = yield* store.redrive({ ...filterOf(input), all: input.all })
    yield* print(Out.json({ redriven }))
    yield* unmatched(input.ids, redriven)
  }))).pipe(
    Command.validate(sayWhich),
    Command.withDescription("Return dead letters to ready with a fresh attempt budget; prints the ids as JSON"),
    Command.withExamples([
      { command: "leasehold dead-letters redrive --ids 17,18", description: "Two messages" },
      { command: "leasehold dead-letters redrive --queue default", description: "Every dead letter of a queue" }
    ])
  )

const purge = Command.make("purge", writingFilter, (input) =>
  Effect.scoped(Effect.gen(function*() {
    const { store } = yield* connect({ migrate: true })
    const purged = yield* store.purge({ ...filterOf(input), all: input.all })
    yield* print(Out.json({ purged }))
    yield* unmatched(input.ids, purged)
  }))).pipe(
    Command.validate(sayWhich),
    Command.withDescription("Delete dead letters for good; prints the ids as JSON")
  )

const queueArgument = Argument.String("queue").pipe(Argument.withDescription("The queue"))

const queuesList = Command.make("list", { json: jsonFlag }, (input) =>
  Effect.scoped(Effect.gen(function*() {
    const { store } = yield* connect({ migrate: false })
    const queues = yield* store.queues()
    yield* print(input.json ? Out.json(queues) : Out.queuesTable(queues))
  }))).pipe(
    Command.withDescription("Every queue with messages, history or a pause: its counts and whether it is paused")
  )

const pause = Command.make("pause", { queue: queueArgument }, (input) =>
  Effect.scoped(Effect.gen(function*() {
    const { store } = yield* connect({ migrate: true })
    yield* store.pause(input.queue)
    yield* print(Out.json({ paused: input.queue }))
  }))).pipe(
    Command.withDescription("Stop every consumer claiming from a queue (sends still accepted; running messages finish)")
  )

const resume = Command.make("resume", { queue: queueArgument }, (input) =>
  Effect.scoped(Effect.gen(function*() {
    const { store } = yield* connect({ migrate: true })
    yield* store.resume(input.queue)
    yield* print(Out.json({ resumed: input.queue }))
  }))).pipe(Command.withDescription("Let consumers claim from a paused queue again; idle ones wake at once"))

const queues = Command.make("queues").pipe(
  Command.withDescription("List queues, pause or resume one"),
  Command.withSubcommands([queuesList, pause, resume])
)

const cancel = Command.make("cancel", {
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

/** Port `leasehold serve` listens on when neither --port nor LEASEHOLD_HTTP_PORT says. */
const defaultServePort = 9464

const serve = Command.make("serve", {
  port: intFlag("port", `Port to listen on (default LEASEHOLD_HTTP_PORT, else ${defaultServePort}; 0 picks a free one)`, 0, 65_535),
  host: Flag.String("host").pipe(
    Flag.withMetavar("HOST"),
    Flag.withDescription("Interface to bind (default LEASEHOLD_HTTP_HOST, else 127.0.0.1: this machine only)"),
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
    // A few connections: the dashboard asks five routes at once every 2 s.
    const { context } = yield* connect({ migrate: false, maxConnections: 4 })
    const served = yield* Layer.build(Http.layerAdminServer({ port, host }).pipe(Layer.provide(Layer.succeedContext(context))))
    const url = Context.get(served, Http.Listening).url
    const token = yield* QueueConfig.adminTokenFromEnv
    yield* print(`leasehold: dashboard at ${url}/ , API reference at ${url}/docs (Ctrl-C to stop)`)
    if (Option.isNone(token)) {
      const reads = Http.servesThisMachineOnly(host) ? "" : " (and so do the reading routes: this server is reachable from other machines)"
      yield* Console.error(`leasehold: ${QueueConfig.adminVariables.token} is not set: pause, resume, cancel, redrive and purge answer 403${reads}`)
    }
    // Ctrl-C ends the server normally (exit 0).
    watching = true
    return yield* Effect.never
  }))).pipe(
    Command.withDescription(
      "Serve the admin API and the dashboard against LEASEHOLD_DATABASE_URL; with LEASEHOLD_ADMIN_TOKEN set, every /api route needs Authorization: Bearer <it> (see docs/admin.md)"
    ),
    Command.withExamples([
      { command: "LEASEHOLD_ADMIN_TOKEN=$(openssl rand -hex 24) leasehold serve --port 8080", description: "Dashboard on http://127.0.0.1:8080/" }
    ])
  )

const deadLetters = Command.make("dead-letters").pipe(
  Command.withDescription("List, redrive or purge dead letters"),
  Command.withSubcommands([list, redrive, purge])
)

// ---------------------------------------------------------------------------
// Schedules: list is read-only; trigger and remove write (and may migrate, like send).

/** A schedule key the command names that no stored schedule has. */
export class UnknownSchedule extends Data.TaggedError("UnknownSchedule")<{
  readonly key: string
}> {
  override get message(): string {
    return `no schedule with key ${JSON.stringify(this.key)} (see \`leasehold schedules list\`)`
  }
}

/** A schedule key argument, checked by the name rule before connecting. */
const scheduleKey = Argument.String("key").pipe(
  Argument.withDescription("The schedule's key (as `leasehold schedules list` shows it)"),
  Argument.mapEffect((text) =>
    Validate.namePattern.test(text)
      ? Effect.succeed(text)
      : refuse(`key ${JSON.stringify(text)} is not a schedule key (rule: ${Validate.nameRule})`)
  )
)

const schedulesList = Command.make("list", { json: jsonFlag }, (input) =>
  Effect.scoped(Effect.gen(function*() {
    const { store } = yield* connect({ migrate: false })
    const rows = yield* store.schedules
    const now = Date.now()
    yield* print(
      input.json
        ? Out.json(rows.map((row) => ({ ...row, declared: Out.declared(row, now) })))
        : Out.schedulesTable(rows, now)
    )
  }))).pipe(
    Command.withDescription(
      `Every stored schedule: its cron, last and next slot, and when a worker last declared it (NOT SEEN after ${Out.scheduleStaleAfter})`
    )
  )

const schedulesTrigger = Command.make("trigger", { key: scheduleKey }, (input) =>
  Effect.scoped(Effect.gen(function*() {
    const { store } = yield* connect({ migrate: true })
    const sent = yield* store.triggerSchedule(input.key)
    if (Option.isNone(sent)) return yield* Effect.fail(new UnknownSchedule({ key: input.key }))
    yield* print(Out.json(sent.value))
  }))).pipe(Command.withDescription("Send a schedule's message now (its slots go on as before); prints its id as JSON"))

const schedulesRemove = Command.make("remove", { key: scheduleKey }, (input) =>
  Effect.scoped(Effect.gen(function*() {
    const { store } = yield* connect({ migrate: true })
    if (!(yield* store.removeSchedule(input.key))) return yield* Effect.fail(new UnknownSchedule({ key: input.key }))
    yield* print(Out.json({ removed: input.key }))
  }))).pipe(
    Command.withDescription("Delete a schedule no worker declares any more (a running worker that still declares it adds it back)")
  )

const schedules = Command.make("schedules").pipe(
  Command.withDescription("List, trigger or remove cron schedules"),
  Command.withSubcommands([schedulesList, schedulesTrigger, schedulesRemove])
)

/** The whole command tree. */
export const leasehold = Command.make("leasehold").pipe(
  Command.withDescription(
    "Operate leasehold queues. Connects with LEASEHOLD_DATABASE_URL (required); tables in LEASEHOLD_SCHEMA (default leasehold)"
  ),
  Command.withSubcommands([migrate, send, stats, get, messages, attempts, deadLetters, queues, cancel, schedules, serve])
)

// ---------------------------------------------------------------------------
// Output of refusals and failures, exit codes

/** `Tag: message` of a failure, as the command prints it (with a hint when the tables are missing). */
const describe = (error: unknown): string => {
  if (typeof error !== "object" || error === null || !("message" in error)) return String(error)
  const { _tag, code, message } = error as { _tag?: string; code?: string; message: string }
  // 42P01 undefined_table, 3F000 invalid_schema_name: the read-only commands do not migrate.
  const hint = code === "42P01" || code === "3F000" ? " (no leasehold tables in LEASEHOLD_SCHEMA: run `leasehold migrate` first)" : ""
  return `${_tag ?? "Error"}: ${message}${hint}`
}

/**
 * Refusals go to stderr, the error first, then the command's help; stdout stays empty, so a script
 * reading it sees nothing but results. Asked-for help goes to stdout.
 */
const presenter: CliOutput.Presenter = {
  present: (event) =>
    Effect.gen(function*() {
      const formatter = CliOutput.defaultFormatter({ colors: event._tag === "InvalidInvocation" ? false : undefined })
      switch (event._tag) {
        case "InvalidInvocation": {
          const messages = event.errors.map((e) => formatter.formatCliError(e))
          yield* Console.error(`leasehold: ${messages.join("\nleasehold: ")}\n\n${formatter.formatHelpDoc(event.helpDoc)}`)
          return
        }
        case "Help":
          return yield* Console.log(formatter.formatHelpDoc(event.helpDoc))
        case "Version":
          return yield* Console.log(formatter.formatVersion(event.name, event.version))
      }
    })
}

const isShowHelp = (u: unknown): u is CliError.ShowHelp => CliError.isCliError(u) && u._tag === "ShowHelp"

/** Run `leasehold` on `args`: refusals exit 2 (already printed with the help), failures print `leasehold: Tag: message` and exit 1. */
export const run = (args: ReadonlyArray<string>) =>
  Command.runWith(leasehold, { version })(args[0] === "help" ? [...args.slice(1), "--help"] : args).pipe(
    Effect.tapCause((cause) => {
      if (Cause.hasInterruptsOnly(cause)) return Effect.void
      const error = Cause.squash(cause)
      return isShowHelp(error) ? Effect.void : Console.error(`leasehold: ${describe(error)}`)
    }),
    Effect.provide(Layer.mergeAll(
      CliOutput.layerPresenter(presenter),
      // --help, --version and --completions; not the interactive wizard, nor --log-level (the command logs nothing).
      CliConfig.layer({ builtIns: [GlobalFlag.Help, GlobalFlag.Version, GlobalFlag.Completions] })
    ))
  )

/** The process exit code of a run: 0, 2 for a refused invocation, 1 for a failure, 0 for Ctrl-C while watching (else 130). */
export const teardown: Runtime.Teardown = (exit, onExit) => {
  if (Exit.isSuccess(exit)) return onExit(0)
  if (Cause.hasInterruptsOnly(exit.cause)) return onExit(watching ? 0 : 130)
  const error = Cause.squash(exit.cause)
  if (isShowHelp(error)) return onExit(error.errors.length > 0 ? usageExitCode : 0)
  return onExit(1)
}
