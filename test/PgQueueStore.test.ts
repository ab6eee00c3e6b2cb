import { conformance } from "./conformance/index.ts"
import * as PgTest from "./support/PgTest.ts"

conformance("PostgreSQL", PgTest.storeLayer(), { exactlyOnceMessages: 2000 })
// The production path: times from the server's now(). Tests that move time with TestClock are
// skipped there; real-time tests with short waits cover the same rules (see test/conformance/).
conformance("PostgreSQL, database clock", PgTest.storeLayer({ clock: "database" }), { exactlyOnceMessages: 500, clock: "database" })
