import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSandbox, type Sandbox } from "../../src/sandbox/picker.js";
import { BUNDLE_PREFIX, PROGRESS_PREFIX, progressReader, readBundle, runRanks } from "../../src/runner/ranks.js";
import type { DockerSandbox } from "../../src/sandbox/docker/create.js";
import type { ExecResult } from "../../src/sandbox/types.js";
import { dockerSuitePlan, ensureTestImage } from "../helpers/docker-image.js";
import { type FakeTask, fakeTask, openTestSandbox } from "../helpers/docker-sandbox.js";
import { processesMatching } from "../helpers/sandbox.js";

// runRanks end to end: the real Python launcher, real gloo ranks inside the real bubblewrap sandbox,
// per-rank JUnit parsed and merged on the TS side.

const MARKER = `infradev_ranks_marker_${process.pid}`;

const TESTS = `
import os, time
import pytest
import torch
import torch.distributed as dist

MARKER = "${MARKER}"

@pytest.fixture(scope="session", autouse=True)
def group():
    dist.init_process_group("gloo")
    yield
    dist.destroy_process_group()

def test_sum():
    t = torch.ones(4) * (dist.get_rank() + 1)
    dist.all_reduce(t)
    assert t.tolist() == [3.0] * 4

def test_rank1_blocks():
    # rank 0 skips the collective: rank 1 waits forever.
    if dist.get_rank() == 1:
        dist.all_reduce(torch.ones(1))

def test_after_hang():
    t = torch.ones(2)
    dist.all_reduce(t)
    assert t.tolist() == [2.0, 2.0]

def test_rank0_fails():
    assert dist.get_rank() != 0, "only rank 0 fails"

def test_zz_rank1_exits():
    if dist.get_rank() == 1:
        os._exit(3)
    dist.barrier()
`;

