/**
 * Issue 10 on the local backend, against real bwrap and a real pids cgroup: logs stored outside the
 * workspace (capped, never written through a planted link, read-only inside), no host path in any
 * process's command line or environment inside, a process limit that stops a fork bomb, and
 * read-only overlays the code under test cannot change.
 */
import { randomBytes } from "node:crypto";
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, realpathSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { packageRoot } from "../../../src/lib/paths.js";
import { LocalSandbox } from "../../../src/sandbox/local/sandbox.js";
import { processesMatching, uniqueSleepSeconds } from "../../helpers/sandbox.js";
import { treeSnapshot } from "../../helpers/tree-snapshot.js";

let base: string;
let workspace: string;
let decoy: string;
let overlayHost: string;
let logsGiven: string;
let sb: LocalSandbox;
const DECOY_SECRET = `decoy-${randomBytes(8).toString("hex")}`;

const snapshot = treeSnapshot;

beforeAll(async () => {
  base = realpathSync(mkdtempSync(join(tmpdir(), "infradev-hardening-")));
  workspace = join(base, "workspace");
  decoy = join(base, "decoy");
  overlayHost = join(base, "probes");
  logsGiven = join(base, "run", "logs");
  mkdirSync(workspace);
  mkdirSync(decoy);
  mkdirSync(overlayHost);
  writeFileSync(join(decoy, "secret.txt"), `${DECOY_SECRET}\n`);
  writeFileSync(join(overlayHost, "test_probe.py"), "def test_probe():\n    assert True\n");
  // The planted link the old code followed: <workspace>/.infradev/logs -> a host folder.
  mkdirSync(join(workspace, ".infradev"));
  symlinkSync(decoy, join(workspace, ".infradev", "logs"));
  sb = await LocalSandbox.create({
    hostRepoDir: workspace,
    logDir: logsGiven,
    readOnlyOverlays: [{ host: overlayHost, rel: "tests/probes" }],
    pidsLimit: 128,
    killGraceMs: 300,
  });
});

afterAll(async () => {
  await sb?.close();
  rmSync(base, { recursive: true, force: true });
});

