/**
 * The flow-control commands: `limits show | set | clear | weight` and `flow` (docs/flow-control.md).
 * `show` and `flow` only read; `set`, `clear` and `weight` write (with source `operator`: a
 * worker's declaration in code never overwrites them until they are cleared) and may migrate.
 * Every value is checked by the rules of `FlowControl` before anything connects: a bad one is
 * refused naming the rule (exit 2), nothing written.
 */
import { Effect, Option } from "effect"
import * as Argument from "effect/cli/Argument"
import * as CliError from "effect/cli/CliError"
import * as Command from "effect/cli/Command"
import * as Flag from "effect/cli/Flag"
import * as FlowControl from "../FlowControl.ts"
import type { FlowLimits, Rate } from "../FlowControl.ts"
import { jsonFlag, queueArgument, refuse, wholeNumber } from "./args.ts"
import { connect, print } from "./connect.ts"
import * as Out from "./flowOutput.ts"

/** A refusal of the CLI (exit 2, with the usage) from a `FlowControl` rule. */
const refusedBy = (e: { readonly message: string }) => new CliError.ValidationError({ message: e.message })

/** An optional count flag, bounded as `FlowControl.bounds` says. */
const countFlag = (name: string, description: string, max: number) =>
  Flag.String(name).pipe(Flag.withMetavar("N"), Flag.withDescription(description), Flag.mapEffect(wholeNumber(name, 1, max)), Flag.optional)

/** An optional rate flag: `COUNT/PERIOD` (`100/1m`, `5/1s`, `10/250ms`). */
const rateFlag = (name: string, description: string) =>
  Flag.String(name).pipe(
    Flag.withMetavar("COUNT/PERIOD"),
    Flag.withDescription(description),
    Flag.mapEffect((text) => Effect.mapError(FlowControl.parseRate(text), (e) => refusedBy({ message: `--${name}: ${e.message}` }))),
    Flag.optional
  )

const taskFlag = (description: string) =>
  Flag.String("task").pipe(Flag.withMetavar("TASK"), Flag.withDescription(description), Flag.optional)

/** The limits the flags of `limits set` name (absent flags are no limit). */
const limitsOf = (input: {
  readonly concurrency: Option.Option<number>
  readonly rate: Option.Option<Rate>
  readonly keyConcurrency: Option.Option<number>
  readonly keyRate: Option.Option<Rate>
  readonly fifo: boolean
  readonly fair: boolean
}): FlowLimits => ({
  ...Option.match(input.concurrency, { onNone: () => ({}), onSome: (concurrency) => ({ concurrency }) }),
  ...Option.match(input.rate, { onNone: () => ({}), onSome: (rate) => ({ rate }) }),
  ...Option.match(input.keyConcurrency, { onNone: () => ({}), onSome: (keyConcurrency) => ({ keyConcurrency }) }),
  ...Option.match(input.keyRate, { onNone: () => ({}), onSome: (keyRate) => ({ keyRate }) }),
  ...(input.fifo ? { fifo: true } : {}),
  ...(input.fair ? { fair: true } : {})
})

const show = Command.make("show", {
  queue: Argument.String("queue").pipe(Argument.withDescription("Only this queue's limits (default: every queue's)"), Argument.optional),
  json: jsonFlag
}, (input) =>
  Effect.scoped(Effect.gen(function*() {
    const { store } = yield* connect({ migrate: false })
    const rows = yield* store.limits(Option.getOrUndefined(input.queue))
    yield* print(input.json ? Out.json(rows) : Out.limitsTable(rows))
  }))).pipe(
    Command.withDescription("The stored flow limits: per queue and per task, who wrote them (code or operator) and when"),
    Command.withExamples([{ command: "leasehold limits show emails --json", description: "For scripts" }])
  )

