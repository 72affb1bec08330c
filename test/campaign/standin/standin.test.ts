/**
 * The scripted STAND-IN model (campaign/standin/) over real HTTP: the Responses API's SSE stream
 * (what Codex reads) and chat completions streamed and not (what OpenCode reads), the step taken
 * from the conversation (so a re-prompt continues), tool names mapped onto each harness's own
 * (Codex's `mcp__infradev` namespace, OpenCode's `infradev_` prefix), the title request answered
 * with text, a held (slow) response released by close(), and the scripts built from a task.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { standinSteps, type StandinStep } from "../../../src/campaign/standin/script.js";
import { mapTool, standinThinkS, startStandin } from "../../../src/campaign/standin/server.js";
import { UsageError } from "../../../src/lib/errors.js";
import { loadGraderTask } from "../../../src/task/hidden/grader-task.js";
import { TEST_FIXTURES } from "../../helpers/paths.js";

const FIXTURES = join(TEST_FIXTURES, "grader", "tasks");
const tmp = mkdtempSync(join(tmpdir(), "infradev-standin-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const STEPS: StandinStep[] = [{ call: "get_task", args: {} }, { call: "run_shell", args: { command: "echo hi" } }, { say: "pausing" }, { call: "submit", args: { note: "n" } }];
const codexTools = [{ type: "function", name: "exec_command" }, { type: "namespace", name: "mcp__infradev", tools: [{ type: "function", name: "get_task" }, { type: "function", name: "run_shell" }, { type: "function", name: "submit" }] }];
const chatTools = ["bash", "infradev_get_task", "infradev_run_shell", "infradev_submit"].map((name) => ({ type: "function", function: { name, parameters: {} } }));

/** The SSE events of a Responses stream, parsed. */
async function sse(res: Response): Promise<Array<Record<string, any>>> {
  const text = await res.text();
  return text
    .split("\n\n")
    .map((block) => block.split("\n").find((l) => l.startsWith("data: ")))
    .filter((l): l is string => l !== undefined && l !== "data: [DONE]")
    .map((l) => JSON.parse(l.slice(6)) as Record<string, any>);
}

const post = (url: string, body: unknown) => fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

