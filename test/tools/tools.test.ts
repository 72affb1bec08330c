/**
 * The tools through a real SDK Client over an in-memory transport (so the SDK validates inputs and
 * structured outputs), on a real session of grad-bucketing: run folder, git workspace, base
 * worktree. Commands run as plain processes here; isolation and multi-rank runs are the e2e suite's.
 */
import { TEST_FIXTURES } from "../helpers/paths.js";
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TOOL_NAMES } from "../../src/tools/index.js";
import { modeEnv } from "../../src/tools/support/task-env.js";
import { openInMemorySession, type InMemorySession } from "../helpers/mcp.js";

const SNAPSHOT = join(TEST_FIXTURES, "tools-schema.json");

let s: InMemorySession;
let client: Client;

async function call(name: string, args: Record<string, unknown> = {}): Promise<CallToolResult & { structuredContent?: Record<string, any> }> {
  return (await client.callTool({ name, arguments: args })) as CallToolResult;
}
const text = (r: CallToolResult) => (r.content[0] as { text: string }).text;

beforeAll(async () => {
  s = await openInMemorySession({ taskId: "grad-bucketing" });
  client = s.client;
});
afterAll(async () => {
  await s?.close();
});

describe("tools/list metadata", () => {
  it("lists every tool once, snake_case, with annotations, a description and both schemas", async () => {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual([...TOOL_NAMES].sort());
    expect(new Set(tools.map((t) => t.name)).size).toBe(tools.length);
    for (const t of tools) {
      expect(t.name).toMatch(/^[a-z]+(_[a-z]+)*$/);
      expect(t.description?.length ?? 0).toBeGreaterThan(40);
      expect(t.title).toBeTruthy();
      for (const hint of ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"] as const) expect(typeof t.annotations?.[hint]).toBe("boolean");
      expect(t.inputSchema.type).toBe("object");
      expect(t.outputSchema?.type).toBe("object");
      for (const key of ["anyOf", "oneOf", "allOf"]) {
        expect(t.inputSchema).not.toHaveProperty(key);
        expect(t.outputSchema).not.toHaveProperty(key);
      }
      for (const [prop, schema] of Object.entries((t.inputSchema.properties ?? {}) as Record<string, { description?: string }>)) {
        expect(schema.description, `${t.name}.${prop} has no description`).toBeTruthy();
      }
    }
    expect(tools.filter((t) => t.annotations?.readOnlyHint === false).map((t) => t.name).sort()).toEqual(["measure", "pytest_collect", "pytest_run", "run_shell", "submit"]); // they run the workspace's code
  });

  it("matches the checked-in schema snapshot (UPDATE_TOOLS_SCHEMA=1 rewrites it)", async () => {
    const { tools } = await client.listTools();
    const current = tools
      .map((t) => ({ name: t.name, title: t.title, description: t.description, annotations: t.annotations, inputSchema: t.inputSchema, outputSchema: t.outputSchema }))
      .sort((a, b) => a.name.localeCompare(b.name));
    const json = `${JSON.stringify(current, null, 2)}\n`;
    if (process.env.UPDATE_TOOLS_SCHEMA === "1") writeFileSync(SNAPSHOT, json);
    expect(existsSync(SNAPSHOT), `missing ${SNAPSHOT}: run UPDATE_TOOLS_SCHEMA=1 npx vitest run test/mcp-tools.test.ts`).toBe(true);
    expect(json, "a tool schema changed: review it, then UPDATE_TOOLS_SCHEMA=1 to accept").toBe(readFileSync(SNAPSHOT, "utf8"));
  });

  it("has the server instructions, the two prompts and the two resources", async () => {
    expect(client.getInstructions()).toMatch(/pytest_collect is the gate/);
    const { prompts } = await client.listPrompts();
    expect(prompts.map((p) => p.name).sort()).toEqual(["infra_skill", "task"]);
    const task = await client.getPrompt({ name: "task" });
    expect((task.messages[0]!.content as { text: string }).text).toContain("# Bucketed gradient all-reduce");
    const skill = await client.getPrompt({ name: "infra_skill" });
    expect((skill.messages[0]!.content as { text: string }).text).toContain("name: infra-dev");
    const { resources } = await client.listResources();
    expect(resources.map((r) => r.uri).sort()).toEqual(["infradev://skill/infra-dev", "infradev://task/prompt"]);
    const prompt = await client.readResource({ uri: "infradev://task/prompt" });
    expect((prompt.contents[0] as { text: string }).text).toBe(s.session.deps.task.prompt);
  });
});

describe("tools", () => {
  it("get_task returns the prompt, the interface contract, ranks and modes", async () => {
    const r = await call("get_task");
    expect(r.isError).toBeFalsy();
    const out = r.structuredContent!;
    expect(out.task_id).toBe("grad-bucketing");
    expect(out.prompt).toContain("Bucketed gradient all-reduce");
    expect(out.interface_contract).toMatch(/interface contract/i);
    expect(out.ranks).toBe(2);
    expect(out.modes).toEqual([{ name: "eager", env: {} }]);
    expect(out.workflow.length).toBeGreaterThan(4);
    expect(text(r)).toContain("## Workflow");
  });

  it("get_skill returns SKILL.md", async () => {
    const r = await call("get_skill");
    expect(r.structuredContent!.name).toBe("infra-dev");
    expect(r.structuredContent!.text).toContain("## Workflow");
  });

  it("run_shell returns exit code and output, and refuses a cwd outside the workspace", async () => {
    const ok = await call("run_shell", { command: "echo out; echo err >&2; exit 3" });
    expect(ok.isError).toBeFalsy();
    expect(ok.structuredContent).toMatchObject({ exit_code: 3, timed_out: false, stdout: "out\n", stderr: "err\n" });
    const bad = await call("run_shell", { command: "true", cwd: "../.." });
    expect(bad.isError).toBe(true);
    expect(text(bad)).toMatch(/outside/);
    const slow = await call("run_shell", { command: "sleep 30", timeout_sec: 1 });
    expect(slow.isError).toBe(true);
    expect(slow.structuredContent).toMatchObject({ timed_out: true });
  });

  it("pytest_collect, pytest_run and measure refuse test paths outside the workspace or disguised as options", async () => {
    for (const [tool, args] of [
      ["pytest_collect", { paths: ["../../etc/passwd"] }],
      ["pytest_run", { paths: ["--co"] }],
      ["measure", { tests: ["../outside.py::test_x"] }],
    ] as const) {
      const r = await call(tool, args as Record<string, unknown>);
      expect(r.isError, tool).toBe(true);
      expect(text(r)).toMatch(new RegExp(`^${tool}: .*(outside|pytest option)`));
    }
  });

  it("cancelling a call (notifications/cancelled) kills the command's process tree", async () => {
    const ac = new AbortController();
    const pending = client.callTool({ name: "run_shell", arguments: { command: "sleep 1019.5 & sleep 1019.75; wait" } }, undefined, { signal: ac.signal });
    await new Promise((r) => setTimeout(r, 1000));
    ac.abort("test");
    await expect(pending).rejects.toThrow();
    let alive = true;
    let traced = false;
    for (let i = 0; i < 100 && (alive || !traced); i++) {
      await new Promise((r) => setTimeout(r, 100));
      alive = spawnSync("pgrep", ["-f", "sleep 1019"]).status === 0;
      traced = readFileSync(s.session.session.tracePath, "utf8").includes('"cancelled":true');
    }
    expect(alive, "the sleeps survived the cancellation").toBe(false);
    expect(traced, "the trace does not record the cancelled call").toBe(true);
  });

  it("pytest_collect is the gate: the count on base, then the file and message of a collection error", async () => {
    const base = await call("pytest_collect");
    expect(base.isError).toBeFalsy();
    expect(base.structuredContent).toMatchObject({ ok: true, collected: 12, errors: [] });
    expect(base.structuredContent!.node_ids).toContain("tests/test_parallel.py::test_sync_gradients_makes_grads_identical");
    const ws = s.session.session.paths.workspaceDir;
    writeFileSync(join(ws, "tests", "test_broken.py"), "import nanoinfra.does_not_exist\n");
    const broken = await call("pytest_collect");
    expect(broken.isError).toBe(true);
    expect(broken.structuredContent!.ok).toBe(false);
    expect(broken.structuredContent!.errors).toHaveLength(1);
    expect(broken.structuredContent!.errors[0]).toMatchObject({ file: "tests/test_broken.py", message: "ModuleNotFoundError: No module named 'nanoinfra.does_not_exist'" });
    expect(broken.structuredContent!.errors[0].detail).toContain("import nanoinfra.does_not_exist");
    expect(broken.structuredContent!.verdict).toMatch(/^BLOCKED/);
    const opt = await call("pytest_collect", { paths: ["--rootdir=/"] });
    expect(opt.isError).toBe(true);
    await call("run_shell", { command: "rm tests/test_broken.py" });
    const missing = await call("pytest_collect", { paths: ["tests/not_there.py"] });
    expect(missing.isError).toBe(true);
    expect(missing.structuredContent!.errors[0]).toMatchObject({ file: "(pytest)" });
    expect(missing.structuredContent!.errors[0].message).toContain("file or directory not found: tests/not_there.py");
  });

  it("pytest_collect reports what the recording plugin collected, whatever pytest's terminal shows", async () => {
    // A conftest hook that prints lines shaped like node ids (as plugins that report collection do)
    // and a fake summary: the collect-only text says 13 tests; the plugin's record says 12.
    const ws = s.session.session.paths.workspaceDir;
    const conftest = join(ws, "tests", "conftest.py");
    const before = existsSync(conftest) ? readFileSync(conftest, "utf8") : null;
    writeFileSync(
      conftest,
      `${before ?? ""}\n\ndef pytest_collection_finish(session):\n    tr = session.config.pluginmanager.get_plugin("terminalreporter")\n    tr.write_line("tests/test_ghost.py::test_phantom")\n    tr.write_line("13 tests collected in 0.01s")\n`,
    );
    try {
      const r = await call("pytest_collect");
      expect(r.isError, JSON.stringify(r.content)).toBeFalsy();
      expect(r.structuredContent).toMatchObject({ ok: true, collected: 12, errors: [] });
      expect(r.structuredContent!.node_ids).not.toContain("tests/test_ghost.py::test_phantom");
    } finally {
      if (before === null) rmSync(conftest);
      else writeFileSync(conftest, before);
    }
  });

  it("find_callers finds the call sites of the gradient sync", async () => {
    const r = await call("find_callers", { symbol: "nanoinfra.parallel.DataParallel.sync_gradients" });
    expect(r.isError).toBeFalsy();
    const sites = r.structuredContent!.callers.map((c: { file: string; in_function: string }) => `${c.file} ${c.in_function}`);
    expect(sites).toContain("nanoinfra/trainer.py Trainer.train_step");
    expect(sites).toContain("tests/test_parallel.py test_sync_gradients_makes_grads_identical");
    const bad = await call("find_callers", { symbol: "not a symbol" });
    expect(bad.isError).toBe(true);
  });

  it("measure asks for exactly one of tests / command", async () => {
    const r = await call("measure", {});
    expect(r.isError).toBe(true);
    expect(text(r)).toMatch(/exactly one of/);
  });

  it("a mode argument accepts exactly the task's modes (an enum in the input schema), never a prototype key", async () => {
    const { tools } = await client.listTools();
    for (const name of ["pytest_run", "measure"]) {
      const mode = (tools.find((t) => t.name === name)!.inputSchema.properties as Record<string, { enum?: string[] }>).mode;
      expect(mode?.enum, name).toEqual(Object.keys(s.session.deps.task.spec.modes));
    }
    for (const mode of ["cuda_graphs", "constructor", "__proto__", "toString", "hasOwnProperty"]) {
      for (const [tool, args] of [
        ["pytest_run", { mode }],
        ["measure", { mode, command: "true" }],
      ] as const) {
        const r = await call(tool, args);
        expect(r.isError, `${tool} mode=${mode}`).toBe(true);
        expect(text(r), `${tool} mode=${mode}`).toMatch(/Input validation error[\s\S]*mode/);
        expect(r.structuredContent).toBeUndefined();
      }
      // The lookup behind the schema is an own-key lookup too.
      expect(modeEnv(s.session.deps.task, mode).ok, mode).toBe(false);
    }
  });

  it("get_diff shows the change and the functions it touches; submit records patch.diff", async () => {
    const empty = await call("get_diff");
    expect(empty.structuredContent).toMatchObject({ files_changed: 0, diff: "" });
    const ws = s.session.session.paths.workspaceDir;
    const file = join(ws, "nanoinfra", "parallel.py");
    writeFileSync(file, readFileSync(file, "utf8").replace("param.grad.div_(world)", "param.grad.div_(float(world))"));
    writeFileSync(join(ws, "nanoinfra", "extra.py"), "def new_helper():\n    return 1\n");
    const d = await call("get_diff");
    expect(d.isError).toBeFalsy();
    expect(d.structuredContent!.files).toEqual([
      { path: "nanoinfra/extra.py", added: 2, removed: 0 },
      { path: "nanoinfra/parallel.py", added: 1, removed: 1 },
    ]);
    expect(d.structuredContent!.diff).toContain("+            param.grad.div_(float(world))");
    expect(d.structuredContent!.changed_functions.changed.map((f: { qualname: string }) => f.qualname)).toEqual(["DataParallel", "DataParallel.sync_gradients"]);
    expect(d.structuredContent!.changed_functions.added.map((f: { qualname: string }) => f.qualname)).toEqual(["new_helper"]);

    const sub = await call("submit", { note: "checked" });
    expect(sub.isError).toBeFalsy();
    expect(sub.structuredContent).toMatchObject({ submitted: true, files_changed: 2, empty: false, note: "checked" });
    const patch = readFileSync(s.session.session.patchPath, "utf8");
    expect(patch).toContain("diff --git a/nanoinfra/extra.py b/nanoinfra/extra.py");
    const state = JSON.parse(readFileSync(join(s.session.session.runDir, "session.json"), "utf8"));
    expect(state.submitted_at).toBe(sub.structuredContent!.submitted_at);
    expect((await call("get_task")).structuredContent!.submitted).toBe(true);
  });

  it("appends every call to trace.jsonl", async () => {
    const lines = readFileSync(s.session.session.tracePath, "utf8").trim().split("\n").map((l) => JSON.parse(l));
    expect(lines[0]).toMatchObject({ event: "session_start", task_id: "grad-bucketing" });
    const calls = lines.filter((l) => l.tool);
    expect(calls.length).toBeGreaterThan(10);
    for (const c of calls) {
      expect(typeof c.duration_ms).toBe("number");
      expect(typeof c.is_error).toBe("boolean");
      expect(c.args).toBeTypeOf("object");
    }
    expect(calls.find((c) => c.tool === "run_shell" && c.exit_code === 3)).toMatchObject({ stdout_bytes: 4, stderr_bytes: 4 });
    // Each line keeps the result the agent saw (head + tail past the cap), not only its size.
    for (const c of calls) expect(typeof c.result, c.tool).toBe("string");
    expect(calls.filter((c) => c.tool === "get_task").every((c) => c.result.includes("grad-bucketing") || c.result.includes("Bucket"))).toBe(true);
    for (const c of calls) expect(c.result.length, c.tool).toBeLessThanOrEqual(4_000);
  });

  it("a result past the trace's cap keeps its head and its tail, and says it was cut", async () => {
    const r = await call("run_shell", { command: "python3 -c \"print('HEAD'); print('x' * 20000); print('TAIL')\"" });
    expect(r.isError).toBeFalsy();
    const last = readFileSync(s.session.session.tracePath, "utf8").trim().split("\n").map((l) => JSON.parse(l)).filter((l) => l.tool === "run_shell").at(-1);
    expect(last.result_truncated).toBe(true);
    expect(last.result).toMatch(/^[\s\S]*HEAD[\s\S]*chars omitted[\s\S]*TAIL[\s\S]*$/);
    expect(last.result_text_bytes).toBeGreaterThan(4_000);
  });
});
