import type { Sandbox } from "../../sandbox/types.js";
import type { PatchStats } from "./deps.js";

/**
 * The agent's change against base, computed by git *inside the sandbox*: the workspace's .git is
 * writable by the agent, and a planted `core.fsmonitor`, diff driver or filter would run whatever it
 * names. Inside the sandbox that is no worse than run_shell; on the host it would be an escape.
 */

const GIT_SAFE = [
  "-c", "core.fsmonitor=false",
  "-c", "core.hooksPath=/dev/null",
  "-c", "safe.directory=*",
  "-c", "diff.noprefix=false",
  "-c", "core.quotePath=false",
];

export interface FileStat {
  path: string;
  /** null for binary files. */
  added: number | null;
  removed: number | null;
}

export interface WorkspaceDiff extends PatchStats {
  patch: string;
  files: FileStat[];
}

const MARK = "@@infradev-numstat-end@@";

// `add -N` makes new files show up in `git diff` without staging their content.
const SCRIPT = [
  "set -e",
  'base="$1"; shift',
  'git "$@" add -A -N -- .',
  'git "$@" diff --numstat --no-ext-diff --no-textconv --no-renames "$base" -- .',
  `printf '%s\\n' '${MARK}'`,
  'git "$@" diff --binary --full-index --no-ext-diff --no-textconv --no-renames "$base" -- .',
].join("\n");

export function parseNumstat(text: string): FileStat[] {
  const files: FileStat[] = [];
  for (const line of text.split("\n")) {
    const m = /^(-|\d+)\t(-|\d+)\t(.+)$/.exec(line);
    if (!m) continue;
    files.push({ path: m[3]!, added: m[1] === "-" ? null : Number(m[1]), removed: m[2] === "-" ? null : Number(m[2]) });
  }
  return files;
}

export async function workspaceDiff(sandbox: Sandbox, baseCommit: string, signal?: AbortSignal): Promise<WorkspaceDiff> {
  if (!/^[0-9a-f]{7,64}$/.test(baseCommit)) throw new Error(`base commit "${baseCommit}" is not a commit id`);
  const res = await sandbox.exec(["bash", "-c", SCRIPT, "infradev-diff", baseCommit, ...GIT_SAFE], {
    cwd: sandbox.repoDir,
    timeoutSec: 120,
    // The patch must come back whole: patch.diff is what gets graded.
    maxOutputBytes: 256 * 1024 * 1024,
    signal,
    env: { GIT_CONFIG_NOSYSTEM: "1", GIT_CONFIG_GLOBAL: "/dev/null", GIT_TERMINAL_PROMPT: "0", GIT_PAGER: "cat" },
  });
  if (res.harnessError) throw new Error(`sandbox: ${res.harnessError}`);
  if (res.timedOut) throw new Error("git diff timed out after 120 s");
  if (res.exitCode !== 0) throw new Error(`git diff failed (exit ${res.exitCode}): ${res.stderr.trim().split("\n").slice(-3).join(" | ")}`);
  if (res.truncated) throw new Error("the patch is larger than 256 MiB; remove generated or binary files from the workspace");
  const at = res.stdout.indexOf(`${MARK}\n`);
  if (at < 0) throw new Error("git diff output is missing its section marker");
  const files = parseNumstat(res.stdout.slice(0, at));
  const patch = res.stdout.slice(at + MARK.length + 1);
  return {
    patch,
    files,
    files_changed: files.length,
    lines_added: files.reduce((n, f) => n + (f.added ?? 0), 0),
    lines_removed: files.reduce((n, f) => n + (f.removed ?? 0), 0),
    patch_bytes: Buffer.byteLength(patch),
  };
}
