#!/usr/bin/env node
/**
 * The `infradev` entry point. `--version` answers before anything is imported (the rest of the CLI
 * pulls in the MCP SDK, dockerode, the grader); every other command loads the program.
 */
const VERSION = "0.1.0";
const args = process.argv.slice(2);
if (args.length === 1 && (args[0] === "--version" || args[0] === "-V")) {
  process.stdout.write(`${VERSION}\n`);
} else {
  const { runCli } = await import("./program.js");
  await runCli();
}
