/**
 * The bubblewrap backend against real bwrap and real processes: what runs, what is hidden, what
 * cannot be written, the network, multi-rank gloo, and how commands are stopped.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, realpathSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { packageRoot } from "../../../src/lib/paths.js";
import { createSandbox } from "../../../src/sandbox/picker.js";
import { SandboxUnavailableError } from "../../../src/sandbox/exec-common.js";
import { HOST_SECRETS } from "../../../src/sandbox/host-secrets.js";
import { LocalSandbox } from "../../../src/sandbox/local/sandbox.js";
import { processesMatching, uniqueSleepSeconds } from "../../helpers/sandbox.js";

let base: string;
let workspace: string;
let taskDir: string;
let sibling: string;
let sb: LocalSandbox;
const SECRET = "golden-answer-do-not-leak";

beforeAll(async () => {
  base = realpathSync(mkdtempSync(join(tmpdir(), "infradev-local-test-")));
  workspace = join(base, "workspace");
  taskDir = join(base, "task");
  sibling = join(base, "sibling");
  mkdirSync(join(workspace, "sub"), { recursive: true });
  mkdirSync(join(taskDir, "hidden", "probes"), { recursive: true });
  mkdirSync(sibling);
  writeFileSync(join(workspace, "hello.txt"), "hello from the workspace\n");
  writeFileSync(join(taskDir, "prompt.md"), "the public prompt\n");
  writeFileSync(join(taskDir, "hidden", "secret.txt"), `${SECRET}\n`);
  writeFileSync(join(taskDir, "hidden", "probes", "test_probe.py"), `# ${SECRET}\n`);
  writeFileSync(join(base, "harness.txt"), "harness file\n");
  symlinkSync(join(taskDir, "hidden"), join(base, "link-to-hidden"));
  process.env.INFRADEV_TEST_HOST_ONLY = "host-secret-env";
  sb = await LocalSandbox.create({
    hostRepoDir: workspace,
    hiddenPaths: [join(taskDir, "hidden")],
    // The parent of the task folder bound twice, as a harness mount would: the masks must hold in both.
    readOnlyMounts: [
      { host: base, sandbox: base },
      { host: base, sandbox: "/opt/harness" },
    ],
    env: { FROM_OPTIONS: "opt-value" },
    killGraceMs: 500,
    selfCheck: true,
  });
});

afterAll(async () => {
  await sb?.close();
  delete process.env.INFRADEV_TEST_HOST_ONLY;
  rmSync(base, { recursive: true, force: true });
});

const sh = (cmd: string, opts: Parameters<LocalSandbox["exec"]>[1] = {}) => sb.exec(["bash", "-lc", cmd], { timeoutSec: 30, ...opts });

describe("local sandbox: running commands", () => {
  it("reports exit codes, stdout and stderr, and runs in /workspace", async () => {
    const ok = await sh("pwd; cat hello.txt; echo oops >&2");
    expect(ok.exitCode).toBe(0);
    expect(ok.stdout).toBe("/workspace\nhello from the workspace\n");
    expect(ok.stderr).toBe("oops\n");
    expect(ok.isolated).toBe(true);
    expect(ok.harnessError).toBeUndefined();
    const bad = await sh("exit 7");
    expect(bad.exitCode).toBe(7);
    expect(bad.harnessError).toBeUndefined();
    const missing = await sb.exec(["no-such-program-xyz"]);
    expect(missing.exitCode).toBe(127);
    expect(missing.harnessError).toBeUndefined();
  });

  it("honours cwd (relative to the workspace) and says so when it does not exist", async () => {
    expect((await sh("pwd", { cwd: "sub" })).stdout).toBe("/workspace/sub\n");
    expect((await sh("pwd", { cwd: "/tmp" })).stdout).toBe("/tmp\n");
    const r = await sh("pwd", { cwd: "nope" });
    expect(r.exitCode).toBe(1);
    expect(r.stderr).toMatch(/cannot cd to \/workspace\/nope/);
    expect(r.harnessError).toBeUndefined();
  });

  it("starts from a clean environment plus the given variables", async () => {
    const r = await sh('echo "$HOME|$FROM_OPTIONS|$FROM_EXEC|${INFRADEV_TEST_HOST_ONLY:-unset}|$INFRADEV_SANDBOX"', { env: { FROM_EXEC: "exec-value" } });
    expect(r.stdout).toBe("/tmp/home|opt-value|exec-value|unset|local\n");
    expect(sb.baseEnv.PATH).toMatch(/\/usr\/bin/);
  });

  it("does not mistake a command's own 'bwrap:' message for a set-up failure", async () => {
    const r = await sh("echo 'bwrap: pretending' >&2; exit 1");
    expect(r.exitCode).toBe(1);
    expect(r.harnessError).toBeUndefined();
  });

  it("maps workspace paths to the host and refuses anything else", async () => {
    await sh("mkdir -p out && echo written > out/file.txt");
    expect(readFileSync(sb.toHostPath("/workspace/out/file.txt"), "utf8")).toBe("written\n");
    expect(sb.toHostPath("out")).toBe(join(workspace, "out"));
    expect(sb.toSandboxPath(join(workspace, "out"))).toBe("/workspace/out");
    expect(() => sb.toHostPath("/etc/passwd")).toThrow(/outside the workspace/);
    expect(() => sb.toHostPath("/workspace/../task")).toThrow(/outside the workspace/);
    await sh(`ln -s ${taskDir} escape`);
    expect(() => sb.toHostPath("/workspace/escape/hidden/secret.txt")).toThrow(/symlink/);
  });
});

describe("local sandbox: hidden paths", () => {
  const attempts = () => [
    join(taskDir, "hidden", "secret.txt"),
    join(taskDir, "hidden", "probes", "test_probe.py"),
    `/opt/harness/task/hidden/secret.txt`,
    join(base, "link-to-hidden", "secret.txt"),
    "/workspace/../task/hidden/secret.txt",
    `/workspace/${"../".repeat(8)}${taskDir.slice(1)}/hidden/secret.txt`,
  ];

  it("cannot read the task's hidden folder by absolute path, relative escape or symlink", async () => {
    const script = attempts()
      .map((p) => `if cat '${p}' >/dev/null 2>&1; then echo "READ ${p}"; else echo "DENIED ${p}"; fi`)
      .join("\n");
    const r = await sh(script);
    expect(r.stdout).not.toContain("READ");
    expect(r.stdout.trim().split("\n")).toHaveLength(attempts().length);
    const rel = await sh("cat ../task/hidden/secret.txt ../../task/hidden/secret.txt; ls -la ../");
    expect(rel.stdout + rel.stderr).not.toContain(SECRET);
    // The needle is assembled in the shell: written literally, it would sit in this command's own log.
    const grep = await sh(`n="golden-answer"; grep -rls "$n-do-not-leak" ${base} /opt/harness /tmp /workspace; echo done`);
    expect(grep.stdout).toBe("done\n");
  });

  it("masks only the hidden folder: its neighbours stay readable, the mask is empty and cannot be removed", async () => {
    expect((await sh(`cat ${base}/harness.txt /opt/harness/task/prompt.md`)).stdout).toBe("harness file\nthe public prompt\n");
    expect((await sh(`ls -A ${taskDir}/hidden /opt/harness/task/hidden; echo end`)).stdout).toMatch(/^(\S+:\s*)*\n*end\n$/);
    const umount = await sh(`umount ${taskDir}/hidden; umount -l /opt/harness/task/hidden; cat ${taskDir}/hidden/secret.txt`);
    expect(umount.exitCode).not.toBe(0);
    expect(umount.stdout).not.toContain(SECRET);
    const nested = await sh("unshare -Urm true");
    expect(nested.exitCode).not.toBe(0);
    const check = await sb.checkHiddenPaths();
    expect(check.leaks).toEqual([]);
    expect(check.checked).toContain("/opt/harness/task/hidden");
  });

  it("masks host secrets under /etc (commands run as uid 0 without capabilities, which still owns them)", async () => {
    const present = HOST_SECRETS.filter((p) => existsSync(p));
    expect(present.length).toBeGreaterThan(0);
    const r = await sh(present.map((p) => `if [ -d '${p}' ]; then ls -A '${p}'; else cat '${p}'; fi; echo "<${p}>"`).join("\n"));
    expect(r.stdout).toBe(present.map((p) => `<${p}>\n`).join(""));
    expect((await sh("cat /etc/passwd")).stdout).toContain("root:");
  });

  it("cannot read the package's own tasks/*/hidden, even when the package lies under a bound folder", async () => {
    const tasksDir = join(packageRoot(), "tasks");
    const withHidden = readdirSync(tasksDir).find((d) => existsSync(join(tasksDir, d, "hidden")));
    expect(withHidden, "a bundled task with a hidden/ folder").toBeDefined();
    const hiddenDir = join(tasksDir, withHidden!, "hidden");
    const hiddenFile = readdirSync(hiddenDir, { recursive: true, withFileTypes: true }).find((e) => e.isFile())!;
    const hostFile = join(hiddenFile.parentPath, hiddenFile.name);
    const content = readFileSync(hostFile, "utf8").slice(0, 40);

    expect((await sh(`cat '${hostFile}'`)).exitCode).not.toBe(0);
    // Like a global npm install under /usr: the package inside a bound folder, at its own path and elsewhere.
    const pkgSb = await LocalSandbox.create({
      hostRepoDir: workspace,
      readOnlyMounts: [
        { host: packageRoot(), sandbox: packageRoot() },
        { host: packageRoot(), sandbox: "/opt/npm-global/lib/node_modules/infradev" },
      ],
      selfCheck: true,
    });
    try {
      const inPkg = hostFile.slice(packageRoot().length);
      const r = await pkgSb.exec(["bash", "-lc", `cat '${hostFile}' '/opt/npm-global/lib/node_modules/infradev${inPkg}'; ls -A ${tasksDir}; head -c 20 ${packageRoot()}/package.json`]);
      expect(r.stdout).not.toContain(content);
      expect(r.stdout).toContain('"name"');
      expect(r.stderr).toMatch(/No such file or directory/);
    } finally {
      await pkgSb.close();
    }
  });

  it("cannot read infradev's caches (gold calibrations, git mirrors with the merged PRs) under a bound cache folder", async () => {
    const cache = join(base, "dotcache");
    mkdirSync(join(cache, "infradev", "git", "abc.git"), { recursive: true });
    mkdirSync(join(cache, "infradev", "calibration", "t"), { recursive: true });
    mkdirSync(join(cache, "huggingface"), { recursive: true });
    writeFileSync(join(cache, "infradev", "git", "abc.git", "packed-refs"), "merged-pr-ref\n");
    writeFileSync(join(cache, "infradev", "calibration", "t", "calibration.json"), "hidden-probe-names\n");
    writeFileSync(join(cache, "huggingface", "model.txt"), "weights\n");
    const saved = { git: process.env.INFRADEV_GIT_CACHE, cal: process.env.INFRADEV_CALIBRATION_DIR };
    process.env.INFRADEV_GIT_CACHE = join(cache, "infradev", "git");
    process.env.INFRADEV_CALIBRATION_DIR = join(cache, "infradev", "calibration");
    let cacheSb: LocalSandbox | undefined;
    try {
      cacheSb = await LocalSandbox.create({ hostRepoDir: workspace, readOnlyMounts: [{ host: cache, sandbox: "/opt/cache" }], selfCheck: true });
      const r = await cacheSb.exec(["sh", "-c", "cat /opt/cache/huggingface/model.txt; grep -rh . /opt/cache/infradev; echo end"]);
      expect(r.stdout).toBe("weights\nend\n");
    } finally {
      await cacheSb?.close();
      for (const [k, v] of [["INFRADEV_GIT_CACHE", saved.git], ["INFRADEV_CALIBRATION_DIR", saved.cal]] as const) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  });

  it("refuses a mount that is or lies inside a hidden path, unless that path is the runs folder holding the workspace", async () => {
    await expect(LocalSandbox.create({ hostRepoDir: workspace, hiddenPaths: [taskDir], readOnlyMounts: [{ host: join(taskDir, "hidden"), sandbox: "/opt/x" }] })).rejects.toThrow(
      /lies inside, hidden path/,
    );
    await expect(LocalSandbox.create({ hostRepoDir: workspace, hiddenPaths: [taskDir], readOnlyMounts: [{ host: taskDir, sandbox: "/opt/x" }] })).rejects.toThrow(
      /hidden path/,
    );
    // runs/<id>/{workspace,base} with runs/ hidden: the session's own base may be bound, other runs stay masked.
    const runs = join(base, "runs");
    mkdirSync(join(runs, "me", "workspace"), { recursive: true });
    mkdirSync(join(runs, "me", "base"), { recursive: true });
    mkdirSync(join(runs, "other"), { recursive: true });
    writeFileSync(join(runs, "me", "base", "base.txt"), "base\n");
    writeFileSync(join(runs, "other", "patch.diff"), "other session\n");
    const runSb = await LocalSandbox.create({
      hostRepoDir: join(runs, "me", "workspace"),
      hiddenPaths: [runs, taskDir],
      readOnlyMounts: [{ host: join(runs, "me", "base"), sandbox: "/base" }, { host: base, sandbox: "/opt/harness" }],
      selfCheck: true,
    });
    try {
      const r = await runSb.exec(["bash", "-c", "cat /base/base.txt; cat /opt/harness/runs/other/patch.diff; ls -A /opt/harness/runs"]);
      expect(r.stdout).toBe("base\n");
      expect(r.stderr).toMatch(/No such file/);
    } finally {
      await runSb.close();
    }
    await expect(LocalSandbox.create({ hostRepoDir: workspace, readOnlyMounts: [{ host: base, sandbox: "/workspace/x" }] })).rejects.toThrow(/collides with \/workspace/);
    await expect(LocalSandbox.create({ hostRepoDir: workspace, readOnlyMounts: [{ host: base, sandbox: "/usr/lib/infradev-nope" }] })).rejects.toThrow(
      /inside the read-only \/usr and does not exist/,
    );
  });
});

