import { InvalidArgumentError, type Command } from "commander";
import type { PruneResult } from "../sandbox/docker/create.js";

function seconds(v: string): number {
  const n = Number(v);
  if (!/^\d+$/.test(v.trim()) || !Number.isSafeInteger(n)) throw new InvalidArgumentError("expected a whole number of seconds ≥ 0");
  return n;
}

/** The human summary of a prune. */
export function formatPrune(r: PruneResult): string {
  const lines = r.removed.map((c) => `removed ${c.name || c.id.slice(0, 12)}  (session ${c.session || "?"}, ${c.kind || "?"}, ${c.reason})`);
  lines.push(`${r.removed.length} container(s) removed, ${r.kept} kept (owner still running, made on another host, or too young)`);
  return lines.join("\n");
}

/** `infradev sandbox …`: housekeeping of the docker backend's containers. */
export function registerSandboxCommands(program: Command): void {
  const sandbox = program.command("sandbox").description("manage the docker sandbox's containers");
  sandbox
    .command("prune")
    .description("remove the containers of sessions whose process is gone (a killed server or grader never removes its own); DOCKER_HOST honoured")
    .option("--all", "remove every infradev container, even those of live sessions")
    .option("--older-than <sec>", "only containers created at least this many seconds ago", seconds)
    .option("--json", "print { removed: [...], kept } as JSON on stdout")
    .action(async (opts: { all?: boolean; olderThan?: number; json?: boolean }) => {
      // dockerode loads here, not when the CLI starts.
      const { DockerSandboxError, pruneSandboxes } = await import("../sandbox/docker/create.js");
      let result: PruneResult;
      try {
        result = await pruneSandboxes({ all: opts.all, olderThanSec: opts.olderThan });
      } catch (e) {
        // An unreachable engine is not bad input (exit 2 is for that): exit 1, the reason and the fix in one line.
        if (!(e instanceof DockerSandboxError)) throw e;
        process.stderr.write(`infradev: sandbox prune: ${e.message}\n`);
        process.exit(1);
      }
      process.stdout.write(opts.json ? `${JSON.stringify(result, null, 2)}\n` : `${formatPrune(result)}\n`);
    });
}
