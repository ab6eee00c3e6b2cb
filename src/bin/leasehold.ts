#!/usr/bin/env node
/**
 * The `leasehold` command: operate queues from a shell. Connects with
 * LEASEHOLD_DATABASE_URL (schema LEASEHOLD_SCHEMA, default `leasehold`).
 *
 *   leasehold migrate
 *   leasehold send <queue> <task> <json> [--delay 5s] [--priority N] [--dedup KEY] [--max-attempts N]
 *   leasehold stats [queue...]                       (default: LEASEHOLD_QUEUES or "default")
 *   leasehold attempts <message-id>                  (the attempt history of a message)
 *   leasehold dead-letters list   [--queue Q] [--ids 1,2] [--limit N]
 *   leasehold dead-letters redrive [--queue Q] [--ids 1,2] | --all
 *   leasehold dead-letters purge   [--queue Q] [--ids 1,2] | --all
 */
import { Cause, Context, Effect, Layer, type Scope } from "effect"
import type { MessageId } from "../Message.ts"
import * as Migrations from "../Migrations.ts"
import * as PgQueueStore from "../PgQueueStore.ts"
import * as QueueConfig from "../QueueConfig.ts"
import type { DeadLetterFilter, QueueStoreShape } from "../QueueStore.ts"
import { QueueStore } from "../QueueStore.ts"

const usage = `usage:
  leasehold migrate
  leasehold send <queue> <task> <json> [--delay 5s] [--priority N] [--dedup KEY] [--max-attempts N]
  leasehold stats [queue...]
  leasehold attempts <message-id>
  leasehold dead-letters list [--queue Q] [--ids 1,2] [--limit N]
  leasehold dead-letters redrive (--queue Q | --ids 1,2 | --all)
  leasehold dead-letters purge (--queue Q | --ids 1,2 | --all)
environment: LEASEHOLD_DATABASE_URL (required), LEASEHOLD_SCHEMA (default leasehold)`

class UsageError extends Error {}

/** Split argv into positional words and `--flag value` / `--flag` options. */
const parseArgs = (argv: ReadonlyArray<string>) => {
  const words: Array<string> = []
  const flags = new Map<string, string>()
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!
    if (!arg.startsWith("--")) {
      words.push(arg)
    } else if (arg === "--all") {
      flags.set("all", "true")
    } else {
      const value = argv[i + 1]
      if (value === undefined) throw new UsageError(`${arg} needs a value`)
      flags.set(arg.slice(2), value)
      i++
    }
  }
  return { words, flags }
}

/** Message ids from `--ids 1,2,3`: every one a decimal number, or the command is refused before it connects. */
const parseIds = (text: string): Array<MessageId> => {
  const ids = text.split(",").map((s) => s.trim())
  const bad = ids.find((id) => !/^\d{1,19}$/.test(id))
  if (bad !== undefined) {
    throw new UsageError(`--ids: ${bad === "" ? "an empty id" : JSON.stringify(bad)} is not a message id (ids are numbers, comma-separated: --ids 17,18)`)
  }
  return ids as Array<MessageId>
}

/** A whole number from `--flag N`, checked before connecting. */
const intFlag = (flags: Map<string, string>, name: string): number | undefined => {
  const text = flags.get(name)
  if (text === undefined) return undefined
  if (!/^-?\d{1,9}$/.test(text.trim())) throw new UsageError(`--${name}: ${JSON.stringify(text)} is not a whole number`)
  return Number(text)
}

const filterFrom = (flags: Map<string, string>, requireOne: boolean): DeadLetterFilter => {
  const queue = flags.get("queue")
  const ids = flags.has("ids") ? parseIds(flags.get("ids")!) : undefined
  if (requireOne && queue === undefined && ids === undefined && !flags.has("all")) {
    throw new UsageError("say which dead letters: --queue Q, --ids 1,2 or --all")
  }
  return { queue, ids }
}