const set = Command.make("set", {
  queue: queueArgument,
  task: taskFlag("The limits of one task of the queue (only --concurrency and --rate) instead of the queue's own"),
  concurrency: countFlag("concurrency", "At most N in flight at once, all workers together", FlowControl.bounds.concurrency),
  rate: rateFlag("rate", "At most COUNT starts per PERIOD (a sliding window), all workers together: 100/1m, 5/1s, 10/250ms"),
  keyConcurrency: countFlag("key-concurrency", "At most N in flight at once per key (the key given at send)", FlowControl.bounds.keyConcurrency),
  keyRate: rateFlag("key-rate", "At most COUNT starts per PERIOD per key: 5/1s"),
  fifo: Flag.Boolean("fifo").pipe(
    Flag.withDescription("One at a time per key, in send order (a failing head blocks its key until it succeeds or is dead-lettered)"),
    Flag.withDefault(false)
  ),
  fair: Flag.Boolean("fair").pipe(Flag.withDescription("Claim round-robin across keys (weighted: limits weight)"), Flag.withDefault(false))
}, (input) =>
  Effect.scoped(Effect.gen(function*() {
    const { store } = yield* connect({ migrate: true })
    const task = Option.getOrUndefined(input.task)
    yield* store.setLimits({ queue: input.queue, task }, limitsOf(input), { source: "operator" })
    const stored = (yield* store.limits(input.queue)).find((row) => row.task === (task ?? null))
    yield* print(Out.json(stored ?? null))
  }))).pipe(
    Command.validate((input) => {
      const limits = limitsOf(input)
      if (FlowControl.isEmpty(limits)) {
        return refuse("limits set needs at least one limit (--concurrency, --rate, --key-concurrency, --key-rate, --fifo, --fair); to remove limits: limits clear")
      }
      return Effect.asVoid(Effect.mapError(FlowControl.validateLimits(limits, { queue: input.queue, task: Option.getOrUndefined(input.task) }), refusedBy))
    }),
    Command.withDescription(
      "Write the flow limits of a queue (or of one task): exactly the limits named, replacing what was stored; as an operator's, which a worker's declaration in code does not overwrite until they are cleared. Prints them as stored"
    ),
    Command.withExamples([
      { command: "leasehold limits set emails --concurrency 20 --key-concurrency 2", description: "20 at once, 2 per key" },
      { command: "leasehold limits set emails --task send --rate 100/1m", description: "100 starts a minute of one task" },
      { command: "leasehold limits set ledger --fifo --fair", description: "One at a time per key, in send order, keys in turn" }
    ])
  )

const clear = Command.make("clear", {
  queue: queueArgument,
  task: taskFlag("Clear one task's limits instead of the queue's own")
}, (input) =>
  Effect.scoped(Effect.gen(function*() {
    const { store } = yield* connect({ migrate: true })
    const task = Option.getOrUndefined(input.task)
    yield* store.setLimits({ queue: input.queue, task }, null, { source: "operator" })
    yield* print(Out.json({ cleared: { queue: input.queue, task: task ?? null } }))
  }))).pipe(
    Command.withDescription("Remove the limits of a queue (or of one task): a worker's declaration in code applies again when it next starts")
  )

const weight = Command.make("weight", {
  queue: queueArgument,
  key: Argument.String("key").pipe(
    Argument.withDescription("The key (as given at send)"),
    Argument.mapEffect((text) => Effect.mapError(FlowControl.validateKey(text), refusedBy))
  ),
  weight: Argument.String("weight").pipe(
    Argument.withDescription(`Turns per round in fair claiming, 1 to ${FlowControl.bounds.maxWeight} (default 1)`),
    Argument.mapEffect((text) =>
      /^\s*\d{1,4}\s*$/.test(text)
        ? Effect.mapError(FlowControl.validateWeight(Number(text)), refusedBy)
        : refuse(`weight ${JSON.stringify(text)} is refused (rule: an integer from 1 to ${FlowControl.bounds.maxWeight})`)
    )
  )
}, (input) =>
  Effect.scoped(Effect.gen(function*() {
    const { store } = yield* connect({ migrate: true })
    yield* store.setKeyWeight(input.queue, input.key, input.weight)
    yield* print(Out.json({ queue: input.queue, key: input.key, weight: input.weight }))
  }))).pipe(
    Command.withDescription("Set a key's weight in fair claiming: a key of weight 2 gets two turns for every one of weight 1 (messages sent from now on)")
  )

/** The `limits` command group. */
export const limits = Command.make("limits").pipe(
  Command.withDescription("Show, set or clear flow limits (concurrency, rates, per key, FIFO, fair) and key weights"),
  Command.withSubcommands([show, set, clear, weight])
)

/** `leasehold flow <queue>`: what holds a queue back now. */
export const flow = Command.make("flow", { queue: queueArgument, json: jsonFlag }, (input) =>
  Effect.scoped(Effect.gen(function*() {
    const { store } = yield* connect({ migrate: false })
    const status = yield* store.flowStatus(input.queue)
    yield* print(input.json ? Out.json(status) : Out.flowReport(status, Date.now()))
  }))).pipe(
    Command.withDescription(
      "What holds a queue back now: its limits, messages in flight, keys at their limit, FIFO keys blocked by a waiting head, full rate windows and when they free"
    ),
    Command.withExamples([{ command: "leasehold flow emails --json", description: "For scripts: the store's FlowStatus" }])
  )
