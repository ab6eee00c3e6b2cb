/**
 * The error wrapper of every store operation: a span per operation, its failures classified.
 *
 * @since 0.1.0
 */
import { Effect, type Tracer } from "effect"
import { classify } from "../QueueError.ts"
import * as Span from "../internal/span.ts"

/**
 * Run one operation: time it in a span, classify its failures. `after` adds attributes
 * known from the result (what a claim returned).
 */
export const op = <A, E>(
  name: string,
  attributes: Record<string, unknown>,
  effect: Effect.Effect<A, E>,
  after?: (span: Tracer.Span, result: A) => void
) =>
  // A lean span (no stack frame): every statement of a kind has the same one, and it is not free.
  after === undefined
    ? effect.pipe(classify(name), Span.within(`leasehold.${name}`, attributes))
    : Span.using(`leasehold.${name}`, { attributes }, (span) =>
      effect.pipe(
        Effect.tap((result) => Effect.sync(() => after(span, result))),
        classify(name)
      ))

/** The type of {@link op}, as the context carries it. */
export type Op = typeof op