const print = (value: unknown) => Effect.sync(() => console.log(typeof value === "string" ? value : JSON.stringify(value, null, 2)))

/** Run a command. Its arguments are checked before `connect`: a usage error needs no database and migrates nothing. */
const command = <E>(argv: ReadonlyArray<string>, connect: Effect.Effect<QueueStoreShape, E, Scope.Scope>) =>
  Effect.gen(function*() {
    const { words, flags } = parseArgs(argv)
    const [verb, ...rest] = words
    if (verb === "migrate") {
      yield* connect // the store migrates when built
      return
    }
    switch (verb) {
      case "send": {
        const [queue, task, json] = rest
        if (queue === undefined || task === undefined || json === undefined) throw new UsageError("send needs <queue> <task> <json>")
        let payload: unknown
        try {
          payload = JSON.parse(json)
        } catch (e) {
          throw new UsageError(`payload is not valid JSON: ${(e as Error).message}`)
        }
        const delay = flags.has("delay") ? yield* QueueConfig.parseDuration("--delay", flags.get("delay")!) : undefined
        const store = yield* connect
        const [result] = yield* store.send(queue, [{
          task,
          payload,
          delay,
          priority: intFlag(flags, "priority"),
          dedupKey: flags.get("dedup"),
          maxAttempts: intFlag(flags, "max-attempts")
        }])
        return yield* print(result)
      }
      case "stats": {
        const queues = rest.length > 0 ? rest : (process.env["LEASEHOLD_QUEUES"] ?? "default").split(",").map((q) => q.trim())
        const store = yield* connect
        return yield* print(yield* Effect.forEach(queues, (q) => store.stats(q)))
      }
      case "attempts": {
        const [id] = rest
        if (id === undefined || !/^\d{1,19}$/.test(id)) throw new UsageError("attempts needs a message id (a number)")
        const store = yield* connect
        return yield* print(yield* store.attempts(id as MessageId))
      }
      case "dead-letters": {
        const [action] = rest
        if (action === "list") {
          const limit = intFlag(flags, "limit") ?? 100
          const filter = filterFrom(flags, false)
          return yield* print(yield* (yield* connect).deadLetters({ ...filter, limit }))
        }
        if (action === "redrive") {
          const filter = filterFrom(flags, true)
          return yield* print({ redriven: yield* (yield* connect).redrive(filter) })
        }
        if (action === "purge") {
          const filter = filterFrom(flags, true)
          return yield* print({ purged: yield* (yield* connect).purge(filter) })
        }
        throw new UsageError(`dead-letters needs list, redrive or purge`)
      }
      default:
        throw new UsageError(verb === undefined ? "no command given" : `unknown command "${verb}"`)
    }
  })

const argv = process.argv.slice(2)
const main = Effect.gen(function*() {
  if (argv.length === 0 || argv[0] === "help" || argv[0] === "--help") return yield* print(usage)
  const schema = yield* QueueConfig.schemaFromEnv
  const layer = PgQueueStore.layer({ schema, leasePool: false }).pipe(
    Layer.provide(QueueConfig.pgLayerFromEnv({ maxConnections: 2, applicationName: "leasehold-cli" }))
  )
  const connect = Effect.map(Layer.build(layer), (context) => Context.get(context, QueueStore))
  yield* Effect.scoped(command(argv, connect))
  if (argv[0] === "migrate") yield* print(`schema ${schema ?? Migrations.defaultSchema} is up to date`)
})

Effect.runPromiseExit(main).then((exit) => {
  if (exit._tag === "Success") return
  const failure = Cause.squash(exit.cause)
  const message = failure instanceof UsageError
    ? `${failure.message}\n\n${usage}`
    : typeof failure === "object" && failure !== null && "message" in failure
    ? `${(failure as { _tag?: string })._tag ?? "Error"}: ${(failure as { message: string }).message}`
    : String(failure)
  console.error(`leasehold: ${message}`)
  process.exitCode = failure instanceof UsageError ? 2 : 1
})
