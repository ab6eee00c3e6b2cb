/**
 * Spans for the hot path, and the W3C trace context that carries a trace
 * across the queue.
 *
 * `within` is `Effect.useSpan` plus the span as the parent of what runs
 * inside, in one context update. Unlike `Effect.withSpan` it records no stack
 * frame for the span (nothing captured, nothing to update), which makes it
 * about three times cheaper per call; the span itself (name, attributes,
 * timing, parent, exit) is the same for any tracer.
 */
import { Context, Effect, Tracer } from "effect"

/** Run `effect` in a span named `name` with `attributes`. */
export const within = (name: string, attributes: Record<string, unknown>) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.useSpan(name, { attributes }, (span) => Effect.provideService(effect, Tracer.ParentSpan, span))

/**
 * Run `f(span)` in a span named `name`, the span as the parent of what runs
 * inside: for operations that add attributes once they know them (what a
 * claim returned).
 */
export const using = <A, E, R>(
  name: string,
  options: Tracer.SpanOptionsNoTrace,
  f: (span: Tracer.Span) => Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> => Effect.useSpan(name, options, (span) => Effect.provideService(f(span), Tracer.ParentSpan, span))

/**
 * A handler's span is the child of the span that sent its message when the
 * message is claimed within this time of its send; later, it starts a trace of
 * its own linked to the sender (see `leasehold.handle` in docs/operating.md).
 */
export const PARENT_WITHIN_MS = 60_000

const traceId = /^[0-9a-f]{32}$/
const spanId = /^[0-9a-f]{16}$/
const flags = /^[0-9a-f]{2}$/

/*
 * Why not effect's `HttpTraceContext` (effect/http): its `toHeaders` needs a full `Span` (a claim's
 * sender is an `ExternalSpan`), writes a `b3` header beside `traceparent`, and writes ids as they
 * are, where a message must carry no `traceparent` at all when its ids are not W3C ids; its `w3c`
 * decodes as `fromTraceparent` does but from a `Headers` record. The two functions below are the
 * same W3C version-00 format, checked both ways.
 */

/** The W3C `traceparent` of a span, or undefined when its ids are not W3C ids. */
export const toTraceparent = (span: Tracer.AnySpan): string | undefined => {
  const trace = span.traceId.padStart(32, "0")
  if (!traceId.test(trace) || !spanId.test(span.spanId)) return undefined
  return `00-${trace}-${span.spanId}-${span.sampled ? "01" : "00"}`
}

/** The sender's span from a W3C `traceparent` (version 00), or undefined when it is not one. */
export const fromTraceparent = (header: string): Tracer.ExternalSpan | undefined => {
  const parts = header.split("-")
  if (parts.length !== 4 || parts[0] !== "00") return undefined
  const [, trace, span, flag] = parts as [string, string, string, string]
  if (!traceId.test(trace) || !spanId.test(span) || !flags.test(flag)) return undefined
  if (/^0+$/.test(trace) || /^0+$/.test(span)) return undefined
  return Tracer.externalSpan({ traceId: trace, spanId: span, sampled: (parseInt(flag, 16) & 1) === 1 })
}

/**
 * The `traceparent` to record on messages sent now: the current span's,
 * unless no tracer is installed (Effect's built-in one exports nothing, so its
 * ids would only be noise on every message), propagation is disabled, or
 * there is no span.
 */
export const currentTraceparent: Effect.Effect<string | undefined> = Effect.withFiberSucceed((fiber) => {
  if (fiber.getRef(Tracer.Tracer) === Tracer.nativeTracer || fiber.getRef(Tracer.DisablePropagation)) return undefined
  const span = Context.getOption(fiber.context, Tracer.ParentSpan)
  if (span._tag === "None" || Context.get(span.value.annotations, Tracer.DisablePropagation)) return undefined
  return toTraceparent(span.value)
})

