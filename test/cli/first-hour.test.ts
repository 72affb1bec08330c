/**
 * Issue 12 ("first hour of a new user"), through the built CLI where the item is about the CLI: a task
 * this node cannot run is refused (1), the interpreter rule (6), --force that really re-runs (4), a
 * missing --patch (5), configuration checked up front and prune exit codes (10), output that reads
 * well (14), `runs prune` (15), and what `tasks list` / `--help` load (7). Real bwrap sandboxes and a
 * real 2-rank calibration of the tiny-mean fixture (once, shared).
 */
import { TEST_FIXTURES } from "../helpers/paths.js";
import { spawnSync } from "node:child_process";
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureBuilt } from "../helpers/backends.js";

const FIXTURES = join(TEST_FIXTURES, "grader", "tasks");
const HAS_GPU = existsSync("/dev/nvidiactl") || existsSync("/dev/nvidia0");
const tmp = mkdtempSync(join(tmpdir(), "infradev-first-hour-"));
let cli: string;

const run = (args: string[], env: Record<string, string | undefined> = {}, timeout = 240_000) =>
  spawnSync(process.execPath, [cli, ...args], { encoding: "utf8", timeout, env: { ...process.env, INFRADEV_PYTHON: undefined, ...env }, cwd: tmp });

/** A tasks folder holding a copy of tiny-mean with `edit` applied to its task.yaml. */
function taskCopy(name: string, edit: (yaml: string) => string): string {
  const dir = join(tmp, `tasks-${name}`);
  cpSync(join(FIXTURES, "tiny-mean"), join(dir, "tiny-mean"), { recursive: true });
  const y = join(dir, "tiny-mean", "task.yaml");
  writeFileSync(y, edit(readFileSync(y, "utf8")));
  return dir;
}

const oneLine = (stderr: string) => stderr.trim().split("\n");