let dir: string;
let sandbox: Sandbox;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "infradev-ranks-"));
  writeFileSync(join(dir, "test_ranks.py"), TESTS);
  sandbox = await createSandbox({ kind: "local", hostRepoDir: dir });
});
afterAll(async () => {
  await sandbox?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("runRanks", () => {
  it("merges per-rank results: pass, a hang named as such, the suite continuing, a one-rank failure, a crash", async () => {
    const progress: Array<[number, number]> = [];
    const perTest = 6;
    const started = Date.now();
    const r = await runRanks(sandbox, {
      ranks: 2,
      pytestArgs: ["test_ranks.py"],
      outDir: `.infradev/results/ranks-test-${process.pid}`,
      perTestTimeoutSec: perTest,
      runTimeoutSec: 300,
      onProgress: (done, total) => progress.push([done, total]),
    });
    const elapsed = (Date.now() - started) / 1000;
    expect(r.harnessError).toBeUndefined();
    expect(r.lostRecords).toBeUndefined();
    const byId = Object.fromEntries(r.cases.map((c) => [c.id.split("::")[1], c]));
    expect(byId.test_sum).toMatchObject({ outcome: "passed" });
    expect(byId.test_rank1_blocks).toMatchObject({ outcome: "error", reason: "hang" });
    expect(byId.test_after_hang).toMatchObject({ outcome: "passed" });
    expect(byId.test_rank0_fails!.outcome).toBe("failed");
    expect(byId.test_rank0_fails!.ranks.map((x) => x.outcome)).toEqual(["failed", "passed"]);
    expect(byId.test_rank0_fails!.ranks[0]!.excerpt).toContain("only rank 0 fails");
    expect(byId.test_zz_rank1_exits!.outcome).not.toBe("passed");
    expect(byId.test_zz_rank1_exits!.reason).toBe("crash");
    // Resources per rank come through: the passing all_reduce moved 4 float32 on each rank.
    expect(byId.test_sum!.ranks.map((x) => x.resources?.bytes.all_reduce)).toEqual([16, 16]);
    const hang = r.launch!.events.find((e) => e.kind === "hang");
    expect(hang?.test).toMatch(/test_rank1_blocks$/);
    // The launcher read the stacks it dumped before the kill: rank 1 waits in the test's all_reduce,
    // rank 0 is somewhere else (the next test, or done).
    expect(hang!.collective).toMatchObject({ name: "all_reduce", waiting: [1], not_arrived: [0] });
    expect(hang!.collective!.call_site).toMatch(/^test_ranks\.py:\d+ in test_rank1_blocks$/);
    expect(hang!.detail).toMatch(/collective hang: rank 1 waits in all_reduce called at test_ranks\.py:\d+ in test_rank1_blocks; did not arrive: rank 0 \(/);
    expect(byId.test_rank1_blocks!.ranks[1]!.excerpt).toMatch(/^hang: [\s\S]*Python stacks of rank 1 when it was killed:/);
    // Detected within the limit plus a few seconds (restarts and torch imports included in elapsed).
    expect(hang!.after_s).toBeLessThan(perTest + 5);
    expect(elapsed).toBeLessThan(200);
    expect(progress.length).toBeGreaterThan(0);
    expect(progress.at(-1)![1]).toBe(5);
    expect(processesMatching(MARKER)).toEqual([]);
    expect(processesMatching(`ranks-test-${process.pid}`)).toEqual([]);
    // Progress came from the launcher's stderr stream: it counts up to the total and ends there.
    expect(progress.map(([d]) => d)).toEqual([...progress.map(([d]) => d)].sort((a, b) => a - b));
    expect(progress.at(-1)).toEqual([5, 5]);
    // Independent records per rank and session: the hang restarted the ranks (session 1).
    expect(new Set(r.integrity.map((i) => i.session))).toEqual(new Set([0, 1]));
    expect(r.logs.map((l) => l.name)).toEqual(expect.arrayContaining(["rank0.log", "rank1.log", "launcher.txt", "launcher.stderr"]));
  });

  it("reports a launcher that cannot start as lost records (the sandbox ran; a control run tells whose fault), not as failed tests", async () => {
    const broken = await createSandbox({ kind: "local", hostRepoDir: dir, python: "/nonexistent/python3" });
    try {
      const r = await runRanks(broken, { ranks: 2, pytestArgs: ["test_ranks.py"], outDir: ".infradev/results/broken", perTestTimeoutSec: 5, runTimeoutSec: 30 });
      expect(r.harnessError).toBeUndefined();
      expect(r.lostRecords).toMatch(/exited with code 127, not one of its own/);
      expect(r.cases).toEqual([]);
    } finally {
      await broken.close();
    }
  });
});

describe("readBundle / progressReader", () => {
  const exec = (stdout: string, exitCode: number | null = 0, extra: Partial<ExecResult> = {}): ExecResult => ({
    exitCode,
    signal: null,
    timedOut: false,
    cancelled: false,
    stdout,
    stderr: "",
    truncated: false,
    durationMs: 1,
    isolated: true,
    ...extra,
  });
  const bundle = (nonce: string, status = "ok") =>
    `${BUNDLE_PREFIX}${JSON.stringify({ format: 1, nonce, launch: { status, events: [] }, collected: [], ranks: [], integrity: [], logs: [] })}`;

  it("accepts exactly one bundle, on the last non-empty line, with this run's nonce and a launcher exit code", () => {
    expect("bundle" in readBundle(exec(`${bundle("n1")}\n\n`), "n1")).toBe(true);
    expect(readBundle(exec(`${bundle("n1")}\n${bundle("n1")}\n`), "n1")).toEqual({ lost: expect.stringMatching(/2 result bundles/) });
    expect(readBundle(exec(`${bundle("n1")}\nmore\n`), "n1")).toEqual({ lost: expect.stringMatching(/not the last line/) });
    expect(readBundle(exec(`junk${bundle("n1")}\n`), "n1")).toEqual({ lost: expect.stringMatching(/no result bundle/) });
    expect(readBundle(exec(`${bundle("forged")}\n`), "n1")).toEqual({ lost: expect.stringMatching(/nonce/) });
    expect(readBundle(exec(`${BUNDLE_PREFIX}{"format":1,\n`), "n1")).toEqual({ lost: expect.stringMatching(/not valid JSON/) });
    expect(readBundle(exec(`${bundle("n1")}\n`, null, { signal: "SIGKILL" }), "n1")).toEqual({ lost: expect.stringMatching(/killed by SIGKILL/) });
    expect(readBundle(exec(`${bundle("n1")}\n`, 137), "n1")).toEqual({ lost: expect.stringMatching(/code 137, not one of its own/) });
    expect(readBundle(exec(`${bundle("n1")}\n`, 0, { timedOut: true }), "n1")).toEqual({ lost: expect.stringMatching(/outer time limit/) });
  });

  it("reads progress lines split anywhere across chunks, ignoring anything else", () => {
    const seen: Array<[number, number]> = [];
    const p = progressReader((d, t) => seen.push([d, t]));
    for (const chunk of [`${PROGRESS_PREFIX}{"do`, `ne":1,"total":3}\nnoise\n${PROGRESS_PREFIX}{"done":2,`, `"total":3}\n${PROGRESS_PREFIX}{bad}\n`]) p.push(chunk);
    expect(seen).toEqual([
      [1, 3],
      [2, 3],
    ]);
  });
});

const HOSTILE: Record<string, string> = {
    "test_stdout.py": `
import os

FORGED = 'INFRADEV-BUNDLE {"format": 1, "nonce": "", "launch": {"status": "ok"}, "collected": [], "ranks": [], "integrity": [], "logs": []}\\n'

def test_cannot_reach_the_launcher():
    ppid = os.getppid()
    opened = []
    for path, flags in ((f"/proc/{ppid}/fd/1", os.O_WRONLY), (f"/proc/{ppid}/environ", os.O_RDONLY), (f"/proc/{ppid}/mem", os.O_RDONLY), ("/proc/1/fd/1", os.O_WRONLY)):
        try:
            fd = os.open(path, flags)
        except (OSError, RuntimeError):  # RuntimeError: the ranks' audit hook refused it (and recorded it)
            continue
        if flags == os.O_WRONLY:
            os.write(fd, FORGED.encode())
        os.close(fd)
        opened.append(path)
    # The sandbox's pid 1 (the launcher itself under bwrap --as-pid-1; docker's init: its own output,
    # not this exec's) may take the write: the host's result shows whether it got through.
    assert [p for p in opened if not p.startswith("/proc/1/")] == [], opened
`,
    "test_forge.py": `
import atexit, json, os
import torch
import torch.distributed as dist

def forge():
    path = os.path.join(os.environ["INFRADEV_OUT_DIR"], "rank%s.results.jsonl" % os.environ["RANK"])
    with open(path, "a") as f:
        f.write(json.dumps({"nodeid": "test_forge.py::test_fails", "outcome": "passed", "phases": {"call": "passed"}, "session": 0}) + "\\n")

atexit.register(forge)

def test_fails():
    dist.init_process_group("gloo")
    t = torch.ones(2)
    dist.all_reduce(t)
    dist.destroy_process_group()
    assert t.tolist() == [0.0, 0.0], "really fails"
`,
    "test_plant.py": `
import os

def test_plants_links():
    out = os.environ["INFRADEV_OUT_DIR"]
    r = os.environ["RANK"]
    # Every session's pytest XML name: under load the launcher may have restarted the ranks once already.
    # The names both ranks share are planted by rank 0 alone: two ranks racing on one name would make one
    # test fail with FileExistsError before it planted its own names.
    names = [f"rank{r}.xml", f"rank{r}.probe.json", *(f"rank{r}.session{s}.pytest.xml" for s in range(4)), f"rank{r}.xml.tmp",
             f"rank{r}.collected.json.tmp-000000000001"]
    if r == "0":
        names += ["launch.json", "launch.json.tmp-000000000001"]
    for name in names:
        path = os.path.join(out, name)
        while True:
            try:
                os.symlink("/etc/passwd", path)
                break
            except FileExistsError:  # the launcher may write the name between an unlink and the symlink
                os.unlink(path)
    os.mkfifo(os.path.join(out, f"rank{r}.stacks.fifo"))
    assert False, "fails"
`,
    "test_cmdline.py": `
import os

def test_launcher_argv_names_no_test():
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
        argv = f.read().split(bytes(1))
    assert any(a.endswith(b"infradev_launch.py") for a in argv), argv
    assert not any(b"test_cmdline" in a or b".infradev" in a for a in argv), argv
    with open("/proc/self/cmdline", "rb") as f:
        assert b"test_cmdline" not in f.read()
`,
    "test_sigterm.py": `
import os, signal, time

def test_sigterm_the_launcher():
    if os.environ["RANK"] == "0":
        os.kill(os.getppid(), signal.SIGTERM)
    time.sleep(20)
`,
    "test_sigkill.py": `
import os, signal, time

def test_sigkill_the_launcher():
    if os.environ["RANK"] == "0":
        os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(3)
`,
};

// Tests that attack the launcher from inside the real bubblewrap sandbox (real ranks, real bwrap):
// nothing forged may reach the result; a forgery shows as lost records or as an integrity disagreement.
describe("runRanks against hostile tests", () => {
  let hdir: string;
  let hsb: Sandbox;
  beforeAll(async () => {
    hdir = mkdtempSync(join(tmpdir(), "infradev-ranks-hostile-"));
    for (const [name, body] of Object.entries(HOSTILE)) writeFileSync(join(hdir, name), body);
    hsb = await createSandbox({ kind: "local", hostRepoDir: hdir });
  });
  afterAll(async () => {
    await hsb?.close();
    rmSync(hdir, { recursive: true, force: true });
  });
  const run = (file: string) =>
    runRanks(hsb, { ranks: 2, pytestArgs: [file], outDir: `.infradev/results/${file}-${process.pid}`, perTestTimeoutSec: 30, runTimeoutSec: 120 });

  it("a test cannot open the launcher's stdout, environ or memory (non-dumpable); a forged bundle written anywhere it can does not reach the host", async () => {
    const r = await run("test_stdout.py");
    expect(r.lostRecords).toBeUndefined();
    expect(r.launch?.hardening).toEqual({ non_dumpable: true, subreaper: true, seccomp: true });
    // The hook refused the opens it saw (recorded on the audit channel); the kernel refused the rest.
    for (const i of r.integrity) expect(i.audit).toMatchObject({ armed: true, done: true });
    expect(r.cases).toMatchObject([{ id: "test_stdout.py::test_cannot_reach_the_launcher", outcome: "passed" }]);
  });

  it("neither the launcher's argv nor a rank's names the tests or the out dir; removeOutDir leaves nothing behind", async () => {
    const outDir = `.infradev/results/cmdline-${process.pid}`;
    const r = await runRanks(hsb, { ranks: 2, pytestArgs: ["test_cmdline.py"], outDir, perTestTimeoutSec: 30, runTimeoutSec: 120, removeOutDir: true });
    expect(r.lostRecords).toBeUndefined();
    expect(r.cases).toMatchObject([{ id: "test_cmdline.py::test_launcher_argv_names_no_test", outcome: "passed" }]);
    expect(r.logs.find((l) => l.name === "rank0.log")?.text).toContain("1 passed");
    expect(readdirSync(join(hdir, outDir))).toEqual([]);
  });

  it("records appended at exit stay out of the result and show as a plugin / pytest-junit disagreement", async () => {
    const r = await run("test_forge.py");
    expect(r.lostRecords).toBeUndefined();
    expect(r.cases).toMatchObject([{ id: "test_forge.py::test_fails", outcome: "failed" }]);
    expect(r.integrity).toHaveLength(2);
    for (const i of r.integrity) {
      expect(i.plugin).toEqual({ passed: 1, failed: 1, error: 0, skipped: 0 });
      expect(i.pytest_junit).toMatchObject({ passed: 0, failed: 1, outcomes: { "test_forge.py::test_fails": "failed" } });
      expect(i.summary).toEqual({ passed: 0, failed: 1, error: 0, skipped: 0 });
      expect(i.exit_code).toBe(1);
    }
  });

  it("links planted under the launcher's file names never bring their target into the result", async () => {
    const r = await run("test_plant.py");
    expect(r.lostRecords).toBeUndefined();
    expect(r.cases).toMatchObject([{ id: "test_plant.py::test_plants_links", outcome: "failed" }]);
    expect(JSON.stringify(r)).not.toContain("root:x:0:0");
    for (const i of r.integrity) expect(i.pytest_junit).toBeNull(); // pytest wrote through the rank's own link; the launcher reads no link
  });

  it("a test that SIGTERMs the launcher loses the session's records; a SIGKILL does not reach it (never a harness error)", async () => {
    const term = await run("test_sigterm.py");
    expect(term.harnessError).toBeUndefined();
    expect(term.lostRecords).toMatch(/interrupted from inside the sandbox.*SIGTERM/);
    // The launcher is the sandbox's pid 1 (bwrap --as-pid-1): the kernel drops a SIGKILL sent to a
    // namespace's init from inside it, so the launcher lives on and reports the session as it ran.
    const kill = await run("test_sigkill.py");
    expect(kill.harnessError).toBeUndefined();
    expect(kill.lostRecords).toBeUndefined();
    expect(kill.cases).toMatchObject([{ id: "test_sigkill.py::test_sigkill_the_launcher", outcome: "passed" }]);
    expect(processesMatching("test_sigkill.py")).toEqual([]);
  });
});

// The same attacks on the docker backend (a real engine; the test image runs the host's python).
const dockerPlan = await dockerSuitePlan();

describe.skipIf(!dockerPlan.run)("runRanks against hostile tests on docker", () => {
  let task: FakeTask;
  let dsb: DockerSandbox;
  beforeAll(async () => {
    if (!dockerPlan.reachable) throw new Error(dockerPlan.whyNot);
    await ensureTestImage();
    task = fakeTask();
    for (const [name, body] of Object.entries(HOSTILE)) writeFileSync(join(task.workspace, name), body);
    dsb = await openTestSandbox(task);
  }, 120_000);
  afterAll(async () => {
    await dsb?.close();
    task?.cleanup();
  });
  const run = (file: string) =>
    runRanks(dsb, { ranks: 2, pytestArgs: [file], outDir: `.infradev/results/${file}`, perTestTimeoutSec: 30, runTimeoutSec: 120 });

  it("no way into the launcher's stdout; appended records stay out; signalling the launcher loses the records", async () => {
    const stdout = await run("test_stdout.py");
    expect(stdout.lostRecords).toBeUndefined();
    expect(stdout.launch?.hardening).toEqual({ non_dumpable: true, subreaper: true, seccomp: true });
    expect(stdout.cases, stdout.cases[0]?.ranks[0]?.excerpt).toMatchObject([{ outcome: "passed" }]);
    const argv = await run("test_cmdline.py");
    expect(argv.cases).toMatchObject([{ outcome: "passed" }]);
    const forge = await run("test_forge.py");
    expect(forge.cases).toMatchObject([{ id: "test_forge.py::test_fails", outcome: "failed" }]);
    for (const i of forge.integrity) expect(i.plugin.passed).toBeGreaterThan(i.pytest_junit!.passed);
    const plant = await run("test_plant.py");
    expect(JSON.stringify(plant)).not.toContain("root:x:0:0");
    expect(plant.cases).toMatchObject([{ outcome: "failed" }]);
    const term = await run("test_sigterm.py");
    expect(term.harnessError).toBeUndefined();
    expect(term.lostRecords).toMatch(/interrupted from inside the sandbox/);
    const kill = await run("test_sigkill.py");
    expect(kill.harnessError).toBeUndefined();
    expect(kill.lostRecords).toMatch(/code 137|killed by SIGKILL/);
  }, 240_000);
});

describe("runRanks arguments", () => {
  it("refuses an out dir that is not a folder inside the workspace", async () => {
    const sb = { repoDir: "/workspace" } as unknown as Sandbox;
    for (const outDir of ["", ".", "/tmp/x", "../x", "a/../../x", "a\0b"]) {
      await expect(runRanks(sb, { ranks: 1, pytestArgs: [], outDir, perTestTimeoutSec: 1, runTimeoutSec: 1 })).rejects.toThrow(/outDir must name a folder/);
    }
  });
});
