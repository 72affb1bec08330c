import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { Progress } from "@modelcontextprotocol/sdk/types.js";
import { afterAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { codexConfig } from "../../src/campaign/harness/codex.js";
import { toolTimeoutSec } from "../../src/campaign/harness/mcp-entry.js";
import { opencodeConfig, opencodeHttpConfig } from "../../src/campaign/harness/opencode.js";
import { defaultSkillsRoot, installSkill } from "../../src/campaign/harness/skills.js";
import { sandboxPythonDir } from "../../src/lib/paths.js";
import { SessionEventStore } from "../../src/server/transports/event-store.js";
import { loadSkill } from "../../src/server/skill.js";
import { collectionErrorHeadline } from "../../src/tools/pytest-collect.js";
import { measurementFromCommand, ratios } from "../../src/tools/support/measure-aggregate.js";
import { checkTestPath, hostToSandboxPath, resolveInside } from "../../src/tools/support/sandbox-paths.js";
import { parseNumstat } from "../../src/tools/support/workspace-diff.js";
import { interfaceContract } from "../../src/tools/support/workflow.js";
import { silentLogger } from "../../src/lib/logger.js";
import type { ToolDeps } from "../../src/tools/support/deps.js";
import { registerTool } from "../../src/tools/support/register.js";
import { captureLateProgress } from "../helpers/late-progress.js";
import { PYTHON } from "../helpers/mcp.js";

const tmp = mkdtempSync(join(tmpdir(), "infradev-mcp-units-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe("collectionErrorHeadline (the line that names a collection error, from the plugin's record of it)", () => {
  it("the last E line of pytest's report", () => {
    const longrepr = [
      "ImportError while importing test module '/w/tests/test_bad.py'.",
      "Traceback:",
      "tests/test_bad.py:1: in <module>",
      "    import nope",
      "E   ModuleNotFoundError: No module named 'nope'",
    ].join("\n");
    expect(collectionErrorHeadline(longrepr)).toBe("ModuleNotFoundError: No module named 'nope'");
  });

  it("a SyntaxError with the file and line pytest names", () => {
    const longrepr = ["/usr/lib/python3.11/ast.py:50: in parse", 'E     File "/w/tests/test_syn.py", line 1', "E       def test_x(:", "E                  ^", "E   SyntaxError: invalid syntax"].join("\n");
    expect(collectionErrorHeadline(longrepr)).toBe("SyntaxError: invalid syntax (/w/tests/test_syn.py, line 1)");
  });

  it("no E line: the last line; nothing: says so", () => {
    expect(collectionErrorHeadline("something\nUsing --randomly-seed=1\n\n")).toBe("Using --randomly-seed=1");
    expect(collectionErrorHeadline("")).toBe("collection error (no message)");
  });
});

describe("sandbox paths", () => {
  it("keeps relative paths inside the workspace and refuses escapes", () => {
    expect(resolveInside("tests", "/workspace")).toEqual({ ok: true, path: "/workspace/tests", relative: "tests" });
    expect(resolveInside(".", "/workspace")).toMatchObject({ ok: true, path: "/workspace" });
    expect(resolveInside("../etc", "/workspace").ok).toBe(false);
    expect(resolveInside("/etc", "/workspace").ok).toBe(false);
    expect(resolveInside("a\0b", "/workspace").ok).toBe(false);
    expect(resolveInside("/base/x", "/workspace", ["/workspace", "/base"])).toMatchObject({ ok: true, path: "/base/x" });
  });

  it("refuses pytest options passed as test paths", () => {
    expect(checkTestPath("--rootdir=/", "/workspace").ok).toBe(false);
    expect(checkTestPath("-p", "/workspace").ok).toBe(false);
    expect(checkTestPath("tests/test_a.py::test_b[1-2]", "/workspace")).toMatchObject({ ok: true });
    expect(checkTestPath("../x.py::t", "/workspace").ok).toBe(false);
  });

  it("maps host log paths into the sandbox view", () => {
    expect(hostToSandboxPath("/runs/r1/workspace/.infradev/logs/a.log", "/runs/r1/workspace", "/workspace")).toBe("/workspace/.infradev/logs/a.log");
    expect(hostToSandboxPath("/elsewhere/a.log", "/runs/r1/workspace", "/workspace")).toBeNull();
  });
});

describe("small pure helpers", () => {
  it("extracts the interface contract section, fences included", () => {
    const prompt = "# T\n\nintro\n\n## Interface contract\n\n```python\n# not a heading\nclass A: ...\n```\n\n### Config\nx\n\n## Definition of done\ny\n";
    expect(interfaceContract(prompt)).toBe("## Interface contract\n\n```python\n# not a heading\nclass A: ...\n```\n\n### Config\nx");
    expect(interfaceContract("# nothing here")).toBeNull();
  });

  it("parses git numstat, binary files included", () => {
    expect(parseNumstat("3\t1\ta.py\n-\t-\timg.png\n")).toEqual([
      { path: "a.py", added: 3, removed: 1 },
      { path: "img.png", added: null, removed: null },
    ]);
  });

  it("computes after/before ratios on the max over ranks", () => {
    const rank = (r: number, calls: number, bytes: number) => ({
      rank: r, exit_code: 0, wall_time_s: 1, peak_memory_bytes: 100, memory_kind: "host_rss",
      calls: { all_reduce: calls }, bytes: { all_reduce: bytes }, processes: 1, log_tail: "", probe_errors: [],
    });
    const after = measurementFromCommand("workspace", { ranks: [rank(0, 2, 800), rank(1, 2, 800)], timed_out: false });
    const before = measurementFromCommand("base", { ranks: [rank(0, 6, 800), rank(1, 6, 800)], timed_out: false });
    const rows = ratios(after, before);
    expect(rows.find((r) => r.metric === "calls.all_reduce")).toEqual({ metric: "calls.all_reduce", after: 2, before: 6, ratio: 2 / 6 });
    expect(rows.find((r) => r.metric === "bytes.all_reduce")?.ratio).toBe(1);
    expect(after.ok).toBe(true);
    const failed = measurementFromCommand("workspace", { ranks: [{ ...rank(0, 0, 0), exit_code: 1, log_tail: "Traceback...\nValueError: boom\n" }], timed_out: false });
    expect(failed.ok).toBe(false);
    expect(failed.failure).toContain("ValueError: boom");
  });
});

describe("skill and harness configuration", () => {
  it("the skill has Agent Skills frontmatter and names the tools and the three findings", () => {
    const skill = loadSkill();
    expect(skill.name).toBe("infra-dev");
    expect(skill.description.length).toBeGreaterThan(50);
    for (const tool of ["pytest_collect", "pytest_run", "measure", "find_callers", "get_diff", "submit"]) expect(skill.text).toContain(tool);
    expect(skill.text).toMatch(/caller/i);
    expect(skill.text).toMatch(/averag/i);
    expect(skill.text).toMatch(/CUDA graphs/);
    // No task-specific answer: the bundled task's own names never appear.
    expect(skill.text).not.toMatch(/nanoinfra|DataParallel|sync_gradients|bucket_cap/i);
  });

  it("installs the skill where each harness looks, or into --dir", () => {
    expect(defaultSkillsRoot("codex", { HOME: "/h" })).toBe("/h/.agents/skills");
    expect(defaultSkillsRoot("opencode", { HOME: "/h" })).toBe("/h/.config/opencode/skills");
    expect(defaultSkillsRoot("opencode", { HOME: "/h", XDG_CONFIG_HOME: "/x" })).toBe("/x/opencode/skills");
    const root = join(tmp, "skills");
    const first = installSkill(root);
    expect(first).toEqual({ file: join(root, "infra-dev", "SKILL.md"), changed: true });
    expect(readFileSync(first.file, "utf8")).toBe(loadSkill().text);
    expect(installSkill(root).changed).toBe(false);
  });

  it("prints Codex TOML and OpenCode JSON with raised tool timeouts", () => {
    const o = { task: "grad-bucketing", sandbox: "local", runsDir: "/r/runs", node: "/usr/bin/node", cli: "/pkg/dist/cli/main.js" };
    expect(toolTimeoutSec(600)).toBe(1500);
    expect(codexConfig(o, 600)).toBe(
      [
        "[mcp_servers.infradev]",
        'command = "/usr/bin/node"',
        'args = ["/pkg/dist/cli/main.js", "serve", "--task", "grad-bucketing", "--sandbox", "local", "--runs-dir", "/r/runs"]',
        "# workspace + base checkout are created at start-up",
        "startup_timeout_sec = 60",
        "# multi-rank pytest_run / measure (twice with compare_with_base) outlast Codex's 60 s default",
        "tool_timeout_sec = 1500",
        "# wait for the server before the first turn (else the model starts without these tools)",
        "required = true",
        '# run_shell and the test runs change the workspace: approved, or refused under approval_policy = "never"',
        'default_tools_approval_mode = "approve"',
        "",
      ].join("\n"),
    );
    const command = ["/usr/bin/node", "/pkg/dist/cli/main.js", "serve", "--task", "grad-bucketing", "--sandbox", "local", "--runs-dir", "/r/runs"];
    // OpenCode V2: mcp.servers, no `enabled`, timeout split into startup / request (ms).
    const v2 = JSON.parse(opencodeConfig(o, 600, "v2"));
    expect(Object.keys(v2.mcp)).toEqual(["servers"]);
    expect(v2.mcp.servers.infradev).toEqual({ type: "local", command, timeout: { startup: 60_000, request: 1_500_000 } });
    // V1 is the default (OpenCode 1.18 drops V2's timeouts).
    const v1 = JSON.parse(opencodeConfig(o, 600));
    expect(v1.mcp.infradev).toEqual({ type: "local", command, enabled: true, timeout: 1_500_000 });
    const remote = JSON.parse(opencodeHttpConfig("http://127.0.0.1:8741/mcp", 600, "v2"));
    expect(remote.mcp.servers.infradev).toEqual({
      type: "remote",
      url: "http://127.0.0.1:8741/mcp",
      oauth: false,
      headers: { Authorization: "Bearer {env:INFRADEV_HTTP_TOKEN}" },
      timeout: { startup: 60_000, request: 1_500_000 },
    });
    expect(JSON.parse(opencodeHttpConfig("http://127.0.0.1:8741/mcp", 600)).mcp.infradev).toMatchObject({ type: "remote", enabled: true, timeout: 1_500_000 });
  });
});

describe("infradev_analysis.py", () => {
  const analysis = join(sandboxPythonDir(), "infradev_analysis.py");
  const run = (...args: string[]) => JSON.parse(execFileSync(PYTHON, [analysis, ...args], { encoding: "utf8" }));
  const repo = join(tmp, "repo");
  const write = (rel: string, text: string) => {
    mkdirSync(join(repo, rel, ".."), { recursive: true });
    writeFileSync(join(repo, rel), text);
  };
  write("pkg/__init__.py", "");
  write("pkg/core.py", "def helper(x):\n    return x\n\nclass Engine:\n    def step(self):\n        return helper(1)\n\n    def run(self):\n        self.step()\n\ndef make():\n    return Engine()\n");
  write("pkg/user.py", "from pkg.core import helper as h, Engine\nimport pkg.core as core\n\nclass Loop:\n    def __init__(self):\n        self.engine = Engine()\n\n    def go(self):\n        self.engine.step()\n        core.helper(2)\n        h(3)\n        hook = self.engine.step\n        return hook\n");
  write("tests/test_x.py", "from pkg.core import make\n\ndef test_it():\n    e = make()\n    e.step()\n    other.step()\n");
  write("broken.py", "def (:\n");

  it("finds method call sites with how sure each match is", () => {
    const r = run("callers", "--root", repo, "--symbol", "pkg.core.Engine.step");
    expect(r.definition).toEqual({ file: "pkg/core.py", line: 5, end_line: 6 });
    const sites = r.callers.map((c: { file: string; line: number; match: string; kind: string }) => `${c.file}:${c.line}:${c.match}:${c.kind}`);
    expect(sites).toEqual([
      "pkg/core.py:9:exact:call",
      "pkg/user.py:9:probable:call",
      "pkg/user.py:12:probable:reference",
      "tests/test_x.py:5:probable:call",
      "tests/test_x.py:6:name-only:call",
    ]);
    expect(r.parse_errors).toEqual([{ file: "broken.py", message: "SyntaxError: invalid syntax (line 1)" }]);
  });

  it("resolves function calls through import aliases", () => {
    const r = run("callers", "--root", repo, "--symbol", "pkg.core.helper");
    const exact = r.callers.filter((c: { match: string }) => c.match === "exact").map((c: { file: string; line: number }) => `${c.file}:${c.line}`);
    expect(exact).toEqual(["pkg/core.py:6", "pkg/user.py:10", "pkg/user.py:11"]);
  });

  it("lists the definitions a change adds, changes and removes", () => {
    const after = join(tmp, "after");
    execFileSync("cp", ["-r", repo, after]);
    writeFileSync(join(after, "pkg/core.py"), "def helper(x):\n    return x + 1\n\nclass Engine:\n    def step(self):\n        return helper(1)\n\ndef make():\n    return Engine()\n\ndef extra():\n    pass\n");
    const r = run("changed", "--base", repo, "--root", after);
    const names = (xs: Array<{ qualname: string }>) => xs.map((x) => x.qualname);
    expect(names(r.added)).toEqual(["extra"]);
    expect(names(r.changed)).toEqual(["helper", "Engine"]);
    expect(names(r.removed)).toEqual(["Engine.run"]);
    expect(r.files.modified).toEqual(["pkg/core.py"]);
    expect(r.changed[0]).toMatchObject({ file: "pkg/core.py", line: 1, end_line: 2, body_line: 2 });
  });

  it("rejects a malformed symbol with exit code 2", () => {
    expect(() => execFileSync(PYTHON, [analysis, "callers", "--root", repo, "--symbol", "pkg..x"], { stdio: "pipe" })).toThrow();
  });
});


describe("registerTool progress", () => {
  // A real in-process server and the SDK's Client over the SDK's in-memory transport, with the
  // client's side batched like a pipe read: everything the server writes within one macrotask
  // reaches the client together, in order, in one synchronous burst. That is the chunk in which the
  // SDK client loses a progress notification read together with its response (typescript-sdk#2580).
  it("delivers the final progress sent just before the result to onprogress", async () => {
    const server = new McpServer({ name: "progress-test", version: "0" });
    const deps = { logger: silentLogger(), trace: { append() {} } } as unknown as ToolDeps;
    registerTool(
      server,
      deps,
      {
        name: "count",
        title: "Count",
        description: "Reports 1/3, 2/3, 3/3 and returns at once.",
        input: z.object({}),
        output: z.object({ n: z.number() }),
        annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
      },
      async (_args, ctx) => {
        for (let i = 1; i <= 3; i++) ctx.progress(i, 3);
        return { content: [{ type: "text", text: "3" }], structuredContent: { n: 3 } };
      },
    );
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await server.connect(serverSide);
    const client = new Client({ name: "progress-test-client", version: "0" });
    const late = captureLateProgress(client);
    await client.connect(clientSide);
    const deliver = clientSide.onmessage!;
    let chunk: Parameters<typeof deliver>[] = [];
    clientSide.onmessage = (...m) => {
      if (chunk.length === 0) setImmediate(() => { const c = chunk; chunk = []; for (const x of c) deliver(...x); });
      chunk.push(m);
    };
    const heard: Progress[] = [];
    const r = await client.callTool({ name: "count", arguments: {} }, undefined, { onprogress: (p) => heard.push(p) });
    expect(r.structuredContent).toEqual({ n: 3 });
    expect(late).toEqual([]);
    expect(heard.map((p) => p.progress)).toEqual([1, 2, 3]);
    await client.close();
  });
});

describe("SessionEventStore", () => {
  const msg = (n: number, pad = 0) => ({ jsonrpc: "2.0" as const, method: "notifications/message", params: { n, pad: "x".repeat(pad) } });

  it("replays what came after an id on that id's stream only, priming events left out", async () => {
    const store = new SessionEventStore();
    const primeA = await store.storeEvent("A", {} as never);
    const a1 = await store.storeEvent("A", msg(1));
    await store.storeEvent("B", msg(2));
    await store.storeEvent("A", msg(3));
    const sent: Array<[string, unknown]> = [];
    const stream = await store.replayEventsAfter(primeA, { send: async (id, m) => void sent.push([id, (m as { params: { n: number } }).params.n]) });
    expect(stream).toBe("A");
    expect(sent.map(([, n]) => n)).toEqual([1, 3]);
    expect(sent[0]![0]).toBe(a1);
    expect(await store.getStreamIdForEventId(a1)).toBe("A");
  });

  it("keeps the newest events within both limits and refuses an id it dropped", async () => {
    const byCount = new SessionEventStore({ maxEvents: 3, maxBytes: 1 << 20 });
    const ids = [];
    for (let n = 0; n < 5; n++) ids.push(await byCount.storeEvent("S", msg(n)));
    expect(byCount.size()).toBe(3);
    expect(await byCount.getStreamIdForEventId(ids[1]!)).toBeUndefined();
    await expect(byCount.replayEventsAfter(ids[1]!, { send: async () => undefined })).rejects.toThrow(/unknown or expired event id/);
    const sent: number[] = [];
    await byCount.replayEventsAfter(ids[2]!, { send: async (_id, m) => void sent.push((m as { params: { n: number } }).params.n) });
    expect(sent).toEqual([3, 4]);

    const byBytes = new SessionEventStore({ maxEvents: 1000, maxBytes: 2500 });
    for (let n = 0; n < 4; n++) await byBytes.storeEvent("S", msg(n, 1000));
    expect(byBytes.size()).toBe(2);
  });
});
