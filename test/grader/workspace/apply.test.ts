import { TEST_FIXTURES } from "../../helpers/paths.js";
import { execFileSync } from "node:child_process";
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { applyPatch, changedPaths } from "../../../src/grader/workspace/apply.js";
import { gradeSubmission } from "../../../src/grader/grade/grade.js";
import { checkPatch } from "../../../src/grader/workspace/patch-check.js";
import type { Calibration } from "../../../src/grader/grade/types.js";
import { CANARY_STYLES, MUST_PASS_STYLES } from "../../../src/grader/workspace/test-renaming.js";
import { freshWorkspace, installGradingTests, removeWorkspace, type GradingWorkspace } from "../../../src/grader/workspace/workspace.js";
import { loadGraderTask, type GraderTask } from "../../../src/task/hidden/grader-task.js";
import { gradedWorldSizes, planSessions } from "../../../src/grader/grade/sessions.js";

const FIXTURES = join(TEST_FIXTURES, "grader", "tasks");
const check = (text: string | Buffer) => checkPatch(typeof text === "string" ? Buffer.from(text) : text);
const newFile = (path: string, body = "x\n", mode = "100644") =>
  `diff --git a/${path} b/${path}\nnew file mode ${mode}\n--- /dev/null\n+++ b/${path}\n@@ -0,0 +1 @@\n+${body}`;

let scratch: string;
let task: GraderTask;
beforeAll(() => {
  scratch = mkdtempSync(join(tmpdir(), "infradev-grader-apply-"));
  task = loadGraderTask("tiny-mean", FIXTURES);
});
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function patchFile(name: string, content: string | Buffer): string {
  const p = join(scratch, name);
  writeFileSync(p, content);
  return p;
}

