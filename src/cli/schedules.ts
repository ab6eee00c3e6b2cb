/**
 * `leasehold schedules list | trigger | remove`: list is read-only; trigger and remove write
 * (and may migrate, like send).
 */
import { Effect, Option } from "effect"
import * as Argument from "effect/cli/Argument"
import * as Command from "effect/cli/Command"
import * as Validate from "../internal/validate.ts"
import { jsonFlag, refuse } from "./args.ts"
import { connect, print } from "./connect.ts"
import { UnknownSchedule } from "./errors.ts"
import * as Out from "./output.ts"

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

/** The `schedules` command group. */
export const schedules = Command.make("schedules").pipe(
  Command.withDescription("List, trigger or remove cron schedules"),
  Command.withSubcommands([schedulesList, schedulesTrigger, schedulesRemove])
)
