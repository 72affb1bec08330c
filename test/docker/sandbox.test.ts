/**
 * The docker backend against a real engine (no mocks): commands, exit codes, cwd / env, output,
 * and the isolation promises of the local backend. Skips without an engine unless
 * INFRADEV_REQUIRE_DOCKER=1, which turns a missing engine into a failure.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HOST_SECRETS } from "../../src/sandbox/host-secrets.js";
import type { DockerSandbox } from "../../src/sandbox/docker/create.js";
import { dockerSuitePlan, ensureTestImage } from "../helpers/docker-image.js";
import { SECRET, fakeTask, openTestSandbox, type FakeTask } from "../helpers/docker-sandbox.js";

const plan = await dockerSuitePlan();

describe.skipIf(!plan.run)("docker sandbox: commands and isolation", () => {
  let task: FakeTask;
  let sb: DockerSandbox;
  let cacheDir: string;

  beforeAll(async () => {
    if (!plan.reachable) throw new Error(plan.whyNot);
    await ensureTestImage();
    task = fakeTask();
    cacheDir = join(task.root, "hf-cache");
    mkdirSync(cacheDir);
    writeFileSync(join(cacheDir, "model.txt"), "weights\n");
    sb = await openTestSandbox(task, { readOnlyMounts: [{ host: cacheDir, sandbox: "/cache/hf" }], env: { BASE_VAR: "base" } });
  });
  afterAll(async () => {
    await sb?.close();
    task?.cleanup();
  });

  it("runs argv in /workspace and reports the exit code", async () => {
    const r = await sb.exec(["python3", "hello.py"]);
    expect(r).toMatchObject({ exitCode: 0, timedOut: false, cancelled: false, isolated: true, signal: null });
    expect(r.stdout).toBe("hello from the workspace\n");
    expect(r.stderr).toBe("");
    const fail = await sb.exec(["sh", "-c", "echo out; echo err >&2; exit 7"]);
    expect(fail).toMatchObject({ exitCode: 7, stdout: "out\n", stderr: "err\n" });
    expect(fail.oomKilled).toBeUndefined();
    const missing = await sb.exec(["no-such-binary-xyz"]);
    expect(missing.exitCode).toBe(127);
    expect(missing.stderr).toMatch(/no-such-binary-xyz/);
  });

  it("passes argv verbatim (no shell), honours cwd and env over the base env", async () => {
    const r = await sb.exec(["python3", "-c", "import sys; print(sys.argv[1:])", "a b", "$HOME", "'q'"]);
    expect(r.stdout.trim()).toBe(`['a b', '$HOME', "'q'"]`);
    mkdirSync(join(task.workspace, "sub"), { recursive: true });
    const cwd = await sb.exec(["pwd"], { cwd: "sub" });
    expect(cwd.stdout.trim()).toBe("/workspace/sub");
    const abs = await sb.exec(["pwd"], { cwd: "/tmp" });
    expect(abs.stdout.trim()).toBe("/tmp");
    const env = await sb.exec(["sh", "-c", 'echo "$BASE_VAR $MY_VAR $INFRADEV_SANDBOX"'], { env: { MY_VAR: "x y" } });
    expect(env.stdout.trim()).toBe("base x y docker");
    const over = await sb.exec(["sh", "-c", 'echo "$BASE_VAR"'], { env: { BASE_VAR: "over" } });
    expect(over.stdout.trim()).toBe("over");
  });

  it("streams output, caps it head + tail and saves the full log under the workspace", async () => {
    const chunks: string[] = [];
    const r = await sb.exec(["python3", "-c", "for i in range(20000): print(f'line {i}')"], {
      maxOutputBytes: 4096,
      onOutput: (c, s) => s === "stdout" && chunks.push(c),
    });
    expect(r.exitCode).toBe(0);
    expect(r.truncated).toBe(true);
    expect(r.stdout).toMatch(/^line 0\n/);
    expect(r.stdout).toMatch(/line 19999\n$/);
    expect(r.stdout.length).toBeLessThan(8192);
    expect(chunks.join("")).toContain("line 10000\n");
    expect(r.logPath).toBeDefined();
    // Outside the workspace, read-only inside at /infradev/logs.
    expect(r.logPath!.startsWith(sb.logDir)).toBe(true);
    expect(r.logPath!.startsWith(task.workspace)).toBe(false);
    expect(readFileSync(r.logPath!, "utf8")).toContain("line 10000\nline 10001\n");
    expect(r.sandboxLogPath).toMatch(/^\/infradev\/logs\/[^/]+\.log$/);
    const inside = await sb.exec(["sh", "-c", 'grep -c "^line " "$1"; echo x > "$1" || echo refused', "sh", r.sandboxLogPath!]);
    expect(inside.stdout).toBe("20000\nrefused\n");
  });

  it("maps workspace paths to the host and refuses others", () => {
    expect(sb.toHostPath("/workspace/a/b.py")).toBe(join(task.workspace, "a", "b.py"));
    expect(sb.toHostPath("a/b.py")).toBe(join(task.workspace, "a", "b.py"));
    expect(() => sb.toHostPath("/workspace/../etc/passwd")).toThrow(/outside the workspace/);
    expect(() => sb.toHostPath("/etc/passwd")).toThrow(/outside the workspace/);
  });

  it("masks host secrets under the bound host /etc", async () => {
    const present = HOST_SECRETS.filter((p) => existsSync(p));
    expect(present.length).toBeGreaterThan(0);
    const script = present.map((p) => `if [ -d '${p}' ]; then ls -A '${p}'; else cat '${p}'; fi 2>/dev/null; echo "<${p}>"`).join("\n");
    const r = await sb.exec(["sh", "-c", script]);
    expect(r.stdout).toBe(present.map((p) => `<${p}>\n`).join(""));
  });

  it("cannot read any file of the task's hidden/ folder", async () => {
    const attempts = [
      join(task.hidden, "secret"),
      join(task.hidden, "probes", "test_probe.py"),
      "../hidden/secret",
      "/workspace/../hidden/secret",
      "../../hidden/secret",
    ];
    for (const p of attempts) {
      const r = await sb.exec(["cat", p]);
      expect(r.exitCode, p).not.toBe(0);
      expect(r.stdout, p).not.toContain(SECRET);
    }
    // Nothing of the task root is mounted: only the workspace, the helpers and the asked-for cache.
    const mounts = (await sb.container.inspect()).Mounts.map((m) => m.Source);
    expect(mounts.some((m) => m.startsWith(task.hidden))).toBe(false);
    expect(mounts.filter((m) => m.startsWith(task.root)).sort()).toEqual([cacheDir, task.workspace].sort());
    const grep = await sb.exec(["sh", "-c", `grep -rl --exclude-dir=.infradev ${SECRET} /workspace /tmp /opt /cache /home /root 2>/dev/null; true`]);
    expect(grep.stdout).toBe("");
  });

  it("refuses a mount inside hidden/ and masks hidden/ inside a mounted folder", async () => {
    await expect(openTestSandbox(task, { readOnlyMounts: [{ host: join(task.hidden, "probes"), sandbox: "/probes" }] })).rejects.toMatchObject({
      name: "DockerSandboxError",
      kind: "docker",
      code: "bad_options",
      harnessFault: true,
      message: expect.stringMatching(/read-only mount .*probes -> \/probes: it lies inside hidden path/),
    });
    const wide = await openTestSandbox(task, { readOnlyMounts: [{ host: task.root, sandbox: "/task" }], sessionId: `vitest-mask-${process.pid}` });
    try {
      const seen = await wide.exec(["sh", "-c", "cat /task/workspace/hello.py; ls -A /task/hidden | wc -l; cat /task/hidden/secret; true"]);
      expect(seen.stdout).toBe("print('hello from the workspace')\n0\n");
      expect(seen.stdout + seen.stderr).not.toContain(SECRET);
      const write = await wide.exec(["sh", "-c", "echo x > /task/hidden/planted"]);
      expect(write.exitCode).not.toBe(0);
    } finally {
      await wide.close();
    }
  });

  it("read-only overlays (contract C): nested in the workspace, cannot be written, renamed or deleted; host copy unchanged", async () => {
    const probes = join(task.root, "overlay-probes");
    mkdirSync(probes);
    writeFileSync(join(probes, "test_probe.py"), "def test_probe():\n    assert True\n");
    const ov = await openTestSandbox(task, { readOnlyOverlays: [{ host: probes, rel: "tests/probes" }], sessionId: `vitest-overlay-${process.pid}` });
    try {
      const r = await ov.exec([
        "sh",
        "-c",
        [
          "cat tests/probes/test_probe.py",
          "echo forged > tests/probes/test_probe.py || echo no-write",
          "mv tests/probes/test_probe.py tests/probes/x.py || echo no-rename",
          "rm -f tests/probes/test_probe.py || echo no-delete",
          "rmdir tests/probes || echo no-rmdir",
          "mv tests/probes tests/moved || echo no-move",
          "mv tests tests_old || echo no-move-parent",
        ].join("\n"),
      ]);
      expect(r.stdout).toContain("assert True");
      for (const w of ["no-write", "no-rename", "no-delete", "no-rmdir", "no-move", "no-move-parent"]) expect(r.stdout).toContain(w);
      expect(r.stderr).toMatch(/Read-only file system/);
      expect(readFileSync(join(probes, "test_probe.py"), "utf8")).toBe("def test_probe():\n    assert True\n");
      expect(readFileSync(join(probes, "test_probe.py"), "utf8")).not.toContain("forged");
    } finally {
      await ov.close();
    }
    await expect(openTestSandbox(task, { readOnlyOverlays: [{ host: probes, rel: "../escape" }] })).rejects.toThrow(/rel/);
  });

  it("cannot write outside the workspace (read-only root, system and helper mounts)", async () => {
    for (const target of ["/usr/x", "/etc/x", "/x", "/opt/infradev/python/x", "/cache/hf/x", "/home/x", "/root/x", "/sbin/x"]) {
      const r = await sb.exec(["sh", "-c", `echo pwned > ${target}`]);
      expect(r.exitCode, target).not.toBe(0);
      expect(r.stderr, target).toMatch(/Read-only file system|Permission denied/);
    }
    expect(existsSync("/x")).toBe(false);
    const ok = await sb.exec(["sh", "-c", "echo mine > /workspace/out.txt && echo scratch > /tmp/t && cat /tmp/t /cache/hf/model.txt"]);
    expect(ok.exitCode).toBe(0);
    expect(ok.stdout).toBe("scratch\nweights\n");
    expect(readFileSync(join(task.workspace, "out.txt"), "utf8")).toBe("mine\n");
  });

  it("has no network but loopback", async () => {
    const script = [
      "import socket",
      "print(sorted(n for _, n in socket.if_nameindex()))",
      "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)",
      "c = socket.create_connection(s.getsockname(), timeout=2); a, _ = s.accept(); c.sendall(b'ping'); print(a.recv(4).decode())",
      "for host in [('1.1.1.1', 53), ('8.8.8.8', 443)]:",
      "    try:",
      "        socket.create_connection(host, timeout=2); print('reached', host)",
      "    except OSError as e:",
      "        print('blocked', e.errno)",
    ].join("\n");
    const r = await sb.exec(["python3", "-c", script]);
    expect(r.exitCode).toBe(0);
    const lines = r.stdout.trim().split("\n");
    expect(lines[0]).toBe("['lo']");
    expect(lines[1]).toBe("ping");
    expect(lines.slice(2).every((l) => l.startsWith("blocked"))).toBe(true);
  });

  it("runs with dropped capabilities and no-new-privileges", async () => {
    const info = await sb.container.inspect();
    expect(info.HostConfig.CapDrop).toEqual(["ALL"]);
    expect(info.HostConfig.SecurityOpt).toContain("no-new-privileges");
    expect(info.HostConfig.ReadonlyRootfs).toBe(true);
    expect(info.HostConfig.NetworkMode).toBe("none");
    expect(info.HostConfig.Init).toBe(true);
    const r = await sb.exec(["sh", "-c", "grep -E '^(CapEff|NoNewPrivs)' /proc/self/status"]);
    expect(r.stdout).toMatch(/NoNewPrivs:\s+1/);
    const mount = await sb.exec(["mount", "-t", "tmpfs", "none", "/mnt"]);
    expect(mount.exitCode).not.toBe(0);
  });
});