beforeAll(() => {
  cli = ensureBuilt();
}, 300_000);
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe("checks before anything runs (no sandbox started, nothing cached)", () => {
  it.skipIf(HAS_GPU)("grade, calibrate and demo --task refuse a requires_gpu task on a node without a GPU: the reason, exit 2, nothing calibrated or cached", () => {
    const tasks = taskCopy("gpu", (y) => `${y}requires_gpu: true\n`);
    const cal = join(tmp, "gpu-cal");
    const out = join(tmp, "gpu-out");
    const patch = join(FIXTURES, "tiny-mean", "hidden", "golden.patch");
    for (const args of [
      ["grade", "--task", "tiny-mean", "--patch", patch, "--out", out],
      ["calibrate", "--task", "tiny-mean"],
      ["demo", "--task", "tiny-mean", "--out", out],
    ]) {
      const r = run([...args, "--tasks-dir", tasks, "--calibration-dir", cal]);
      expect(r.status, `${args[0]}: ${r.stderr}`).toBe(2);
      expect(oneLine(r.stderr), r.stderr).toHaveLength(1);
      expect(r.stderr).toContain(`infradev: ${args[0]}: task tiny-mean cannot run on this machine: requires a CUDA GPU`);
      expect(r.stderr).toContain("--skip-runnable-check");
      expect(r.stdout).toBe("");
    }
    expect(existsSync(cal)).toBe(false);
    expect(existsSync(out)).toBe(false);
    // The bundled GPU task the issue found graded "resolved" on a CPU node.
    const bundled = run(["calibrate", "--task", "cuda-graph-decode", "--calibration-dir", cal]);
    expect(bundled.status).toBe(2);
    expect(existsSync(cal)).toBe(false);
    // demo without --task still lists it as not run here (and runs the rest): not an error.
  });

  it("the override says loudly what it does and goes on to the next check", () => {
    const tasks = taskCopy("gpu-override", (y) => `${y}requires_gpu: true\nenv: { python: /nonexistent/python3 }\n`);
    const r = run(["grade", "--task", "tiny-mean", "--tasks-dir", tasks, "--skip-runnable-check", "--sandbox", "docker", "--out", join(tmp, "o"), "--calibration-dir", join(tmp, "c")]);
    expect(r.status, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/^infradev grade: WARNING: --skip-runnable-check: task tiny-mean cannot run on this machine \(.*\), running it ANYWAY: .*describe this machine, not the task$/m);
    // ...and the next check (docker needs an image) is what stops it here.
    expect(r.stderr).toMatch(/^infradev: grade: --sandbox docker needs an image and task tiny-mean names none: pass --image <image> .* or set `image:` in its task.yaml$/m);
  });

  it("one rule for the interpreter: --python, else INFRADEV_PYTHON, else env.python (a missing one is refused, exit 2)", () => {
    const tasks = taskCopy("python", (y) => y);
    const base = ["grade", "--task", "tiny-mean", "--tasks-dir", tasks, "--patch", join(FIXTURES, "tiny-mean", "hidden", "golden.patch"), "--out", join(tmp, "o"), "--calibration-dir", join(tmp, "c")];
    for (const cmd of [base, ["calibrate", ...base.slice(1, 5), ...base.slice(9)], ["demo", "--task", "tiny-mean", "--tasks-dir", tasks, "--out", join(tmp, "o")]]) {
      const flag = run([...cmd, "--python", "/nonexistent/flag/python3"]);
      expect(flag.status, flag.stderr).toBe(2);
      expect(flag.stderr).toContain(`infradev: ${cmd[0]}: task tiny-mean cannot run on this machine: needs the Python interpreter /nonexistent/flag/python3, which is missing here`);
    }
    const env = run(base, { INFRADEV_PYTHON: "/nonexistent/env/python3" });
    expect(env.status).toBe(2);
    expect(env.stderr).toContain("needs the Python interpreter /nonexistent/env/python3");
    // --python beats INFRADEV_PYTHON: the runnable check passes, the docker check is next.
    const both = run([...base, "--python", "/usr/bin/python3", "--sandbox", "docker"], { INFRADEV_PYTHON: "/nonexistent/env/python3" });
    expect(both.status).toBe(2);
    expect(both.stderr).toContain("--sandbox docker needs an image");
    expect(both.stderr).not.toContain("/nonexistent");
    // And task.yaml's env.python is the last resort.
    const yaml = run(base.map((a) => (a === tasks ? taskCopy("python-yaml", (y) => `${y}env: { python: /nonexistent/yaml/python3 }\n`) : a)));
    expect(yaml.stderr).toContain("needs the Python interpreter /nonexistent/yaml/python3");
  });

  it("grade --sandbox docker without an image fails before the patch is applied: exit 2, the fix named", () => {
    const out = join(tmp, "docker-out");
    const r = run(["grade", "--task", "tiny-mean", "--tasks-dir", FIXTURES, "--patch", join(FIXTURES, "tiny-mean", "hidden", "golden.patch"), "--sandbox", "docker", "--out", out, "--calibration-dir", join(tmp, "c")]);
    expect(r.status).toBe(2);
    expect(oneLine(r.stderr)).toEqual(["infradev: grade: --sandbox docker needs an image and task tiny-mean names none: pass --image <image> (on the engine already: docker pull <image>) or set `image:` in its task.yaml"]);
    expect(existsSync(out)).toBe(false);
  });

  it("sandbox prune without a reachable docker engine exits 1 with the reason (it is not bad input)", () => {
    const r = run(["sandbox", "prune"], { DOCKER_HOST: `unix://${join(tmp, "no-engine.sock")}` });
    expect(r.status, r.stderr).toBe(1);
    expect(oneLine(r.stderr)).toHaveLength(1);
    expect(r.stderr).toMatch(/^infradev: sandbox prune: .*no-engine\.sock/);
  });

  it("grade --patch F with F missing: exit 2 with a clear message, nothing written", () => {
    const out = join(tmp, "missing-out");
    const r = run(["grade", "--task", "tiny-mean", "--tasks-dir", FIXTURES, "--patch", "no-such.patch", "--out", out, "--calibration-dir", join(tmp, "c")]);
    expect(r.status).toBe(2);
    expect(oneLine(r.stderr)).toEqual([`infradev: grade: --patch no-such.patch: no such file (${join(tmp, "no-such.patch")}); omit --patch, or add --allow-missing-patch, to score a submission that produced nothing as missing_patch`]);
    expect(existsSync(out)).toBe(false);
    mkdirSync(join(tmp, "a-folder.patch"), { recursive: true });
    const dir = run(["grade", "--task", "tiny-mean", "--tasks-dir", FIXTURES, "--patch", "a-folder.patch", "--out", out]);
    expect(dir.status).toBe(2);
    expect(dir.stderr).toContain("--patch a-folder.patch: not a regular file");
  });
});