describe("local sandbox: logs outside the workspace (contract D)", () => {
  it("stores each log in logDir, never through the planted link, and the sandbox can only read it", async () => {
    const before = snapshot(decoy);
    const r = await sb.exec(["bash", "-c", "echo hello-log; ls -ld /infradev/logs; echo x > /infradev/logs/new.log || echo refused-new; echo x >> \"$1\" || echo refused-append", "sh", "/infradev/logs/placeholder"]);
    expect(r.exitCode).toBe(0);
    expect(r.logPath!.startsWith(`${realpathSync(logsGiven)}/`)).toBe(true);
    expect(r.sandboxLogPath).toBe(`/infradev/logs/${r.logPath!.split("/").pop()}`);
    expect(r.stdout).toContain("refused-new");
    expect(r.stderr).toMatch(/Read-only file system/);
    expect(readFileSync(r.logPath!, "utf8")).toContain("hello-log");
    const again = await sb.exec(["bash", "-c", 'cat "$1"; echo x >> "$1" || echo refused', "sh", r.sandboxLogPath!]);
    expect(again.stdout).toContain("hello-log");
    expect(again.stdout).toContain("refused");
    expect(snapshot(decoy)).toEqual(before);
    expect(statSync(r.logPath!).mode & 0o777).toBe(0o644);
  });

  it("caps a 300 MB output: head + tail kept with a marker line, the bytes dropped reported", async () => {
    const HEAD = 8 * 1024 * 1024;
    const r = await sb.exec(["bash", "-c", "echo FIRST; head -c 300M /dev/zero | tr '\\0' a; echo; echo LAST"], { timeoutSec: 120 });
    expect(r.exitCode).toBe(0);
    const size = statSync(r.logPath!).size;
    expect(size).toBeLessThanOrEqual(2 * HEAD + 4096);
    const total = "FIRST\n".length + 300 * 1024 * 1024 + "\nLAST\n".length;
    expect(r.logTruncatedBytes).toBe(total - 2 * HEAD);
    const log = readFileSync(r.logPath!, "latin1");
    expect(log).toContain(`[infradev: ${total - 2 * HEAD} bytes dropped: the log kept the first ${HEAD} and last ${HEAD} bytes]`);
    expect(log).toMatch(/^# infradev local exec .*\n# cwd: \/workspace\n# argv: .*\nFIRST\naaa/);
    expect(log).toMatch(/aaaa\nLAST\n\n# exited: exit code 0/);
    // The result's own cap is the usual one.
    expect(r.truncated).toBe(true);
  }, 120_000);

  it("refuses a logDir inside the workspace; a temp log folder is removed at close, a given one kept", async () => {
    await expect(LocalSandbox.create({ hostRepoDir: workspace, logDir: join(workspace, "logs") })).rejects.toThrow(/inside the workspace/);
    const own = await LocalSandbox.create({ hostRepoDir: workspace, pidsLimit: false });
    const r = await own.exec(["echo", "x"]);
    expect(existsSync(r.logPath!)).toBe(true);
    expect(own.logDir.startsWith(workspace)).toBe(false);
    await own.close();
    expect(existsSync(own.logDir)).toBe(false);
    expect(existsSync(logsGiven)).toBe(true);
  });
});

describe("local sandbox: no host layout in argv or environment (item 6)", () => {
  it("no process inside shows the workspace's host path, the package root, the log folder or the session temp", async () => {
    const script = [
      "sleep 30 & sleep 0.2",
      'for p in /proc/[0-9]*; do printf "%s: " "$p"; tr "\\0" " " < "$p/cmdline" 2>/dev/null; echo; tr "\\0" "\\n" < "$p/environ" 2>/dev/null; done',
      "kill %1",
    ].join("\n");
    const r = await sb.exec(["bash", "-c", script]);
    expect(r.exitCode).toBe(0);
    // No bwrap init inside (--as-pid-1): pid 1 is the command itself, and no process shows bwrap's options.
    expect(r.stdout).toMatch(/\/proc\/1: bash -c sleep 30/);
    expect(r.stdout).not.toMatch(/bwrap/);
    expect(r.stdout).toMatch(/sleep 30/);
    const forbidden = [workspace, base, packageRoot(), realpathSync(logsGiven), tmpdir() + "/infradev-local-"];
    for (const f of forbidden) expect(r.stdout, `${f} visible inside`).not.toContain(f);
  });

  it("mountinfo names bind sources (documented: bwrap cannot hide them) but not the package: the helpers are a private copy", async () => {
    const r = await sb.exec(["cat", "/proc/self/mountinfo"]);
    expect(r.stdout).not.toContain(packageRoot());
    const helpers = r.stdout.split("\n").find((l) => l.split(" ")[4] === "/opt/infradev/python")!;
    expect(helpers.split(" ")[3]).toMatch(/\/infradev-helpers-\d+-[A-Za-z0-9]{6}$/);
    const same = await sb.exec(["sh", "-c", "ls /opt/infradev/python | sort"]);
    const mine = readdirSync(join(packageRoot(), "python", "sandbox")).filter((n) => !n.startsWith(".")).sort();
    expect(same.stdout.trim().split("\n")).toEqual(mine);
  });
});

describe("local sandbox: the command reaches bwrap intact", () => {
  it("passes argv and env verbatim (quotes, newlines, $(...), backslashes), through a standby or not", async () => {
    const args = ["a b", "it's", "$(touch /workspace/injected)", "`id`", "line1\nline2", "back\\slash", "", "-n", "'", "\"q\""];
    for (let i = 0; i < 3; i++) {
      const r = await sb.exec(["python3", "-c", "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ['WEIRD']]))", ...args], {
        env: { WEIRD: "x'y\n$(id) \\ z" },
      });
      expect(r.exitCode, r.stderr).toBe(0);
      expect(JSON.parse(r.stdout)).toEqual([args, "x'y\n$(id) \\ z"]);
    }
    expect(existsSync(join(workspace, "injected"))).toBe(false);
  });
});

describe("local sandbox: process limit (item 7)", () => {
  it("reports how the limit is enforced", () => {
    const lim = sb.processLimit;
    expect(lim.limit).toBe(128);
    expect(["cgroup-v1", "cgroup-v2", "rlimit"]).toContain(lim.mechanism);
    if (lim.mechanism === "rlimit") expect(lim.warning).toMatch(/RLIMIT_NPROC.*root/);
  });

  it("stops a fork bomb at the limit, says so, and nothing survives", async (ctx) => {
    if (sb.processLimit.mechanism === "rlimit" && process.getuid?.() === 0) ctx.skip(); // root is exempt from RLIMIT_NPROC
    const s = uniqueSleepSeconds();
    const r = await sb.exec(["sh", "-c", `n=0; while [ $n -lt 5000 ]; do sleep ${s} & n=$((n+1)); done; echo started $n`], { timeoutSec: 30 });
    expect(r.pidsLimitHit).toBe(true);
    expect(r.warning).toMatch(/process limit 128 reached \(pids\.events max > 0\)/);
    expect(r.stderr).toMatch(/infradev: process limit 128 reached/);
    expect(r.stdout).not.toContain("started 5000");
    expect(readFileSync(r.logPath!, "utf8")).toMatch(/process limit 128 reached/);
    expect(processesMatching(`sleep ${s}`)).toEqual([]);
    // An ordinary command in the same sandbox is not marked.
    const ok = await sb.exec(["true"]);
    expect(ok.pidsLimitHit).toBeUndefined();
  });

  it("removes each exec's cgroup, and the sandbox's own at close", async (ctx) => {
    if (!sb.processLimit.mechanism.startsWith("cgroup")) ctx.skip();
    const own = await LocalSandbox.create({ hostRepoDir: workspace, pidsLimit: 64 });
    const mine = () => readdirSync("/sys/fs/cgroup/pids").filter((n) => n.startsWith(`infradev-${process.pid}-`));
    await own.exec(["true"]);
    await own.close();
    // The shared sandbox of this file is still open: exactly one folder of this process remains.
    expect(mine()).toHaveLength(1);
  });
});

describe("local sandbox: read-only overlays (contract C)", () => {
  it("the code under test cannot write, rename or delete under an overlay; the host copy is unchanged", async () => {
    const before = snapshot(overlayHost);
    const r = await sb.exec([
      "bash",
      "-c",
      [
        "cat tests/probes/test_probe.py",
        "echo forged > tests/probes/test_probe.py || echo no-write",
        "mv tests/probes/test_probe.py tests/probes/x.py || echo no-rename",
        "rm -f tests/probes/test_probe.py || echo no-delete",
        "touch tests/probes/new.py || echo no-create",
        "rmdir tests/probes || echo no-rmdir",
        "mv tests/probes tests/moved || echo no-move",
      ].join("\n"),
    ]);
    expect(r.stdout).toContain("assert True");
    for (const w of ["no-write", "no-rename", "no-delete", "no-create", "no-rmdir", "no-move"]) expect(r.stdout).toContain(w);
    expect(r.stderr).toMatch(/Read-only file system/);
    expect(r.stderr).toMatch(/Device or resource busy/);
    expect(snapshot(overlayHost)).toEqual(before);
  });

  it("an overlay cannot be moved away within an exec: its parent folders are mount points too", async () => {
    const r = await sb.exec([
      "bash",
      "-c",
      "mv tests tests_old || echo no-move-parent; rm -rf tests || echo no-rm-parent; ls tests; echo new > tests/own.txt && echo parent-writable; cat tests/probes/test_probe.py",
    ]);
    expect(r.stdout).toContain("no-move-parent");
    expect(r.stdout).toContain("no-rm-parent");
    expect(r.stdout).toContain("parent-writable");
    expect(r.stdout).toContain("assert True");
    expect(r.stderr).toMatch(/Device or resource busy/);
    expect(existsSync(join(workspace, "tests_old"))).toBe(false);
    expect(readFileSync(join(overlayHost, "test_probe.py"), "utf8")).toContain("assert True");
  });

  it("a mount point found replaced by a link is put back (the link removed, never followed) before the next exec", async () => {
    rmSync(join(workspace, "tests"), { recursive: true, force: true });
    symlinkSync(decoy, join(workspace, "tests"));
    const before = snapshot(decoy);
    const next = await sb.exec(["cat", "tests/probes/test_probe.py"]);
    expect(next.stdout).toContain("assert True");
    expect(lstatSync(join(workspace, "tests")).isDirectory()).toBe(true);
    expect(lstatSync(join(workspace, "tests")).isSymbolicLink()).toBe(false);
    expect(snapshot(decoy)).toEqual(before);
  });

  it("refuses a bad rel or a host folder inside the workspace", async () => {
    for (const rel of ["../x", "/abs", "a/../b", "a//b", "./a", ".git/hooks", "a\0b", ""]) {
      await expect(LocalSandbox.create({ hostRepoDir: workspace, readOnlyOverlays: [{ host: overlayHost, rel }] })).rejects.toThrow(/rel/);
    }
    mkdirSync(join(workspace, "inner"), { recursive: true });
    await expect(LocalSandbox.create({ hostRepoDir: workspace, readOnlyOverlays: [{ host: join(workspace, "inner"), rel: "x" }] })).rejects.toThrow(/inside the workspace/);
    // A mount point whose component is a link is refused at creation (never followed).
    symlinkSync(decoy, join(workspace, "linked"));
    await expect(LocalSandbox.create({ hostRepoDir: workspace, readOnlyOverlays: [{ host: overlayHost, rel: "linked/probes" }] })).rejects.toThrow(/symbolic link/);
    expect(existsSync(join(decoy, "probes"))).toBe(false);
  });
});
