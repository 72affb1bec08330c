/**
 * task.yaml's env.pythonpath (import-only stand-ins, docs/task-format.md): what the loaders refuse,
 * with the field named, and what a real sandbox does with the folders — the real bubblewrap backend
 * (read-only at /opt/infradev/pythonpath/<i>, first on PYTHONPATH, the task folder itself masked)
 * and the `none` backend (the host copies on PYTHONPATH).
 */
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { createSandbox } from "../../src/sandbox/picker.js";
import { SANDBOX_PYTHONPATH_ROOT } from "../../src/sandbox/task-pythonpath.js";
import { TaskError } from "../../src/task/public/errors.js";
import { loadPublicTask } from "../../src/task/public/loader.js";
import { loadGraderTask } from "../../src/task/hidden/grader-task.js";
import { TEST_FIXTURES } from "../helpers/paths.js";

const GOOD = {
  schema_version: 1,
  id: "toy",
  title: "Toy task",
  category: "training",
  type: "performance",
  source: { kind: "dir", path: "repo" },
  test_dirs: ["tests"],
  ranks: 1,
  timeout_sec: 30,
};

let root: string;
const toy = () => join(root, "toy");

function makeTask(pythonpath: unknown, layout: (dir: string) => void = () => {}): void {
  const dir = toy();
  mkdirSync(join(dir, "repo", "tests"), { recursive: true });
  mkdirSync(join(dir, "hidden", "probes"), { recursive: true });
  mkdirSync(join(dir, "hidden", "tests", "tests"), { recursive: true });
  writeFileSync(join(dir, "hidden", "golden.patch"), "diff --git a/x b/x\n");
  mkdirSync(join(dir, "env", "stubs", "fakepkg"), { recursive: true });
  writeFileSync(join(dir, "env", "stubs", "fakepkg", "__init__.py"), "STAND_IN = True\n");
  writeFileSync(join(dir, "prompt.md"), "# Do the thing\n");
  writeFileSync(join(dir, "task.yaml"), stringify({ ...GOOD, env: { pythonpath } }));
  layout(dir);
}

function loadError(pythonpath: unknown, layout?: (dir: string) => void): string {
  makeTask(pythonpath, layout);
  try {
    loadPublicTask("toy", root);
  } catch (e) {
    expect(e).toBeInstanceOf(TaskError);
    return (e as Error).message.replaceAll(`${root}/`, "<root>/");
  }
  throw new Error("expected the task to be rejected");
}

