import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, expect, it } from "vitest";
import { stringify } from "yaml";
import { loadPublicTask } from "../tasks/loader.js";
import { createSnapshot, diffAgainstBase } from "../tasks/snapshot.js";

let root: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), "infradev-snap-"));
  const t = join(root, "tasks", "toy");
  mkdirSync(join(t, "repo", "pkg"), { recursive: true });
  writeFileSync(join(t, "repo", "pkg", "a.py"), "x = 1\n");
  writeFileSync(join(t, "prompt.md"), "p\n");
  writeFileSync(
    join(t, "task.yaml"),
    stringify({ schema_version: 1, id: "toy", title: "t", category: "rl", type: "bugfix", source: { kind: "dir", path: "repo" }, test_dirs: ["tests"], ranks: 1, timeout_sec: 5 }),
  );
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

it("creates a git workspace at base whose diff is exactly the change, new files and our logs excluded", async () => {
  const task = loadPublicTask("toy", join(root, "tasks"));
  const ws = join(root, "ws");
  const snap = await createSnapshot(task, ws);
  expect(snap.baseCommit).toMatch(/^[0-9a-f]{40}$/);
  expect(await diffAgainstBase(ws)).toBe("");
  writeFileSync(join(ws, "pkg", "a.py"), "x = 2\n");
  writeFileSync(join(ws, "pkg", "new.py"), "y = 3\n");
  mkdirSync(join(ws, ".infradev", "logs"), { recursive: true });
  writeFileSync(join(ws, ".infradev", "logs", "l.log"), "noise\n");
  const diff = await diffAgainstBase(ws);
  expect(diff).toContain("-x = 1\n+x = 2");
  expect(diff).toContain("+++ b/pkg/new.py");
  expect(diff).not.toContain(".infradev");
  await expect(createSnapshot(task, ws)).rejects.toThrow(/already exists and is not empty/);
});
