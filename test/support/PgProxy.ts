/**
 * A TCP proxy of the test's own in front of the test server, to put a client
 * in situations PostgreSQL alone cannot: cut off from the database while the
 * server runs on for everyone else, an event loop blocked at an exact point
 * of the protocol, or a slow network (`delayMs`).
 *
 * Each connection is tagged with the `application_name` of its startup packet,
 * so a test can aim at one consumer's presence session or heartbeat pool.
 */
import { Effect, type Scope } from "effect"
import * as net from "node:net"

/** One proxied client connection. */
export interface ProxiedConnection {
  /** `application_name` from the startup packet, once seen. */
  applicationName: string | undefined
  /** Set when either side closed. */
  closed: boolean
  /** Frozen by {@link PgProxy.limit}: over the number of connections let through under its name. */
  limited: boolean
}

/** A running proxy. */
export interface PgProxy {
  /** `url` with its host and port replaced by the proxy's. */
  readonly url: string
  /**
   * Called after each client-to-server chunk has been forwarded. A hook that
   * blocks (a synchronous busy loop) blocks the whole process there, as a
   * CPU-heavy handler would.
   */
  onClientChunk: ((connection: ProxiedConnection, chunk: Buffer) => void) | undefined
  /**
   * Latency added to every chunk, each way (a slow network: a round trip takes twice
   * this more), order kept. 0 (default): forwarded at once.
   */
  delayMs: number
  /**
   * Cut off every client whose `application_name` starts with `prefix`: their
   * connections are dropped, and new ones are accepted and closed at once (a
   * middlebox that cannot reach the server, not a refused connection: that
   * would look like the server itself being down).
   */
  cut(prefix: string): void
  /**
   * Freeze every client whose `application_name` starts with `prefix`: their
   * connections stay open but nothing more is forwarded either way, and new
   * ones are accepted and never answered (a network partition: TCP would
   * retransmit for minutes before anyone noticed).
   */
  freeze(prefix: string): void
  /**
   * Let only `n` more connections whose `application_name` is exactly `name` through; those
   * after them are frozen (accepted, never answered), connections already open go on.
   */
  limit(name: string, n: number): void
  /** Let everybody through again (frozen connections are closed: their streams lost bytes). */
  restore(): void
  /** Connections currently open through the proxy. */
  readonly connections: () => ReadonlyArray<ProxiedConnection>
}

const applicationNameIn = (bytes: Buffer): string | undefined => {
  const marker = Buffer.from("application_name\0")
  const at = bytes.indexOf(marker)
  if (at < 0) return undefined
  const start = at + marker.length
  const end = bytes.indexOf(0, start)
  return end < 0 ? undefined : bytes.subarray(start, end).toString("utf8")
}

/** Start a proxy to `targetUrl` (a `postgres://` URL on TCP) for the life of the scope. */
export const make = (targetUrl: string): Effect.Effect<PgProxy, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(() =>
      new Promise<{ proxy: PgProxy; server: net.Server; sockets: Set<net.Socket> }>((resolve) => {
        const target = new URL(targetUrl)
        const sockets = new Set<net.Socket>()
        const live = new Map<net.Socket, { connection: ProxiedConnection; upstream: net.Socket }>()
        let cutPrefix: string | undefined
        let frozenPrefix: string | undefined
        const isCut = (c: ProxiedConnection) => cutPrefix !== undefined && c.applicationName?.startsWith(cutPrefix) === true
        let limit: { readonly name: string; left: number } | undefined
        const isFrozen = (c: ProxiedConnection) =>
          c.limited || (frozenPrefix !== undefined && (c.applicationName ?? "").startsWith(frozenPrefix))
        const frozen = new Set<net.Socket>()
        /** Forward after `proxy.delayMs`, in order: a chunk never overtakes the one before it. */
        const delayed = () => {
          let last = 0
          return (send: () => void) => {
            if (proxy.delayMs <= 0 && last <= Date.now()) return send()
            last = Math.max(Date.now() + proxy.delayMs, last)
            setTimeout(send, last - Date.now())
          }
        }
        const server = net.createServer((client) => {
          sockets.add(client)
          const toClient = delayed()
          const toServer = delayed()
          const connection: ProxiedConnection = { applicationName: undefined, closed: false, limited: false }
          const upstream = net.connect(Number(target.port || 5432), target.hostname)
          sockets.add(upstream)
          live.set(client, { connection, upstream })
          const drop = () => {
            connection.closed = true
            live.delete(client)
            sockets.delete(client)
            sockets.delete(upstream)
            client.destroy()
            upstream.destroy()
          }
          client.on("close", drop).on("error", drop)
          upstream.on("close", drop).on("error", drop)
          upstream.on("data", (chunk) => {
            if (isFrozen(connection)) return void frozen.add(client)
            toClient(() => {
              if (!isCut(connection) && !client.destroyed) client.write(chunk)
            })
          })
          let head = Buffer.alloc(0)
          client.on("data", (chunk) => {
            if (connection.applicationName === undefined) {
              head = Buffer.concat([head, chunk])
              connection.applicationName = applicationNameIn(head)
              if (limit !== undefined && connection.applicationName === limit.name) {
                if (limit.left > 0) limit.left -= 1
                else connection.limited = true
              }
            }
            if (isCut(connection)) return drop()
            if (isFrozen(connection)) return void frozen.add(client)
            toServer(() => {
              if (!upstream.destroyed) upstream.write(chunk)
            })
            proxy.onClientChunk?.(connection, chunk)
          })
        })
        const proxy: PgProxy = {
          url: "",
          onClientChunk: undefined,
          delayMs: 0,
          cut(prefix) {
            cutPrefix = prefix
            for (const [client, { connection }] of live) {
              if (isCut(connection)) {
                client.destroy()
                live.get(client)?.upstream.destroy()
              }
            }
          },
          freeze(prefix) {
            frozenPrefix = prefix
          },
          limit(name, n) {
            limit = { name, left: n }
          },
          restore() {
            cutPrefix = undefined
            frozenPrefix = undefined
            limit = undefined
            for (const client of frozen) client.destroy()
            frozen.clear()
          },
          connections: () => [...live.values()].map((l) => l.connection)
        }
        server.listen(0, "127.0.0.1", () => {
          const port = (server.address() as net.AddressInfo).port
          const url = new URL(targetUrl)
          url.hostname = "127.0.0.1"
          url.port = String(port)
          ;(proxy as { url: string }).url = url.toString()
          resolve({ proxy, server, sockets })
        })
      })
    ),
    ({ server, sockets }) =>
      Effect.promise(() =>
        new Promise<void>((resolve) => {
          for (const s of sockets) s.destroy()
          server.close(() => resolve())
        })
      )
  ).pipe(Effect.map(({ proxy }) => proxy))
