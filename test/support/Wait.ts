/**
 * Waiting on conditions in real-time tests: poll with a generous bound, never a
 * sleep that merely hopes. The bound is either a number (ms) or options.
 */
import { Effect, Option } from "effect"

/** How long to wait and how often to look; `describe` adds the last state seen to the failure. */
export type WaitOptions = number | {
  readonly timeoutMs?: number | undefined
  readonly intervalMs?: number | undefined
  readonly describe?: (() => string) | undefined
}

const resolve = (options: WaitOptions | undefined) =>
  typeof options === "number" ? { timeoutMs: options, intervalMs: 50 } : {
    timeoutMs: options?.timeoutMs ?? 15_000,
    intervalMs: options?.intervalMs ?? 50,
    describe: options?.describe
  }

const timedOut = (what: string, timeoutMs: number, describe?: () => string) =>
  new Error(`timed out after ${timeoutMs} ms waiting for ${what}${describe ? `: ${describe()}` : ""}`)

/** Poll `check` until it yields a value, or die naming `what`. */
export const waitFor = <A, E, R>(what: string, check: Effect.Effect<Option.Option<A>, E, R>, options?: WaitOptions) =>
  Effect.gen(function*() {
    const { timeoutMs, intervalMs, describe } = { describe: undefined, ...resolve(options) }
    const deadline = Date.now() + timeoutMs
    while (true) {
      const value = yield* check
      if (Option.isSome(value)) return value.value
      if (Date.now() > deadline) return yield* Effect.die(timedOut(what, timeoutMs, describe))
      yield* Effect.sleep(intervalMs)
    }
  })

/** The same for plain promises: poll `check` until it returns something other than `undefined`. */
export const waitForAsync = async <A>(
  what: string,
  check: () => Promise<A | undefined> | A | undefined,
  options?: WaitOptions
): Promise<A> => {
  const { timeoutMs, intervalMs, describe } = { describe: undefined, ...resolve(options) }
  const deadline = Date.now() + timeoutMs
  while (true) {
    const value = await check()
    if (value !== undefined) return value
    if (Date.now() > deadline) throw timedOut(what, timeoutMs, describe)
    await new Promise((r) => setTimeout(r, intervalMs))
  }
}
