/** `infradev task new`: flags to one call of author/scaffold, then the static half of `task check` on what it wrote. */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { Option, type Command } from "commander";
import { UsageError } from "../lib/errors.js";
import { bundledTasksDir } from "../lib/paths.js";
import { parseEnvPairs } from "./curate.js";

interface TaskNewCli {
  repo: string;
  base: string;
  merge: string;
  id: string;
  category: "training" | "inference" | "rl";
  type: "feature" | "performance" | "refactor" | "bugfix";
  url?: string;
  title?: string;
  tasksDir?: string;
  runResults?: string;
  gpus: number;
  ranks: number;
  python?: string;
  timeout: number;
  env: string[];
  hostPython?: string;
  cacheImport: boolean;
  check: boolean;
  json?: boolean;
}

function int(name: string, min: number) {
  return (v: string): number => {
    if (!/^\d+$/.test(v) || Number(v) < min) throw new UsageError(`task new: ${name}: expected an integer ≥ ${min}, got "${v}"`);
    return Number(v);
  };
}

/** The run of `merge` in a curate JSON file (curate --out / --json), or a usage error saying what is there. */
function runFrom(file: string, merge: string): import("../author/curate-run.js").CandidateRun {
  let data: { candidates?: Array<{ sha: string; run?: import("../author/curate-run.js").CandidateRun }> };
  try {
    data = JSON.parse(readFileSync(file, "utf8"));
  } catch (e) {
    throw new UsageError(`task new: --run-results ${file}: not a curate JSON file (${(e as Error).message.split("\n")[0]})`);
  }
  const c = (data.candidates ?? []).find((x) => x.sha === merge);
  if (!c) throw new UsageError(`task new: --run-results ${file}: no candidate ${merge.slice(0, 12)} (it holds ${(data.candidates ?? []).map((x) => x.sha.slice(0, 10)).join(", ") || "none"})`);
  if (!c.run) throw new UsageError(`task new: --run-results ${file}: candidate ${merge.slice(0, 12)} was not run (curate --run)`);
  return c.run;
}

