/**
 * The `leasehold` command on `effect/cli`: commands, typed flags, `--help` on
 * each, `--json` for scripts. Every argument is parsed and checked by the
 * command's flags before its handler runs, so a bad one is refused (exit 2,
 * naming the flag and the rule) before anything connects; unknown flags are
 * refused too. Only `migrate`, `send`, `dead-letters redrive`, `dead-letters purge`,
 * `queues pause|resume`, `cancel`, `schedules trigger`, `schedules remove`, `workflows prune` and
 * `limits set|clear|weight` may migrate the schema; the read-only commands work with a read-only role, and on
 * a schema not (fully) migrated they fail with
 * `SchemaNotMigrated` (exit 1). Message ids that match nothing fail with
 * `UnknownIds` (exit 1), schedule keys that match nothing with `UnknownSchedule` (exit 1).
 *
 * The commands are grouped by what they act on: messages.ts (send, get, messages, attempts,
 * cancel), queues.ts (stats, queues), deadLetters.ts, schedules.ts, limits.ts (limits, flow), workflows.ts, serve.ts; they share the
 * checked flags of args.ts, the connection of connect.ts, the failures of errors.ts and the
 * printing of output.ts. No command writes SQL of its own: each asks the store's operations.
 */
import { createRequire } from "node:module"
import { Cause, Console, Effect, Exit, Layer, Runtime } from "effect"
import * as CliConfig from "effect/cli/CliConfig"
import * as CliError from "effect/cli/CliError"
import * as CliOutput from "effect/cli/CliOutput"
import * as Command from "effect/cli/Command"
import * as GlobalFlag from "effect/cli/GlobalFlag"
import { connect, interruptEndsNormally, print } from "./connect.ts"
import { deadLetters } from "./deadLetters.ts"
import { describe } from "./errors.ts"
import { flow, limits } from "./limits.ts"
import { attempts, cancel, get, messages, send } from "./messages.ts"
import { queues, stats } from "./queues.ts"
import { schedules } from "./schedules.ts"
import { serve } from "./serve.ts"
import { workflows } from "./workflows.ts"

export { SchemaNotMigrated, UnknownIds, UnknownQueues, UnknownSchedule } from "./errors.ts"

/**
 * The version `leasehold --version` prints: the package's. `../../package.json` is the package root
 * from src/cli/ (running the TypeScript) and from dist/cli/ (the built package) alike.
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

/** `leasehold migrate`: create or upgrade the tables. */
const migrate = Command.make("migrate", {}, () =>
  Effect.scoped(Effect.gen(function*() {
    const { schema } = yield* connect({ migrate: true })
    yield* print(`schema ${schema} is up to date`)
  }))).pipe(
    Command.withDescription("Create or upgrade leasehold's tables in LEASEHOLD_SCHEMA (default leasehold); a no-op when up to date")
  )

/** The whole command tree. */
export const leasehold = Command.make("leasehold").pipe(
  Command.withDescription(
    "Operate leasehold queues. Connects with LEASEHOLD_DATABASE_URL (required); tables in LEASEHOLD_SCHEMA (default leasehold)"
  ),
  Command.withSubcommands([migrate, send, stats, get, messages, attempts, deadLetters, queues, cancel, schedules, limits, flow, workflows, serve])
)

// ---------------------------------------------------------------------------
// Output of refusals, exit codes

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
  if (Cause.hasInterruptsOnly(exit.cause)) return onExit(interruptEndsNormally() ? 0 : 130)
  const error = Cause.squash(exit.cause)
  if (isShowHelp(error)) return onExit(error.errors.length > 0 ? usageExitCode : 0)
  return onExit(1)
}
