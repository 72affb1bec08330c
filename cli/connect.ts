import { resolve } from "node:path";
import { join } from "node:path";
import type { Command } from "commander";
import { packageRoot } from "../lib/paths.js";
import { loadPublicTask } from "../tasks/loader.js";
import type { Harness } from "./skill.js";

export interface ConnectOptions {
  task: string;
  sandbox: string;
  runsDir: string;
  tasksDir?: string;
  /** Node and the CLI entry point; default: this very installation. */
  node?: string;
  cli?: string;
}

/** How long one tool call may take: measure with compare_with_base runs the suite twice. */
export function toolTimeoutSec(runTimeoutSec: number): number {
  return Math.ceil(2 * runTimeoutSec + 300);
}

function serveArgv(o: ConnectOptions): string[] {
  return [
    o.node ?? process.execPath,
    o.cli ?? join(packageRoot(), "dist", "cli", "main.js"),
    "serve",
    "--task",
    o.task,
    "--sandbox",
    o.sandbox,
    "--runs-dir",
    resolve(o.runsDir),
    ...(o.tasksDir ? ["--tasks-dir", resolve(o.tasksDir)] : []),
  ];
}

const toml = (s: string) => JSON.stringify(s); // a JSON string is a valid TOML basic string

/** `[mcp_servers.infradev]` for ~/.codex/config.toml. */
export function codexConfig(o: ConnectOptions, runTimeoutSec: number): string {
  const [command, ...args] = serveArgv(o);
  return [
    "[mcp_servers.infradev]",
    `command = ${toml(command!)}`,
    `args = [${args.map(toml).join(", ")}]`,
    "# workspace + base checkout are created at start-up",
    "startup_timeout_sec = 60",
    "# multi-rank pytest_run / measure (twice with compare_with_base) outlast Codex's 60 s default",
    `tool_timeout_sec = ${toolTimeoutSec(runTimeoutSec)}`,
    "",
  ].join("\n");
}

/** The `mcp` entry for opencode.json (timeout in milliseconds). */
export function opencodeConfig(o: ConnectOptions, runTimeoutSec: number): string {
  const config = {
    $schema: "https://opencode.ai/config.json",
    mcp: {
      infradev: {
        type: "local",
        command: serveArgv(o),
        enabled: true,
        timeout: toolTimeoutSec(runTimeoutSec) * 1000,
      },
    },
  };
  return `${JSON.stringify(config, null, 2)}\n`;
}

export function registerConnectCommands(program: Command): void {
  program
    .command("connect <harness>")
    .description("print the MCP configuration that makes Codex (codex) or OpenCode (opencode) start `infradev serve` for a task")
    .requiredOption("--task <id>", "task id (or path to a task folder)")
    .option("--sandbox <kind>", "sandbox backend the server will use: local | docker | none", "local")
    .option("--runs-dir <dir>", "where runs/<run-id>/ folders go", process.env.INFRADEV_RUNS_DIR ?? "runs")
    .option("--tasks-dir <dir>", "tasks folder (default: the bundled tasks)")
    .action((harness: string, opts: { task: string; sandbox: string; runsDir: string; tasksDir?: string }) => {
      if (harness !== "codex" && harness !== "opencode") throw new Error(`connect: harness must be codex or opencode (got "${harness}")`);
      if (!["local", "docker", "none"].includes(opts.sandbox)) throw new Error(`connect: --sandbox must be local, docker or none (got "${opts.sandbox}")`);
      const task = loadPublicTask(opts.task, opts.tasksDir);
      const o: ConnectOptions = { task: opts.task, sandbox: opts.sandbox, runsDir: opts.runsDir, tasksDir: opts.tasksDir };
      const h = harness as Harness;
      if (h === "codex") {
        process.stderr.write("# add to ~/.codex/config.toml (or .codex/config.toml in a trusted project); skill: infradev skill install --codex\n");
        process.stdout.write(codexConfig(o, task.spec.run_timeout_sec));
      } else {
        process.stderr.write("# merge into opencode.json (project) or ~/.config/opencode/opencode.json; timeout is in ms; skill: infradev skill install --opencode\n");
        process.stdout.write(opencodeConfig(o, task.spec.run_timeout_sec));
      }
    });
}
