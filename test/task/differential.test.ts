import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { ruleProblem } from "../../src/task/hidden/differential-schema.js";
import { loadGraderTask } from "../../src/task/hidden/grader-task.js";

const SPEC = {
  schema_version: 1,
  id: "toy",
  title: "Toy task",
  category: "training",
  type: "performance",
  source: { kind: "dir", path: "repo" },
  test_dirs: ["tests"],
  ranks: 2,
  timeout_sec: 30,
};

const GOLDEN = `diff --git a/toypkg/core.py b/toypkg/core.py
index 0000000..1111111 100644
--- a/toypkg/core.py
+++ b/toypkg/core.py
@@ -1 +1,2 @@
 VALUE = 1
+EXTRA = 2
diff --git a/README.md b/README.md
--- a/README.md
+++ b/README.md
@@ -1 +1 @@
-old
+new
`;

const RULES = [
  { id: "bytes-budget", promise: "small", kind: "resource", metric: "bytes", rule: "<= 16 * P + 64" },
  { id: "same-values", promise: "small", kind: "numerical", metric: "values" },
];

let root: string;
let cache: string;
const saved = process.env.INFRADEV_GIT_CACHE;

function makeTask(diff: Record<string, unknown> | null): string {
  const dir = join(mkdtempSync(join(root, "t-")), "toy");
  mkdirSync(join(dir, "repo", "tests"), { recursive: true });
  mkdirSync(join(dir, "repo", "toypkg"), { recursive: true });
  writeFileSync(join(dir, "repo", "toypkg", "__init__.py"), "");
  writeFileSync(join(dir, "repo", "toypkg", "core.py"), "VALUE = 1\n");
  writeFileSync(join(dir, "repo", "README.md"), "old\n");
  writeFileSync(join(dir, "task.yaml"), stringify(SPEC));
  writeFileSync(join(dir, "prompt.md"), "# Toy\n\nCall `toypkg.core.Thing` and keep it small.\n");
  mkdirSync(join(dir, "hidden", "tests", "tests"), { recursive: true });
  mkdirSync(join(dir, "hidden", "probes"), { recursive: true });
  mkdirSync(join(dir, "hidden", "differential"), { recursive: true });
  writeFileSync(join(dir, "hidden", "probes", "test_p.py"), "import pytest\n\n@pytest.mark.probe(promise='small', kind='resource')\ndef test_a():\n    pass\n");
  writeFileSync(join(dir, "hidden", "golden.patch"), GOLDEN);
  writeFileSync(join(dir, "hidden", "promises.yaml"), stringify([{ id: "small", text: "Keep it small.", prompt: "keep it small" }]));
  writeFileSync(join(dir, "hidden", "differential", "drv.py"), "def generate(rng, index, count, world_size):\n    return {}\n\ndef run(impl, workload, rec):\n    pass\n");
  if (diff) writeFileSync(join(dir, "hidden", "differential.yaml"), stringify(diff));
  return dir;
}

const base = { package: "toypkg", entry_points: ["toypkg.core.Thing"], driver: "differential/drv.py", facts: ["P"], rules: RULES };
const loadError = (diff: Record<string, unknown>): string => {
  try {
    const dir = makeTask(diff);
    loadGraderTask(dir, join(dir, ".."));
  } catch (e) {
    return (e as Error).message.replace(/^.*?hidden\/differential\.yaml/, "differential.yaml");
  }
  return "loaded";
};

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "infradev-diff-"));
  cache = join(root, "cache");
  process.env.INFRADEV_GIT_CACHE = cache;
});
afterAll(() => {
  if (saved === undefined) delete process.env.INFRADEV_GIT_CACHE;
  else process.env.INFRADEV_GIT_CACHE = saved;
  rmSync(root, { recursive: true, force: true });
});

