/**
 * A tracer that keeps every span it makes, for tests that read spans (their names,
 * parents, attributes, the SQL text a statement's span carries).
 */
import { Tracer } from "effect"

/** A tracer keeping every span it makes; `named` filters them by name. */
export const collecting = () => {
  const spans: Array<Tracer.NativeSpan> = []
  const tracer = Tracer.make({
    span(options) {
      const span = new Tracer.NativeSpan(options)
      spans.push(span)
      return span
    }
  })
  return { spans, tracer, named: (name: string) => spans.filter((s) => s.name === name) }
}