export function registerTaskNewCommands(tasks: Command): void {
  tasks
    .command("new")
    .description(
      "scaffold a task from a merged PR: task.yaml (git source, test_dirs and official_tests from merge's changed tests, deselect from a curate --run), prompt.md in the paper's Appendix B shape with the interface contract from the golden diff and TODO(author) marks, hidden/promises.yaml and a probe skeleton, the generated hollow, the upstream bundle; then the static half of task check",
    )
    .requiredOption("--repo <dir>", "the repository (a clone or a bare mirror)")
    .requiredOption("--base <sha>", "the pre-PR commit (the merge's first parent)")
    .requiredOption("--merge <sha>", "the merged commit")
    .requiredOption("--id <id>", "the task id (lowercase letters, digits, '-')")
    .addOption(new Option("--category <c>", "training | inference | rl").choices(["training", "inference", "rl"]).default("training"))
    .addOption(new Option("--type <t>", "feature | performance | refactor | bugfix").choices(["feature", "performance", "refactor", "bugfix"]).default("feature"))
    .option("--url <url>", "the upstream URL task.yaml names (default: the repository's origin)")
    .option("--title <text>", "the task's title (default: from the merge's subject)")
    .option("--tasks-dir <dir>", "where the task folder goes (default: the bundled tasks)")
    .option("--run-results <file>", "a curate --run JSON (curate --out F): official modules and the deselect list with reasons")
    .option("--gpus <n>", "GPUs the tests need (0: a CPU task)", int("--gpus", 0), 0)
    .option("--ranks <n>", "ranks per session", int("--ranks", 1), 1)
    .option("--python <path>", "env.python (default python3 for a GPU task, else /usr/bin/python3)")
    .option("--timeout <s>", "timeout_sec per test (default 120)", int("--timeout", 1), 120)
    .option("--env <NAME=VALUE>", "env.vars (repeatable)", (v: string, prev: string[] = []) => [...prev, v], [])
    .option("--host-python <path>", "Python for the static analysis (stdlib only; default $INFRADEV_HOST_PYTHON, else python3)")
    .option("--no-cache-import", "do not seed the git cache from the bundle")
    .option("--no-check", "do not run the static half of task check afterwards")
    .option("--json", "print JSON")
    .action(async (opts: TaskNewCli) => {
      if (!/^[a-z0-9][a-z0-9-]*$/.test(opts.id)) throw new UsageError(`task new: --id "${opts.id}": expected lowercase letters, digits and '-'`);
      const [{ resolveGitDir, resolveCommit, gitIn }, { scaffoldTask }] = await Promise.all([import("../author/git.js"), import("../author/scaffold.js")]);
      const gitDir = await resolveGitDir(opts.repo);
      const base = await resolveCommit(gitDir, opts.base, "task new: --base");
      const merge = await resolveCommit(gitDir, opts.merge, "task new: --merge");
      const parent = (await gitIn(gitDir, ["rev-parse", `${merge}^1`]).catch(() => "")).trim();
      const say = (m: string) => process.stderr.write(`[task new] ${m}\n`);
      if (parent !== base) say(`warning: --base ${base.slice(0, 12)} is not --merge's first parent (${parent.slice(0, 12) || "none"}): the golden patch is every change between them`);
      const url = opts.url ?? (await gitIn(gitDir, ["config", "--get", "remote.origin.url"]).catch(() => "")).trim();
      if (!url) throw new UsageError(`task new: ${opts.repo} has no origin URL: pass --url (the upstream URL the task's git source names)`);
      const tasksDir = resolve(opts.tasksDir ?? bundledTasksDir());
      const res = await scaffoldTask({
        gitDir, repoLabel: opts.repo, base, merge, id: opts.id, category: opts.category, type: opts.type, url, tasksDir, title: opts.title,
        run: opts.runResults ? runFrom(opts.runResults, merge) : null, gpus: opts.gpus, ranks: opts.ranks, python: opts.python, timeoutSec: opts.timeout,
        env: parseEnvPairs(opts.env, "task new: --env"), hostPython: opts.hostPython, importToCache: opts.cacheImport, onProgress: say,
      });
      let check: import("../grader/check/types.js").CheckReport | null = null;
      if (opts.check) {
        const [{ loadGraderTask }, { checkTaskStatic }] = await Promise.all([import("../task/hidden/grader-task.js"), import("../grader/check/task-check.js")]);
        const { mkdtempSync, rmSync } = await import("node:fs");
        const { tmpdir } = await import("node:os");
        const out = mkdtempSync(`${tmpdir()}/infradev-task-new-check-`);
        try {
          check = await checkTaskStatic({ task: loadGraderTask(opts.id, tasksDir), outDir: out, sandboxFactory: () => Promise.reject(new Error("static check grades nothing")), hostPython: opts.hostPython, onProgress: say });
        } finally {
          rmSync(out, { recursive: true, force: true });
        }
      }
      if (opts.json) {
        process.stdout.write(`${JSON.stringify({ ...res, static_check: check }, null, 2)}\n`);
      } else {
        const lines = [
          `wrote ${res.taskDir}:`,
          ...res.files.map((f) => `  ${f}`),
          `test_dirs: ${res.testDirs.join(", ")}; official: ${res.officialModules.join(", ")}; ${res.deselected.length} deselected`,
          `interface: ${res.symbols.filter((s) => s.change !== "body").length} symbol(s) added or re-signed, ${res.symbols.filter((s) => s.change === "body").length} changed inside; hollow: ${res.hollow.stubbed.length} stubbed, ${res.hollow.reverted.length} reverted`,
          `bundle: ${(res.bundle.bytes / 1048576).toFixed(1)} MiB${res.cache ? `, imported into ${res.cache.mirror}` : ""}`,
          ...res.notes.map((n) => `note: ${n}`),
        ];
        if (check) {
          lines.push(`static check: ${check.passed ? "passed" : "FAILED"} (${check.findings.filter((f) => f.level === "error").length} error(s), ${check.findings.filter((f) => f.level === "warning").length} warning(s))`);
          for (const f of check.findings) lines.push(`  ${f.level} ${f.area}: ${f.message}`);
        }
        process.stdout.write(`${lines.join("\n")}\n`);
      }
      if (check && !check.passed) process.exitCode = 1;
    });
}
