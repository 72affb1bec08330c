/**
 * Issue 12 item 2: the calibration fingerprint is taken where the tests run — in a sandbox from the
 * grader's own factory, with the tests' interpreter and task environment — not by running
 * env.python on the host. Real sandboxes (none, local = bwrap, docker where an engine answers).
 */
import { TEST_FIXTURES } from "../../helpers/paths.js";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { graderSandboxFactory } from "../../../src/grader/grade/sandbox-factory.js";
import { calibrationDirFor } from "../../../src/grader/grade/calibrate.js";
import { fingerprintHash, hardwareFingerprint } from "../../../src/grader/workspace/fingerprint.js";
import { loadGraderTask, type GraderTask } from "../../../src/task/hidden/grader-task.js";
import { SANDBOX_BACKENDS, TEST_DOCKER_OPTIONS, prepareBackend } from "../../helpers/backends.js";

const FIXTURES = join(TEST_FIXTURES, "grader", "tasks");
let root: string;
let task: GraderTask;

beforeAll(() => {
  delete process.env.INFRADEV_PYTHON;
  root = mkdtempSync(join(tmpdir(), "infradev-fingerprint-test-"));
  // A torch the task's environment puts first on the path: what its tests import, where that path exists.
  const fake = join(root, "site");
  mkdirSync(join(fake, "torch"), { recursive: true });
  writeFileSync(join(fake, "torch", "__init__.py"), "");
  writeFileSync(join(fake, "torch", "version.py"), '__version__ = "0.0.0+tests-env"\n');
  const tasks = join(root, "tasks");
  cpSync(join(FIXTURES, "tiny-mean"), join(tasks, "tiny-mean"), { recursive: true });
  const y = join(tasks, "tiny-mean", "task.yaml");
  writeFileSync(y, `${readFileSync(y, "utf8")}env: { python: /usr/bin/python3, vars: { PYTHONPATH: ${fake} } }\n`);
  task = loadGraderTask("tiny-mean", tasks);
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("hardware fingerprint", () => {
  it("reads torch with the tests' environment inside the sandbox (none: the host path is there; local: /tmp is private)", async () => {
    const none = await hardwareFingerprint(task, graderSandboxFactory("none", [join(root, "tasks")]));
    expect(none).toMatchObject({ sandbox: "none", torch: "0.0.0+tests-env" });
    expect(none.python).toMatch(/^\/usr\/bin\/python3(\.\d+)? 3\.\d+\.\d+$/);
    const local = await hardwareFingerprint(task, graderSandboxFactory("local", [join(root, "tasks")]));
    expect(local.sandbox).toBe("local");
    expect(local.torch).toMatch(/^\d+\.\d+\.\d+/);
    expect(local.torch).not.toBe("0.0.0+tests-env");
    // Cache keys follow: the two calibrations live apart.
    expect(fingerprintHash(none)).not.toBe(fingerprintHash(local));
    expect(calibrationDirFor("/c", task, "h".repeat(64), none)).not.toBe(calibrationDirFor("/c", task, "h".repeat(64), local));
  });

  it("--python reaches the sandbox; an interpreter missing there is recorded as unknown, not guessed from the host", async () => {
    const other = await hardwareFingerprint(task, graderSandboxFactory("local", [join(root, "tasks")], {}, { python: "/nonexistent/bin/python3" }));
    expect(other.torch).toMatch(/^unknown \(\/nonexistent\/bin\/python3 in the local sandbox: /);
  });

  it.runIf(SANDBOX_BACKENDS.includes("docker"))("docker: taken in the container, with the image's interpreter", async () => {
    await prepareBackend("docker");
    const fp = await hardwareFingerprint(task, graderSandboxFactory("docker", [join(root, "tasks")], TEST_DOCKER_OPTIONS));
    expect(fp.sandbox).toBe("docker");
    expect(fp.python).toMatch(/ 3\.\d+\.\d+$/);
    // The fake torch is a host path, not bound into the container.
    expect(fp.torch).not.toBe("0.0.0+tests-env");
  }, 120_000);
});