describe("local sandbox: writes", () => {
  it("cannot write outside the workspace", async () => {
    const targets = ["/usr/infradev-x", "/etc/infradev-x", join(sibling, "x"), join(base, "x"), "/opt/harness/x", "/x", "/opt/infradev/python/x"];
    const r = await sh(targets.map((t) => `if echo pwned > '${t}' 2>/dev/null; then echo "WROTE ${t}"; else echo "REFUSED ${t}"; fi`).join("\n"));
    expect(r.stdout).not.toContain("WROTE");
    expect(r.stdout.trim().split("\n")).toHaveLength(targets.length);
    expect(existsSync(join(sibling, "x"))).toBe(false);
    expect(existsSync(join(base, "x"))).toBe(false);
    expect(existsSync("/usr/infradev-x")).toBe(false);
    expect(existsSync("/etc/infradev-x")).toBe(false);
  });

  it("has a private /tmp that persists across the session's execs but is not the host's", async () => {
    const marker = `infradev-host-marker-${process.pid}-${Date.now()}`;
    writeFileSync(join(tmpdir(), marker), "host tmp\n");
    try {
      expect((await sh(`ls /tmp/${marker}`)).exitCode).not.toBe(0);
      await sh("echo kept > /tmp/session-file");
      expect((await sh("cat /tmp/session-file")).stdout).toBe("kept\n");
      expect(existsSync("/tmp/session-file")).toBe(false);
    } finally {
      rmSync(join(tmpdir(), marker), { force: true });
    }
  });
});

