import type { Command } from "commander";
import { loadPublicTask, listTaskIds } from "../tasks/loader.js";
import { TaskError } from "../tasks/errors.js";
import { taskPython, taskRunnableHere } from "../tasks/runnable.js";
import { registerTaskCheckCommands } from "./task-check.js";
import { formatTable } from "../lib/text-table.js";

export interface TaskRow {
  id: string;
  /** Set when the task folder does not load: the rest of the row is empty. */
  error?: string;
  title: string;
  category: string;
  type: string;
  ranks: number;
  requires_gpu: boolean;
  runnable: boolean;
  reason?: string;
}

export function taskRows(tasksRoot?: string): TaskRow[] {
  return listTaskIds(tasksRoot).map((id): TaskRow => {
    let t: ReturnType<typeof loadPublicTask>;
    try {
      t = loadPublicTask(id, tasksRoot);
    } catch (e) {
      // One broken task does not hide the others: it gets a row saying why.
      if (!(e instanceof TaskError)) throw e;
      return { id, error: e.message, title: "", category: "", type: "", ranks: 0, requires_gpu: false, runnable: false };
    }
    // With the interpreter the grader would use ($INFRADEV_PYTHON, else env.python).
    const r = taskRunnableHere(t.spec, { python: taskPython(t.spec).python });
    return {
      id,
      title: t.spec.title,
      category: t.spec.category,
      type: t.spec.type,
      ranks: t.spec.ranks,
      requires_gpu: t.spec.requires_gpu,
      runnable: r.runnable,
      ...(r.reason ? { reason: r.reason } : {}),
    };
  });
}

export { formatTable };

export function registerTasksCommands(program: Command): void {
  const tasks = program.command("tasks").alias("task").description("list, inspect and check tasks (`task` is the same command)");
  tasks
    .command("list")
    .description("one row per task: id, title, category, type, ranks, requires_gpu, runnable here")
    .option("--json", "print JSON")
    .option("--tasks-dir <dir>", "tasks folder (default: the bundled tasks)")
    .action((opts: { json?: boolean; tasksDir?: string }) => {
      const rows = taskRows(opts.tasksDir);
      // Every row is printed; a task that does not load makes the exit status 1.
      if (rows.some((r) => r.error)) process.exitCode = 1;
      if (opts.json) {
        process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
        return;
      }
      process.stdout.write(
        `${formatTable(
          ["id", "title", "category", "type", "ranks", "requires_gpu", "runnable here"],
          rows.map((r) => (r.error ? [r.id, `error: ${r.error}`, "", "", "", "", ""] : [r.id, r.title, r.category, r.type, String(r.ranks), String(r.requires_gpu), r.runnable ? "yes" : `no: ${r.reason}`])),
        )}\n`,
      );
    });
  tasks
    .command("show <id>")
    .description("print the prompt the agent will get")
    .option("--tasks-dir <dir>", "tasks folder (default: the bundled tasks)")
    .action((id: string, opts: { tasksDir?: string }) => {
      process.stdout.write(loadPublicTask(id, opts.tasksDir).prompt);
    });
  registerTaskCheckCommands(tasks);
}
