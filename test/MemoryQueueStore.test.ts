import * as MemoryQueueStore from "../src/MemoryQueueStore.ts"
import { conformance } from "./QueueStoreConformance.ts"

conformance("memory", MemoryQueueStore.layer(), { exactlyOnceMessages: 2000 })
