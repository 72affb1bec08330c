/** The `infradev` program (commander) and its error handling; cli/main.ts is the entry point. */
import { Command, CommanderError } from "commander";
import { TaskError } from "../tasks/errors.js";
import { registerCalibrateCommands } from "./calibrate.js";
import { registerDemoCommands } from "./demo.js";
import { registerDoctorCommands } from "./doctor.js";
import { registerGradeCommands } from "./grade.js";
import { registerConnectCommands } from "./connect.js";
import { registerSandboxCommands } from "./sandbox.js";
import { registerServeCommands } from "./serve.js";
import { registerSkillCommands } from "./skill.js";
import { registerTasksCommands } from "./tasks.js";
import { UsageError } from "../lib/errors.js";

export const VERSION = "0.1.0"; // also in cli/main.ts (answered there without loading this module)

/**
 * The `infradev` command: thin; each sub-command lives in its own file and calls the modules.
 * Usage errors (unknown command or option, a missing or invalid value) are one line and exit 2;
 * the settings are made before the sub-commands exist, so every one of them inherits them.
 */
export function buildProgram(): Command {
  const program = new Command()
    .name("infradev")
    .description("MCP server and grader for coding agents that change AI infrastructure")
    .version(VERSION)
    .exitOverride()
    .configureOutput({
      // commander's own error text is "error: ..."; ours is "infradev: <command>: ...".
      outputError: () => {},
    });
  registerTasksCommands(program);
  registerGradeCommands(program);
  registerCalibrateCommands(program);
  registerDemoCommands(program);
  registerServeCommands(program);
  registerSandboxCommands(program);
  registerSkillCommands(program);
  registerConnectCommands(program);
  registerDoctorCommands(program);
  return program;
}

/** The sub-command a usage error belongs to, from argv (commander's error does not say). */
function commandPath(program: Command, argv: string[]): string {
  const names: string[] = [];
  let cmd: Command | undefined = program;
  for (const a of argv) {
    const sub: Command | undefined = cmd?.commands.find((c) => c.name() === a || c.aliases().includes(a));
    if (!sub) break;
    names.push(sub.name());
    cmd = sub;
  }
  return names.join(" ");
}

export async function runCli(): Promise<void> {
  const program = buildProgram();
  try {
    await program.parseAsync(process.argv);
  } catch (e) {
    if (e instanceof CommanderError) {
      // --help, --version: already printed, a success.
      if (e.exitCode === 0 || e.code === "commander.helpDisplayed" || e.code === "commander.version") process.exit(0);
      if (e.code === "commander.help") process.exit(2); // no sub-command given: the help is on stderr already
      const where = commandPath(program, process.argv.slice(2));
      const message = e.message.replace(/^error: /, "");
      process.stderr.write(`infradev: ${where ? `${where}: ` : ""}${message} (see: infradev ${where ? `${where} ` : ""}--help)\n`);
      process.exit(2);
    }
    if (e instanceof TaskError || e instanceof UsageError) {
      process.stderr.write(`infradev: ${e.message}\n`);
      process.exit(2);
    }
    // Anything else: the message, and the stack on request (a failure of ours, or of the machine).
    const err = e instanceof Error ? e : new Error(String(e));
    process.stderr.write(process.env.INFRADEV_DEBUG ? `infradev: ${err.stack}\n` : `infradev: ${err.message}\n  (INFRADEV_DEBUG=1 shows where it failed)\n`);
    process.exit(1);
  }
}

