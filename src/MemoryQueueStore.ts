/**
 * An in-memory queue store with the same semantics as the PostgreSQL one, for
 * fast tests of consumer logic. Time is Effect's `Clock`, so `TestClock` drives
 * leases and delays. It has no transactions and keeps nothing across restarts:
 * never use it in production.
 *
 * @since 0.1.0
 */
import { Clock, Duration, Effect, Latch, Layer, Option } from "effect"
import type {
  Attempt,
  CancelResult,
  Claim,
  ClaimRef,
  DeadLetter,
  MessageId,
  MessageInfo,
  MessageState,
  QueueInfo,
  QueueStats,
  SendResult
} from "./Message.ts"
import type { InvalidInput } from "./QueueError.ts"
import {
  type Completion,
  defaults,
  type DeadLetterFilter,
  fromOperations,
  type Finish,
  historyErrors,
  QueueStore,
  type QueueStoreShape,
  type ScheduleInfo
} from "./QueueStore.ts"
import * as CancelInbox from "./internal/cancelInbox.ts"
import * as AttemptResult from "./internal/attemptResult.ts"
import * as Validate from "./internal/validate.ts"

/** How to build a {@link MemoryQueueStore}. */
export interface MemoryQueueStoreOptions {
  /** Largest payload accepted, in JSON bytes (default 1 MiB). */
  readonly maxPayloadBytes?: number | undefined
  /** Attempts a message gets unless its sender says otherwise (default 25). */
  readonly defaultMaxAttempts?: number | undefined
}

/** One stored message: the mutable mirror of a row of the messages table. */
interface Row {
  readonly id: bigint
  readonly queue: string
  readonly task: string
  readonly payload: unknown
  readonly headers: Readonly<Record<string, string>>
  readonly priority: number
  readonly enqueuedAt: number
  readonly maxAttempts: number
  state: "ready" | "dead"
  visibleAt: number
  attempts: number
  leaseToken: string | null
  leasedBy: string | null
  leasedAt: number | null
  leaseExpiries: number
  /** Attempts before the last redrive: the history numbers attempts on from there. */
  attemptBase: number
  dedupKey: string | null
  lastError: string | null
  deadReason: string | null
  deadAt: number | null
  /** When a cancel of this message, while running, was asked for. */
  cancelRequestedAt: number | null
}

const message = (row: Row) => ({
  id: String(row.id) as MessageId,
  queue: row.queue,
  task: row.task,
  payload: structuredClone(row.payload),
  headers: { ...row.headers },
  priority: row.priority,
  attempts: row.attempts,
  maxAttempts: row.maxAttempts,
  enqueuedAt: new Date(row.enqueuedAt),
  dedupKey: row.dedupKey,
  lastError: row.lastError,
  leaseExpiries: row.leaseExpiries
})

/** Claim order: lowest priority number, then earliest visibility, then id. */
const claimOrder = (a: Row, b: Row) =>
  a.priority - b.priority || a.visibleAt - b.visibleAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)

/**
 * Build an empty in-memory store. Each operation runs synchronously, so it is
 * atomic with respect to other fibers, like a single SQL statement.
 */
