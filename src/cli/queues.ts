/**
 * The queue commands: `stats` (read-only, `--watch` refreshes until Ctrl-C) and
 * `queues list | pause | resume` (pause and resume write, and may migrate).
 */
import { Console, Effect } from "effect"
import * as Argument from "effect/cli/Argument"
import * as Command from "effect/cli/Command"
import * as Flag from "effect/cli/Flag"
import type { QueueStats } from "../Message.ts"
import type { QueueStore } from "../QueueStore.ts"
import * as Validate from "../internal/validate.ts"
import { jsonFlag, queueArgument } from "./args.ts"
import { connect, endOnInterrupt, print } from "./connect.ts"
import { describe, UnknownQueues } from "./errors.ts"
import * as Out from "./output.ts"

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

/** `leasehold stats [queue...]`: counts of queues, once or every second. */
export const stats = Command.make("stats", {
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
    yield* endOnInterrupt
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

/** The `queues` command group. */
export const queues = Command.make("queues").pipe(
  Command.withDescription("List queues, pause or resume one"),
  Command.withSubcommands([queuesList, pause, resume])
)
