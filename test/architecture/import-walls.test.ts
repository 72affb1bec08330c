/**
 * The walls of .dependency-cruiser.cjs hold: each rule fires on a small tree that breaks exactly it
 * (so the config cannot be weakened without a test failing). The real src/ is checked by
 * `npm test` itself (`npm run lint:imports`, before vitest).
 */
import { spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO_ROOT } from "../helpers/paths.js";

const DEPCRUISE = join(REPO_ROOT, "node_modules", ".bin", "depcruise");

interface Violation {
  rule: { name: string };
  from: string;
  to: string;
}

/** Runs the project's config over `dir`/src and returns the violations. */
function cruise(dir: string): Violation[] {
  const r = spawnSync(DEPCRUISE, ["src", "--config", ".dependency-cruiser.cjs", "--output-type", "json"], { cwd: dir, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
  if (!r.stdout.trim()) throw new Error(`depcruise printed nothing (exit ${r.status}): ${r.stderr}`);
  return (JSON.parse(r.stdout) as { summary: { violations: Violation[] } }).summary.violations;
}

describe("import walls (dependency-cruiser)", () => {
  let dir: string;
  const file = (rel: string, text: string) => {
    mkdirSync(dirname(join(dir, rel)), { recursive: true });
    writeFileSync(join(dir, rel), text);
  };
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "infradev-walls-"));
    cpSync(join(REPO_ROOT, ".dependency-cruiser.cjs"), join(dir, ".dependency-cruiser.cjs"));
    writeFileSync(join(dir, "tsconfig.json"), JSON.stringify({ compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", strict: true }, include: ["src/**/*.ts"] }));
    file("src/lib/util.ts", "export const u = 1;\n");
    file("src/task/public/loader.ts", 'import { u } from "../../lib/util.js";\nexport const pub = u;\n');
    file("src/task/hidden/grader-task.ts", 'import { pub } from "../public/loader.js";\nexport const secret = pub;\n');
    file("src/cli/main.ts", 'export const cliThing = 1;\n');
    // One offender per rule.
    file("src/server/reads-hidden.ts", 'import { secret } from "../task/hidden/grader-task.js";\nexport const s = secret;\n');
    file("src/tools/reads-grader.ts", 'import { g } from "../grader/grade/x.js";\nexport const t = g;\n');
    file("src/grader/grade/x.ts", 'import { cliThing } from "../../cli/main.js";\nexport const g = cliThing;\n');
    file("src/sandbox/a.ts", 'import type { B } from "./b.js";\nexport type A = { b?: B };\nexport const a = 1;\n');
    file("src/sandbox/b.ts", 'import { a } from "./a.js";\nexport type B = number;\nexport const b = a;\n');
    file("src/lib/reaches-up.ts", 'import { pub } from "../task/public/loader.js";\nexport const r = pub;\n');
    file("src/task/public/peeks.ts", 'import { secret } from "../hidden/grader-task.js";\nexport const p = secret;\n');
    file("src/grader/grade/uses-tool.ts", 'import { t } from "../../tools/reads-grader.js";\nexport const v = t;\n');
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("each rule fires on the import that breaks it, type-only imports included", () => {
    const found = cruise(dir).map((v) => `${v.rule.name}: ${v.from} -> ${v.to}`);
    const expected = [
      "server-never-reaches-the-grader: src/server/reads-hidden.ts -> src/task/hidden/grader-task.ts",
      "only-grader-and-campaign-open-hidden: src/server/reads-hidden.ts -> src/task/hidden/grader-task.ts",
      "tools-are-below-the-server: src/tools/reads-grader.ts -> src/grader/grade/x.ts",
      "nothing-imports-cli: src/grader/grade/x.ts -> src/cli/main.ts",
      "lib-imports-nothing-of-ours: src/lib/reaches-up.ts -> src/task/public/loader.ts",
      "task-public-is-low: src/task/public/peeks.ts -> src/task/hidden/grader-task.ts",
      "only-grader-and-campaign-open-hidden: src/task/public/peeks.ts -> src/task/hidden/grader-task.ts",
      "grader-is-not-a-server: src/grader/grade/uses-tool.ts -> src/tools/reads-grader.ts",
    ];
    for (const e of expected) expect(found).toContain(e);
    expect(found.some((f) => f.startsWith("no-circular: src/sandbox/"))).toBe(true);
    // the layers that are kept produce nothing
    expect(found.filter((f) => f.includes("src/task/hidden/grader-task.ts -> src/task/public/loader.ts"))).toEqual([]);
  }, 120_000);
});
