/**
 * The sandbox backends the integration suites (MCP e2e, grader) are parameterised over.
 *
 * INFRADEV_E2E_SANDBOXES=local,docker names them explicitly. By default: `local`, plus `docker` when
 * INFRADEV_REQUIRE_DOCKER=1 (CI) or an engine answers here. A docker variant that runs without an
 * engine fails in its `beforeAll` (`prepareBackend`), never skips: the list only holds docker when it
 * was asked for or is available.
 */
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import type { DockerCliOptions } from "../../src/cli/sandbox-options.js";
import { packageRoot } from "../../src/lib/paths.js";
import { TEST_IMAGE, dockerSuitePlan, ensureTestImage } from "./docker-image.js";

export type Backend = "local" | "docker" | "none";

const plan = await dockerSuitePlan();

export const SANDBOX_BACKENDS: Backend[] = process.env.INFRADEV_E2E_SANDBOXES
  ? (process.env.INFRADEV_E2E_SANDBOXES.split(",").map((s) => s.trim()).filter(Boolean) as Backend[])
  : plan.run
    ? ["local", "docker"]
    : ["local"];

/** The docker options for the local test image (an empty root run on the host's /usr and /etc). */
export const TEST_DOCKER_OPTIONS: DockerCliOptions = { image: TEST_IMAGE, hostSystemMounts: true };

/** The same as CLI flags, for `serve` / `grade` spawned as processes. */
export function backendCliFlags(backend: Backend): string[] {
  return backend === "docker" ? ["--image", TEST_IMAGE, "--host-system-mounts"] : [];
}

/** What a backend's suite needs before it starts; throws (so the suite fails) when it cannot run. */
export async function prepareBackend(backend: Backend): Promise<void> {
  if (backend !== "docker") return;
  if (!plan.reachable) throw new Error(plan.whyNot);
  await ensureTestImage();
}

function newestMtime(dir: string): number {
  let newest = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) newest = Math.max(newest, newestMtime(p));
    else if (e.name.endsWith(".ts")) newest = Math.max(newest, statSync(p).mtimeMs);
  }
  return newest;
}

/**
 * Builds dist/ when it is missing, older than any source file the CLI is built from, or when
 * INFRADEV_E2E_BUILD=1: the process suites spawn `node dist/cli/main.js` and must test today's code.
 */
export function ensureBuilt(): string {
  const root = packageRoot();
  const cli = join(root, "dist", "cli", "main.js");
  const sources = [join(root, "src")].filter(existsSync);
  const stale = !existsSync(cli) || Math.max(...sources.map(newestMtime)) > statSync(cli).mtimeMs;
  if (stale || process.env.INFRADEV_E2E_BUILD === "1") execFileSync("npm", ["run", "--silent", "build"], { cwd: root, stdio: "inherit" });
  return cli;
}
