/** The `infradev` program (commander) and its error handling; cli/main.ts is the entry point. */
import { Command, CommanderError } from "commander";
import { TaskError } from "../task/public/errors.js";
import { UsageError } from "../lib/errors.js";

export const VERSION = "0.1.0"; // also in cli/main.ts (answered there without loading this module)

type Register = (program: Command) => void;

/**
 * Every sub-command: its one-line summary (the root help's list) and how to load it. Only the
 * command being run is imported (its module, and in its action handler the heavy parts: the grader,
 * dockerode, the MCP SDK and the HTTP stack); the others are named by their summary alone, so
 * `infradev --help` or `tasks list` loads none of them. The full description stays in each module.
 */
export const COMMANDS: ReadonlyArray<{ name: string; aliases?: string[]; summary: string; load: () => Promise<Register> }> = [
  { name: "tasks", aliases: ["task"], summary: "list, inspect and check tasks (task check: the author's acceptance check)", load: async () => (await import("./tasks.js")).registerTasksCommands },
  { name: "curate", summary: "rank a repository's merged changes as task candidates (the paper's filters, each with its reason); --run: fail→pass at base vs merge", load: async () => (await import("./curate.js")).registerCurateCommands },
  { name: "grade", summary: "grade one patch against gold's calibration (Set A and Set B)", load: async () => (await import("./grade.js")).registerGradeCommands },
  { name: "run", summary: "run an agent harness (Codex, OpenCode) on one task, then grade its patch", load: async () => (await import("./run.js")).registerRunCommands },
  { name: "eval", summary: "run agents × tasks (× repeats) as jobs on an engine into one campaign folder, in parallel, resumable; eval status", load: async () => (await import("./eval.js")).registerEvalCommands },
  { name: "grade-many", summary: "grade many submissions made elsewhere (predictions JSONL or a folder) in parallel into a campaign folder; resumable", load: async () => (await import("./grade-many.js")).registerGradeManyCommands },
  { name: "calibrate", summary: "run the golden patch 3× here and cache which cases it passes", load: async () => (await import("./calibrate.js")).registerCalibrateCommands },
  { name: "report", summary: "the paper's tables and figures from a campaign folder (text, --html, --md, --json)", load: async () => (await import("./report.js")).registerReportCommands },
  { name: "view", summary: "one offline HTML file to read a campaign: runs, trajectories, patches, grades, the reward-hacking scan, paired runs", load: async () => (await import("./view.js")).registerViewCommands },
  { name: "export", summary: "every run's trajectory as Harbor's ATIF (trajectory.json) or our JSONL", load: async () => (await import("./export.js")).registerExportCommands },
  { name: "demo", summary: "grade golden, adversarial, hollow, base and empty patches of every task runnable here; one table", load: async () => (await import("./demo.js")).registerDemoCommands },
  { name: "serve", summary: "serve one task to an MCP client (stdio, or Streamable HTTP with --http)", load: async () => (await import("./serve.js")).registerServeCommands },
  { name: "runs", summary: "manage serve's run folders (runs prune)", load: async () => (await import("./runs.js")).registerRunsCommands },
  { name: "sandbox", summary: "manage the docker sandbox's containers (sandbox prune)", load: async () => (await import("./sandbox.js")).registerSandboxCommands },
  { name: "skill", summary: "the infra-dev skill (Agent Skills format)", load: async () => (await import("./skill.js")).registerSkillCommands },
  { name: "connect", summary: "print the MCP configuration for Codex or OpenCode", load: async () => (await import("./connect.js")).registerConnectCommands },
  { name: "doctor", summary: "what the probes see on this node: Python, torch, GPUs, NCCL, torchrun, bwrap", load: async () => (await import("./doctor.js")).registerDoctorCommands },
];

/** The sub-command argv asks for (`help <cmd>` too); "*" loads every one (tests, no argv). */
function wantedCommand(argv: string[] | undefined): string {
  if (argv === undefined) return "*";
  const words = argv.filter((a) => !a.startsWith("-"));
  return words[0] === "help" ? (words[1] ?? "") : (words[0] ?? "");
}

/**
 * The `infradev` command: thin; each sub-command lives in its own file and calls the modules.
 * Usage errors (unknown command or option, a missing or invalid value) are one line and exit 2;
 * the settings are made before the sub-commands exist, so every one of them inherits them.
 * `argv` (without node and the script): only the command it names is loaded (default: all).
 */
export async function buildProgram(argv?: string[]): Promise<Command> {
  const program = new Command()
    .name("infradev")
    .description("MCP server and grader for coding agents that change AI infrastructure")
    .version(VERSION)
    .exitOverride()
    .configureOutput({
      // commander's own error text is "error: ..."; ours is "infradev: <command>: ...".
      outputError: () => {},
    });
  const wanted = wantedCommand(argv);
  for (const c of COMMANDS) {
    if (wanted === "*" || wanted === c.name || c.aliases?.includes(wanted)) {
      (await c.load())(program);
      program.commands.find((x) => x.name() === c.name)?.summary(c.summary);
    } else {
      program.command(c.name).aliases(c.aliases ?? []).summary(c.summary);
    }
  }
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
  const program = await buildProgram(process.argv.slice(2));
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

