/**
 * A task whose code imports a module that only its env.pythonpath stand-in folder provides
 * (test/fixtures/pythonpath/tasks/stub-import): graded end to end on the real bubblewrap sandbox
 * and the real launcher (2 ranks), and run by the agent's pytest_run tool in a real MCP session on
 * the same backend. The official tests themselves check that the stand-in is found first on
 * PYTHONPATH (ahead of task.yaml's own PYTHONPATH) and that the code under test cannot write to it.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { calibrate } from "../../../src/grader/grade/calibrate.js";
import { gradeSubmission } from "../../../src/grader/grade/grade.js";
import { graderSandboxFactory } from "../../../src/grader/grade/sandbox-factory.js";
import { silentLogger } from "../../../src/lib/logger.js";
import { createServer } from "../../../src/server/create-server.js";
import { makeSandboxFactory } from "../../../src/server/sandbox-factory.js";
import { openSession } from "../../../src/server/session.js";
import { loadGraderTask } from "../../../src/task/hidden/grader-task.js";
import { TEST_FIXTURES } from "../../helpers/paths.js";

const TASKS = join(TEST_FIXTURES, "pythonpath", "tasks");
let root: string;

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "infradev-pythonpath-grade-"));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("env.pythonpath on the local sandbox", () => {
  it("gold passes every official case and the probe on 2 ranks, three times; golden is resolved and base is not", async () => {
    const task = loadGraderTask("stub-import", TASKS);
    const sandboxFactory = graderSandboxFactory("local", [root]);
    const cacheDir = join(root, "calibration");
    const { calibration } = await calibrate({ task, cacheDir, sandboxFactory });
    const byName = new Map(calibration.cases.map((c) => [c.id.split("::")[1]!, c.outcomes]));
    expect([...byName.keys()].sort()).toEqual(
      ["test_double", "test_stand_in_comes_first_then_the_task_vars", "test_stand_in_folder_is_read_only", "test_triple", "test_triple_of_negatives_and_floats"].sort(),
    );
    for (const [name, outcomes] of byName) expect(outcomes, name).toEqual(["passed", "passed", "passed"]);

    const gold = await gradeSubmission({ task, patchFile: task.hidden.goldenPatch, outDir: join(root, "out-gold"), calibrationDir: cacheDir, sandboxFactory });
    expect(gold.result).toMatchObject({ status: "graded" });
    expect(gold.result.official).toMatchObject({ n_cases: 4, passed: 4, resolved: true });
    expect(gold.result.with_probes).toMatchObject({ resolved: true });

    // Base has no triple(): the module fails to import — but because of triple, not of heavydep.
    const base = await gradeSubmission({ task, patchFile: null, baseAsIs: true, outDir: join(root, "out-base"), calibrationDir: cacheDir, sandboxFactory });
    expect(base.result.official).toMatchObject({ resolved: false });
  }, 300_000);

  it("the agent's pytest_run tool runs the workspace's tests with the stand-in first on PYTHONPATH, read-only", async () => {
    const runsDir = join(root, "runs");
    const session = await openSession({
      taskId: "stub-import",
      tasksRoot: TASKS,
      runsDir,
      sandboxKind: "local",
      logger: silentLogger(),
      createSandbox: makeSandboxFactory(),
    });
    const server = createServer(session.deps);
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    const client = new Client({ name: "infradev-test", version: "0" });
    await Promise.all([server.connect(serverSide), client.connect(clientSide)]);
    try {
      // What an agent would write: a test that imports the stand-in and tries to change it.
      writeFileSync(
        join(session.deps.sandbox.hostRepoDir, "tests", "test_agent.py"),
        [
          "import os",
          "import heavydep",
          "import pytest",
          "",
          "def test_stand_in_first_and_read_only():",
          "    entries = os.environ['PYTHONPATH'].split(os.pathsep)",
          "    assert entries.index('/opt/infradev/pythonpath/0') < entries.index('/opt/stub-import-extra'), entries",
          "    assert heavydep.__file__ == '/opt/infradev/pythonpath/0/heavydep/__init__.py'",
          "    with pytest.raises(OSError):",
          "        open('/opt/infradev/pythonpath/0/heavydep/planted.py', 'w').close()",
          "",
        ].join("\n"),
      );
      const r = (await client.callTool({ name: "pytest_run", arguments: { paths: ["tests"] } })) as CallToolResult;
      const out = r.structuredContent as { status: string; tests: Array<{ id: string; outcome: string }> };
      expect(out.status, JSON.stringify(out).slice(0, 2000)).toBe("ok");
      expect(out.tests.map((t) => [t.id.split("::")[1], t.outcome]).sort()).toEqual([
        ["test_double", "passed"],
        ["test_stand_in_first_and_read_only", "passed"],
      ]);
    } finally {
      await client.close();
      await session.finish("test end");
      await server.close();
    }
  }, 300_000);
});
