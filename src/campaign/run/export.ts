/**
 * The public export of a task: what an agent's harness may read. A copy of the task folder's public
 * door (loadPublicTask) — task.yaml without the grader's fields (the hidden layout, world_sizes, a
 * git source's merge commit), prompt.md and the pre-PR snapshot — and nothing else: hidden/ is not
 * copied, so neither the server started on the export nor the harness can reach golden, probes or
 * post-PR tests, whatever their paths. `infradev run` serves the export, never the real task folder.
 */
import { cpSync, existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";
import { loadPublicTask, type PublicTask } from "../../task/public/loader.js";

export interface TaskExport {
  /** The tasks folder of the export (pass as --tasks-dir). */
  tasksDir: string;
  /** The exported task's own folder. */
  taskDir: string;
  task: PublicTask;
}

/** Writes the public export of `task` into `<destRoot>/<task id>/` (destRoot must not exist or be empty). */
export function exportPublicTask(task: PublicTask, destRoot: string): TaskExport {
  const taskDir = join(destRoot, task.id);
  if (existsSync(taskDir)) throw new Error(`export: ${taskDir} already exists`);
  mkdirSync(taskDir, { recursive: true });
  const spec: Record<string, unknown> = { ...task.spec };
  if (task.source.kind === "dir") {
    // Dereferenced: the snapshot is copied as files; a link in it must not point back into the task.
    cpSync(task.source.dir, join(taskDir, "repo"), { recursive: true, dereference: true });
    spec.source = { kind: "dir", path: "repo" };
  }
  writeFileSync(join(taskDir, "prompt.md"), task.prompt);
  writeFileSync(join(taskDir, "task.yaml"), `# public export made by infradev run: no hidden part\n${toYaml(spec)}`);
  // Read back through the same door the server uses: a field the export dropped wrongly fails here.
  return { tasksDir: destRoot, taskDir, task: loadPublicTask(task.id, destRoot) };
}
