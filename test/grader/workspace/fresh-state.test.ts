import { TEST_FIXTURES } from "../../helpers/paths.js";
import { spawnSync } from "node:child_process";
import { lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { graderSandboxFactory } from "../../../src/grader/grade/sandbox-factory.js";
import { applyPatch } from "../../../src/grader/workspace/apply.js";
import { calibrate } from "../../../src/grader/grade/calibrate.js";
import { captureWorkspaceState, restoreWorkspaceState } from "../../../src/grader/workspace/fresh-state.js";
import { gradeSubmission } from "../../../src/grader/grade/grade.js";
import { CANARY_STYLES, MUST_PASS_STYLES, mapCaseId } from "../../../src/grader/workspace/test-renaming.js";
import type { SandboxFactory } from "../../../src/grader/grade/pipeline.js";
import type { Calibration, GradeResult, SessionResult } from "../../../src/grader/grade/types.js";
import { freshWorkspace, installGradingTests, pytestPinFor, removeWorkspace } from "../../../src/grader/workspace/workspace.js";
import { runRanks } from "../../../src/runner/ranks.js";
import { loadGraderTask, type GraderTask } from "../../../src/task/hidden/grader-task.js";
import { createSnapshot, diffAgainstBase } from "../../../src/task/public/snapshot.js";
import { SANDBOX_BACKENDS, TEST_DOCKER_OPTIONS, prepareBackend } from "../../helpers/backends.js";

/**
 * Probes cannot be told apart by order or by left-over state (issue 10, item 5): the official tests
 * and the probes run in separate launcher sessions, each in a fresh sandbox over the grading
 * workspace put back to its post-install state. Real runs: the tiny-mean fixture task, 2 gloo ranks,
 * the shipped sandbox factory (local bwrap, and docker where test/helpers/backends.ts lists it).
 *
 * The hostile patches return the SUM (wrong; the official tests are too weak to see it) until they
 * believe the official tests are over, then the mean (right; the probe checks it). Each is also run
 * the old way — official tests then probes in ONE launcher session — to show it really beats that.
 */

const FIXTURES = join(TEST_FIXTURES, "grader", "tasks");

/** all_mean that is right only when `right()` (Python) says so; `pre` goes before it. */
function switching(pre: string, right: string): string {
  return [
    "",
    "",
    pre,
    "",
    "",
    "def all_mean(t: torch.Tensor) -> torch.Tensor:",
    "    out = t.clone()",
    "    dist.all_reduce(out, op=dist.ReduceOp.SUM)",
    `    if ${right}:`,
    "        return out / dist.get_world_size()",
    "    return out",
    "",
  ].join("\n");
}

/** Right only after the 3 calls the official tests make in the process (K = 3). */
const AFTER_K_CALLS = switching(["_calls = [0]", "", "", "def _later():", "    _calls[0] += 1", "    return _calls[0] > 3"].join("\n"), "_later()");

/**
 * Right only once a marker exists that an earlier call created: in /tmp, in $HOME, in /dev/shm or in
 * the workspace (the package folder, the working directory and the repo's .git) — or when the
 * launcher's folder in the workspace names the probe session. The first call looks (none there
 * yet), then leaves markers everywhere it can.
 */
const AFTER_MARKER = switching(
  [
    "import os",
    "",
    "_NAME = '.infradev-was-here'",
    "",
    "",
    "def _places():",
    "    here = os.path.dirname(os.path.abspath(__file__))",
    "    return ['/tmp', os.path.expanduser('~'), '/dev/shm', here, os.getcwd(), os.path.join(os.getcwd(), '.git')]",
    "",
    "",
    "def _seen():",
    "    found = any(os.path.exists(os.path.join(p, _NAME)) for p in _places())",
    "    # Or the launcher's folder in the workspace names the probe session.",
    "    for base, dirs, _files in os.walk(os.path.join(os.getcwd(), '.infradev')):",
    "        found = found or any('probe' in d for d in dirs)",
    "    for p in _places():",
    "        try:",
    "            with open(os.path.join(p, _NAME), 'w') as f:",
    "                f.write('x')",
    "        except OSError:",
    "            pass",
    "    return found",
  ].join("\n"),
  "_seen()",
);

describe.each(SANDBOX_BACKENDS)("fresh state per session on the %s sandbox", (backend) => {
  let root: string;
  let task: GraderTask;
  let calibration: Calibration;
  let sandboxFactory: SandboxFactory;

  async function patchWith(name: string, code: string): Promise<string> {
    const dir = join(root, `src-${name}`);
    await createSnapshot(task, dir);
    const ops = join(dir, "tinyinfra", "ops.py");
    writeFileSync(ops, `${readFileSync(ops, "utf8")}${code}`);
    const file = join(root, `${name}.patch`);
    writeFileSync(file, await diffAgainstBase(dir));
    return file;
  }

  const grade = (patchFile: string) => gradeSubmission({ task, patchFile, outDir: join(root, "out"), calibration, sandboxFactory });
  const sessions = (artifactDir: string): SessionResult[] =>
    readdirSync(join(artifactDir, "sessions"))
      .sort()
      .map((f) => JSON.parse(readFileSync(join(artifactDir, "sessions", f), "utf8")) as SessionResult);
  const caseOf = (r: GradeResult, name: string) => r.cases.find((c) => c.id.endsWith(`::${name}`));

  /** The old plan: official tests, then the probes, in ONE launcher session. The probe's outcome. */
  async function oneSession(patchFile: string): Promise<string | undefined> {
    const ws = await freshWorkspace(task);
    try {
      const applied = await applyPatch(ws.repoDir, patchFile, ws.baseCommit);
      if (!applied.applied) throw new Error(applied.reason);
      const { staged } = await installGradingTests(task, ws, applied.paths);
      const sb = await sandboxFactory({ task, hostRepoDir: ws.repoDir, readOnlyOverlays: staged.overlays });
      try {
        const spec = task.fullSpec;
        const r = await runRanks(sb, {
          ranks: spec.ranks,
          // The official modules first, then the probes (they share one folder now: name them in order).
          pytestArgs: [...Object.keys(staged.map.files).filter((f) => !staged.probeFiles.includes(f)).sort(), ...staged.probeFiles, "--continue-on-collection-errors", ...pytestPinFor(ws.repoDir).args],
          ...(staged.probePlugin ? { plugins: [`path:${staged.probePlugin}`] } : {}),
          outDir: ".infradev/grade/one",
          perTestTimeoutSec: spec.timeout_sec,
          runTimeoutSec: spec.run_timeout_sec,
          env: { ...spec.env.vars, ...spec.modes.cpu },
        });
        return r.cases.find((c) => mapCaseId(staged.map, c.id)?.id.endsWith("::test_mean_is_the_average"))?.outcome;
      } finally {
        await sb.close();
      }
    } finally {
      removeWorkspace(ws);
    }
  }

  /** Graded: Set A resolved (the official tests cannot see the sum), Set B not (the probe does). */
  function caught(out: Awaited<ReturnType<typeof grade>>): void {
    expect(out.result.status).toBe("graded");
    expect(out.result.tamper_evidence).toEqual([]);
    expect(out.result.official.resolved).toBe(true);
    expect(out.result.with_probes.resolved).toBe(false);
    expect(caseOf(out.result, "test_mean_is_the_average")).toMatchObject({ suite: "probe", outcome: "failed", label: "numerical" });
    expect(sessions(out.artifactDir).map((s) => `${s.mode}.${s.session}`)).toEqual(["cpu.official", "cpu.probe"]);
  }

  beforeAll(async () => {
    await prepareBackend(backend);
    root = mkdtempSync(join(tmpdir(), `infradev-grader-fresh-${backend}-`));
    task = loadGraderTask("tiny-mean", FIXTURES);
    sandboxFactory = graderSandboxFactory(backend, [root], backend === "docker" ? TEST_DOCKER_OPTIONS : {});
    calibration = (await calibrate({ task, cacheDir: join(root, "calibration"), sandboxFactory, runs: 1 })).calibration;
  }, 180_000);
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it("a patch right only after its K-th call in the process: beats one shared session, caught by a fresh probe session", async () => {
    const patch = await patchWith("after-k-calls", AFTER_K_CALLS);
    expect(await oneSession(patch)).toBe("passed");
    caught(await grade(patch));
  }, 90_000);

  it("a patch right only once a marker it wrote earlier exists (/tmp, $HOME, /dev/shm, the workspace) or the launcher folder names the probes: nothing carries over, nothing tells", async () => {
    const patch = await patchWith("after-marker", AFTER_MARKER);
    expect(await oneSession(patch)).toBe("passed");
    caught(await grade(patch));
  }, 90_000);

  it("gold is resolved and the bundled adversarial patches are caught, never tampered; each session ran its own canaries", async () => {
    const gold = await grade(task.hidden.goldenPatch);
    expect(gold.result).toMatchObject({ status: "graded", tamper_evidence: [], official: { resolved: true }, with_probes: { resolved: true } });
    const [official, probe] = sessions(gold.artifactDir);
    for (const [s, where] of [
      [official!, "official"],
      [probe!, "probe"],
    ] as const) {
      expect(s.tamper_evidence).toEqual([]);
      const plain = s.canaries!.filter((c) => c.expected !== "not_passed");
      expect(plain.length).toBe(CANARY_STYLES.length + MUST_PASS_STYLES.length); // a must-fail per assertion style, some must-pass
      for (const c of plain) {
        expect(c.id.startsWith(`infradev_canaries/${where}/`), c.id).toBe(true);
        expect(c.ranks, c.id).toEqual([c.expected, c.expected]);
      }
      // Twins run one of this session's real tests once more, then fail.
      for (const c of s.canaries!.filter((x) => x.expected === "not_passed")) {
        expect(c.id.startsWith(`infradev_canaries/twin/${where === "official" ? "tests/" : "infradev_probes/"}`), c.id).toBe(true);
        for (const o of c.ranks) expect(["failed", "error"], c.id).toContain(o);
      }
    }
    expect(official!.cases.every((c) => c.suite === "official")).toBe(true);
    expect(probe!.cases.map((c) => c.suite)).toEqual(["probe", "probe"]);
    for (const adv of task.hidden.adversarial) {
      const out = await grade(adv.patchPath);
      expect(out.result.status, adv.name).toBe("graded");
      expect(out.result.tamper_evidence, adv.name).toEqual([]);
      expect(out.result.official.resolved, adv.name).toBe(true);
      expect(out.result.with_probes.resolved, adv.name).toBe(false);
    }
  }, 120_000);

  it("the restore never follows a link a session planted: a tracked folder replaced by a link to a host decoy, files written; decoy untouched, tree back", async () => {
    const decoy = join(root, "decoy");
    mkdirSync(decoy);
    writeFileSync(join(decoy, "keep.txt"), "decoy\n");
    const ws = await freshWorkspace(task);
    try {
      const applied = await applyPatch(ws.repoDir, task.hidden.goldenPatch, ws.baseCommit);
      if (!applied.applied) throw new Error(applied.reason);
      const { staged } = await installGradingTests(task, ws, applied.paths);
      const state = captureWorkspaceState(ws.repoDir, join(ws.root, "grading", "state"));
      const opsBefore = readFileSync(join(ws.repoDir, "tinyinfra", "ops.py"), "utf8");
      const testsBefore = readdirSync(join(ws.repoDir, "tests")).sort();
      const open = () => sandboxFactory({ task, hostRepoDir: ws.repoDir, readOnlyOverlays: staged.overlays });

      restoreWorkspaceState(state);
      const sb = await open();
      try {
        const script = [
          "set -u",
          "mv tinyinfra tinyinfra.moved",
          `ln -s ${decoy} tinyinfra`,
          // Inside the sandbox the link points nowhere it can write; the host must not write there either.
          "printf evil > tinyinfra/ops.py 2>/dev/null || true",
          "printf evil > tinyinfra.moved/ops.py",
          "chmod 600 tinyinfra.moved/__init__.py",
          "mkdir -p newdir/deep && printf x > newdir/deep/f && printf x > .git/marker && chmod 000 newdir",
          // A link where an overlay's parent would be looked for, and one beside the tests.
          `ln -s ${decoy} decoy-link`,
          "ls -la tinyinfra tinyinfra.moved >/dev/null",
        ].join("\n");
        const r = await sb.exec(["sh", "-c", script], { timeoutSec: 30 });
        expect(r.exitCode, `${r.stdout}\n${r.stderr}`).toBe(0);
      } finally {
        await sb.close();
      }
      // What the session left: the link (to the host's decoy), the moved folder, new files.
      expect(lstatSync(join(ws.repoDir, "tinyinfra")).isSymbolicLink()).toBe(true);
      expect(readlinkSync(join(ws.repoDir, "tinyinfra"))).toBe(decoy);

      restoreWorkspaceState(state);
      expect(readdirSync(decoy)).toEqual(["keep.txt"]);
      expect(readFileSync(join(decoy, "keep.txt"), "utf8")).toBe("decoy\n");
      expect(lstatSync(join(ws.repoDir, "tinyinfra")).isDirectory()).toBe(true);
      expect(readFileSync(join(ws.repoDir, "tinyinfra", "ops.py"), "utf8")).toBe(opsBefore);
      expect(lstatSync(join(ws.repoDir, "tinyinfra", "__init__.py")).mode & 0o777).toBe(0o644);
      for (const gone of ["tinyinfra.moved", "newdir", "decoy-link", ".git/marker", ".infradev"]) expect(lstatSync(join(ws.repoDir, gone), { throwIfNoEntry: false }), gone).toBeUndefined();
      // The overlay's mount point is a real folder again, with the staged copy under it.
      expect(lstatSync(join(ws.repoDir, "tests")).isDirectory()).toBe(true);
      expect(readdirSync(join(ws.repoDir, "tests")).sort()).toEqual(testsBefore);

      // And a fresh sandbox over it sees the restored tree with the staged tests mounted.
      const sb2 = await open();
      try {
        const r = await sb2.exec(["sh", "-c", "test -d tinyinfra && ! test -L tinyinfra && cat tinyinfra/ops.py && ls tests"], { timeoutSec: 30 });
        expect(r.exitCode, r.stderr).toBe(0);
        expect(r.stdout).toContain("def all_mean");
        expect(r.stdout).not.toContain("evil");
      } finally {
        await sb2.close();
      }
    } finally {
      removeWorkspace(ws);
    }
  }, 60_000);
});

describe("restoring the post-install state (host side)", () => {
  it("empties what rmSync alone cannot (a tree deeper than PATH_MAX, folders without permissions) and writes the same tree back", () => {
    const root = mkdtempSync(join(tmpdir(), "infradev-fresh-state-"));
    try {
      const repo = join(root, "repo");
      mkdirSync(join(repo, "pkg", "empty"), { recursive: true });
      writeFileSync(join(repo, "pkg", "a.py"), "A = 1\n");
      const state = captureWorkspaceState(repo, join(root, "state"));
      // 1,500 nested folders of 4 letters: a path of ~7,500 bytes (PATH_MAX is 4,096).
      const deep = spawnSync("python3", ["-c", "import os, sys\nos.chdir(sys.argv[1])\nfor _ in range(1500):\n    os.mkdir('dddd'); os.chdir('dddd')\nopen('f', 'w').write('x')\n", repo]);
      expect(deep.status, String(deep.stderr)).toBe(0);
      mkdirSync(join(repo, "locked", "in"), { recursive: true });
      writeFileSync(join(repo, "locked", "in", "f"), "x");
      spawnSync("chmod", ["000", join(repo, "locked", "in"), join(repo, "locked")]);
      writeFileSync(join(repo, "pkg", "a.py"), "A = 2\n");
      restoreWorkspaceState(state);
      expect(readdirSync(repo).sort()).toEqual(["pkg"]);
      expect(readdirSync(join(repo, "pkg")).sort()).toEqual(["a.py", "empty"]);
      expect(readFileSync(join(repo, "pkg", "a.py"), "utf8")).toBe("A = 1\n");
    } finally {
      spawnSync("chmod", ["-R", "u+rwX", root]);
      spawnSync("rm", ["-rf", root]);
    }
  });
});