describe("patch pre-check (pure)", () => {
  it("accepts an ordinary diff and lists its paths", () => {
    const r = check(readFileSync(task.hidden.goldenPatch));
    expect(r).toEqual({ ok: true, paths: ["tests/test_ops.py", "tinyinfra/ops.py"] });
  });

  it("refuses paths outside the repo, into .git, symlinks and submodules", () => {
    const refused: Array<[string, RegExp]> = [
      [newFile("../escape.py"), /climbs out of the repo/],
      [newFile("a/../../escape.py"), /climbs out/],
      [`--- /dev/null\n+++ /etc/cron.d/x\n@@ -0,0 +1 @@\n+x\n`, /absolute path/],
      [`--- a//etc/passwd\n+++ b//etc/passwd\n@@ -1 +1 @@\n-x\n+y\n`, /absolute path/],
      [newFile(".git/hooks/post-checkout"), /\.git folder/],
      [newFile("sub/.GIT/config"), /\.git folder/],
      [newFile("link", "/etc", "120000"), /symlink/],
      [`diff --git a/m b/m\nold mode 100644\nnew mode 120000\n`, /symlink/],
      [`diff --git a/l b/l\nindex 1111111..2222222 120000\n--- a/l\n+++ b/l\n@@ -1 +1 @@\n-a\n+b\n`, /symlink's target/],
      [newFile("vendor/x", "x", "160000"), /submodule/],
      [`diff --git a/x.py b/x.py\nrename from x.py\nrename to ../x.py\n`, /climbs out/],
      [`diff --git "a/\\056\\056/q" "b/\\056\\056/q"\n`, /climbs out/],
      [`Index: ../../etc/passwd\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n`, /climbs out/],
    ];
    for (const [text, why] of refused) {
      const r = check(text);
      expect(r.ok, text).toBe(false);
      if (!r.ok) expect(r.reason).toMatch(why);
    }
  });

  it("refuses binary files and text that is not a diff, with a clear reason", () => {
    const bin = Buffer.from([0x7f, 0x45, 0x4c, 0x46, 0x00, 0x01, 0xff, 0xfe]);
    expect(check(bin)).toEqual({ ok: false, reason: "patch file is binary (NUL bytes or not UTF-8), not a text diff" });
    expect(check(Buffer.from([0xc3, 0x28, 0x41]))).toMatchObject({ ok: false, reason: expect.stringMatching(/binary/) });
    expect(check("I fixed the bug, trust me.\n")).toEqual({ ok: false, reason: "not a patch: no file headers (`diff --git` or `---`/`+++`) found" });
  });

  it("does not read a removed line that starts with '-- ' inside a hunk as a header", () => {
    const sql = `--- a/q.sql\n+++ b/q.sql\n@@ -1,2 +1,1 @@\n--- ../../etc/passwd\n select 1;\n`;
    expect(check(sql)).toEqual({ ok: true, paths: ["q.sql"] });
  });
});

describe("applyPatch (real git, real patch)", () => {
  let ws: GradingWorkspace;
  const fresh = async () => {
    if (ws) removeWorkspace(ws);
    ws = await freshWorkspace(task);
    return ws;
  };
  afterAll(() => ws && removeWorkspace(ws));

  it("applies with git apply and records the method", async () => {
    const w = await fresh();
    const r = await applyPatch(w.repoDir, task.hidden.goldenPatch, w.baseCommit);
    expect(r).toMatchObject({ applied: true, method: "git_apply" });
    expect(readFileSync(join(w.repoDir, "tinyinfra/ops.py"), "utf8")).toContain("def all_mean");
  });

  it("falls back to git apply --3way, then to patch --fuzz, resetting in between", async () => {
    let w = await fresh();
    const ops = readFileSync(join(w.repoDir, "tinyinfra/ops.py"), "utf8").split("\n");
    // A preimage that differs from base in a context line (blob known to git) → only --3way applies it.
    const v0 = [...ops];
    v0[3] = "# v0";
    const v1 = [...v0];
    v1[0] = "import torch  # patched";
    const blob = (text: string) => execFileSync("git", ["hash-object", "-w", "--stdin"], { cwd: w.repoDir, input: text }).toString().trim();
    const threeWay = `diff --git a/tinyinfra/ops.py b/tinyinfra/ops.py\nindex ${blob(v0.join("\n"))}..${blob(v1.join("\n"))} 100644\n--- a/tinyinfra/ops.py\n+++ b/tinyinfra/ops.py\n@@ -1,4 +1,4 @@\n-${v0[0]}\n+${v1[0]}\n ${v0[1]}\n ${v0[2]}\n ${v0[3]}\n`;
    const r3 = await applyPatch(w.repoDir, patchFile("3way.patch", threeWay), w.baseCommit);
    expect(r3).toMatchObject({ applied: true, method: "git_apply_3way" });
    expect(readFileSync(join(w.repoDir, "tinyinfra/ops.py"), "utf8").split("\n")[0]).toBe("import torch  # patched");

    w = await fresh();
    // No blob ids and a context line that is slightly off: only patch's fuzz takes it.
    const fuzzy = readFileSync(task.hidden.goldenPatch, "utf8")
      .split(/(?=^diff --git )/m)
      .find((s) => s.includes("tinyinfra/ops.py"))!
      .replace(/^index .*\n/m, "")
      .replace("\n     out = t.clone()\n", "\n     out = t.clone()  # drifted\n");
    const rf = await applyPatch(w.repoDir, patchFile("fuzzy.patch", fuzzy), w.baseCommit);
    expect(rf).toMatchObject({ applied: true, method: "patch_fuzz" });
    expect(readFileSync(join(w.repoDir, "tinyinfra/ops.py"), "utf8")).toContain("def all_mean");
    expect(existsSync(join(w.repoDir, "tinyinfra/ops.py.orig"))).toBe(false);
  });

  it("a patch that applies with none of the three is inapplicable and leaves base untouched (never in part)", async () => {
    const w = await fresh();
    const golden = readFileSync(task.hidden.goldenPatch, "utf8");
    // The first file applies, the second cannot: nothing at all may remain.
    const half = `${golden}diff --git a/tinyinfra/__init__.py b/tinyinfra/__init__.py\n--- a/tinyinfra/__init__.py\n+++ b/tinyinfra/__init__.py\n@@ -5,3 +5,3 @@\n-no such line\n-at all\n-here\n+x\n+y\n+z\n`;
    const r = await applyPatch(w.repoDir, patchFile("half.patch", half), w.baseCommit);
    expect(r.applied).toBe(false);
    if (!r.applied) expect(r.reason).toMatch(/does not apply to the base with git apply, git apply --3way or patch --fuzz/);
    expect(await changedPaths(w.repoDir)).toEqual([]);
  });

  it("a corrupt binary section makes the whole patch inapplicable (git apply --3way would apply the text part alone)", async () => {
    const w = await fresh();
    // A real binary diff made by git, then one byte of its base85 data changed.
    const scratchRepo = join(scratch, "bin-src");
    rmSync(scratchRepo, { recursive: true, force: true });
    mkdirSync(scratchRepo);
    const git = (...args: string[]) => execFileSync("git", ["-c", "user.email=t@t", "-c", "user.name=t", ...args], { cwd: scratchRepo }).toString();
    git("init", "-q");
    writeFileSync(join(scratchRepo, "blob.bin"), Buffer.from([0, 1, 2, 3, 250, 251]));
    git("add", ".");
    git("commit", "-qm", "base");
    writeFileSync(join(scratchRepo, "blob.bin"), Buffer.from([0, 1, 2, 9, 250, 252, 7]));
    const binary = git("diff", "--binary").replace(/diff --git a\/blob\.bin b\/blob\.bin\nindex [0-9a-f]+\.\.([0-9a-f]+) 100644/, "diff --git a/tinyinfra/blob.bin b/tinyinfra/blob.bin\nnew file mode 100644\nindex 0000000000000000000000000000000000000000..$1");
    const lines = binary.split("\n");
    const lit = lines.findIndex((l) => l.startsWith("literal "));
    expect(lit).toBeGreaterThan(0);
    lines[lit + 1] = `${lines[lit + 1]!.slice(0, 2)}${lines[lit + 1]![2] === "A" ? "B" : "A"}${lines[lit + 1]!.slice(3)}`;
    const golden = readFileSync(task.hidden.goldenPatch, "utf8");
    const corrupt = `${golden}${lines.slice(0, lit + 2).join("\n")}\n\n`;
    const r = await applyPatch(w.repoDir, patchFile("corrupt-binary.patch", corrupt), w.baseCommit);
    expect(r.applied, r.applied ? "applied" : r.reason).toBe(false);
    if (!r.applied) expect(r.reason).toMatch(/binary section for "tinyinfra\/blob\.bin" did not apply|does not apply to the base/);
    expect(await changedPaths(w.repoDir)).toEqual([]);
    // The same binary section intact applies, with the text part.
    const w2 = await fresh();
    const intact = `${golden}${binary.split("\n").slice(0, lit + 2).join("\n")}\n\n`;
    const ok = await applyPatch(w2.repoDir, patchFile("intact-binary.patch", intact), w2.baseCommit);
    expect(ok, ok.applied ? "" : ok.reason).toMatchObject({ applied: true });
    expect([...readFileSync(join(w2.repoDir, "tinyinfra/blob.bin"))]).toEqual([0, 1, 2, 9, 250, 252, 7]);
  });

  it("a patch over the size limit is refused whole before anything is applied", () => {
    const big = `${newFile("big.txt", "x".repeat(2000))}\n`;
    const r = checkPatch(Buffer.from(big), { maxBytes: 1000 });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.reason).toMatch(/over the limit of 1000 bytes/);
    expect(checkPatch(Buffer.from(big), { maxBytes: 1 << 20 }).ok).toBe(true);
  });

  it("refuses a patch that plants a symlink and writes through it, and one that writes through a link already in the repo", async () => {
    let w = await fresh();
    const outside = join(scratch, "outside");
    mkdirSync(outside, { recursive: true });
    const plant = `${newFile("innocent", outside, "120000")}\n${newFile("innocent/pwned.txt")}`;
    const r = await applyPatch(w.repoDir, patchFile("plant.patch", plant), w.baseCommit);
    expect(r).toMatchObject({ applied: false, reason: expect.stringMatching(/^inapplicable: .*symlink/) });
    expect(existsSync(join(outside, "pwned.txt"))).toBe(false);

    // A task whose base already holds a link to outside the repo.
    const tasks = join(scratch, "tasks");
    const t = join(tasks, "linky");
    mkdirSync(join(t, "repo"), { recursive: true });
    mkdirSync(join(t, "hidden", "tests", "tests"), { recursive: true });
    mkdirSync(join(t, "hidden", "probes"), { recursive: true });
    writeFileSync(join(t, "hidden", "golden.patch"), "");
    writeFileSync(join(t, "prompt.md"), "p\n");
    writeFileSync(join(t, "task.yaml"), stringify({ schema_version: 1, id: "linky", title: "t", category: "rl", type: "bugfix", source: { kind: "dir", path: "repo" }, test_dirs: ["tests"], ranks: 1, timeout_sec: 5 }));
    symlinkSync(outside, join(t, "repo", "out"));
    const linky = loadGraderTask("linky", tasks);
    removeWorkspace(ws);
    ws = w = await freshWorkspace(linky);
    const through = await applyPatch(w.repoDir, patchFile("through.patch", newFile("out/pwned.txt")), w.baseCommit);
    expect(through).toMatchObject({ applied: false, reason: 'inapplicable: "out/pwned.txt" would be written through the symlink "out" in the repo' });
    expect(existsSync(join(outside, "pwned.txt"))).toBe(false);
  });

  it("reverts the submission's edits under the test dirs before the post-PR tests and probes go in", async () => {
    const w = await fresh();
    const edit = `${newFile("tests/test_extra.py", "def test_always(): pass")}\n${newFile("infradev_probes/conftest.py", "raise SystemExit")}\ndiff --git a/tests/test_ops.py b/tests/test_ops.py\n--- a/tests/test_ops.py\n+++ b/tests/test_ops.py\n@@ -1,3 +1,3 @@\n-import torch\n+import torch  # edited\n import torch.distributed as dist\n \n`;
    const r = await applyPatch(w.repoDir, patchFile("tests.patch", edit), w.baseCommit);
    expect(r.applied).toBe(true);
    const install = await installGradingTests(task, w);
    expect(install.reverted.sort()).toEqual(["tests/test_extra.py", "tests/test_ops.py"]);
    expect(existsSync(join(w.repoDir, "tests/test_extra.py"))).toBe(false);
    // The post-PR module is installed under a random name; the map says which.
    const [installed] = Object.entries(install.staged.map.files).find(([, f]) => f.real === "tests/test_ops.py")!;
    expect(existsSync(join(w.repoDir, "tests/test_ops.py"))).toBe(false);
    // Renamed on the same lines (twin canaries, when drawn here, come after the last one).
    const original = readFileSync(join(task.hidden.testsDir, "tests/test_ops.py"), "utf8").split("\n");
    const renamed = readFileSync(join(w.repoDir, installed), "utf8").split("\n");
    expect(renamed.length).toBeGreaterThanOrEqual(original.length);
    expect(renamed.slice(0, original.length).map((l) => l.replace(/test_[a-z]{10}/g, "T"))).toEqual(original.map((l) => l.replace(/test_[a-z_]+/g, "T")));
    expect(readFileSync(join(w.repoDir, "tests/conftest.py"), "utf8")).toBe(readFileSync(join(task.hidden.testsDir, "tests/conftest.py"), "utf8"));
    // The probes sit beside the official tests (same folder, same conftest chain above them); their
    // conftest is a module with a random name that the probe sessions load as a plugin.
    const plugin = install.staged.probePlugin!;
    expect(plugin).toMatch(/^tests\/[a-z]{10}\.py$/);
    const stem = plugin.slice("tests/".length, -".py".length);
    expect(readFileSync(join(w.repoDir, plugin), "utf8")).toMatch(/^def dist_session\(\):$/m);
    // Each probe module takes the conftest's fixtures at its end: module-level fixtures win over the
    // official conftest's of the same name, as the probes' own deeper conftest did.
    const probeModules = Object.entries(install.staged.map.files).filter(([, f]) => f.suite === "probe").map(([k]) => k);
    for (const m of probeModules) expect(readFileSync(join(w.repoDir, m), "utf8")).toMatch(new RegExp(`^from ${stem} import dist_session {2}# noqa: E402,F401$`, "m"));
    for (const f of install.staged.probeFiles) expect(f.split("/").length, f).toBe(installed.split("/").length);
    expect(install.staged.probeFiles.length).toBeGreaterThan(0);
    // The staged copy (what the sandbox binds read-only) is the same tree, outside the repo.
    expect(install.staged.overlays).toEqual([{ host: join(install.staged.root, "0"), rel: "tests" }]);
    expect(install.staged.root.startsWith(w.repoDir)).toBe(false);
    expect(readFileSync(join(install.staged.root, "0", installed.slice("tests/".length)), "utf8")).toBe(readFileSync(join(w.repoDir, installed), "utf8"));
  });

  it("two installs of the same tests: different random names, the same session keys (a killed grade resumes)", async () => {
    const plansOf = async () => {
      const w = await fresh();
      const { staged } = await installGradingTests(task, w, []);
      return planSessions(task, w.repoDir, staged);
    };
    const [a, b] = [await plansOf(), await plansOf()];
    expect(a.map((p) => p.pytestArgs)).not.toEqual(b.map((p) => p.pytestArgs));
    expect(a.map((p) => p.keyArgs)).toEqual(b.map((p) => p.keyArgs));
    expect(a.find((p) => p.name === "probe")!.keyArgs.slice(0, 3)).toEqual(["infradev_canaries/probe/test_c0.py", "infradev_canaries/probe/test_c1.py", "infradev_probes/test_probe_mean.py"]);
  });

  it("a test dir turned into a symlink (to /) by the patch is restored before anything is written there", async () => {
    const w = await fresh();
    const outside = mkdtempSync(join(scratch, "outside-"));
    writeFileSync(join(outside, "keep.txt"), "keep\n");
    rmSync(join(w.repoDir, "tests"), { recursive: true, force: true });
    symlinkSync(outside, join(w.repoDir, "tests"));
    const install = await installGradingTests(task, w, ["tests"]);
    expect(readdirSync(outside)).toEqual(["keep.txt"]);
    expect(lstatSync(join(w.repoDir, "tests")).isDirectory()).toBe(true);
    expect(existsSync(join(w.repoDir, install.staged.probePlugin!))).toBe(true);
  });
});

