import { TEST_FIXTURES } from "../../helpers/paths.js";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { XMLParser, XMLValidator } from "fast-xml-parser";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { junitSuites } from "../../../src/grader/grade/junit-report.js";
import type { GradeResult, SessionResult } from "../../../src/grader/grade/types.js";
import { packageRoot } from "../../../src/lib/paths.js";
import { loadGraderTask } from "../../../src/task/hidden/grader-task.js";
import { createSnapshot, diffAgainstBase } from "../../../src/task/public/snapshot.js";

/**
 * `grade --junit F` through the real CLI on tiny-mean (real gloo ranks, real bwrap): the XML is
 * parsed back with an independent parser (fast-xml-parser) and compared with result.json and the
 * grade's session files, case by case.
 */

const FIXTURES = join(TEST_FIXTURES, "grader", "tasks");
const CLI = join(packageRoot(), "dist", "cli", "main.js");
const run = promisify(execFile);
let root: string;

interface Parsed {
  testsuites: {
    tests: string; failures: string; errors: string; skipped: string;
    testsuite: Array<{
      name: string; tests: string; failures: string; errors: string; skipped: string;
      properties: { property: Array<{ name: string; value: string }> };
      testcase?: Array<{ classname: string; name: string; time: string; failure?: { type: string; message: string }; error?: { type: string; message: string }; skipped?: { message: string } }>;
    }>;
  };
}

const parser = new XMLParser({ ignoreAttributes: false, attributeNamePrefix: "", isArray: (name) => ["testsuite", "testcase", "property"].includes(name) });

async function grade(name: string, patch: string | null): Promise<{ result: GradeResult; xml: string; parsed: Parsed; artifactDir: string }> {
  const junit = join(root, `${name}.xml`);
  const args = [CLI, "grade", "--task", "tiny-mean", "--tasks-dir", FIXTURES, "--out", join(root, "out"), "--calibration-dir", join(root, "cal"), "--json", "--junit", junit, ...(patch ? ["--patch", patch] : [])];
  const { stdout } = await run(process.execPath, args, { maxBuffer: 1 << 24 });
  const result = JSON.parse(stdout) as GradeResult;
  const xml = readFileSync(junit, "utf8");
  expect(XMLValidator.validate(xml)).toBe(true);
  const hash = patch ? (await import("../../../src/grader/grade/grade.js")).submissionHash(readFileSync(patch)) : "missing";
  return { result, xml, parsed: parser.parse(xml) as Parsed, artifactDir: join(root, "out", "tiny-mean", hash) };
}

