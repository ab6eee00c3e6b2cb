/** Formatting shared by log lines. */

/** Milliseconds as seconds with one decimal, e.g. `2.5s`. */
export const seconds = (ms: number): string => `${(ms / 1000).toFixed(1)}s`