describe("local sandbox: network", () => {
  it("has loopback only", async () => {
    const script = `
import socket
print("ifaces", sorted(n for _, n in socket.if_nameindex()))
try:
    socket.create_connection(("1.1.1.1", 53), timeout=3); print("outside: connected")
except OSError as e:
    print("outside: failed", e.errno)
try:
    socket.getaddrinfo("example.com", 80); print("dns: resolved")
except OSError:
    print("dns: failed")
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
c = socket.create_connection(srv.getsockname(), timeout=3); conn, _ = srv.accept()
c.sendall(b"ping"); print("loopback:", conn.recv(4).decode())
`;
    const r = await sb.exec([sb.python, "-c", script], { timeoutSec: 30 });
    expect(r.stderr).toBe("");
    expect(r.stdout).toContain("ifaces ['lo']");
    expect(r.stdout).toMatch(/outside: failed/);
    expect(r.stdout).toContain("dns: failed");
    expect(r.stdout).toContain("loopback: ping");
  });

  it("runs a 2-rank torch gloo all_reduce on 127.0.0.1", async () => {
    writeFileSync(
      join(workspace, "gloo_allreduce.py"),
      `import os, sys, torch, torch.distributed as dist
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + os.environ["PORT"], rank=rank, world_size=2)
t = torch.tensor([rank + 1.0])
dist.all_reduce(t)
print(f"rank{rank} sum={t.item()}")
dist.destroy_process_group()
`,
    );
    const cmd = [
      `export PORT=$(${sb.python} -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')`,
      `${sb.python} gloo_allreduce.py 0 & r0pid=$!`,
      `${sb.python} gloo_allreduce.py 1; r1=$?`,
      "wait $r0pid; r0=$?",
      "exit $((r0 + r1))",
    ].join("\n");
    const r = await sh(cmd, { timeoutSec: 60 });
    expect(r.stderr).not.toMatch(/Error/);
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toContain("rank0 sum=3.0");
    expect(r.stdout).toContain("rank1 sum=3.0");
  });
});