function props(s: Parsed["testsuites"]["testsuite"][number]): Record<string, string> {
  return Object.fromEntries(s.properties.property.map((p) => [p.name, p.value]));
}

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "infradev-junit-"));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("grade --junit", () => {
  it("an adversarial patch: one testcase per graded case, failures carry the label, properties the scores", async () => {
    const patch = join(FIXTURES, "tiny-mean", "hidden", "adversarial", "sum-not-mean.patch");
    const { result, parsed, artifactDir } = await grade("adv", patch);
    const suites = parsed.testsuites.testsuite;
    expect(suites.map((s) => s.name)).toEqual(["official", "probe"]);
    expect(Number(parsed.testsuites.tests)).toBe(result.cases.length);
    const sessions = ["cpu.official", "cpu.probe"].map((f) => JSON.parse(readFileSync(join(artifactDir, "sessions", `${f}.json`), "utf8")) as SessionResult);
    for (const s of suites) {
      const p = props(s);
      expect(p.task).toBe("tiny-mean");
      expect(p.status).toBe(result.status);
      expect(Number(p["set_a.passed"])).toBe(result.official.passed);
      expect(Number(p["set_b.n_cases"])).toBe(result.with_probes.n_cases);
      expect(p["set_b.resolved"]).toBe(String(result.with_probes.resolved));
      const mine = result.cases.filter((c) => c.suite === s.name);
      expect(s.testcase!.map((t) => t.name)).toEqual(mine.map((c) => c.id));
      for (const [i, t] of s.testcase!.entries()) {
        const c = mine[i]!;
        const rec = sessions.flatMap((x) => x.cases).find((x) => x.id === c.id)!;
        expect(t.classname).toBe(`${s.name}.cpu.ws2`);
        expect(Number(t.time)).toBeCloseTo(rec.time_s, 3);
        expect(Boolean(t.failure), c.id).toBe(c.outcome === "failed");
        expect(Boolean(t.skipped), c.id).toBe(c.outcome === "skipped");
        if (c.label) expect(t.failure!.type).toBe(c.label);
        if (t.failure && rec.message) expect(t.failure.message).toBe(rec.message);
      }
      expect(Number(s.failures)).toBe(mine.filter((c) => c.outcome === "failed").length);
    }
    // The adversarial patch passes Set A and is caught by a probe: exactly what the report must show.
    expect(result.official.resolved).toBe(true);
    expect(suites[1]!.testcase!.some((t) => t.failure?.type === "numerical")).toBe(true);
  });

  it("a failure message with markup and control characters stays well-formed and round-trips", async () => {
    const task = loadGraderTask("tiny-mean", FIXTURES);
    const dir = join(root, "src-raise");
    await createSnapshot(task, dir);
    const ops = join(dir, "tinyinfra", "ops.py");
    writeFileSync(ops, `${readFileSync(ops, "utf8")}\n\ndef all_mean(t):\n    raise ValueError("bad <mean> & \\"quotes\\" ]]> \\x01 end")\n`);
    const patch = join(root, "raise.patch");
    writeFileSync(patch, await diffAgainstBase(dir));
    const { result, parsed } = await grade("raise", patch);
    const official = parsed.testsuites.testsuite[0]!.testcase!;
    const shape = official.find((t) => t.name.endsWith("::test_all_mean_shape"))!;
    expect(result.cases.find((c) => c.id.endsWith("::test_all_mean_shape"))!.outcome).toBe("failed");
    expect(shape.failure!.message).toContain('bad <mean> & "quotes" ]]>');
    expect(shape.failure!.message).not.toContain("\x01");
  });

  it("an empty patch: every case a failure typed empty_patch", async () => {
    const patch = join(root, "empty.patch");
    writeFileSync(patch, "");
    const { result, parsed } = await grade("empty", patch);
    expect(result.status).toBe("empty_patch");
    const cases = parsed.testsuites.testsuite.flatMap((s) => s.testcase ?? []);
    expect(cases.length).toBe(result.cases.length);
    expect(cases.every((t) => t.failure?.type === "empty_patch")).toBe(true);
  });

  it("a tampered grade has no passing case; a harness fault makes every case an error", () => {
    const base: GradeResult = {
      task_id: "t", status: "graded", patch_applied: true, apply_method: "git_apply", n_cases: 2, passed: 2, score: 1, resolved: true, resolved_strict: true,
      official: { n_cases: 1, passed: 1, score: 1, resolved: true, resolved_strict: true },
      with_probes: { n_cases: 2, passed: 2, score: 1, resolved: true, resolved_strict: true },
      tamper_evidence: [], world_sizes: [2],
      cases: [{ id: "tests/a.py::x", suite: "official", outcome: "passed" }, { id: "probes/b.py::y", suite: "probe", outcome: "passed" }],
    };
    const verdicts = (r: GradeResult) => junitSuites(r, new Map()).flatMap((s) => s.cases.map((c) => c.verdict));
    expect(verdicts(base)).toEqual(["passed", "passed"]);
    expect(junitSuites(base, new Map())[0]!.cases[0]!.classname).toBe("official.ws2");
    const tampered = junitSuites({ ...base, status: "tampered", tamper_evidence: ["canary c1 passed on rank 1"] }, new Map()).flatMap((s) => s.cases);
    expect(tampered.map((c) => [c.verdict, c.type, c.message])).toEqual([["failure", "tampered", "canary c1 passed on rank 1"], ["failure", "tampered", "canary c1 passed on rank 1"]]);
    expect(verdicts({ ...base, status: "harness_fault" })).toEqual(["error", "error"]);
  });

  it("--junit with an empty value is a usage error (exit 2)", async () => {
    const err = await run(process.execPath, [CLI, "grade", "--task", "tiny-mean", "--tasks-dir", FIXTURES, "--junit", ""]).catch((e: { code: number; stderr: string }) => e);
    expect((err as { code: number }).code).toBe(2);
    expect((err as { stderr: string }).stderr).toMatch(/--junit/);
  });
});
