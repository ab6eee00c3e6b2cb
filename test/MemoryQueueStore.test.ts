import * as MemoryQueueStore from "../src/MemoryQueueStore.ts"
import { conformance } from "./conformance/index.ts"

conformance("memory", MemoryQueueStore.layer(), { exactlyOnceMessages: 2000 })
