#!/usr/bin/env node
/**
 * The `leasehold` command: operate queues from a shell (built on `effect/cli`;
 * the commands are in ../cli/). Connects with LEASEHOLD_DATABASE_URL
 * (schema LEASEHOLD_SCHEMA, default `leasehold`). `leasehold --help` and
 * `leasehold <command> --help` list the commands and their flags:
 *
 *   leasehold migrate
 *   leasehold send <queue> <task> <json> [--delay 5s] [--priority N] [--dedup KEY] [--max-attempts N]
 *   leasehold stats [queue...] [--json] [--watch]    (default: every queue that has messages)
 *   leasehold attempts <message-id> [--json]
 *   leasehold dead-letters list    [--queue Q] [--ids 1,2] [--limit N] [--json]
 *   leasehold dead-letters redrive (--queue Q | --ids 1,2 | --all)
 *   leasehold dead-letters purge   (--queue Q | --ids 1,2 | --all)
 *   leasehold serve [--port N] [--host H]    (admin API + dashboard; changes need LEASEHOLD_ADMIN_TOKEN)
 *
 * Exit codes: 0 done (also Ctrl-C ending `stats --watch`), 1 failed (database,
 * invalid name, missing configuration, a schema not migrated for a read-only
 * command, message ids that match nothing), 2 refused before connecting (a bad
 * or unknown flag, argument or command; the error and the command's help on stderr).
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as NodeServices from "@effect/platform-node/NodeServices"
import { Effect } from "effect"
import * as Cli from "../cli/cli.ts"

Cli.run(process.argv.slice(2)).pipe(
  Effect.provide(NodeServices.layer),
  NodeRuntime.runMain({ disableErrorReporting: true, teardown: Cli.teardown })
)