describe("bundled tasks (no ranks)", () => {
  it("every golden, hollow and adversarial patch applies to a fresh snapshot; sessions are planned per mode", async () => {
    for (const id of ["grad-bucketing", "cuda-graph-decode"]) {
      const t = loadGraderTask(id);
      const patches = [t.hidden.goldenPatch, t.hidden.hollowPatch!, ...t.hidden.adversarial.map((a) => a.patchPath)];
      for (const p of patches) expect(checkPatch(readFileSync(p)).ok, p).toBe(true);
      const w = await freshWorkspace(t);
      try {
        expect(await applyPatch(w.repoDir, t.hidden.goldenPatch, w.baseCommit)).toMatchObject({ applied: true, method: "git_apply" });
        const { staged } = await installGradingTests(t, w);
        const plans = planSessions(t, w.repoDir, staged);
        const modes = Object.keys(t.fullSpec.modes);
        // Per world size × mode: the official tests (without the probes' folder) in one session, the
        // probes' folder in another; every official session first, so an early stop can skip every probe.
        const ws = gradedWorldSizes(t.fullSpec);
        const carry = !(ws.length === 1 && ws[0] === t.fullSpec.ranks);
        const tag = (m: string, w: number) => (carry ? `${m}.ws${w}` : m);
        const each = (name: string) => ws.flatMap((w) => modes.map((m) => `${tag(m, w)}.${name}`));
        expect(plans.map((p) => p.fileName)).toEqual([...each("official"), ...each("probe")]);
        expect(plans.map((p) => p.ranks)).toEqual([...ws.flatMap((w) => modes.map(() => w)), ...ws.flatMap((w) => modes.map(() => w))]);
        for (const p of plans) {
          // The official sessions collect the test dir less every file the probes brought; the probe
          // sessions name the probe modules (and their canaries), and load the probes' conftest as a plugin.
          const head = p.name === "official" ? ["tests", ...staged.probeOnly.map((f) => `--ignore=${f}`)] : staged.probeFiles;
          expect(p.pytestArgs.slice(0, head.length)).toEqual(head);
          expect(p.pytestArgs.slice(head.length).some((a) => !a.startsWith("-") && a.startsWith("tests"))).toBe(false);
          expect(p.pluginFiles).toEqual(p.name === "probe" ? [staged.probePlugin] : []);
          // Each session carries the canaries that live beside what it runs (and at most 2 twins there).
          expect(p.canaries.filter((c) => c.expected !== "not_passed").length).toBe(CANARY_STYLES.length + MUST_PASS_STYLES.length);
          expect(p.canaries.filter((c) => c.expected === "not_passed").length).toBeLessThanOrEqual(2);
          expect(p.canaries.every((c) => c.location === p.name)).toBe(true);
        }
        // Probe modules as deep as the official ones, in the same folder.
        const officialFiles = Object.entries(staged.map.files).filter(([, f]) => f.suite === "official").map(([k]) => k);
        for (const f of [...staged.probeFiles, ...officialFiles]) expect(f).toMatch(/^tests\/test_[a-z]{10}\.py$/);
        // Case ids carry the mode only when there is more than one, the world size only when not just `ranks`.
        const prefixes = ws.flatMap((w) => modes.map((m) => `${modes.length > 1 ? `${m}/` : ""}${carry ? `ws${w}/` : ""}`));
        expect([...new Set(plans.map((p) => p.idPrefix))]).toEqual(prefixes);
      } finally {
        removeWorkspace(w);
      }
    }
  });
});

