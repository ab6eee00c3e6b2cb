/**
 * The behaviour suite (suite.ts) on effect's in-memory engine and on leasehold's engine on
 * PostgreSQL (a fresh migrated schema): the same assertions, passing on both.
 */
import { layer } from "@effect/vitest"
import { Layer } from "effect"
import { WorkflowEngine } from "effect/workflow"
import * as LeaseholdWorkflow from "../../src/LeaseholdWorkflow.ts"
import * as Migrations from "../../src/Migrations.ts"
import * as PgTest from "../support/PgTest.ts"
import { behaviours } from "./suite.ts"
import { WorkflowsLive } from "./workflows.ts"

layer(WorkflowsLive.pipe(Layer.provideMerge(WorkflowEngine.layerMemory)), { timeout: 60_000, excludeTestServices: true })(
  "effect's memory engine",
  behaviours
)

const schema = PgTest.uniqueSchema("wf")
const pgEngine = LeaseholdWorkflow.layer({ schema, pollInterval: "200 millis", lease: "3 seconds" }).pipe(
  Layer.provideMerge(Migrations.layer({ schema })),
  Layer.provideMerge(PgTest.dropSchemaOnRelease(schema)),
  Layer.provideMerge(PgTest.clientLayer())
)

layer(WorkflowsLive.pipe(Layer.provideMerge(pgEngine)), { timeout: 60_000, excludeTestServices: true })("leasehold engine on PostgreSQL", behaviours)
