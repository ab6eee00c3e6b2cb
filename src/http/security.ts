/**
 * The HTTP server's access rules that need no database: which names are this
 * machine (loopback), which `Host` headers the admin server answers, which
 * routes are public probes, and the security headers of every response (a
 * Content-Security-Policy admitting only the inline scripts and styles a page
 * carries, by their SHA-256, and never a frame).
 */
import { createHash } from "node:crypto"
import { isIP } from "node:net"

// ---------------------------------------------------------------------------
// Names of this machine

/** What a host name may hold before it is parsed: no `@`, `/` or space (a URL would read those as other parts). */
const hostCharacters = /^[A-Za-z0-9._:-]{1,253}$/

/**
 * `name` (a bind address, or the name of a `Host` header without brackets and port) as a URL
 * writes it: lower case, IPv4 in dotted decimal (`127.1` is `127.0.0.1`), IPv6 bracketed and
 * shortened (`::ffff:127.0.0.1` is `[::ffff:7f00:1]`); undefined when it is no host name.
 */
export const canonicalHost = (name: string): string | undefined => {
  const ipv6 = isIP(name) === 6
  // A colon outside an IPv6 address would be read as a port.
  if (!hostCharacters.test(name) || (!ipv6 && name.includes(":"))) return undefined
  try {
    return new URL(`http://${ipv6 ? `[${name}]` : name}/`).hostname
  } catch {
    return undefined
  }
}

const loopbackV4 = /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/
/** `::ffff:127.x.y.z`, the IPv4 loopback as an IPv6 address, once shortened by {@link canonicalHost}. */
const mappedLoopbackV4 = /^\[::ffff:7f[0-9a-f]{2}:[0-9a-f]{1,4}\]$/

/** Whether `name` names this machine only: `localhost`, `127.0.0.0/8`, `::1`, or `::ffff:127.0.0.0/104`. */
export const isLoopback = (name: string): boolean => {
  const host = canonicalHost(name)
  if (host === undefined) return false
  return host === "localhost" || host === "[::1]" || loopbackV4.test(host) || mappedLoopbackV4.test(host)
}

/** The host name of a `Host` header: without the port, an IPv6 literal without its brackets. */
export const hostOfHeader = (header: string): string => {
  const bracketed = /^\[([^\]]*)\](?::\d+)?$/.exec(header)
  return bracketed ? bracketed[1]! : header.replace(/:\d+$/, "")
}

// ---------------------------------------------------------------------------
// Which requests the admin server answers

/** The routes an orchestrator or a scraper asks: no token, any `Host` (Kubernetes sends the pod's IP). */
export const probePaths: ReadonlySet<string> = new Set(["/healthz", "/readyz", "/metrics"])

/** The path of a request URL (`/api/queues?x=1` is `/api/queues`). */
export const pathOf = (url: string): string => {
  const end = url.search(/[?#]/)
  return end === -1 ? url : url.slice(0, end)
}

/** Which `Host` headers the admin server answers. */
export interface HostRule {
  /** Bound to this machine only: without an allowlist, only loopback names are answered. */
  readonly bindLoopback: boolean
  /** The names answered besides the loopback ones, as {@link canonicalHost} writes them; undefined: no allowlist. */
  readonly allowed: ReadonlyArray<string> | undefined
}

/**
 * Whether a request with this `Host` header is answered. Loopback names always are: a web
 * page elsewhere cannot make a browser send them (DNS rebinding sends the page's own name),
 * and `kubectl port-forward` does. Otherwise the allowlist decides when there is one; without
 * one, a server bound to this machine answers loopback names only and any other server any
 * name. No header at all (HTTP/1.0) is answered: browsers always send one.
 */
export const hostAllowed = (rule: HostRule, header: string | undefined): boolean => {
  if (header === undefined) return true
  const name = hostOfHeader(header)
  if (isLoopback(name)) return true
  if (rule.allowed !== undefined) {
    const host = canonicalHost(name)
    return host !== undefined && rule.allowed.includes(host)
  }
  return !rule.bindLoopback
}

// ---------------------------------------------------------------------------
// Security headers

/** Sent with every response. */
export const commonHeaders: Readonly<Record<string, string>> = {
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY"
}

/** The policy of every response that is not a page: nothing loads, nothing frames it. */
export const strictPolicy = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

const sha256 = (text: string) => `'sha256-${createHash("sha256").update(text, "utf8").digest("base64")}'`

/** The SHA-256 sources of every `<tag>` element's text in `html` (the browser hashes the same text). */
const inlineHashes = (html: string, tag: "script" | "style"): Array<string> => {
  const element = new RegExp(`<${tag}(?:\\s[^>]*)?>([\\s\\S]*?)</${tag}>`, "gi")
  return [...new Set([...html.matchAll(element)].map((match) => sha256(match[1]!)))]
}

/**
 * The policy of an HTML page: only its own inline scripts run (named by hash: a script
 * injected into the page would not), fetches go to this server only, images and fonts come
 * from it or `data:`; no plugin, no frame, no form post. Its styles are its own `<style>`
 * elements (by hash) or, with `inlineStyles`, any inline style (for a page whose script
 * sets styles at run time, as the API reference does: style cannot run code, and with
 * images and fonts kept to this server a style cannot send anything elsewhere).
 */
export const pagePolicy = (html: string, options: { readonly inlineStyles: boolean }): string => {
  const scripts = inlineHashes(html, "script")
  const styles = options.inlineStyles ? ["'unsafe-inline'"] : inlineHashes(html, "style")
  return [
    "default-src 'none'",
    `script-src ${scripts.length === 0 ? "'none'" : scripts.join(" ")}`,
    `style-src ${styles.length === 0 ? "'none'" : styles.join(" ")}`,
    "img-src 'self' data:",
    "font-src 'self' data:",
    "connect-src 'self'",
    "frame-ancestors 'none'",
    "base-uri 'none'",
    "form-action 'none'"
  ].join("; ")
}

// ---------------------------------------------------------------------------
// A base path (a reverse proxy serving the admin server under a path of its own)

/**
 * Where a request URL goes on a server under `base` (`/leasehold`): under it, the URL without
 * it (`/leasehold/api/queues` is `/api/queues`); `base` itself, `"redirect"` (to `base/`, where
 * the dashboard's relative requests resolve under it); anything else, as it is (the probes
 * are asked at the root by orchestrators).
 */
export const underBasePath = (url: string, base: string): string | "redirect" => {
  const path = pathOf(url)
  if (path === base) return "redirect"
  return path.startsWith(`${base}/`) ? url.slice(base.length) : url
}
