/**
 * bench/throughput/breakdown.ts: a pickup split into send, wake, claim and dispatch from the
 * producer's and the worker's timings (`BENCH_LATENCY_BREAKDOWN=1 npm run bench:own`).
 */
import { assert, describe, it } from "@effect/vitest"
import { breakdownRows, pickups } from "../bench/throughput/breakdown.ts"

describe("pickup latency breakdown", () => {
  it("joins each handler start to its send and to the last claim that answered between the send and the start", () => {
    const sends = [{ sentAt: 1_000, ackedAt: 1_002 }, { sentAt: 1_020, ackedAt: 1_021.5 }]
    const claims = [
      { startAt: 990, endAt: 995 }, // answered before the first send: another message's
      { startAt: 1_002.5, endAt: 1_004 },
      { startAt: 1_021, endAt: 1_023 } // began before the producer heard its commit: wake is negative
    ]
    const starts = [{ sentAt: 1_000, startAt: 1_004.25 }, { sentAt: 1_020, startAt: 1_023.5 }]
    const [first, second] = pickups(sends, claims, starts)
    assert.deepStrictEqual(first, { total: 4.25, send: 2, wake: 0.5, claim: 1.5, dispatch: 0.25 })
    assert.deepStrictEqual(second, { total: 3.5, send: 1.5, wake: -0.5, claim: 2, dispatch: 0.5 })
  })

  it("leaves out a start whose send or claim was not seen", () => {
    const claims = [{ startAt: 5, endAt: 6 }]
    assert.lengthOf(pickups([], claims, [{ sentAt: 1, startAt: 7 }]), 0, "no send")
    assert.lengthOf(pickups([{ sentAt: 1, ackedAt: 2 }], [{ startAt: 0, endAt: 0.5 }], [{ sentAt: 1, startAt: 7 }]), 0, "no claim after the send")
  })

  it("tabulates p50, p95, p99 and max per segment, total first", () => {
    const all = Array.from({ length: 100 }, (_, i) => ({ total: i + 1, send: 1, wake: 0, claim: 2, dispatch: 0.5 }))
    const rows = breakdownRows(all)
    assert.strictEqual(rows[0]![0], "total (handler start - send start)")
    assert.deepStrictEqual(rows[0]!.slice(1), ["50.00", "95.00", "99.00", "100.00"])
    assert.deepStrictEqual(rows[3]!.slice(1), ["2.00", "2.00", "2.00", "2.00"])
    assert.deepStrictEqual(breakdownRows([])[0]!.slice(1), ["-", "-", "-", "-"])
  })
})
