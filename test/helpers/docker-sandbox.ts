/** Shared set-up for the docker sandbox suites: a fake task folder and sandboxes on the test image. */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createDockerSandbox, type DockerSandbox, type DockerSandboxOptions } from "../../src/sandbox/docker/create.js";
import { TEST_IMAGE } from "./docker-image.js";

export const SECRET = "golden-answer-7f3a91";

/** A task-like folder: `workspace/` (what gets mounted) beside `hidden/secret` (what must not be). */
export interface FakeTask {
  root: string;
  workspace: string;
  hidden: string;
  cleanup(): void;
}

export function fakeTask(): FakeTask {
  const root = mkdtempSync(join(tmpdir(), "infradev-docker-task-"));
  const workspace = join(root, "workspace");
  const hidden = join(root, "hidden");
  mkdirSync(workspace);
  mkdirSync(join(hidden, "probes"), { recursive: true });
  writeFileSync(join(hidden, "secret"), `${SECRET}\n`);
  writeFileSync(join(hidden, "probes", "test_probe.py"), `SECRET = "${SECRET}"\n`);
  writeFileSync(join(workspace, "hello.py"), "print('hello from the workspace')\n");
  return { root, workspace, hidden, cleanup: () => rmSync(root, { recursive: true, force: true }) };
}

/** A sandbox on the local test image (host system dirs bind-mounted read-only). */
export function openTestSandbox(task: FakeTask, extra: Partial<DockerSandboxOptions> = {}): Promise<DockerSandbox> {
  return createDockerSandbox({
    hostRepoDir: task.workspace,
    image: TEST_IMAGE,
    sessionId: `vitest-${process.pid}`,
    purpose: "agent",
    hostSystemMounts: true,
    hiddenPaths: [task.hidden],
    memoryMb: 2048,
    pidsLimit: 512,
    shmSizeMb: 256,
    ...extra,
  });
}

/** Process lines inside the container other than the idle init and the `ps` itself. */
export async function strayProcesses(sb: DockerSandbox): Promise<string[]> {
  const r = await sb.exec(["ps", "-eo", "pid=,args="]);
  return r.stdout
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l && !/docker-init|: infradev-init;|ps -eo/.test(l));
}