describe("inapplicable submissions score 0 / N_p with the reason", () => {
  // A hand-made calibration: these submissions never reach a rank, so no gold run is needed.
  const calibration: Calibration = {
    format: 1,
    task_id: "tiny-mean",
    task_hash: "h",
    world_sizes: [2],
    fingerprint: { cpu_model: "test", cpu_count: 1, gpus: [], torch: "x", platform: "linux", sandbox: "none", python: "x" },
    fingerprint_hash: "f",
    runs: 3,
    cases: [
      { id: "tests/test_ops.py::test_all_sum", suite: "official", outcomes: ["passed", "passed", "passed"] },
      { id: "infradev_probes/test_probe_mean.py::test_mean_is_the_average", suite: "probe", outcomes: ["passed", "passed", "passed"] },
    ],
    flaky: [],
    created_at: "2026-01-01T00:00:00Z",
    duration_s: 1,
  };
  const grade = (patch: string | null) =>
    gradeSubmission({
      task,
      patchFile: patch,
      outDir: join(scratch, "out"),
      calibration,
      sandboxFactory: () => Promise.reject(new Error("no sandbox may start for these")),
    });

  it.each([
    ["dotdot", newFile("../escape.py"), /climbs out of the repo/],
    ["dotgit", newFile(".git/hooks/pre-commit"), /\.git folder/],
    ["symlink", `${newFile("l", "/tmp", "120000")}\n${newFile("l/x")}`, /symlink/],
    ["garbage", "lorem ipsum\n", /not a patch/],
    ["binary", Buffer.from([0, 1, 2, 3, 255]), /binary/],
  ])("%s", async (_name, content, why) => {
    const { result } = await grade(patchFile(`${_name}.patch`, content));
    expect(result).toMatchObject({ status: "inapplicable", patch_applied: false, apply_method: null, n_cases: 2, passed: 0, score: 0, resolved: false, resolved_strict: false });
    expect(result.reason).toMatch(why);
    expect(result.official.score).toBe(0);
  });

  it("a sandbox that cannot start is a harness fault: nothing scored, and not reused next time", async () => {
    const first = await grade(task.hidden.goldenPatch);
    expect(first.result).toMatchObject({ status: "harness_fault", patch_applied: true, apply_method: "git_apply", n_cases: 2, passed: null, score: null, resolved: null });
    expect(first.result.reason).toMatch(/harness fault .*no sandbox may start/);
    const again = await grade(task.hidden.goldenPatch);
    expect(again.reused).toBe(false);
  });

  it("empty and missing patches", async () => {
    expect((await grade(patchFile("empty.patch", "\n  \n"))).result).toMatchObject({ status: "empty_patch", score: 0, n_cases: 2 });
    expect((await grade(join(scratch, "nope.patch"))).result).toMatchObject({ status: "missing_patch", score: 0, reason: expect.stringMatching(/does not exist/) });
  });
});