describe("differential rules: the formula checker", () => {
  it("accepts the prompt's formulas and golden-relative rules", () => {
    for (const r of ["<= golden", "<= golden * (1 + 0.1)", "== golden", "<= 16 * P + 64", ">= max(golden, 2) - min(P, 3) // 2", "< -1.5e3 + P"]) expect(ruleProblem(r, ["P"]), r).toBeNull();
  });
  it("names what is wrong", () => {
    expect(ruleProblem("16 * P", ["P"])).toBe("expected it to start with one of <=, >=, ==, <, >");
    expect(ruleProblem("<= 16 * Q", ["P"])).toBe('unknown name "Q" (known: golden, P; declare the driver\'s facts under facts:)');
    expect(ruleProblem("<= (P + 1", ["P"])).toBe("a '(' is not closed");
    expect(ruleProblem("<= P P", ["P"])).toBe('unexpected "P"');
    expect(ruleProblem("<= ", [])).toBe("no expression after <=");
    expect(ruleProblem("<= P ** 2", ["P"])).toBe('unexpected "*"');
    expect(ruleProblem("<= os.system", [])).toContain('unknown name "os"');
  });
});

describe("hidden/differential.yaml", () => {
  it("errors name the field and its line", () => {
    expect(loadError({ ...base, rules: [{ ...RULES[0], rule: "<= 16 * Q" }] })).toMatch(/^differential\.yaml:\d+: rules\.0\.rule: "<= 16 \* Q": unknown name "Q"/);
    expect(loadError({ ...base, rules: [{ ...RULES[0], promise: "tiny" }] })).toMatch(/rules\.0\.promise: unknown promise "tiny" \(known: small\)/);
    expect(loadError({ ...base, rules: [{ ...RULES[0], metric: "wall_time" }] })).toMatch(/rules\.0\.metric: .*expected values, bytes/);
    expect(loadError({ ...base, rules: [{ ...RULES[1], rule: "<= 1" }] })).toMatch(/rules\.0\.rule: only for a resource metric/);
    expect(loadError({ ...base, rules: [{ ...RULES[0], rule: undefined }] })).toMatch(/rules\.0\.rule: required for metric bytes/);
    expect(loadError({ ...base, rules: [RULES[0], RULES[0]] })).toMatch(/rules\.1\.id: rule "bytes-budget" is declared twice/);
    expect(loadError({ ...base, rules: [{ ...RULES[0], metric: "fact:n" }] })).toMatch(/rules\.0\.metric: fact "n" is not declared under facts:/);
    expect(loadError({ ...base, entry_points: ["toypkg.core.Hidden"] })).toMatch(/entry_points\.0: "Hidden" \(of toypkg\.core\.Hidden\) is not named in prompt\.md/);
    expect(loadError({ ...base, driver: "differential/none.py" })).toMatch(/driver: "differential\/none\.py" does not exist/);
    expect(loadError({ ...base, driver: "../x.py" })).toMatch(/driver: expected a path inside hidden\//);
    expect(loadError({ ...base, budget: { workloads: 0, seconds: 5 } })).toMatch(/budget\.workloads: expected a number ≥ 1/);
    expect(loadError({ ...base, colour: 1 })).toMatch(/unknown key "colour"/);
  });

  it("without it the probes folder is hidden/probes itself", () => {
    const dir = makeTask(null);
    const task = loadGraderTask(dir, join(dir, ".."));
    expect(task.hidden.differential).toBeNull();
    expect(task.hidden.probesDir).toMatch(/hidden\/probes$/);
  });

  it("with it the staged probes add one marked case per rule, the driver and the recorder, and nothing of golden's code", () => {
    const made = makeTask(base);
    const task = loadGraderTask(made, join(made, ".."));
    const dir = task.hidden.probesDir;
    expect(dir.startsWith(join(cache, "derived"))).toBe(true); // masked in every sandbox, like the git cache
    expect(existsSync(join(dir, "test_p.py"))).toBe(true);
    const test = readFileSync(join(dir, "test_differential.py"), "utf8");
    expect(test).toContain('@pytest.mark.probe(promise="small", kind="resource")\ndef test_bytes_budget(differential_outcome):');
    expect(test).toContain('@pytest.mark.probe(promise="small", kind="numerical")\ndef test_same_values(differential_outcome):');
    // Golden's side is recorded in a session of its own: the probes the submission runs beside carry none of it.
    expect(readdirSync(dir).sort()).toEqual(["differential_driver.py", "differential_runner.py", "test_differential.py", "test_p.py"]);
    for (const f of readdirSync(dir)) expect(readFileSync(join(dir, f), "utf8"), f).not.toContain("EXTRA = 2");
    expect(readFileSync(join(dir, "differential_driver.py"), "utf8")).toContain("def generate");
    expect(existsSync(join(dir, "differential_runner.py"))).toBe(true);
  });
});
