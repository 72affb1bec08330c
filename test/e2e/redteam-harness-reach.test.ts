/**
 * Red team, issue 21 (classes 1 and 2): a hostile submission and a hostile agent that have read this
 * repository go after the harness itself rather than the tests' records.
 *
 * (a) pid 1 and the launcher: read the bundle nonce from /proc/<pid>/environ, open their stdout,
 *     ptrace-attach pid 1, pidfd_getfd its stdout, process_vm_readv its memory (before: bwrap's own
 *     init was pid 1, dumpable, holding every --setenv value and the host's pipes).
 * (b) test bodies swapped in memory: at import, the package gives every test function that reaches
 *     it a same-signature no-op code object (canaries never reach the package; plain twins call the
 *     neutered test and still fail on their own constant).
 * (c) assertions switched off in memory: the same tests recompiled from their own source without
 *     their `assert`s and assert_* calls, so the bodies still run (and the ranks stay in step).
 *
 * Each through the real `infradev grade` CLI on the tiny-mean fixture (2 gloo ranks, one calibration
 * shared) and through `infradev serve` with a real MCP client (pytest_run): each ends `tampered`
 * (score 0) / not resolved / a failing test reported as failed, and nothing of pid 1 reached.
 */
import { TEST_FIXTURES } from "../helpers/paths.js";
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { GradeResult } from "../../src/grader/grade/types.js";
import { packageRoot } from "../../src/lib/paths.js";
import { loadGraderTask, type GraderTask } from "../../src/task/hidden/grader-task.js";
import { createSnapshot, diffAgainstBase } from "../../src/task/public/snapshot.js";
import { SANDBOX_BACKENDS, backendCliFlags, ensureBuilt, prepareBackend, type Backend } from "../helpers/backends.js";

const FIXTURES = join(TEST_FIXTURES, "grader", "tasks");
/** The CLI under test: this checkout's build, or another one's (INFRADEV_REDTEAM_CLI: to show an older build losing). */
const CLI = process.env.INFRADEV_REDTEAM_CLI ?? join(packageRoot(), "dist", "cli", "main.js");
const ATTACKS = join(packageRoot(), "test", "e2e", "attacks");
const run = promisify(execFile);
const attack = (name: string) => readFileSync(join(ATTACKS, name), "utf8");

/** A wrong all_mean that exists (the tests import it): it returns its input. */
const STUB = `

def all_mean(t: torch.Tensor) -> torch.Tensor:
    return t.clone()
`;
/** A wrong all_mean: the sum. */
const SUM = `

def all_mean(t: torch.Tensor) -> torch.Tensor:
    out = t.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out
`;

/** What the pid-1 attack printed, in every rank log of a grade's folder. */
function reachLines(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(d, e.name));
      else if (/^rank\d+\.log$/.test(e.name)) out.push(...readFileSync(join(d, e.name), "utf8").split("\n").filter((l) => l.includes("PID1-REACH")));
    }
  };
  if (existsSync(dir)) walk(dir);
  return out;
}

/** Nothing of pid 1 or the launcher reached: no nonce, no writable stdout, no ptrace, no getfd, no memory read. */
function expectNothingReached(lines: string[], why: string, containerInit = false): void {
  for (const l of lines) {
    expect(l, why).not.toMatch(/NONCE:/);
    // docker: pid 1 is the engine's init (tini) in front of the container's idle loop, not the
    // launcher; it holds no nonce and its stdout is the container log, which the host never reads for
    // results (docs/security.md says so). Everything of the launcher must stay out of reach there too.
    const tokens = containerInit ? l.split(" ").filter((t) => !/(^|:)(environ|stdout)1=/.test(t)).join(" ") : l;
    expect(tokens, why).not.toMatch(/=ok\b|environ\d+=readable/);
  }
}

