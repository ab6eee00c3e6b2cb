/**
 * `leasehold dead-letters list | redrive | purge`: list is read-only; redrive and purge write
 * (and may migrate, like send).
 */
import { Effect, Option } from "effect"
import * as Command from "effect/cli/Command"
import * as Flag from "effect/cli/Flag"
import type { MessageId } from "../Message.ts"
import type { DeadLetterFilter } from "../QueueStore.ts"
import { jsonFlag, limitFlag, parseIds, refuse } from "./args.ts"
import { connect, print } from "./connect.ts"
import { UnknownIds } from "./errors.ts"
import * as Out from "./output.ts"

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

const filterOf = (input: { readonly queue: Option.Option<string>; readonly ids: Option.Option<ReadonlyArray<MessageId>> }): DeadLetterFilter => ({
  queue: Option.getOrUndefined(input.queue),
  ids: Option.getOrUndefined(input.ids)
})

const list = Command.make("list", {
  queue: queueFilter,
  ids: idsFilter,
  limit: limitFlag,
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
/** The `dead-letters` command group. */
export const deadLetters = Command.make("dead-letters").pipe(
  Command.withDescription("List, redrive or purge dead letters"),
  Command.withSubcommands([list, redrive, purge])
)
