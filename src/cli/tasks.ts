import { existsSync } from "node:fs";
import { resolve } from "node:path";
import type { Command } from "commander";
import { UsageError } from "../lib/errors.js";
import { loadPublicTask, listTaskIds } from "../task/public/loader.js";
import { TaskError } from "../task/public/errors.js";
import { taskPython, taskRunnableHere } from "../task/public/runnable.js";
import { registerTaskCheckCommands } from "./task-check.js";
import { registerTaskNewCommands } from "./task-new.js";
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
  const cache = tasks.command("cache").description("the git cache of git-sourced tasks (mirrors of upstream repositories; $INFRADEV_GIT_CACHE moves it)");
  cache
    .command("import <bundle>")
    .description("seed the cache's mirror of --url from a git bundle (offline machines, CI): a task whose source is that URL is then built from it")
    .requiredOption("--url <url>", "the upstream URL the bundle's commits come from, exactly as the task's source.url names it")
    .option("--shallow <sha>", "the commit the bundle's history is cut at (its first commit): becomes the mirror's shallow boundary (repeatable: a bundle of a two-parent merge cut at depth 1 has two)", (v: string, prev: string[] = []) => [...prev, v])
    .option("--json", "print JSON")
    .action(async (bundle: string, opts: { url: string; shallow?: string[]; json?: boolean }) => {
      const { importBundle } = await import("../task/public/snapshot.js");
      if (!existsSync(bundle)) throw new UsageError(`tasks cache import: bundle ${bundle}: no such file`);
      for (const s of opts.shallow ?? []) if (!/^[0-9a-f]{40}$/.test(s)) throw new UsageError(`tasks cache import: --shallow: expected a full 40-hex commit sha, got "${s}"`);
      const r = await importBundle(resolve(bundle), opts.url, opts.shallow?.length ? { shallow: opts.shallow } : {});
      if (opts.json) {
        process.stdout.write(`${JSON.stringify(r, null, 2)}\n`);
        return;
      }
      process.stdout.write(`${r.created ? "created" : "updated"} ${r.mirror} (${opts.url}) from ${bundle}: ${r.refs.length} ref(s)${r.shallow ? `, shallow at ${r.shallow}` : ""}\n`);
      for (const ref of r.refs) process.stdout.write(`  ${ref}\n`);
    });
  cache
    .command("path")
    .description("print the folder of the cache's mirror of --url (whether or not it exists)")
    .requiredOption("--url <url>", "the upstream URL")
    .action(async (opts: { url: string }) => {
      const { mirrorDirFor } = await import("../task/public/snapshot.js");
      process.stdout.write(`${mirrorDirFor(opts.url)}\n`);
    });
  registerTaskCheckCommands(tasks);
  registerTaskNewCommands(tasks);
}