describe("local sandbox: stopping commands", () => {
  it("timeout kills the whole tree and leaves no process", async () => {
    const s = uniqueSleepSeconds();
    const started = Date.now();
    const r = await sh(`sleep ${s} & (setsid sleep ${s} &); sleep ${s}`, { timeoutSec: 2 });
    expect(r.timedOut).toBe(true);
    expect(r.cancelled).toBe(false);
    expect(r.harnessError).toBeUndefined();
    expect(Date.now() - started).toBeLessThan(6000);
    expect(processesMatching(`sleep ${s}`)).toEqual([]);
  });

  it("kills a tree that ignores SIGTERM after the grace period", async () => {
    const s = uniqueSleepSeconds();
    const r = await sh(`trap '' TERM; sleep ${s} & trap '' TERM; wait`, { timeoutSec: 1 });
    expect(r.timedOut).toBe(true);
    expect(r.durationMs).toBeLessThan(4000);
    expect(processesMatching(`sleep ${s}`)).toEqual([]);
  });

  it("an abort signal cancels and kills the tree; an already-aborted signal never runs", async () => {
    const s = uniqueSleepSeconds();
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 500);
    const r = await sh(`sleep ${s}`, { signal: ac.signal });
    expect(r.cancelled).toBe(true);
    expect(r.timedOut).toBe(false);
    expect(r.durationMs).toBeLessThan(4000);
    expect(processesMatching(`sleep ${s}`)).toEqual([]);
    const pre = await sh("echo never", { signal: AbortSignal.abort() });
    expect(pre.cancelled).toBe(true);
    expect(pre.stdout).not.toContain("never");
  });

  it("a background child does not outlive a command that exits", async () => {
    const s = uniqueSleepSeconds();
    const r = await sh(`sleep ${s} & echo started`);
    expect(r.exitCode).toBe(0);
    expect(r.durationMs).toBeLessThan(3000);
    expect(processesMatching(`sleep ${s}`)).toEqual([]);
  });

  it("close() kills running commands", async () => {
    const s = uniqueSleepSeconds();
    const own = await LocalSandbox.create({ hostRepoDir: workspace });
    const pending = own.exec(["sleep", s]);
    await new Promise((r) => setTimeout(r, 300));
    await own.close();
    const r = await pending;
    expect(r.cancelled).toBe(true);
    expect(processesMatching(`sleep ${s}`)).toEqual([]);
    await expect(own.exec(["true"])).rejects.toThrow(/after close/);
  });
});

