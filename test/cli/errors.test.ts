/**
 * The built `infradev` CLI on bad input: one line naming what is wrong, exit 2, no stack trace; a
 * failure that is not bad input says its message and shows the stack only with INFRADEV_DEBUG=1.
 */
import { REPO_ROOT, TEST_FIXTURES } from "../helpers/paths.js";
import { spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureBuilt } from "../helpers/backends.js";

let cli: string;
const tmp = mkdtempSync(join(tmpdir(), "infradev-cli-errors-"));
beforeAll(() => {
  cli = ensureBuilt();
}, 300_000);
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const run = (args: string[], env: Record<string, string> = {}) =>
  spawnSync(process.execPath, [cli, ...args], { encoding: "utf8", timeout: 60_000, env: { ...process.env, ...env }, cwd: tmp });

describe("infradev CLI errors", () => {
  it("bad input: one line that names the problem, exit 2, no stack", () => {
    const cases: Array<[string[], string]> = [
      [["connect", "foo", "--task", "grad-bucketing"], 'infradev: connect: harness must be codex or opencode (got "foo")'],
      [["connect", "codex", "--task", "grad-bucketing", "--opencode-v1"], "infradev: connect: --opencode-v1 applies to opencode only"],
      [["connect", "opencode", "--task", "grad-bucketing", "--http", "--port", "99999"], 'infradev: connect: --port must be a fixed port from 1 to 65535 (got "99999"); the config names it'],
      [["demo", "--task", "nope", "--out", join(tmp, "demo")], 'infradev: demo: unknown task "nope" in'],
      [["tasks", "show", "nope"], 'infradev: task: unknown task "nope"'],
      [["task", "check", "grad-bucketing", "--mutants", "-1"], 'infradev: --mutants: expected an integer ≥ 0, got "-1"'],
      [["task", "check", "grad-bucketing", "--min-mutation-score", "2"], 'infradev: --min-mutation-score: expected a number in [0, 1], got "2"'],
      [["task", "check", "grad-bucketing", "--jobs", "0"], 'infradev: --jobs: expected an integer ≥ 1, got "0"'],
      [["task", "check", "grad-bucketing", "--time-limit", "x"], 'infradev: --time-limit: expected minutes > 0, got "x"'],
    ];
    for (const [args, message] of cases) {
      const r = run(args);
      expect(r.status, args.join(" ")).toBe(2);
      expect(r.stderr.startsWith(message), `${args.join(" ")}: ${r.stderr}`).toBe(true);
      expect(r.stderr.trim().split("\n"), args.join(" ")).toHaveLength(1);
      expect(r.stderr).not.toMatch(/^\s+at /m);
      expect(r.stdout).toBe("");
    }
  });

  it("commander's usage errors are one line naming the command, exit 2, no help dump", () => {
    const cases: Array<[string[], RegExp]> = [
      [["grade", "--patch", "x.patch"], /^infradev: grade: required option '--task <id>' not specified \(see: infradev grade --help\)$/],
      [["grade", "--task", "grad-bucketing", "--sandbox", "wat"], /^infradev: grade: option '--sandbox <kind>' argument 'wat' is invalid\. Allowed choices are local, docker, none\./],
      [["tasks", "list", "--frobnicate"], /^infradev: tasks list: unknown option '--frobnicate'/],
      [["frobnicate"], /^infradev: unknown command 'frobnicate' \(see: infradev --help\)$/],
    ];
    for (const [args, message] of cases) {
      const r = run(args);
      expect(r.status, `${args.join(" ")}: ${r.stderr}`).toBe(2);
      expect(r.stderr.trim().split("\n"), `${args.join(" ")}: ${r.stderr}`).toHaveLength(1);
      expect(r.stderr.trim()).toMatch(message);
      expect(r.stderr).not.toMatch(/Usage:|^\s+at /m);
    }
    // Help and version are successes; the version is the package's.
    const help = run(["grade", "--help"]);
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/^Usage: infradev grade/);
    const version = run(["--version"]);
    expect(version.status).toBe(0);
    expect(version.stdout.trim()).toBe(JSON.parse(readFileSync(join(REPO_ROOT, "package.json"), "utf8")).version);
  });

  it("tasks list shows every task of a folder, a broken one as an error row naming its real file (exit 1)", () => {
    const dir = join(tmp, "bank");
    cpSync(join(TEST_FIXTURES, "grader", "tasks", "tiny-mean"), join(dir, "tiny-mean"), { recursive: true });
    cpSync(join(TEST_FIXTURES, "grader", "tasks", "tiny-mean"), join(dir, "broken"), { recursive: true });
    writeFileSync(join(dir, "broken", "task.yaml"), "schema_version: 1\nid: broken\nranks: two\n");
    const r = run(["tasks", "list", "--tasks-dir", dir, "--json"]);
    expect(r.status, r.stderr).toBe(1);
    const rows = JSON.parse(r.stdout) as Array<{ id: string; error?: string; title: string }>;
    expect(rows.map((x) => x.id).sort()).toEqual(["broken", "tiny-mean"]);
    expect(rows.find((x) => x.id === "tiny-mean")!.error).toBeUndefined();
    // Named as it lies, relative to the working directory (the CLI runs in tmp here), not tasks/broken/.
    expect(rows.find((x) => x.id === "broken")!.error).toMatch(/^bank\/broken\/task\.yaml: /);
    const table = run(["tasks", "list", "--tasks-dir", dir]);
    expect(table.status).toBe(1);
    expect(table.stdout).toMatch(/^broken +error: .*task\.yaml: /m);
    expect(table.stdout).toMatch(/^tiny-mean +all_mean/m);
  });

  it("another failure: its message and a hint, exit 1; the stack with INFRADEV_DEBUG=1", () => {
    // The calibration cache would lie below a file: creating it fails before anything runs.
    const blocker = join(tmp, "not-a-dir");
    writeFileSync(blocker, "x");
    const args = ["calibrate", "--task", "grad-bucketing", "--calibration-dir", join(blocker, "cal"), "--sandbox", "none"];
    const plain = run(args);
    expect(plain.status).toBe(1);
    expect(plain.stderr).toMatch(/^infradev: .*not-a-dir.*\n {2}\(INFRADEV_DEBUG=1 shows where it failed\)\n$/m);
    expect(plain.stderr).not.toMatch(/^\s+at /m);
    const debug = run(args, { INFRADEV_DEBUG: "1" });
    expect(debug.status).toBe(1);
    expect(debug.stderr).toMatch(/^\s+at /m);
  });
});
