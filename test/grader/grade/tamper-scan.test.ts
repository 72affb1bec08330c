import { TEST_FIXTURES } from "../../helpers/paths.js";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it, onTestFinished } from "vitest";
import { scanPatchForTampering } from "../../../src/grader/grade/tamper-scan.js";
import { bundledTasksDir } from "../../../src/lib/paths.js";
import { seedGitCache } from "../../helpers/upstream.js";
import { listTaskIds } from "../../../src/task/public/loader.js";
import { loadGraderTask } from "../../../src/task/hidden/grader-task.js";

const FIXTURES = join(TEST_FIXTURES, "grader", "tasks");

describe("scanPatchForTampering", () => {
  it("names each added line that reaches for the harness, with its file and line in the patched tree", () => {
    const patch = [
      "diff --git a/pkg/dp.py b/pkg/dp.py",
      "--- a/pkg/dp.py",
      "+++ b/pkg/dp.py",
      "@@ -10,3 +10,8 @@ class DP:",
      "     def sync(self):",
      "-        pass",
      "+        dist.all_reduce(self.flat)",
      "+        import infradev_probe",
      "+        out = os.environ.get('INFRADEV_OUT_DIR')",
      "+        dist.all_reduce = lambda *a, **k: None",
      "+        ok = dist.all_reduce == other",
      "+        open(out + '/rank0.results.jsonl', 'a')",
      "     # end",
      "diff --git a/pkg/hooks.py b/pkg/hooks.py",
      "new file mode 100644",
      "--- /dev/null",
      "+++ b/pkg/hooks.py",
      "@@ -0,0 +1,2 @@",
      "+def pytest_runtest_makereport(item, call):",
      "+    from _pytest.reports import TestReport",
      "diff --git a/pkg/gone.py b/pkg/gone.py",
      "deleted file mode 100644",
      "--- a/pkg/gone.py",
      "+++ /dev/null",
      "@@ -1 +0,0 @@",
      "-import infradev_probe",
      "",
    ].join("\n");
    expect(scanPatchForTampering(patch).map((f) => `${f.file}:${f.line} ${f.what}`)).toEqual([
      "pkg/dp.py:12 the probe library or the harness's helpers",
      "pkg/dp.py:13 infradev's environment",
      "pkg/dp.py:14 rebinding a torch.distributed function",
      "pkg/dp.py:16 the launcher's result files",
      "pkg/hooks.py:1 pytest's internals or hooks",
      "pkg/hooks.py:2 pytest's internals or hooks",
    ]);
  });

  it("reads the patch as checkPatch does: '+++' inside a hunk is an added line, names are unquoted and cut at a tab, CRLF is fine", () => {
    const patch = [
      "--- notes.md\t2026-11-29 10:00:00",
      "+++ notes.md\t2026-11-29 10:00:01",
      "@@ -1,1 +1,3 @@",
      " # notes",
      "+++ INFRADEV_OUT_DIR is where results go",
      "+plain text",
      'diff --git "a/pkg/sp ace.py" "b/pkg/sp ace.py"',
      '--- "a/pkg/sp ace.py"',
      '+++ "b/pkg/sp ace.py"',
      "@@ -1,0 +2,1 @@\r",
      "+import infradev_probe\r",
      "",
    ].join("\n");
    expect(scanPatchForTampering(patch).map((f) => `${f.file}:${f.line} ${f.what} | ${f.text}`)).toEqual([
      "notes.md:2 infradev's environment | ++ INFRADEV_OUT_DIR is where results go",
      "pkg/sp ace.py:2 the probe library or the harness's helpers | import infradev_probe",
    ]);
  });

  it("finds nothing in any bundled or fixture task's golden, adversarial or hollow patch (no false alarm on real changes)", async () => {
    // A git-sourced task's golden patch comes from the git cache: seeded here from the upstream bundle.
    const { restore } = await seedGitCache(["megatron-lm-pr3812", "megatron-lm-pr4028"], "infradev-tamper-git-");
    onTestFinished(restore);
    let scanned = 0;
    for (const root of [bundledTasksDir(), FIXTURES]) {
      for (const id of listTaskIds(root)) {
        const task = loadGraderTask(id, root);
        const patches = [task.hidden.goldenPatch, task.hidden.hollowPatch, ...task.hidden.adversarial.map((a) => a.patchPath)].filter((p): p is string => !!p);
        for (const p of patches) {
          expect(scanPatchForTampering(readFileSync(p, "utf8")), p).toEqual([]);
          scanned++;
        }
      }
    }
    expect(scanned).toBeGreaterThanOrEqual(readdirSync(bundledTasksDir()).length + 10);
  });
});
