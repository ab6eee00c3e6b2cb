/**
 * The JSON forms the workflow engine stores: a run's or an activity's `Workflow.Result` and a
 * deferred's `Exit`, with values already encoded by their schemas (effect's `Encoded` contract)
 * and defects as effect's `Schema.Defect` writes them.
 *
 * @since 0.1.0
 */
import { Effect, Exit, Schema } from "effect"
import * as Workflow from "effect/workflow/Workflow"

const AnyOrVoid = Schema.Union([Schema.Any, Schema.Void])

const ResultJson = Schema.toCodecJson(Workflow.Result({ success: AnyOrVoid, error: AnyOrVoid }))
const ExitJson = Schema.toCodecJson(Schema.Exit(AnyOrVoid, AnyOrVoid, Schema.Defect()))

/** `undefined` (a void success) as `null`: JSON keeps no `undefined`, and effect's codecs read `null` back. */
const jsonExit = Exit.map((value: unknown) => value ?? null)

/** A result as stored JSON. */
export const encodeResult = (result: Workflow.Result<unknown, unknown>): Effect.Effect<unknown> =>
  Effect.orDie(Schema.encodeEffect(ResultJson)(
    result._tag === "Complete" ? new Workflow.Complete({ exit: jsonExit(result.exit) }) : result
  ))

/** A stored result back as a `Workflow.Result`. */
export const decodeResult = (json: unknown): Effect.Effect<Workflow.Result<unknown, unknown>> =>
  Effect.orDie(Schema.decodeUnknownEffect(ResultJson)(json)) as Effect.Effect<Workflow.Result<unknown, unknown>>

/** An exit as stored JSON. */
export const encodeExit = (exit: Exit.Exit<unknown, unknown>): Effect.Effect<unknown> =>
  Effect.orDie(Schema.encodeEffect(ExitJson)(jsonExit(exit)))

/** A stored exit back as an `Exit`. */
export const decodeExit = (json: unknown): Effect.Effect<Exit.Exit<unknown, unknown>> =>
  Effect.orDie(Schema.decodeUnknownEffect(ExitJson)(json)) as Effect.Effect<Exit.Exit<unknown, unknown>>

/** `Exit.void` as stored JSON: what a fired clock completes its deferred with. */
export const voidExitJson: unknown = Schema.encodeSync(ExitJson)(jsonExit(Exit.void))
