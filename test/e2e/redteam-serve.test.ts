/**
 * Red team, agent's side: a hostile agent drives the real `infradev serve` (stdio, the SDK's Client)
 * on the tiny-mean fixture task and tries to (a) read what it must not — hidden probes and golden
 * patch, another run's results, any host file — by planting links where the host reads, during and
 * between runs; (b) make the host write where it chooses, through a planted link; (c) learn the host
 * layout from /proc; (d) exhaust the machine (processes, disk through logs); (e) slip a prototype key
 * through a tool argument. Checked on the host side: a decoy secret file's random content never
 * appears in any result, decoy folders stay empty, the stored log stays under its cap.
 */
import { TEST_FIXTURES } from "../helpers/paths.js";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { packageRoot } from "../../src/lib/paths.js";
import { SANDBOX_BACKENDS, backendCliFlags, ensureBuilt, prepareBackend, type Backend } from "../helpers/backends.js";

const ROOT = packageRoot();
const CLI = join(ROOT, "dist", "cli", "main.js");
const FIXTURES = join(TEST_FIXTURES, "grader", "tasks");
const TASK_DIR = join(FIXTURES, "tiny-mean");

type Result = CallToolResult & { structuredContent?: Record<string, any> };

beforeAll(() => {
  ensureBuilt();
}, 300_000);

