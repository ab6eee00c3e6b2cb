/**
 * The per-task metrics cache stays bounded: task names come from message data, and a
 * producer sending ever new names must not grow the process's memory without bound.
 */
import { assert, describe, it } from "@effect/vitest"
import * as QueueMetrics from "../src/QueueMetrics.ts"

describe("QueueMetrics.forTask", () => {
  it("keeps at most MAX_TASK_SERIES names (and one other-series per queue), whatever the names it is given", () => {
    const queue = "bounded-cache"
    const first = QueueMetrics.forTask(queue, "t-0")
    assert.strictEqual(QueueMetrics.forTask(queue, "t-0"), first, "a known pair is served from the cache")
    const names = QueueMetrics.MAX_TASK_SERIES + 5_000
    for (let i = 1; i < names; i++) QueueMetrics.forTask(queue, `t-${i}`)
    assert.isAtMost(QueueMetrics.taskCacheSize(), QueueMetrics.MAX_TASK_SERIES + 1)
    // A name beyond the bound is recorded as the queue's (other) series, every time.
    const late = QueueMetrics.forTask(queue, `t-${names + 1}`)
    assert.strictEqual(late.task, QueueMetrics.OTHER_TASK)
    assert.strictEqual(late.queue, queue)
    assert.strictEqual(QueueMetrics.forTask(queue, `t-${names + 2}`), late)
    assert.strictEqual(QueueMetrics.forTask("another-queue", "x").task, QueueMetrics.OTHER_TASK)
    assert.strictEqual(QueueMetrics.forTask(queue, "t-0"), first, "pairs within the bound keep their own series")
    assert.isAtMost(QueueMetrics.taskCacheSize(), QueueMetrics.MAX_TASK_SERIES + 2)
  })
})