export const make = (options: MemoryQueueStoreOptions = {}): Effect.Effect<QueueStoreShape> =>
  Effect.sync(() => {
    const rows = new Map<bigint, Row>()
    /** Subscribers per queue, woken by sends of messages ready now. */
    const listeners = new Map<string, Set<Latch.Latch>>()
    /** Subscribers per queue, told of cancels of running messages. */
    const cancelListeners: CancelInbox.Registry = new Map()
    const history: Array<Attempt> = []
    /** Queues ever paused (a resumed one stays, unpaused), with when they were paused. */
    const pauses = new Map<string, { paused: boolean; pausedAt: number | null }>()
    let nextId = 1n
    const limits: Validate.SendLimits = {
      maxPayloadBytes: options.maxPayloadBytes ?? defaults.maxPayloadBytes,
      defaultMaxAttempts: options.defaultMaxAttempts ?? defaults.maxAttempts
    }

    /** The row a fenced write may touch: same id, same token, still live. */
    const held = (id: MessageId, token: string): Row | undefined => {
      const row = rows.get(BigInt(id))
      return row !== undefined && row.state === "ready" && row.leaseToken === token ? row : undefined
    }
    const clearLease = (row: Row) => {
      row.leaseToken = null
      row.leasedBy = null
      row.leasedAt = null
    }
    const live = (queue: string) => [...rows.values()].filter((r) => r.queue === queue && r.state === "ready")
    const matching = (filter: DeadLetterFilter) => {
      const wanted = filter.ids === undefined ? undefined : new Set(filter.ids.map(String))
      return [...rows.values()]
        .filter((r) =>
          r.state === "dead" && (filter.queue === undefined || r.queue === filter.queue) &&
          (wanted === undefined || wanted.has(String(r.id)))
        )
        .sort((a, b) => (a.deadAt ?? 0) - (b.deadAt ?? 0) || (a.id < b.id ? -1 : 1))
    }
    /**
     * The fenced write of a retry, release or dead letter of a held message (one flagged for
     * cancel never gets here: `complete` deletes it instead): `write` sets its columns, the
     * lease is cleared. `false` when the lease was lost.
     */
    const handBack = (ref: ClaimRef, write: (row: Row, now: number) => void) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const row = held(ref.id, ref.leaseToken)
        if (row === undefined) return false
        write(row, now)
        clearLease(row)
        return true
      })

    const send: QueueStoreShape["send"] = (queue, messages) =>
      Effect.gen(function*() {
        const prepared = yield* Validate.prepareSend(queue, messages, limits)
        const now = yield* Clock.currentTimeMillis
        // All checks passed before the first write: like the SQL transaction, all or nothing.
        const results = prepared.map((m): SendResult => {
          if (m.dedupKey !== null) {
            const existing = live(queue).find((r) => r.dedupKey === m.dedupKey)
            if (existing !== undefined) return { id: String(existing.id) as MessageId, deduplicated: true }
          }
          const holder = m.unique === null ? undefined : reservation(queue, m.unique.key, now)
          if (holder !== undefined) return { id: holder, deduplicated: true }
          const id = nextId++
          if (m.unique !== null) reserved.set(uniqueKey(queue, m.unique.key), { until: now + m.unique.forMs, id: String(id) as MessageId })
          rows.set(id, {
            id,
            queue,
            task: m.task,
            payload: JSON.parse(m.payloadJson),
            headers: m.headers,
            priority: m.priority,
            enqueuedAt: now,
            maxAttempts: m.maxAttempts,
            state: "ready",
            visibleAt: now + m.delayMs,
            attempts: 0,
            leaseToken: null,
            leasedBy: null,
            leasedAt: null,
            leaseExpiries: 0,
            attemptBase: 0,
            dedupKey: m.dedupKey,
            lastError: null,
            deadReason: null,
            deadAt: null,
            cancelRequestedAt: null
          })
          return { id: String(id) as MessageId, deduplicated: false }
        })
        if (prepared.some((m) => m.delayMs === 0)) {
          for (const latch of listeners.get(queue) ?? []) latch.openUnsafe()
        }
        return results
      })

    /** The history record of the attempt its last holder left unfinished. */
    const unfinished = (row: Row, endedAt: number, outcome: "cancelled" | "lease-expired", error: string | null): Attempt => ({
      messageId: String(row.id) as MessageId,
      queue: row.queue,
      task: row.task,
      attempt: row.attemptBase + row.attempts,
      consumer: row.leasedBy ?? "",
      startedAt: new Date(row.leasedAt ?? row.visibleAt),
      endedAt: new Date(endedAt),
      outcome,
      error
    })
    /** Delete the cancelled ones of `picked` (their holders stopped before finishing them), recording it. */
    const dropCancelled = (picked: ReadonlyArray<Row>, now: number) => {
      for (const row of picked.filter((r) => r.cancelRequestedAt !== null)) {
        rows.delete(row.id)
        pushAttempt(unfinished(row, now, "cancelled", historyErrors.cancelledUnfinished))
      }
    }

    const claim: QueueStoreShape["claim"] = (queue, options) =>
      Effect.gen(function*() {
        yield* Validate.name("queue", queue)
        yield* Validate.name("consumer", options.consumer)
        const limit = yield* Validate.positiveInt("limit", options.limit, 10_000)
        const leaseMs = yield* Validate.durationMs("lease", options.lease, { min: defaults.minLeaseMs })
        const now = yield* Clock.currentTimeMillis
        if (pauses.get(queue)?.paused === true) return []
        // As SQL: a pick of only cancelled messages (deleted below) picks again, never answering
        // nothing while ready messages wait behind them.
        const pick = () => live(queue).filter((r) => r.visibleAt <= now).sort(claimOrder).slice(0, limit)
        let all = pick()
        while (all.length > 0 && all.every((r) => r.cancelRequestedAt !== null)) {
          dropCancelled(all, now)
          all = pick()
        }
        // Same rules as SQL: a message whose cancel was asked for while it ran, and whose holder
        // stopped before finishing it, is deleted (never run again); a suspect (lease expired now
        // or before) is claimed alone.
        dropCancelled(all, now)
        const picked = all.filter((r) => r.cancelRequestedAt === null)
        const suspect = (r: Row) => r.leaseExpiries > 0 || r.leaseToken !== null
        const chosen = picked.length > 0 && suspect(picked[0]!) ? [picked[0]!] : picked.filter((r) => !suspect(r))
        return chosen.map((row): Claim => {
          if (row.leaseToken !== null) {
            row.leaseExpiries += 1
            history.push(unfinished(row, row.visibleAt, "lease-expired", historyErrors.leaseExpired))
          }
          const readyAt = row.visibleAt
          row.visibleAt = now + leaseMs
          row.attempts += 1
          row.leaseToken = crypto.randomUUID()
          row.leasedBy = options.consumer
          row.leasedAt = now
          return {
            ...message(row),
            leaseToken: row.leaseToken as Claim["leaseToken"],
            leaseExpiresAt: new Date(row.visibleAt),
            consumer: options.consumer,
            readyAt: new Date(readyAt)
          }
        })
      })

    const renew: QueueStoreShape["renew"] = (claims, lease) =>
      Effect.gen(function*() {
        const leaseMs = yield* Validate.durationMs("lease", lease, { min: defaults.minLeaseMs }).pipe(Effect.orDie)
        const now = yield* Clock.currentTimeMillis
        const stillHeld: Array<MessageId> = []
        const cancelling: Array<MessageId> = []
        for (const c of claims) {
          const row = held(c.id, c.leaseToken)
          if (row === undefined) continue
          row.visibleAt = now + leaseMs
          stillHeld.push(c.id)
          if (row.cancelRequestedAt !== null) cancelling.push(c.id)
        }
        return { held: stillHeld, cancelling }
      })

    /** Delete a held message (an ack, or a cancel); `false` when the lease was lost. */
    const deleteHeld = (ref: ClaimRef) => Effect.sync(() => held(ref.id, ref.leaseToken) !== undefined && rows.delete(BigInt(ref.id)))

    /** The fenced write of one completion's finish (not a cancel): whether it landed. */
    const finishWrite = (ref: ClaimRef, f: Finish): Effect.Effect<boolean> => {
      switch (f._tag) {
        case "Ack":
        case "Cancel":
          return deleteHeld(ref)
        case "Retry":
          return Effect.flatMap(Validate.durationMs("delay", f.delayMs, { min: 0 }).pipe(Effect.orDie), (delayMs) =>
            handBack(ref, (row, now) => {
              row.visibleAt = now + delayMs
              row.lastError = Validate.boundedText(f.error)
            }))
        case "Release":
          return handBack(ref, (row, now) => {
            // The attempt is given back: a release is not a failure of the handler.
            row.visibleAt = now
            row.attempts = Math.max(row.attempts - 1, 0)
            // Ready again now: idle consumers hear of it as of a send (a peer claims it at once).
            for (const latch of listeners.get(row.queue) ?? []) latch.openUnsafe()
          })
        case "DeadLetter":
          return handBack(ref, (row, now) => {
            row.state = "dead"
            // A claim beyond the last attempt (quarantined, exhausted) ran nothing: never shown past the max.
            row.attempts = Math.min(row.attempts, row.maxAttempts)
            row.deadReason = Validate.boundedText(f.reason)
            row.deadAt = now
            if (f.error !== undefined) row.lastError = Validate.boundedText(f.error)
          })
        case "Forget":
          return Effect.succeed(false)
      }
    }

    /** Each completion's fenced write, by its kind, then its history record; as one step. */
    const complete: QueueStoreShape["complete"] = (completions) =>
      Effect.gen(function*() {
        const landedIds: Array<MessageId> = []
        const cancelledIds: Array<MessageId> = []
        for (const c of completions) {
          const f = c.finish
          // Read before the write (an ack deletes the row).
          const base = attemptBaseOf(c.ref.id)
          // Same rule as SQL: a retry, release or dead letter of a message flagged for cancel is a cancel.
          const flagged = held(c.ref.id, c.ref.leaseToken)?.cancelRequestedAt != null &&
            (f._tag === "Retry" || f._tag === "DeadLetter" || f._tag === "Release")
          const cancelled = flagged || f._tag === "Cancel"
          const landed = yield* (cancelled ? deleteHeld(c.ref) : finishWrite(c.ref, f))
          if (!landed) {
            // A retried write whose first one landed (its answer lost) answers as its record says, recording nothing more.
            const earlier = ownRecord(c)
            if (earlier !== undefined) {
              if (earlier.outcome !== "lease-lost") landedIds.push(c.ref.id)
              if (earlier.outcome === "cancelled") cancelledIds.push(c.ref.id)
              continue
            }
          }
          if (landed) landedIds.push(c.ref.id)
          if (landed && cancelled) cancelledIds.push(c.ref.id)
          pushAttempt({
            messageId: c.ref.id,
            queue: c.queue,
            task: c.task,
            attempt: base + c.attempt,
            consumer: c.consumer,
            startedAt: c.startedAt,
            endedAt: new Date(yield* Clock.currentTimeMillis),
            outcome: !landed ? "lease-lost" : cancelled ? "cancelled" : c.outcome,
            error: c.error,
            ...(c.result === undefined ? {} : { result: JSON.parse(c.result) })
          })
        }
        return { held: landedIds, cancelled: cancelledIds }
      })

    const redrive: QueueStoreShape["redrive"] = (filter) =>
      Effect.map(Clock.currentTimeMillis, (now) =>
        matching(filter).map((row) => {
          // Same rule as SQL: a key now held by a live message is given up.
          if (row.dedupKey !== null && live(row.queue).some((r) => r.dedupKey === row.dedupKey)) row.dedupKey = null
          row.state = "ready"
          // The history records the redrive as the last attempt so far; the next drive's are numbered on.
          row.attemptBase += row.attempts
          history.push({
            messageId: String(row.id) as MessageId,
            queue: row.queue,
            task: row.task,
            attempt: row.attemptBase,
            consumer: "",
            startedAt: new Date(now),
            endedAt: new Date(now),
            outcome: "redriven",
            error: null
          })
          row.attempts = 0
          row.leaseExpiries = 0
          row.deadReason = null
          row.deadAt = null
          row.visibleAt = now
          return String(row.id) as MessageId
        }))

    const purge: QueueStoreShape["purge"] = (filter) =>
      Effect.sync(() =>
        matching(filter).map((row) => {
          rows.delete(row.id)
          return String(row.id) as MessageId
        })
      )

    const deadLetters: QueueStoreShape["deadLetters"] = (filter) =>
      Effect.sync(() =>
        matching(filter).slice(0, filter.limit ?? 100).map((row): DeadLetter => ({
          ...message(row),
          reason: row.deadReason ?? "",
          deadAt: new Date(row.deadAt ?? 0)
        }))
      )

    const pause: QueueStoreShape["pause"] = (queue) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        if (pauses.get(queue)?.paused !== true) pauses.set(queue, { paused: true, pausedAt: now })
      })

    const resume: QueueStoreShape["resume"] = (queue) =>
      Effect.sync(() => {
        const entry = pauses.get(queue)
        if (entry?.paused !== true) return
        pauses.set(queue, { paused: false, pausedAt: null })
        // Idle consumers claim at once, as after a send.
        for (const latch of listeners.get(queue) ?? []) latch.openUnsafe()
      })

    const queues: QueueStoreShape["queues"] = () =>
      Effect.gen(function*() {
        const names = new Set<string>([...pauses.keys()])
        for (const row of rows.values()) names.add(row.queue)
        for (const a of history) names.add(a.queue)
        const out: Array<QueueInfo> = []
        const now = yield* Clock.currentTimeMillis
        for (const queue of [...names].sort()) {
          // Counted whatever the name (as SQL counts what its tables hold): never a defect.
          const counts = countOf(queue, now)
          const entry = pauses.get(queue)
          out.push({
            ...counts,
            paused: entry?.paused === true,
            pausedAt: entry?.pausedAt == null ? null : new Date(entry.pausedAt)
          })
        }
        return out
      })

    /** Cancel the given rows, in id order: flag the running ones, delete the others with a history row. */
    const cancelRows = (targets: ReadonlyArray<Row>) =>
      Effect.map(Clock.currentTimeMillis, (now) =>
        [...targets].sort((a, b) => (a.id < b.id ? -1 : 1)).map((row): CancelResult => {
          const id = String(row.id) as MessageId
          if (stateOf(row, now) === "in-flight") {
            row.cancelRequestedAt ??= now
            for (const inbox of cancelListeners.get(row.queue) ?? []) inbox.add([id])
            return { id, result: "cancelling" }
          }
          rows.delete(row.id)
          history.push({
            messageId: id,
            queue: row.queue,
            task: row.task,
            attempt: row.attemptBase + row.attempts,
            consumer: "",
            startedAt: new Date(now),
            endedAt: new Date(now),
            outcome: "cancelled",
            error: null
          })
          return { id, result: "cancelled" }
        }))

    // Ids checked by `fromOperations`: valid and distinct.
    const cancel: QueueStoreShape["cancel"] = (ids) =>
      Effect.suspend(() => cancelRows(ids.flatMap((id) => rows.get(BigInt(id)) ?? [])))

    const cancelWhere: QueueStoreShape["cancelWhere"] = (filter) =>
      Effect.suspend(() =>
        cancelRows([...rows.values()].filter((r) => r.queue === filter.queue && (filter.task === undefined || r.task === filter.task)))
      )

    const attemptBaseOf = (id: MessageId): number => rows.get(BigInt(id))?.attemptBase ?? 0

    /**
     * The history record an earlier write of this same completion left (as SQL finds it): same
     * message, consumer, start and error, its outcome, `cancelled` or `lease-lost`.
     */
    const ownRecord = (c: Completion): Attempt | undefined => {
      const error = c.error === null ? null : Validate.boundedText(c.error)
      return history.find((a) =>
        a.messageId === c.ref.id && a.consumer === c.consumer && a.startedAt.getTime() === c.startedAt.getTime() &&
        a.error === error && (a.outcome === c.outcome || a.outcome === "cancelled" || a.outcome === "lease-lost")
      )
    }

    /** Keep a record as SQL would: error text bounded, a result bounded as JSON, null or undefined as none. */
    const pushAttempt = ({ result, ...a }: Attempt): void => {
      const json = AttemptResult.textOf(result)
      history.push({
        ...a,
        error: a.error === null ? null : Validate.boundedText(a.error),
        ...(json === undefined ? {} : { result: JSON.parse(json) })
      })
    }

    const attempts: QueueStoreShape["attempts"] = (id) => Effect.sync(() => history.filter((a) => a.messageId === id))

    const pruneAttempts: QueueStoreShape["pruneAttempts"] = (olderThan) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const cutoff = now - Duration.toMillis(olderThan)
        const kept = history.filter((a) => a.endedAt.getTime() >= cutoff)
        const removed = history.length - kept.length
        history.splice(0, history.length, ...kept)
        return removed
      })

    /** A latch opened by what `registry` hears about `queues`, for the life of the current scope. */
    const subscribe = (registry: Map<string, Set<Latch.Latch>>, queues: ReadonlyArray<string>) =>
      Effect.gen(function*() {
        const latch = yield* Latch.make(false)
        for (const queue of queues) {
          const set = registry.get(queue) ?? new Set()
          set.add(latch)
          registry.set(queue, set)
        }
        yield* Effect.addFinalizer(() => Effect.sync(() => queues.forEach((q) => registry.get(q)?.delete(latch))))
        return Effect.andThen(latch.await, latch.close)
      })

    const sends: QueueStoreShape["sends"] = (queues) => subscribe(listeners, queues)

    const cancels: QueueStoreShape["cancels"] = (queues) => CancelInbox.subscribe(cancelListeners, queues)

    /** Where a row stands at `now`, as `stats` counts it. */
    const stateOf = (row: Row, now: number): MessageState =>
      row.state === "dead" ? "dead" : row.visibleAt <= now ? "ready" : row.leaseToken === null ? "delayed" : "in-flight"

    const info = (row: Row, now: number): MessageInfo => {
      const state = stateOf(row, now)
      return {
        ...message(row),
        state,
        visibleAt: state === "dead" ? null : new Date(row.visibleAt),
        leasedBy: state === "in-flight" ? row.leasedBy : null,
        leasedAt: state === "in-flight" && row.leasedAt !== null ? new Date(row.leasedAt) : null,
        cancelRequestedAt: state === "in-flight" && row.cancelRequestedAt !== null ? new Date(row.cancelRequestedAt) : null,
        deadReason: row.deadReason,
        deadAt: row.deadAt === null ? null : new Date(row.deadAt)
      }
    }

    const get: QueueStoreShape["get"] = (id) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const row = rows.get(BigInt(id))
        return row === undefined ? Option.none() : Option.some(info(row, now))
      })

    // Options checked by `fromOperations`: `limit` is set, `after` a valid id.
    const messages: QueueStoreShape["messages"] = (queue, options = {}) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const after = options.after === undefined ? 0n : BigInt(options.after)
        const limit = options.limit ?? 100
        const out: Array<MessageInfo> = []
        // The map keeps insertion order, which is id order.
        for (const row of rows.values()) {
          if (out.length >= limit) break
          if (row.queue !== queue || row.id <= after) continue
          if (options.state !== undefined && stateOf(row, now) !== options.state) continue
          out.push(info(row, now))
        }
        return out
      })

    /** The counts of one queue at `now`, its name not checked. */
    const countOf = (queue: string, now: number): QueueStats => {
      const all = [...rows.values()].filter((r) => r.queue === queue)
      const ready = all.filter((r) => r.state === "ready" && r.visibleAt <= now)
      const waiting = all.filter((r) => r.state === "ready" && r.visibleAt > now)
      return {
        queue,
        ready: ready.length,
        delayed: waiting.filter((r) => r.leaseToken === null).length,
        inFlight: waiting.filter((r) => r.leaseToken !== null).length,
        dead: all.filter((r) => r.state === "dead").length,
        oldestReadyAgeMs: ready.length === 0 ? 0 : now - Math.min(...ready.map((r) => r.visibleAt))
      }
    }

    const stats: QueueStoreShape["stats"] = (queue) =>
      Effect.gen(function*() {
        yield* Validate.name("queue", queue)
        return countOf(queue, yield* Clock.currentTimeMillis)
      })

    const depths: QueueStoreShape["depths"] = (queues) =>
      Effect.gen(function*() {
        const wanted = [...new Set(queues)]
        const out: Array<QueueStats> = []
        // Each queue as `stats` counts it; no effect between them, so one instant for all.
        for (const queue of wanted) out.push(yield* stats(queue))
        return out
      })

    const nextVisibleAt = (queue: string): Effect.Effect<Option.Option<Date>, InvalidInput> =>
      Effect.gen(function*() {
        yield* Validate.name("queue", queue)
        const now = yield* Clock.currentTimeMillis
        const future = live(queue).map((r) => r.visibleAt).filter((t) => t > now)
        return future.length === 0 ? Option.none() : Option.some(new Date(Math.min(...future)))
      })

    // -------------------------------------------------------------------------
    // Uniqueness windows and schedules, as the SQL store keeps them (migration 7).

    /** Reservations by queue and key: they outlive their message, as the unique_keys table does. */
    const reserved = new Map<string, { until: number; id: MessageId }>()
    const uniqueKey = (queue: string, key: string) => `${queue}\u0000${key}`
    /** The holder of a live reservation, if any. */
    const reservation = (queue: string, key: string, now: number): MessageId | undefined => {
      const held = reserved.get(uniqueKey(queue, key))
      return held !== undefined && held.until > now ? held.id : undefined
    }

    const scheduleRows = new Map<string, ScheduleInfo>()

    const upsertSchedules: QueueStoreShape["upsertSchedules"] = (specs, options) =>
      Effect.gen(function*() {
        // Every payload checked before the first write, as the one SQL statement does.
        const payloads = yield* Effect.forEach(specs, (spec) =>
          Effect.map(Validate.prepareMessage(spec.queue, { task: spec.task, payload: spec.payload }, limits), (m) =>
            JSON.parse(m.payloadJson) as unknown))
        // As SQL: a declared time ahead of the store's clock by more than the tolerance is the store's now.
        const storeNow = yield* Clock.currentTimeMillis
        const now = options.now.getTime() > storeNow + defaults.scheduleClockToleranceMs ? new Date(storeNow) : options.now
        return specs.map((spec, i): ScheduleInfo => {
          const old = scheduleRows.get(spec.key)
          if (old !== undefined && options.replace === false) {
            const seen: ScheduleInfo = { ...old, lastSeenAt: old.lastSeenAt < now ? now : old.lastSeenAt, lastSeenBy: options.seenBy }
            scheduleRows.set(spec.key, seen)
            return seen
          }
          const changed = old !== undefined && (old.cron !== spec.cron || old.tz !== spec.tz)
          const row: ScheduleInfo = {
            ...spec,
            payload: payloads[i],
            lastSlot: old === undefined ? now : changed && old.lastSlot < now ? now : old.lastSlot,
            firedAt: old?.firedAt ?? null,
            lastSeenAt: old === undefined || old.lastSeenAt < now ? now : old.lastSeenAt,
            lastSeenBy: options.seenBy
          }
          scheduleRows.set(spec.key, row)
          return row
        }).sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
      })

    /** Send a schedule's message (the store's own send: same checks, same wake-ups). */
    const sendScheduled = (row: ScheduleInfo, slot: string) =>
      Effect.map(
        send(row.queue, [{ task: row.task, payload: row.payload, headers: { "leasehold-schedule": row.key, "leasehold-slot": slot } }]),
        (results) => Option.some(results[0]!)
      )

    // The fence as the SQL store applies it: only a later slot of the same definition fires.
    // Nothing yields between the check and the move, so a concurrent fiber sees the moved row.
    const fireSchedule: QueueStoreShape["fireSchedule"] = (key, fire) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        const row = scheduleRows.get(key)
        const future = fire.slot.getTime() > now + defaults.scheduleClockToleranceMs
        if (row === undefined || future || !(row.lastSlot < fire.slot) || row.cron !== fire.cron || row.tz !== fire.tz) {
          return Effect.succeedNone
        }
        const moved: ScheduleInfo = { ...row, lastSlot: fire.slot, nextSlot: fire.nextSlot, firedAt: new Date(now) }
        scheduleRows.set(key, moved)
        return sendScheduled(moved, fire.slot.toISOString())
      })

    const triggerSchedule: QueueStoreShape["triggerSchedule"] = (key) =>
      Effect.suspend(() => {
        const row = scheduleRows.get(key)
        return row === undefined ? Effect.succeedNone : sendScheduled(row, "manual")
      })

    const schedules: QueueStoreShape["schedules"] = Effect.sync(() =>
      [...scheduleRows.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
    )

    const removeSchedule: QueueStoreShape["removeSchedule"] = (key) => Effect.sync(() => scheduleRows.delete(key))

    const pruneUniqueKeys: QueueStoreShape["pruneUniqueKeys"] = Effect.map(Clock.currentTimeMillis, (now) => {
      let removed = 0
      for (const [k, held] of reserved) {
        if (held.until <= now) {
          reserved.delete(k)
          removed++
        }
      }
      return removed
    })

    const now: QueueStoreShape["now"] = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    return fromOperations({
      now,
      upsertSchedules,
      fireSchedule,
      triggerSchedule,
      schedules,
      removeSchedule,
      pruneUniqueKeys,
      send,
      claim,
      renew,
      complete,
      redrive,
      purge,
      deadLetters,
      pause,
      resume,
      queues,
      cancel,
      cancelWhere,
      get,
      messages,
      attempts,
      pruneAttempts,
      sends,
      cancels,
      stats,
      depths,
      nextVisibleAt
    })
  })

/** A fresh, empty in-memory store as a layer: one per test gives isolation for free. */
export const layer = (options: MemoryQueueStoreOptions = {}): Layer.Layer<QueueStore> =>
  Layer.effect(QueueStore, make(options))
