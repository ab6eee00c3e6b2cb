import { defaultServerConditions } from "vite"
import { defineConfig } from "vitest/config"

export default defineConfig({
  // `leasehold` (the package's self-reference, which examples/ import) is the source under test,
  // not the build in dist/: the `leasehold-source` condition of package.json's exports.
  ssr: { resolve: { conditions: ["leasehold-source", ...defaultServerConditions] } },
  test: {
    include: ["test/**/*.test.ts", "examples/**/*.test.ts"],
    globalSetup: ["test/support/globalSetup.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000
  }
})