describe("on real sandboxes (tiny-mean, local backend; gold calibrated once)", () => {
  const cal = () => join(tmp, "cal");
  const out = () => join(tmp, "out");
  const golden = join(FIXTURES, "tiny-mean", "hidden", "golden.patch");
  const grade = (extra: string[]) => run(["grade", "--task", "tiny-mean", "--tasks-dir", FIXTURES, "--calibration-dir", cal(), "--out", out(), ...extra]);
  let first: ReturnType<typeof run>;

  beforeAll(() => {
    first = run(["calibrate", "--task", "tiny-mean", "--tasks-dir", FIXTURES, "--calibration-dir", cal(), "--json"]);
  }, 240_000);

  it("the calibration's fingerprint is taken in the sandbox the tests run in, with their interpreter", () => {
    expect(first.status, first.stderr).toBe(0);
    const c = JSON.parse(first.stdout) as { cached: boolean; fingerprint: { sandbox: string; python: string; torch: string } };
    expect(c.cached).toBe(false);
    expect(c.fingerprint.sandbox).toBe("local");
    expect(c.fingerprint.python).toMatch(/^\/usr\/bin\/python3(\.\d+)? 3\.\d+\.\d+$/);
    expect(c.fingerprint.torch).toMatch(/^\d+\.\d+/);
  });

  it("calibrate --force really runs gold again (no session file reused); without it the cache answers", () => {
    const cached = run(["calibrate", "--task", "tiny-mean", "--tasks-dir", FIXTURES, "--calibration-dir", cal(), "--json"]);
    expect(JSON.parse(cached.stdout).cached).toBe(true);
    const forced = run(["calibrate", "--task", "tiny-mean", "--tasks-dir", FIXTURES, "--calibration-dir", cal(), "--json", "--force"]);
    expect(forced.status, forced.stderr).toBe(0);
    const f = JSON.parse(forced.stdout) as { cached: boolean; created_at: string };
    expect(f.cached).toBe(false);
    expect(f.created_at).not.toBe(JSON.parse(first.stdout).created_at);
    expect(forced.stderr).not.toMatch(/reusing/);
    expect(forced.stderr.match(/gold run \d\/3: cpu\.official: running/g)).toHaveLength(3);
  }, 240_000);

  it("grade --force grades again (a complete result is otherwise reused); progress lines name test paths only", () => {
    const a = grade(["--patch", golden, "--json"]);
    expect(a.status, a.stderr).toBe(0);
    expect(JSON.parse(a.stdout).status).toBe("graded");
    // The progress line lists what runs, never pytest option values (-c pyproject.toml, --rootdir=.).
    const running = a.stderr.split("\n").filter((l) => / running /.test(l));
    expect(running.length).toBeGreaterThan(0);
    for (const l of running) expect(l).not.toMatch(/pyproject\.toml|--rootdir|-c |confcutdir/);
    expect(running.join("\n")).toMatch(/official: running tests \(\+ \d+ canaries\)/);
    const b = grade(["--patch", golden]);
    expect(b.stderr).toContain("complete result found, reusing");
    const c = grade(["--patch", golden, "--force"]);
    expect(c.status, c.stderr).toBe(0);
    expect(c.stderr).not.toMatch(/reusing/);
    expect(c.stderr).toMatch(/official: running/);
  }, 240_000);

  it("--allow-missing-patch scores missing_patch, each missing path in its own results folder", () => {
    const r1 = grade(["--patch", "gone-1.patch", "--allow-missing-patch", "--json"]);
    const r2 = grade(["--patch", "gone-2.patch", "--allow-missing-patch", "--json"]);
    expect(r1.status, r1.stderr).toBe(0);
    const [j1, j2] = [JSON.parse(r1.stdout), JSON.parse(r2.stdout)];
    expect(j1).toMatchObject({ status: "missing_patch", score: 0 });
    expect(j1.reason).toContain("gone-1.patch");
    expect(j2.reason).toContain("gone-2.patch");
    expect(j2.reason).not.toContain("gone-1.patch");
    const folders = readdirSync(join(out(), "tiny-mean")).filter((d) => d.startsWith("missing"));
    expect(folders.length).toBe(2);
    // --patch omitted: a submission that produced nothing.
    const none = grade(["--json"]);
    expect(JSON.parse(none.stdout)).toMatchObject({ status: "missing_patch", reason: "no patch was submitted" });
  }, 120_000);

  it("the quick demo (the README's first command, issue 23): the table, expectations met, plain progress lines in a log, the whole matrix one flag away; on a terminal one live line", () => {
    // The grade tests' results folder: golden's complete result there is reused, as a user's would be.
    const args = ["demo", "--task", "tiny-mean", "--tasks-dir", FIXTURES, "--calibration-dir", cal(), "--out", out()];
    const r = run(args, {}, 1_200_000);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^tiny-mean:golden +yes +yes /m);
    expect(r.stdout).toMatch(/^tiny-mean:adversarial\/sum-not-mean +yes +no /m);
    expect(r.stdout).toContain("expectations met");
    expect(r.stdout).toMatch(/This was the quick demo \(tiny-mean at world size 2 with 2 of its 2 adversarial patches\)\. .* npm run demo -- --full/s);
    // A log: every line is a plain `[demo m:ss] …` line; test counters are for a live line only.
    const lines = r.stderr.trim().split("\n");
    for (const l of lines) expect(l).toMatch(/^\[demo \d+:\d\d\] /);
    expect(r.stderr).not.toMatch(/\r|\x1b\[/);
    expect(r.stderr).not.toMatch(/\d+\/\d+ tests$/m);
    expect(r.stderr).toMatch(/^\[demo [\d:]+\] quick demo: tiny-mean at world size\(s\) 2, 6 submissions/m);
    expect(r.stderr).toMatch(/\[5\/6\] tiny-mean:base: graded, Set A (yes|no), Set B no/);
    // On a terminal (script(1) gives it a pty): one line rewritten in place, results above it.
    const tty = spawnSync("script", ["-qec", [process.execPath, cli, ...args].map((a) => `'${a}'`).join(" "), "/dev/null"], { encoding: "utf8", timeout: 240_000, cwd: tmp, env: { ...process.env, INFRADEV_PYTHON: undefined, TERM: "xterm" } });
    expect(tty.status, tty.stdout).toBe(0);
    expect(tty.stdout).toMatch(/\r\x1b\[K\[demo \d+:\d\d\] \[1\/6\] tiny-mean:golden: graded, Set A yes, Set B yes \(reused\)\r?\n/);
    expect(tty.stdout).toMatch(/\r\[demo \d+:\d\d\] [^\r\n]*\x1b\[K/);
    expect(tty.stdout).toContain("expectations met");
  }, 1_500_000);

  it("an inapplicable patch says 'inapplicable' once", () => {
    const bad = join(tmp, "bad.patch");
    writeFileSync(bad, "--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n");
    const r = grade(["--patch", bad]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^tiny-mean: inapplicable — /m);
    expect(r.stdout).not.toMatch(/inapplicable — inapplicable/);
  }, 120_000);
});

describe("output", () => {
  it("log lines on stderr: JSON when stderr is not a terminal, one readable line per event when it is", () => {
    const code = `const { createLogger } = await import(${JSON.stringify(join(cli, "..", "..", "lib", "logger.js"))}); createLogger("infradev-serve").warn({ run: "r-1", n: 2 }, "base checkout gone");`;
    const piped = spawnSync(process.execPath, ["--input-type=module", "-e", code], { encoding: "utf8", env: { ...process.env, INFRADEV_LOG_FORMAT: undefined } });
    expect(JSON.parse(piped.stderr.trim())).toMatchObject({ level: 40, name: "infradev-serve", msg: "base checkout gone", run: "r-1", n: 2 });
    // A real terminal: script(1) gives the child a pty for stdin, stdout and stderr.
    const file = join(tmp, "logger.mjs");
    writeFileSync(file, code);
    const tty = spawnSync("script", ["-qec", `${process.execPath} ${file}`, "/dev/null"], { encoding: "utf8", env: { ...process.env, INFRADEV_LOG_FORMAT: undefined } });
    expect(tty.stdout.trim()).toMatch(/^\d\d:\d\d:\d\d WARN infradev-serve: base checkout gone run=r-1 n=2$/);
  });

  it("tasks list and --help load neither the grader, dockerode nor the MCP SDK", () => {
    const record = join(tmp, "loaded.txt");
    const hooks = join(tmp, "hooks.mjs");
    writeFileSync(hooks, `import { appendFileSync } from "node:fs";\nexport async function load(url, ctx, next) { appendFileSync(${JSON.stringify(record)}, url + "\\n"); return next(url, ctx); }\n`);
    const reg = join(tmp, "register.mjs");
    writeFileSync(reg, `import { register } from "node:module";\nregister(${JSON.stringify(`file://${hooks}`)});\n`);
    for (const args of [["tasks", "list"], ["--help"], ["grade", "--help"]]) {
      rmSync(record, { force: true });
      const r = spawnSync(process.execPath, ["--import", reg, cli, ...args], { encoding: "utf8" });
      expect(r.status, r.stderr).toBe(0);
      const loaded = readFileSync(record, "utf8");
      expect(loaded).toContain("/cli/main.js");
      for (const heavy of ["/node_modules/dockerode/", "/node_modules/@modelcontextprotocol/", "/dist/grader/grade.js", "/dist/server/", "/dist/sandbox/docker.js", "/dist/sandbox/index.js"]) {
        expect(loaded.includes(heavy), `${args.join(" ")} loaded ${heavy}`).toBe(false);
      }
    }
  });
});

describe("runs prune", () => {
  const runsDir = join(tmp, "runs");
  const day = 24 * 3600;
  /** A run folder as serve leaves it; `ended`: its trace ends with session_end; `idleSec`: its files' age. */
  function makeRun(id: string, ended: boolean, idleSec: number): string {
    const dir = join(runsDir, id);
    mkdirSync(join(dir, "workspace", "pkg"), { recursive: true });
    mkdirSync(join(dir, "base"), { recursive: true });
    mkdirSync(join(dir, "logs"), { recursive: true });
    writeFileSync(join(dir, "workspace", "pkg", "big.bin"), Buffer.alloc(4096));
    writeFileSync(join(dir, "session.json"), JSON.stringify({ run_id: id }));
    writeFileSync(join(dir, "patch.diff"), "diff\n");
    writeFileSync(join(dir, "trace.jsonl"), `${JSON.stringify({ event: "session_start" })}\n${ended ? `${JSON.stringify({ event: "session_end" })}\n` : ""}`);
    const t = (Date.now() - idleSec * 1000) / 1000;
    for (const f of ["session.json", "patch.diff", "trace.jsonl"]) utimesSync(join(dir, f), t, t);
    return dir;
  }

  it("a dry run by default; --yes removes the workspace and base of finished and stale runs, never following a link", () => {
    const outside = join(tmp, "outside");
    mkdirSync(outside);
    writeFileSync(join(outside, "keep.txt"), "mine");
    const finished = makeRun("finished-1", true, 60);
    const stale = makeRun("stale-1", false, 2 * day);
    const active = makeRun("active-1", false, 60);
    // The agent owned the workspace: a link out of it, and a folder it cannot read.
    symlinkSync(outside, join(stale, "workspace", "link"));
    chmodSync(join(stale, "workspace", "pkg"), 0o000);
    const dry = run(["runs", "prune", "--runs-dir", runsDir, "--json"]);
    expect(dry.status, dry.stderr).toBe(0);
    const d = JSON.parse(dry.stdout) as { dry_run: boolean; pruned: Array<{ run_id: string; state: string; remove: string[] }>; kept: Array<{ run_id: string; state: string }> };
    expect(d.dry_run).toBe(true);
    expect(d.pruned.map((p) => [p.run_id, p.state, p.remove])).toEqual([
      ["finished-1", "finished", ["workspace", "base"]],
      ["stale-1", "stale", ["workspace", "base"]],
    ]);
    expect(d.kept.map((k) => [k.run_id, k.state])).toEqual([["active-1", "active"]]);
    expect(existsSync(join(finished, "workspace"))).toBe(true);
    const text = run(["runs", "prune", "--runs-dir", runsDir]);
    expect(text.stdout).toMatch(/^would remove finished-1\/workspace, finished-1\/base {2}\(finished/m);
    expect(text.stdout).toContain("dry run: nothing was removed; run again with --yes to remove it");

    const yes = run(["runs", "prune", "--runs-dir", runsDir, "--yes"]);
    expect(yes.status, yes.stderr).toBe(0);
    for (const dir of [finished, stale]) {
      expect(readdirSync(dir).sort()).toEqual(["logs", "patch.diff", "session.json", "trace.jsonl"]);
    }
    expect(readFileSync(join(outside, "keep.txt"), "utf8")).toBe("mine");
    expect(existsSync(join(active, "workspace", "pkg", "big.bin"))).toBe(true);
    // --older-than: an unfinished run idle that long is stale; --whole takes the folder itself.
    const whole = run(["runs", "prune", "--runs-dir", runsDir, "--older-than", "30", "--whole", "--yes", "--json"]);
    expect((JSON.parse(whole.stdout) as { pruned: Array<{ run_id: string }> }).pruned.map((p) => p.run_id)).toEqual(["active-1", "finished-1", "stale-1"]);
    expect(readdirSync(runsDir)).toEqual([]);
  });

  it("a runs folder that does not exist is bad input (exit 2)", () => {
    const r = run(["runs", "prune", "--runs-dir", join(tmp, "nope")]);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/^infradev: runs prune: .*nope is not a folder/);
  });
});
