import { loadGraderTask } from "../tasks/loader.js";
import { freshWorkspace, installGradingTests, removeWorkspace } from "../grader/workspace.js";
import { applyPatch } from "../grader/apply.js";
import { taskContentHash } from "../grader/files.js";
import { hardwareFingerprint } from "../grader/fingerprint.js";
const task = loadGraderTask("grad-bucketing");
for (let i = 0; i < 3; i++) {
  let t = performance.now();
  const lap = (n: string) => { const now = performance.now(); console.log(n, (now - t).toFixed(0), "ms"); t = now; };
  taskContentHash(task.taskDir); lap("taskhash");
  await hardwareFingerprint("/usr/bin/python3"); lap("fingerprint");
  const ws = await freshWorkspace(task); lap("snapshot");
  await applyPatch(ws.repoDir, task.hidden.goldenPatch, ws.baseCommit); lap("apply");
  await installGradingTests(task, ws); lap("install");
  removeWorkspace(ws); lap("remove");
}