describe("local sandbox: output", () => {
  it("caps output to head + tail with a marker, keeps the full log, and streams everything", async () => {
    let streamed = 0;
    const r = await sb.exec(["bash", "-c", "seq 1 100000; echo tail-of-stderr >&2"], {
      maxOutputBytes: 4096,
      onOutput: (chunk) => (streamed += Buffer.byteLength(chunk)),
    });
    const full = readFileSync(r.logPath!, "utf8");
    const seqBytes = Buffer.byteLength(Array.from({ length: 100000 }, (_, i) => `${i + 1}\n`).join(""));
    expect(r.truncated).toBe(true);
    expect(r.stdout.startsWith("1\n2\n3\n")).toBe(true);
    expect(r.stdout.endsWith("99999\n100000\n")).toBe(true);
    expect(r.stdout).toMatch(/\n\[\.\.\. \d+ bytes omitted \.\.\.\]\n/);
    expect(Buffer.byteLength(r.stdout)).toBeLessThan(4096 + 64);
    expect(r.stderr).toBe("tail-of-stderr\n");
    expect(streamed).toBe(seqBytes + "tail-of-stderr\n".length);
    expect(full).toContain("\n50000\n");
    expect(full).toContain("100000\n");
    // The log lives outside the workspace; the sandbox reads it at /infradev/logs.
    expect(r.logPath!.startsWith(sb.logDir)).toBe(true);
    expect(r.logPath!.startsWith(workspace)).toBe(false);
    expect(r.sandboxLogPath).toMatch(/^\/infradev\/logs\/[^/]+\.log$/);
    const inside = await sb.exec(["wc", "-c", r.sandboxLogPath!]);
    expect(inside.stdout).toContain(r.sandboxLogPath!);
  });
});

describe("local sandbox: harness faults", () => {
  it("bwrap missing: a clear error that says how to install it", async () => {
    const err = await createSandbox({ kind: "local", hostRepoDir: workspace, bwrapPath: join(base, "no-such-bwrap") }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SandboxUnavailableError);
    expect((err as Error).message).toMatch(/bubblewrap \(bwrap\) was not found/);
    expect((err as Error).message).toContain("apt-get install -y bubblewrap");
  });

  it("a bwrap set-up failure is a harnessError, not a command failure", async () => {
    const gone = join(base, "vanishing-workspace");
    mkdirSync(gone);
    const own = await LocalSandbox.create({ hostRepoDir: gone, logDir: join(base, "vanishing-logs") });
    try {
      rmSync(gone, { recursive: true });
      const r = await own.exec(["true"]);
      expect(r.harnessError).toMatch(/bwrap could not set up the sandbox.*bwrap: /);
      expect(r.isolated).toBe(true);
    } finally {
      await own.close();
    }
  });
});
