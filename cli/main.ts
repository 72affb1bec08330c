#!/usr/bin/env node
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

/** The `infradev` command: thin; each sub-command lives in its own file and calls the modules. */
export function buildProgram(): Command {
  const program = new Command()
    .name("infradev")
    .description("MCP server and grader for coding agents that change AI infrastructure")
    .version("0.1.0")
    .showHelpAfterError();
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

async function main(): Promise<void> {
  const program = buildProgram();
  program.exitOverride();
  try {
    await program.parseAsync(process.argv);
  } catch (e) {
    if (e instanceof CommanderError) process.exit(e.exitCode);
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

await main();
