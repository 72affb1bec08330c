/** `infradev curate`: flags to one call of author/curate (and author/curate-run with --run). */
import { existsSync, statSync } from "node:fs";
import { resolve } from "node:path";
import { Option, type Command } from "commander";
import { UsageError } from "../lib/errors.js";
import { writeJsonAtomic } from "../lib/json.js";

interface CurateCli {
  repo: string;
  branch?: string;
  since?: string;
  paths?: string[];
  core?: string;
  minLines?: number;
  maxLines?: number;
  maxFiles?: number;
  top?: number;
  only?: string[];
  have?: string;
  json?: boolean;
  out?: string;
  run?: boolean;
  python?: string;
  nproc: number;
  sandbox: "local" | "none";
  env: string[];
  pythonpath?: string[];
  testTimeout: number;
  runTimeout: number;
  parallel?: boolean;
  work?: string;
  keep?: boolean;
  hostPython?: string;
}

function int(name: string, min = 0) {
  return (v: string): number => {
    if (!/^\d+$/.test(v) || Number(v) < min) throw new UsageError(`curate: ${name}: expected an integer ≥ ${min}, got "${v}"`);
    return Number(v);
  };
}

function collect(v: string, prev: string[] = []): string[] {
  return [...prev, v];
}

export function parseEnvPairs(pairs: string[], flag: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const p of pairs) {
    const m = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/s.exec(p);
    if (!m) throw new UsageError(`${flag}: expected NAME=VALUE, got "${p}"`);
    env[m[1]!] = m[2]!;
  }
  return env;
}

export function registerCurateCommands(program: Command): void {
  program
    .command("curate")
    .description(
      "rank the merged changes of a git repository as task candidates, by the InfraDev paper's filters (merged and not reverted; size; adds or changes tests; distributed / parallel / memory code; later changes build on it; with --have, its tests' imports installed), each a column with its reason, with the test files and the commands to check each; --run runs the tests it changes at base (with merge's test folders) and at merge: fail→pass, pass→pass, needs more GPUs",
    )
    .requiredOption("--repo <dir>", "the repository (a clone or a bare mirror)")
    .option("--branch <rev>", "the main line (default HEAD)")
    .option("--since <date>", "only changes merged since (any date git reads: 2026-01-01, \"6 months ago\")")
    .option("--paths <glob...>", "only changes touching these paths (git glob pathspecs, e.g. 'megatron/core/inference/**')")
    .option("--core <dir>", "the core package for the size column (default: the largest top-level package, or its core/)")
    .option("--min-lines <n>", "size filter: at least this many code lines changed (default 30)", int("--min-lines"))
    .option("--max-lines <n>", "size filter: at most this many (default 1500)", int("--max-lines", 1))
    .option("--max-files <n>", "size filter: at most this many code files (default 25)", int("--max-files", 1))
    .option("--top <n>", "show this many candidates (default 20)", int("--top", 1))
    .option("--only <sha>", "only this commit (a sha prefix; repeatable)", collect)
    .option("--have <file>", "installed distribution names, one per line (bench/gpu_image_packages.txt): a column for whether its tests' unguarded imports are all there")
    .option("--json", "print JSON")
    .option("--out <file>", "also write the JSON here (task new --run-results reads it)")
    .option("--run", "run each shown candidate's changed tests at base (with merge's test folders) and at merge")
    .option("--python <path>", "--run: the tests' interpreter (default python3)")
    .option("--nproc <n>", "--run: ranks per session (default 1)", int("--nproc", 1), 1)
    .addOption(new Option("--sandbox <kind>", "--run: where the tests run (none = plain processes, e.g. a GPU node without bubblewrap)").choices(["local", "none"]).default("local"))
    .option("--env <NAME=VALUE>", "--run: environment for the tests (repeatable)", collect, [])
    .option("--pythonpath <dir>", "--run: a folder first on the tests' PYTHONPATH, read-only (import stand-ins, as a task's env.pythonpath; repeatable)", collect, [])
    .option("--test-timeout <s>", "--run: per-test limit (default 300)", int("--test-timeout", 1), 300)
    .option("--run-timeout <s>", "--run: per-session limit (default 1800)", int("--run-timeout", 1), 1800)
    .option("--parallel", "--run: base and merge at the same time")
    .option("--work <dir>", "--run: scratch folder for the trees (default: the temp folder)")
    .option("--keep", "--run: keep the trees")
    .option("--host-python <path>", "Python for the static analysis (stdlib only; default $INFRADEV_HOST_PYTHON, else python3)")
    .action(async (opts: CurateCli) => {
      const [{ curate }, { resolveGitDir }, { runCandidate }, { curateText }] = await Promise.all([
        import("../author/curate.js"), import("../author/git.js"), import("../author/curate-run.js"), import("../author/curate-format.js"),
      ]);
      if (opts.have && !existsSync(opts.have)) throw new UsageError(`curate: --have ${opts.have}: no such file`);
      const env = parseEnvPairs(opts.env, "curate: --env");
      const pythonPath = (opts.pythonpath ?? []).map((d) => {
        const abs = resolve(d);
        if (!existsSync(abs) || !statSync(abs).isDirectory()) throw new UsageError(`curate: --pythonpath ${d}: no such folder`);
        return abs;
      });
      const gitDir = await resolveGitDir(opts.repo);
      const say = (m: string) => process.stderr.write(`[curate] ${m}\n`);
      const res = await curate({
        gitDir, repoLabel: opts.repo, branch: opts.branch, since: opts.since, paths: opts.paths, core: opts.core, minLines: opts.minLines, maxLines: opts.maxLines,
        maxFiles: opts.maxFiles, top: opts.top, only: opts.only, have: opts.have ? resolve(opts.have) : undefined, hostPython: opts.hostPython, onProgress: say,
      });
      if (opts.only?.length && !res.candidates.length) throw new UsageError(`curate: --only ${opts.only.join(", ")}: no main-line change of ${opts.repo} matches${opts.since ? ` since ${opts.since}` : ""}`);
      if (opts.run) {
        if (res.candidates.length > 5) say(`--run over ${res.candidates.length} candidates: narrow it with --only or --top`);
        for (const c of res.candidates) {
          c.run = await runCandidate(c, {
            gitDir, python: opts.python, ranks: opts.nproc, sandbox: opts.sandbox, env, pythonPath, testTimeoutSec: opts.testTimeout, runTimeoutSec: opts.runTimeout,
            parallel: opts.parallel, workDir: opts.work ? resolve(opts.work) : undefined, keep: opts.keep, hostPython: opts.hostPython, onProgress: say,
          });
          say(`${c.sha.slice(0, 10)}: ${c.run.verdict}: ${c.run.why}`);
        }
      }
      const json = { repo: opts.repo, git_dir: gitDir, generated_at: new Date().toISOString(), ...res };
      if (opts.out) writeJsonAtomic(resolve(opts.out), json);
      process.stdout.write(opts.json ? `${JSON.stringify(json, null, 2)}\n` : curateText(res, opts.repo));
    });
}
