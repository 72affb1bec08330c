/**
 * For bench/initialize_latency.ts --entry serve-only: `infradev serve` through a program that holds
 * the serve command alone, i.e. what the CLI costs once cli/program.ts loads only the command it
 * runs. Separates the server's start-up from the rest of the CLI's imports.
 */
import { Command } from "commander";
import { registerServeCommands } from "../dist/cli/serve.js";

const program = new Command().name("infradev");
registerServeCommands(program);
await program.parseAsync(process.argv);