describe.each(SANDBOX_BACKENDS.filter((b) => b !== "none"))("a hostile agent against `infradev serve --sandbox %s`", (backend: Backend) => {
  let scratch: string;
  let runsDir: string;
  let secretFile: string;
  let secret: string;
  let decoy: string;
  let client: Client;
  const seen: string[] = []; // every tool result, as the agent received it
  const call = async (name: string, args: Record<string, unknown> = {}): Promise<Result> => {
    const r = (await client.callTool({ name, arguments: args }, undefined, { timeout: 300_000 })) as Result;
    seen.push(JSON.stringify(r));
    return r;
  };
  const sh = async (command: string, timeout_sec = 60) => (await call("run_shell", { command, timeout_sec })).structuredContent!;

  beforeAll(async () => {
    await prepareBackend(backend);
    scratch = mkdtempSync(join(tmpdir(), `infradev-redteam-serve-${backend}-`));
    runsDir = join(scratch, "runs");
    // A host file the agent must never see, and a host folder the host must never write into.
    secret = `SECRET-${randomBytes(12).toString("hex")}`;
    // In the shapes the launcher's files have, so a host that follows a link would parse it and pass it on.
    secretFile = join(scratch, "host-secret");
    writeFileSync(`${secretFile}.xml`, `<?xml version="1.0"?><testsuites><testsuite name="s" tests="1"><testcase name="tests/test_ops.py::${secret}" classname="tests.test_ops" time="0.1"><failure message="${secret}">${secret}</failure></testcase></testsuite></testsuites>\n`);
    writeFileSync(
      `${secretFile}.jsonl`,
      ["tests/test_ops.py::test_all_sum", "tests/test_plant.py::test_plant", `tests/test_ops.py::${secret}`]
        .map((nodeid) => JSON.stringify({ nodeid, outcome: "failed", when: "call", duration_s: 0.1, message: secret, longrepr: secret, markers: {}, session: 0, calls: { [secret]: 7 }, bytes: { [secret]: 7 } }))
        .join("\n") + "\n",
    );
    writeFileSync(`${secretFile}.json`, JSON.stringify({ launcher: "builtin", nproc: 2, status: "tests_failed", exit_codes: [1, 1], duration_s: 1, restarts: 0, events: [], collected: [`tests/test_ops.py::${secret}`], collection_errors: [{ file: secret, message: secret }], ids: [`tests/test_ops.py::${secret}`] }));
    decoy = join(scratch, "decoy");
    mkdirSync(decoy);
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [CLI, "serve", "--task", "tiny-mean", "--tasks-dir", FIXTURES, "--sandbox", backend, ...backendCliFlags(backend), "--runs-dir", runsDir, "--pids-limit", "512"],
      env: { ...(process.env as Record<string, string>), INFRADEV_LOG_LEVEL: "warn" },
      stderr: "pipe",
      cwd: ROOT,
    });
    client = new Client({ name: "infradev-redteam", version: "0" });
    await client.connect(transport);
  }, 180_000);

  afterAll(async () => {
    await client?.close();
    // Nothing the agent did may have put the secret in front of it, or a file in the decoy.
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  it("links planted where results are read, before and during a multi-rank run, give nothing of the host", async () => {
    const link = JSON.stringify(secretFile);
    // Between runs: every name the launcher writes, in every results folder the agent can guess.
    await sh(
      [
        "set -e",
        "for d in .infradev .infradev/results .infradev/grade; do mkdir -p $d; done",
        `for d in $(seq 0 40) $(ls .infradev/results 2>/dev/null); do mkdir -p .infradev/results/$d; for f in launch.json rank0.probe.json rank1.probe.json rank0.collected.json; do ln -sfn ${link}.json .infradev/results/$d/$f; done; for f in rank0.xml rank1.xml; do ln -sfn ${link}.xml .infradev/results/$d/$f; done; for f in rank0.results.jsonl rank1.results.jsonl; do ln -sfn ${link}.jsonl .infradev/results/$d/$f; done; done`,
        "mkfifo .infradev/results/fifo 2>/dev/null || true",
      ].join("\n"),
    );
    // During the run: a test that keeps replacing the launcher's files with links and FIFOs.
    writeFileSync(
      join(scratch, "test_plant.py"),
      [
        "import os, time, glob",
        `SECRET = ${JSON.stringify(secretFile)}`,
        "",
        "def test_plant():",
        "    out = os.environ.get('INFRADEV_OUT_DIR') or ''",
        "    dirs = [d for d in {out, *glob.glob('/workspace/.infradev/**/', recursive=True)} if d]",
        "    end = time.time() + 2.0",
        "    while time.time() < end:",
        "        for d in dirs:",
        "            for name, ext in (('launch.json', '.json'), ('rank0.xml', '.xml'), ('rank1.xml', '.xml'), ('rank0.probe.json', '.json'), ('rank1.probe.json', '.json'), ('rank0.results.jsonl', '.jsonl'), ('rank1.results.jsonl', '.jsonl'), ('rank0.collected.json', '.json')):",
        "                p = os.path.join(d, name)",
        "                try:",
        "                    if os.path.lexists(p) and not os.path.islink(p):",
        "                        os.replace(p, p + '.moved')",
        "                    if not os.path.lexists(p):",
        "                        os.symlink(SECRET + ext, p)",
        "                except OSError:",
        "                    pass",
        "        time.sleep(0.01)",
        "",
      ].join("\n"),
    );
    const plant = await call("get_task");
    const workspace = plant.structuredContent!.workspace as string;
    // The agent writes the test itself (the sandbox cannot see the scratch folder).
    const body = readFileSync(join(scratch, "test_plant.py"), "utf8");
    await sh(`cat > ${workspace}/tests/test_plant.py <<'EOF'\n${body}EOF`);
    const run = await call("pytest_run", { paths: ["tests/test_plant.py", "tests/test_ops.py"], ranks: 2 });
    expect(run.isError ?? false, JSON.stringify(run).slice(0, 2000)).toBe(false);
    const m = await call("measure", { tests: ["tests/test_plant.py"], ranks: 2 });
    expect(JSON.stringify(m)).not.toContain(secret);
    for (const r of seen) expect(r).not.toContain(secret);
  }, 600_000);

  it("the host writes no log through a link the agent planted at the old log folder", async () => {
    await sh(`rm -rf .infradev/logs; mkdir -p .infradev; ln -sfn ${JSON.stringify(decoy)} .infradev/logs; ln -sfn ${JSON.stringify(decoy)} .infradev/log`);
    const r = await sh("echo hello-from-the-sandbox; echo err >&2");
    expect(r.exit_code).toBe(0);
    expect(readdirSync(decoy)).toEqual([]);
    // The log is readable inside the sandbox, and not writable.
    const logPath = r.log_path as string;
    expect(logPath).toMatch(/^\/infradev\/logs\//);
    const back = await sh(`cat ${JSON.stringify(logPath)}; echo forged >> ${JSON.stringify(logPath)} && echo WROTE || echo REFUSED`);
    expect(back.stdout).toContain("hello-from-the-sandbox");
    expect(back.stdout).toContain("REFUSED");
    expect(readdirSync(decoy)).toEqual([]);
  }, 120_000);

  it("/proc and the environment inside name no host path of the package, the runs folder or a session folder", async () => {
    const r = await sh("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; tr '\\0' '\\n' < $p/environ 2>/dev/null; done; env; cat /proc/self/cgroup", 60);
    const text = `${r.stdout}\n${r.stderr}`;
    expect(text).toContain("for p in"); // the listing did run
    for (const hostPath of [ROOT, runsDir, scratch, tmpdir() + "/infradev-local-"]) expect(text, hostPath).not.toContain(hostPath);
  }, 120_000);

  it("a fork bomb stops at the process limit, says so, and leaves no process behind", async () => {
    const marker = `redteam-${randomBytes(4).toString("hex")}`;
    // Children keep their parent's command line, marker included; the loop stops at the first refused fork.
    const bomb = ["import os, time", "n = 0", "while n < 6000:", "    try:", "        pid = os.fork()", "    except OSError:", "        break", "    if pid == 0:", "        time.sleep(30)", "        os._exit(0)", "    n += 1", "print('forked', n)"].join("\n");
    const r = await sh(`python3 - ${marker} <<'EOF'\n${bomb}\nEOF`, 60);
    expect(r.process_limit_hit || r.timed_out, JSON.stringify({ ...r, stdout: r.stdout.slice(-300), stderr: r.stderr.slice(-300) })).toBe(true);
    expect(r.process_limit_hit).toBe(true); // local: the exec's pids cgroup; docker: the container's, read on the host
    // Nothing with the marker survives on the host.
    await new Promise((res) => setTimeout(res, 1000));
    const survivors = readdirSync("/proc").filter((p) => /^\d+$/.test(p)).filter((p) => {
      try {
        return readFileSync(`/proc/${p}/cmdline`, "utf8").includes(marker);
      } catch {
        return false;
      }
    });
    expect(survivors).toEqual([]);
  }, 120_000);

  it("300 MB of output leaves a capped log on the host (head and tail) and says how much was dropped", async () => {
    const r = await sh("head -c 300000000 /dev/zero | tr '\\0' 'a'; echo; echo THE-END", 120);
    expect(r.exit_code).toBe(0);
    expect(r.log_truncated_bytes).toBeGreaterThan(250_000_000);
    const logs = readdirSync(runsDir).flatMap((run) => {
      const dir = join(runsDir, run, "logs");
      try {
        return readdirSync(dir).map((f) => join(dir, f));
      } catch {
        return [];
      }
    });
    expect(logs.length).toBeGreaterThan(0);
    const biggest = Math.max(...logs.map((f) => statSync(f).size));
    expect(biggest).toBeLessThan(20 * 1024 * 1024);
    const tail = await sh(`tail -c 200 ${JSON.stringify(r.log_path)}`);
    expect(tail.stdout).toContain("THE-END");
  }, 300_000);

  it("a test that SIGKILLs the rank launcher does not reach it (the sandbox's pid 1): its own run's results, never another run's", async () => {
    const ws = (await call("get_task")).structuredContent!.workspace as string;
    await sh(`cat > ${ws}/tests/test_kill.py <<'EOF'\nimport os, signal\n\ndef test_kill():\n    os.kill(os.getppid(), signal.SIGKILL)\nEOF`);
    const r = await call("pytest_run", { paths: ["tests/test_kill.py"], ranks: 2 });
    if (backend === "docker") {
      // docker: the launcher is a `docker exec` process, not the container's init: the kill lands and
      // the results are lost (never another run's).
      expect(r.isError).toBe(true);
      expect(JSON.stringify(r.content)).toMatch(/results were lost/);
      await sh(`rm -f ${ws}/tests/test_kill.py`);
      return;
    }
    // bwrap --as-pid-1: the launcher is the namespace's init, and the kernel drops a SIGKILL sent to
    // it from inside; the session reports this run's one test.
    expect(r.isError, JSON.stringify(r).slice(0, 2000)).toBeFalsy();
    const sc = r.structuredContent as { summary?: { total: number }; tests?: Array<{ id: string }> };
    expect(sc.summary?.total).toBe(1);
    expect(sc.tests?.map((t) => t.id)).toEqual(["tests/test_kill.py::test_kill"]);
    await sh(`rm -f ${ws}/tests/test_kill.py`);
  }, 180_000);

  it("tools that run the workspace's code are not announced as read-only or idempotent", async () => {
    const { tools } = await client.listTools();
    for (const name of ["pytest_run", "pytest_collect", "measure", "run_shell"]) {
      const t = tools.find((x) => x.name === name)!;
      expect(t.annotations?.readOnlyHint, name).toBe(false);
      expect(t.annotations?.idempotentHint, name).toBe(false);
    }
  });

  it("a mode named after a prototype key is refused by the schema", async () => {
    for (const mode of ["constructor", "__proto__", "toString"]) {
      const r = await client.callTool({ name: "pytest_run", arguments: { paths: ["tests/test_ops.py"], mode } }, undefined, { timeout: 60_000 }).catch((e: Error) => ({ isError: true, content: [{ type: "text", text: e.message }] }));
      seen.push(JSON.stringify(r));
      expect((r as Result).isError, mode).toBe(true);
    }
  }, 120_000);

  it("hidden probes and the golden patch are not readable from the sandbox, nor by their names in any result", async () => {
    const r = await sh(`cat ${JSON.stringify(join(TASK_DIR, "hidden", "golden.patch"))} ${JSON.stringify(join(TASK_DIR, "hidden", "probes", "test_probe_mean.py"))} 2>&1; ls -R / 2>/dev/null | grep -c test_probe_mean || true`, 120);
    expect(r.stdout).not.toContain("def all_mean");
    for (const s of seen) {
      expect(s).not.toContain("test_mean_is_the_average");
      expect(s).not.toContain("out / dist.get_world_size()");
      expect(s).not.toContain(secret);
    }
  }, 180_000);
});
