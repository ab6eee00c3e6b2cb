/**
 * `leasehold workflows list|show|prune` as a real process against the test server, on executions
 * made by leasehold's engine in the test process: list shows status and what a suspended one waits
 * on (a deferred), filtered by status; show lists an execution's recorded attempts with outcomes;
 * prune deletes finished ones; a bad --status is refused before connecting (exit 2).
 */
import { Effect, Layer, ManagedRuntime, Option } from "effect"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import * as LeaseholdWorkflow from "../src/LeaseholdWorkflow.ts"
import * as Migrations from "../src/Migrations.ts"
import { cli as run, type CliResult as Result } from "./support/CliProcess.ts"
import * as PgTest from "./support/PgTest.ts"
import { waitFor } from "./support/Wait.ts"
import * as W from "./workflow/workflows.ts"

const show = (r: Result) => `exit ${r.code}\n--- stdout ---\n${r.stdout}\n--- stderr ---\n${r.stderr}`

const schema = PgTest.uniqueSchema("cw")
const runtime = ManagedRuntime.make(W.WorkflowsLive.pipe(
  Layer.provideMerge(LeaseholdWorkflow.layer({ schema, pollInterval: "200 millis" })),
  Layer.provideMerge(Migrations.layer({ schema })),
  Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
  Layer.provideMerge(PgTest.clientLayer({ maxConnections: 4 }))
))
afterAll(() => runtime.dispose())

let chain = "", doomed = ""
beforeAll(async () => {
  await runtime.runPromise(Effect.gen(function*() {
    chain = yield* W.Chain.execute({ id: "cli-chain" }, { discard: true })
    doomed = yield* W.Doomed.execute({ id: "cli-doomed" }, { discard: true })
    yield* waitFor("both to settle", Effect.gen(function*() {
      const a = yield* W.Chain.poll(chain)
      const b = yield* W.Doomed.poll(doomed)
      return Option.isSome(a) && Option.isSome(b) && b.value._tag === "Complete" ? Option.some(true) : Option.none()
    }))
  }))
})

describe("leasehold workflows", () => {
  it("list shows status and what a suspended execution waits on; --status filters; --json for scripts", async () => {
    const list = await run(["workflows", "list"], schema)
    assert.strictEqual(list.code, 0, show(list))
    const lines = list.stdout.trim().split("\n")
    assert.match(lines[0]!, /^WORKFLOW\s+EXECUTION\s+STATUS\s+RUNS\s+ACTIVITIES\s+WAITING ON$/)
    assert.match(lines.find((l) => l.startsWith("Chain"))!, new RegExp(`^Chain\\s+${chain}\\s+suspended\\s+1\\s+1\\s+deferred go$`))
    assert.match(lines.find((l) => l.startsWith("Doomed"))!, new RegExp(`^Doomed\\s+${doomed}\\s+complete \\((failure|defect)\\)\\s+1\\s+2\\s*$`))
    const complete = JSON.parse((await run(["workflows", "list", "--status", "complete", "--json"], schema)).stdout) as Array<{ workflow: string }>
    assert.deepStrictEqual(complete.map((r) => r.workflow), ["Doomed"])
    const refused = await run(["workflows", "list", "--status", "sleeping"], schema)
    assert.strictEqual(refused.code, 2, show(refused))
  })

  it("show lists the recorded attempts; prune deletes finished executions only", async () => {
    const attempts = await run(["workflows", "show", "Doomed", doomed], schema)
    assert.strictEqual(attempts.code, 0, show(attempts))
    assert.match(attempts.stdout, /doomed\s+1\s+failure\s+\S+Z\n.*doomed\s+2\s+failure/)
    const pruned = await run(["workflows", "prune", "--older-than", "0s"], schema)
    assert.strictEqual(pruned.code, 0, show(pruned))
    assert.deepStrictEqual(JSON.parse(pruned.stdout), { pruned: 1 })
    const left = JSON.parse((await run(["workflows", "list", "--json"], schema)).stdout) as Array<{ workflow: string }>
    assert.deepStrictEqual(left.map((r) => r.workflow), ["Chain"])
  })
})
