import { conformance } from "./QueueStoreConformance.ts"
import * as PgTest from "./support/PgTest.ts"

conformance("PostgreSQL", PgTest.storeLayer(), { exactlyOnceMessages: 2000 })
