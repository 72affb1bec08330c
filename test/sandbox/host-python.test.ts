/**
 * An agent's sandbox holds none of python/host/ (how the grader renames, places and disguises tests;
 * the mutation engine; the marker scan): not at /opt/infradev/python, not anywhere on its filesystem,
 * and not through a bound folder that holds the package (an install under /usr or /opt is masked).
 */
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { silentLogger } from "../../src/lib/logger.js";
import { hostPythonDir, packageRoot, sandboxPythonDir } from "../../src/lib/paths.js";
import { makeSandboxFactory } from "../../src/server/sandbox-factory.js";
import type { Sandbox } from "../../src/sandbox/types.js";
import { loadPublicTask } from "../../src/task/public/loader.js";
import { SANDBOX_BACKENDS, TEST_DOCKER_OPTIONS, prepareBackend, type Backend } from "../helpers/backends.js";
import { TEST_FIXTURES } from "../helpers/paths.js";

const HOST_FILES = readdirSync(hostPythonDir()).filter((n) => n.endsWith(".py"));
const SANDBOX_FILES = readdirSync(sandboxPythonDir()).filter((n) => !n.startsWith(".") && n !== "__pycache__");
/** Where the test binds the whole package read-only, as a global install under a system folder would be seen. */
const PKG_MOUNT = "/opt/infradev-pkg";

describe.each(SANDBOX_BACKENDS.filter((b) => b !== "none"))("no host-only Python in an agent sandbox (%s)", (backend: Backend) => {
  let sb: Sandbox;
  let dir: string;
  beforeAll(async () => {
    await prepareBackend(backend);
    dir = mkdtempSync(join(tmpdir(), "infradev-host-python-"));
    const factory = makeSandboxFactory(backend === "docker" ? TEST_DOCKER_OPTIONS : {});
    sb = await factory({
      kind: backend as "local" | "docker",
      hostRepoDir: join(dir),
      readOnlyMounts: [{ host: packageRoot(), sandbox: PKG_MOUNT }],
      hiddenPaths: [],
      logDir: mkdtempSync(join(tmpdir(), "infradev-host-python-logs-")),
      python: "/usr/bin/python3",
      sessionId: `host-python-${process.pid}`,
      task: loadPublicTask(join(TEST_FIXTURES, "grader", "tasks", "tiny-mean")),
      logger: silentLogger(),
    });
  }, 300_000);
  afterAll(async () => {
    await sb?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("the mounted helpers are exactly python/sandbox", async () => {
    const r = await sb.exec(["sh", "-c", "ls -A /opt/infradev/python | sort"]);
    expect(r.exitCode, r.stderr).toBe(0);
    const listed = r.stdout.trim().split("\n").filter((n) => n !== "__pycache__");
    expect(listed).toEqual([...SANDBOX_FILES].sort());
    for (const f of HOST_FILES) expect(listed).not.toContain(f);
  });

  it("no file of python/host is anywhere on the sandbox's filesystem", async () => {
    const names = HOST_FILES.map((n) => `-name ${n}`).join(" -o ");
    const r = await sb.exec(["sh", "-c", `find / \\( -path /proc -o -path /sys -o -path /dev \\) -prune -o \\( ${names} \\) -print 2>/dev/null; true`], { timeoutSec: 240 });
    expect(r.stdout.trim()).toBe("");
  }, 300_000);

  it("a bound folder holding the package shows its python/sandbox but not its python/host", async () => {
    const control = await sb.exec(["sh", "-c", `test -r ${PKG_MOUNT}/python/sandbox/infradev_launch.py && echo readable`]);
    expect(control.stdout.trim()).toBe("readable"); // the mount itself works
    for (const f of HOST_FILES) {
      const r = await sb.exec(["sh", "-c", `cat ${PKG_MOUNT}/python/host/${f} 2>/dev/null | head -c 64 | wc -c`]);
      expect(r.stdout.trim(), f).toBe("0");
    }
  });
});