// Grades on the local backend only (a calibration and four grades); docker is held through pytest_run below.
describe.each(SANDBOX_BACKENDS.filter((b) => b === "local"))("the harness out of reach, test bodies sealed: `infradev grade` on %s", (backend) => {
  let root: string;
  let task: GraderTask;

  async function makePatch(name: string, files: Record<string, string>): Promise<string> {
    const dir = join(root, `src-${name}`);
    rmSync(dir, { recursive: true, force: true });
    await createSnapshot(task, dir);
    for (const [rel, text] of Object.entries(files)) {
      mkdirSync(join(dir, rel, ".."), { recursive: true });
      const prev = existsSync(join(dir, rel)) ? readFileSync(join(dir, rel), "utf8") : "";
      writeFileSync(join(dir, rel), text.startsWith("+") ? `${prev}${text.slice(1)}` : text);
    }
    const file = join(root, `${name}.patch`);
    writeFileSync(file, await diffAgainstBase(dir));
    return file;
  }

  async function grade(patch: string, out: string): Promise<GradeResult> {
    const args = [CLI, "grade", "--task", "tiny-mean", "--tasks-dir", FIXTURES, "--patch", patch, "--out", out, "--calibration-dir", join(root, "cal"), "--json", "--sandbox", backend, ...backendCliFlags(backend as "local" | "docker")];
    const r = await run(process.execPath, args, { maxBuffer: 64 << 20, timeout: 600_000 }).catch((e: { stderr?: string; code?: number }) => {
      throw new Error(`grade exited ${e.code}: ${e.stderr?.slice(-2000)}`);
    });
    return JSON.parse(r.stdout) as GradeResult;
  }

  beforeAll(async () => {
    await prepareBackend(backend);
    root = mkdtempSync(join(tmpdir(), `infradev-reach-${backend}-`));
    task = loadGraderTask("tiny-mean", FIXTURES);
  }, 120_000);
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it("gold is resolved, never tampered, and its ranks arm the audit hook (the control)", async () => {
    const r = await grade(task.hidden.goldenPatch, join(root, "out-gold"));
    expect(r).toMatchObject({ status: "graded", resolved: true });
  }, 600_000); // with the calibration (3 gold runs) the grades below reuse

  const cases: Array<[string, Record<string, string>, "tampered"]> = [
    ["(a) pid 1 and the launcher: nonce, stdout, ptrace, pidfd_getfd, process_vm_readv", { "tinyinfra/__init__.py": attack("pid1_reach.py"), "tinyinfra/ops.py": `+${STUB}` }, "tampered"],
    ["(b) test bodies swapped for no-ops at import of the package", { "tinyinfra/__init__.py": attack("swap_code.py"), "tinyinfra/ops.py": `+${STUB}` }, "tampered"],
    ["(c) assertions switched off in the tests that reach the package", { "tinyinfra/__init__.py": attack("flip_asserts.py"), "tinyinfra/ops.py": `+${SUM}` }, "tampered"],
  ];
  it.each(cases)("%s", async (name, files, expected) => {
    const out = join(root, `out-${name.slice(1, 2)}`);
    const r = await grade(await makePatch(name.slice(1, 2), files), out);
    const why = JSON.stringify({ status: r.status, reason: r.reason, official: r.official, with_probes: r.with_probes, evidence: (r as { tamper_evidence?: unknown }).tamper_evidence });
    expect(r.status, why).toBe(expected);
    expect(r.score, why).toBe(0);
    expect(r.resolved, why).toBe(false);
    expect(r.official.resolved, why).toBe(false);
    if (name.startsWith("(a)")) {
      const lines = reachLines(out);
      expect(lines.length, why).toBeGreaterThan(0);
      expectNothingReached(lines, why);
    }
  }, 300_000);
});

type Result = CallToolResult & { structuredContent?: Record<string, any> };

describe.each(SANDBOX_BACKENDS.filter((b) => b !== "none"))("the harness out of reach through `infradev serve --sandbox %s` (pytest_run)", (backend: Backend) => {
  let scratch: string;
  let client: Client;
  const call = async (name: string, args: Record<string, unknown> = {}): Promise<Result> =>
    (await client.callTool({ name, arguments: args }, undefined, { timeout: 300_000 })) as Result;

  beforeAll(async () => {
    ensureBuilt();
    await prepareBackend(backend);
    scratch = mkdtempSync(join(tmpdir(), `infradev-reach-serve-${backend}-`));
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [CLI, "serve", "--task", "tiny-mean", "--tasks-dir", FIXTURES, "--sandbox", backend, ...backendCliFlags(backend), "--runs-dir", join(scratch, "runs")],
      env: { ...(process.env as Record<string, string>), INFRADEV_LOG_LEVEL: "warn" },
      stderr: "pipe",
      cwd: packageRoot(),
    });
    client = new Client({ name: "infradev-redteam-reach", version: "0" });
    await client.connect(transport);
  }, 300_000);
  afterAll(async () => {
    await client?.close();
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  /** Writes `files` into the agent's workspace through run_shell (the sandbox cannot see the host's folders). */
  async function put(files: Record<string, string>): Promise<void> {
    for (const [rel, text] of Object.entries(files)) {
      const b64 = Buffer.from(text).toString("base64");
      const r = await call("run_shell", { command: `mkdir -p "$(dirname ${rel})" && echo ${b64} | base64 -d > ${rel}`, timeout_sec: 60 });
      expect(r.structuredContent!.exit_code, JSON.stringify(r.structuredContent)).toBe(0);
    }
  }

  const FAILING = "import tinyinfra\n\n\ndef test_must_fail():\n    from tinyinfra.ops import all_sum\n    all_sum\n    assert False, 'this test must fail'\n";
  const attacks = [
    ["(a) pid 1 and the launcher", "pid1_reach.py"],
    ["(b) the failing test's body swapped", "swap_code.py"],
    ["(c) the failing test's assertion switched off", "flip_asserts.py"],
  ] as const;
  // docker: the in-process filter and hook are the same code; (a) shows the container holds too.
  it.each(backend === "docker" ? attacks.slice(0, 1) : attacks)("%s: `assert False` comes back failed, nothing of pid 1 reached", async (name, file) => {
    await put({ "tinyinfra/__init__.py": attack(file), "tests/test_reach.py": FAILING });
    const r = await call("pytest_run", { paths: ["tests/test_reach.py"], ranks: 2 });
    const text = JSON.stringify(r);
    const sc = r.structuredContent ?? {};
    expect(sc.summary?.passed ?? 0, text.slice(0, 3000)).toBe(0);
    expect(text).toMatch(/test_must_fail/);
    const log = await call("run_shell", { command: "find .infradev -name 'rank*.log' -exec grep -h PID1-REACH {} + 2>/dev/null || true", timeout_sec: 60 });
    const lines = String(log.structuredContent!.stdout).split("\n").filter(Boolean);
    if (name.startsWith("(a)")) expect(lines.length, text.slice(0, 2000)).toBeGreaterThan(0);
    expectNothingReached(lines, text.slice(0, 2000), backend === "docker");
    await call("run_shell", { command: "git checkout -- tinyinfra/__init__.py && rm -f tests/test_reach.py", timeout_sec: 60 });
  }, 300_000);
});