describe("stand-in model server", () => {
  it("Responses API: a namespaced call per step, the step read from the conversation, usage reported", async () => {
    const s = await startStandin({ steps: STEPS });
    try {
      const first = await sse(await post(`${s.url}/responses`, { model: "m", stream: true, input: [{ type: "message", role: "user", content: "go" }], tools: codexTools }));
      const done = first.find((e) => e.type === "response.output_item.done")!;
      expect(done.item).toMatchObject({ type: "function_call", namespace: "mcp__infradev", name: "get_task", arguments: "{}" });
      const completed = first.find((e) => e.type === "response.completed")!;
      expect(completed.response.usage.input_tokens).toBeGreaterThan(0);
      expect(completed.response.usage.output_tokens_details.reasoning_tokens).toBeGreaterThan(0);
      // Two tool results already: the third step (a final text) is next.
      const history = [
        { type: "message", role: "user", content: "go" },
        { type: "function_call", call_id: "a", name: "get_task" },
        { type: "function_call_output", call_id: "a", output: "{}" },
        { type: "function_call", call_id: "b", name: "run_shell" },
        { type: "function_call_output", call_id: "b", output: "{}" },
      ];
      const third = await sse(await post(`${s.url}/responses`, { stream: true, input: history, tools: codexTools }));
      expect(third.find((e) => e.type === "response.output_item.done")!.item).toMatchObject({ type: "message", content: [{ type: "output_text", text: "pausing" }] });
      // A re-prompt: the same conversation + the text + a user turn continues at submit.
      const again = [...history, { type: "message", role: "assistant", content: [{ type: "output_text", text: "pausing" }] }, { type: "message", role: "user", content: "continue" }];
      const fourth = await sse(await post(`${s.url}/responses`, { stream: true, input: again, tools: codexTools }));
      expect(fourth.find((e) => e.type === "response.output_item.done")!.item).toMatchObject({ name: "submit", arguments: JSON.stringify({ note: "n" }) });
      expect(s.requests.map((r) => [r.step, r.answer])).toEqual([
        [0, "call mcp__infradev.get_task"],
        [2, "say"],
        [3, "call mcp__infradev.submit"],
      ]);
      expect(s.requests[0]!.tools_offered).toContain("exec_command");
    } finally {
      await s.close();
    }
  });

  it("chat completions: title request (no tools) gets text; streamed and plain tool calls use infradev_<tool>", async () => {
    const s = await startStandin({ steps: STEPS });
    try {
      const title = await (await post(`${s.url}/chat/completions`, { model: "m", messages: [{ role: "user", content: "title?" }] })).json();
      expect(title.choices[0].message.content).toMatch(/stand-in/);
      const plain = await (await post(`${s.url}/chat/completions`, { model: "m", messages: [{ role: "user", content: "go" }], tools: chatTools })).json();
      expect(plain.choices[0]).toMatchObject({ finish_reason: "tool_calls", message: { tool_calls: [{ type: "function", function: { name: "infradev_get_task", arguments: "{}" } }] } });
      expect(plain.usage.prompt_tokens).toBeGreaterThan(0);
      const messages = [
        { role: "user", content: "go" },
        { role: "assistant", content: null, tool_calls: [{ id: "a", type: "function", function: { name: "infradev_get_task", arguments: "{}" } }] },
        { role: "tool", tool_call_id: "a", content: "{}" },
      ];
      const chunks = await sse(await post(`${s.url}/chat/completions`, { model: "m", stream: true, messages, tools: chatTools }));
      expect(chunks[0]!.choices[0].delta.tool_calls[0]).toMatchObject({ index: 0, function: { name: "infradev_run_shell", arguments: JSON.stringify({ command: "echo hi" }) } });
      expect(chunks.find((c) => c.choices.length === 0)!.usage.completion_tokens).toBeGreaterThan(0);
      expect(s.requests.map((r) => r.step)).toEqual([null, 0, 1]);
    } finally {
      await s.close();
    }
  });

  it("a tool the harness does not offer is answered with text naming it; an unknown path is a 404", async () => {
    const s = await startStandin({ steps: [{ call: "measure", args: {} }] });
    try {
      const r = await (await post(`${s.url}/chat/completions`, { model: "m", messages: [{ role: "user", content: "go" }], tools: chatTools })).json();
      expect(r.choices[0].message.content).toMatch(/no tool for "measure"/);
      expect((await post(`${s.url}/embeddings`, {})).status).toBe(404);
    } finally {
      await s.close();
    }
  });

  it("a sleep step holds the response; close() releases it at once", async () => {
    const s = await startStandin({ steps: [{ sleep_s: 3600 }, { say: "late" }] });
    const started = Date.now();
    const pending = post(`${s.url}/chat/completions`, { model: "m", messages: [{ role: "user", content: "go" }], tools: chatTools }).then(
      () => "answered",
      () => "closed",
    );
    await new Promise((r) => setTimeout(r, 300));
    await s.close();
    expect(await pending).toBe("closed");
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(s.requests).toHaveLength(0);
  });

  it("INFRADEV_STANDIN_THINK_S holds every scripted turn that long (a model's think time for throughput benchmarks); a bad value is refused", async () => {
    expect(standinThinkS({})).toBe(0);
    expect(() => standinThinkS({ INFRADEV_STANDIN_THINK_S: "-1" })).toThrow(/INFRADEV_STANDIN_THINK_S/);
    expect(() => standinThinkS({ INFRADEV_STANDIN_THINK_S: "soon" })).toThrow(/got "soon"/);
    const before = process.env.INFRADEV_STANDIN_THINK_S;
    process.env.INFRADEV_STANDIN_THINK_S = "0.6";
    const s = await startStandin({ steps: STEPS });
    if (before === undefined) delete process.env.INFRADEV_STANDIN_THINK_S;
    else process.env.INFRADEV_STANDIN_THINK_S = before;
    try {
      const started = Date.now();
      const r = await (await post(`${s.url}/chat/completions`, { model: "m", messages: [{ role: "user", content: "go" }], tools: chatTools })).json();
      expect(r.choices[0].message.tool_calls[0].function.name).toBe("infradev_get_task");
      expect(Date.now() - started).toBeGreaterThanOrEqual(550);
    } finally {
      await s.close();
    }
  });

  it("mapTool prefers the infradev namespace, then the infradev_ prefix, then a __ suffix", () => {
    expect(mapTool("submit", [{ namespace: "other", name: "submit" }, { namespace: "mcp__infradev", name: "submit" }])).toEqual({ namespace: "mcp__infradev", name: "submit" });
    expect(mapTool("submit", [{ namespace: null, name: "submit" }, { namespace: null, name: "infradev_submit" }])).toEqual({ namespace: null, name: "infradev_submit" });
    expect(mapTool("submit", [{ namespace: null, name: "mcp__infradev__submit" }])).toEqual({ namespace: null, name: "mcp__infradev__submit" });
    expect(mapTool("submit", [{ namespace: null, name: "bash" }])).toBeNull();
  });
});