describe("env.pythonpath: the loaders", () => {
  beforeEach(() => {
    root = realpathSync(mkdtempSync(join(tmpdir(), "infradev-pythonpath-tasks-")));
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it("defaults to none, and resolves good entries to their real folders, in order, for both doors", () => {
    makeTask(undefined);
    expect(loadPublicTask("toy", root).pythonPath).toEqual([]);
    rmSync(toy(), { recursive: true });
    makeTask(["env/stubs", "./env"], (dir) => symlinkSync("fakepkg/__init__.py", join(dir, "env", "stubs", "alias.py")));
    const want = [join(toy(), "env", "stubs"), join(toy(), "env")];
    expect(loadPublicTask("toy", root).pythonPath).toEqual(want);
    expect(loadGraderTask("toy", root).pythonPath).toEqual(want);
    expect(loadPublicTask("toy", root).spec.env.pythonpath).toEqual(["env/stubs", "./env"]);
  });

  it("refuses an absolute path, a '..', an empty string and a non-list, naming the field", () => {
    expect(loadError(["/opt/infradev-stubs/verl"])).toMatch(/task\.yaml: env\.pythonpath\.0: expected a relative path, got an absolute one/);
    rmSync(toy(), { recursive: true });
    expect(loadError(["env/stubs", "env/../../outside"])).toMatch(/env\.pythonpath\.1: must stay inside the task folder \(no '\.\.'\)/);
    rmSync(toy(), { recursive: true });
    expect(loadError([""])).toMatch(/env\.pythonpath\.0: /);
    rmSync(toy(), { recursive: true });
    expect(loadError("env/stubs")).toMatch(/env\.pythonpath: expected array, got "env\/stubs"/);
  });

  it("refuses a missing folder, a file, a link out of the task folder and a folder inside hidden/", () => {
    expect(loadError(["env/nothing"])).toMatch(/task\.yaml: env\.pythonpath\.0: folder "env\/nothing" does not exist in the task folder/);
    rmSync(toy(), { recursive: true });
    expect(loadError(["prompt.md"])).toMatch(/env\.pythonpath\.0: "prompt\.md" is not a folder/);
    rmSync(toy(), { recursive: true });
    const outside = mkdtempSync(join(tmpdir(), "infradev-pythonpath-outside-"));
    try {
      expect(loadError(["env/out"], (dir) => symlinkSync(outside, join(dir, "env", "out")))).toMatch(/env\.pythonpath\.0: resolves outside the task folder \(symlink\?\)/);
      rmSync(toy(), { recursive: true });
      // A link inside the folder that leads out is refused too: the host copies what the folder holds.
      writeFileSync(join(outside, "secret.py"), "X = 1\n");
      expect(loadError(["env/stubs"], (dir) => symlinkSync(join(outside, "secret.py"), join(dir, "env", "stubs", "secret.py")))).toMatch(
        /env\.pythonpath\.0: link .*env\/stubs\/secret\.py resolves outside the task folder/,
      );
    } finally {
      rmSync(outside, { recursive: true, force: true });
    }
    rmSync(toy(), { recursive: true });
    expect(loadError(["hidden/probes"])).toMatch(/env\.pythonpath\.0: "hidden\/probes" overlaps hidden\.dir "hidden"/);
    rmSync(toy(), { recursive: true });
    expect(loadError(["env/stubs"], (dir) => symlinkSync("fakepkg", join(dir, "env", "stubs", "dirlink")))).toMatch(/env\.pythonpath\.0: link .*dirlink leads to a folder/);
  });
});

describe("env.pythonpath: in a real sandbox", () => {
  const FIXTURE = join(TEST_FIXTURES, "pythonpath", "tasks");
  let base: string;
  let tasksRoot: string;
  let workspace: string;
  beforeAll(() => {
    base = realpathSync(mkdtempSync(join(tmpdir(), "infradev-pythonpath-sb-")));
    tasksRoot = join(base, "tasks");
    cpSync(FIXTURE, tasksRoot, { recursive: true });
    workspace = join(base, "workspace");
    mkdirSync(workspace);
  });
  afterAll(() => rmSync(base, { recursive: true, force: true }));

  const PROBE = [
    "import os, sys, heavydep",
    "print('FILE', heavydep.__file__)",
    "print('PYTHONPATH', os.environ['PYTHONPATH'])",
    "folder = os.path.dirname(heavydep.__file__)",
    "for what, act in (('plant', lambda: open(os.path.join(folder, 'planted.py'), 'w')), ('append', lambda: open(heavydep.__file__, 'a'))):",
    "    try:",
    "        act().close(); print(what, 'WROTE')",
    "    except OSError as e:",
    "        print(what, 'REFUSED', e.errno)",
  ].join("\n");

  it("local (bubblewrap): the copy is read-only at the fixed path, first on PYTHONPATH ahead of the exec's own; the task folder stays hidden", async () => {
    const task = loadPublicTask("stub-import", tasksRoot);
    const taskDir = join(tasksRoot, "stub-import");
    const sb = await createSandbox({ kind: "local", hostRepoDir: workspace, hiddenPaths: [taskDir], pythonPath: task.pythonPath.map((host) => ({ host, boundary: taskDir })) });
    try {
      const r = await sb.exec(["/usr/bin/python3", "-c", PROBE], { env: { PYTHONPATH: "/opt/from-task-vars" }, timeoutSec: 60 });
      expect(r.stderr).toBe("");
      expect(r.stdout).toContain(`FILE ${SANDBOX_PYTHONPATH_ROOT}/0/heavydep/__init__.py`);
      expect(r.stdout).toContain(`PYTHONPATH ${SANDBOX_PYTHONPATH_ROOT}/0:/opt/from-task-vars`);
      // EROFS (30): a read-only bind, which not even the sandbox's root can write through; the
      // copy's files are 0444 too, so appending may be refused for that first (EACCES, 13).
      expect(r.stdout).toContain("plant REFUSED 30");
      expect(r.stdout).toMatch(/append REFUSED (13|30)/);
      // An exec that sets no PYTHONPATH still gets the stand-ins.
      const bare = await sb.exec(["/usr/bin/python3", "-c", "import heavydep, os; print(heavydep.STAND_IN, os.environ['PYTHONPATH'])"], { timeoutSec: 60 });
      expect(bare.stdout.trim()).toBe(`True ${SANDBOX_PYTHONPATH_ROOT}/0`);
      // The task folder is not reachable through the copy's path or its own.
      const hidden = await sb.exec(["bash", "-c", `ls ${taskDir}/env 2>&1; ls ${SANDBOX_PYTHONPATH_ROOT}/0`], { timeoutSec: 30 });
      expect(hidden.stdout).not.toContain("pystubs");
      expect(hidden.stdout).toContain("heavydep");
    } finally {
      await sb.close();
    }
    expect(existsSync(join(taskDir, "env", "pystubs", "heavydep", "planted.py"))).toBe(false);
    expect(readFileSync(join(taskDir, "env", "pystubs", "heavydep", "__init__.py"), "utf8")).toContain("Import-only stand-in for heavydep");
  });

  it("none: the host copy (not the task folder) comes first on PYTHONPATH, and is removed at close", async () => {
    const task = loadPublicTask("stub-import", tasksRoot);
    const sb = await createSandbox({ kind: "none", hostRepoDir: workspace, pythonPath: task.pythonPath.map((host) => ({ host })) });
    let copy: string;
    try {
      const r = await sb.exec(["/usr/bin/python3", "-c", "import heavydep, os; print(heavydep.__file__); print(os.environ['PYTHONPATH'])"], {
        env: { PYTHONPATH: "/opt/from-task-vars" },
        timeoutSec: 60,
      });
      const [file, pp] = r.stdout.trim().split("\n");
      copy = pp!.split(":")[0]!;
      expect(pp).toBe(`${copy}:/opt/from-task-vars`);
      expect(file).toBe(join(copy, "heavydep", "__init__.py"));
      expect(copy.startsWith(join(tasksRoot, "stub-import"))).toBe(false);
    } finally {
      await sb.close();
    }
    expect(existsSync(copy)).toBe(false);
  });
});
