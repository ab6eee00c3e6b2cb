/** Stable small hashes, for advisory-lock keys and name suffixes. */

/** FNV-1a of `text`, as a positive 31-bit integer (reads the same as a PostgreSQL oid or int4). */
export const hash31 = (text: string): number => {
  let h = 0x811c9dc5
  for (const ch of text) {
    h ^= ch.codePointAt(0)!
    h = Math.imul(h, 0x01000193)
  }
  return (h >>> 0) & 0x7fffffff
}