describe("stand-in scripts", () => {
  const task = loadGraderTask("tiny-mean", FIXTURES);

  it("golden applies the task's golden patch through run_shell (quoted heredoc), then collects, runs and submits", () => {
    const steps = standinSteps("golden", task);
    expect(steps.map((s) => ("call" in s ? s.call : "say" in s ? "say" : "sleep"))).toEqual(["get_task", "run_shell", "pytest_collect", "pytest_run", "submit"]);
    const cmd = String((steps[1] as { args: { command: string } }).args.command);
    expect(cmd).toContain(readFileSync(task.hidden.goldenPatch, "utf8"));
    expect(cmd).toMatch(/<<'INFRADEV_STANDIN_PATCH'\n/);
    expect(cmd).toMatch(/git apply/);
  });

  it("adversarial picks the first patch or a named one; early-exit says something before submit; bad scripts are usage errors", () => {
    const adv = (name: string) => String(((standinSteps(name, task)[1] as { args: { command: string } }).args.command));
    expect(adv("adversarial")).toContain(readFileSync(task.hidden.adversarial[0]!.patchPath, "utf8"));
    expect(adv("adversarial:two-all-reduces")).toContain(readFileSync(task.hidden.adversarial.find((a) => a.name === "two-all-reduces")!.patchPath, "utf8"));
    expect(() => standinSteps("adversarial:nope", task)).toThrow(/no adversarial patch "nope" \(has: sum-not-mean, two-all-reduces\)/);
    const early = standinSteps("early-exit", task);
    expect(early.findIndex((s) => "say" in s)).toBe(2);
    expect(early.at(-1)).toMatchObject({ call: "submit" });
    expect(standinSteps("slow", task)[1]).toEqual({ sleep_s: 86_400 });
    expect(() => standinSteps("clever", task)).toThrow(UsageError);
  });

  it("file:<path> reads YAML or JSON steps and names the bad step", () => {
    const good = join(tmp, "steps.yaml");
    writeFileSync(good, "- call: get_task\n- sleep_s: 1\n- say: bye\n");
    expect(standinSteps(`file:${good}`, task)).toEqual([{ call: "get_task", args: {} }, { sleep_s: 1 }, { say: "bye" }]);
    const json = join(tmp, "steps.json");
    writeFileSync(json, JSON.stringify([{ call: "run_shell", args: { command: "ls" } }]));
    expect(standinSteps(`file:${json}`, task)).toEqual([{ call: "run_shell", args: { command: "ls" } }]);
    const bad = join(tmp, "bad.yaml");
    writeFileSync(bad, "- call: get_task\n- sleep_s: -1\n");
    expect(() => standinSteps(`file:${bad}`, task)).toThrow(/step 2: expected/);
    expect(() => standinSteps(`file:${join(tmp, "missing.yaml")}`, task)).toThrow(/cannot read the script/);
  });
});
