/**
 * The local test image for the docker backend: an empty root (mount points and the host's usrmerge
 * symlinks) made with `docker import`, run with the host's /usr and /etc bind-mounted read-only
 * (`hostSystemMounts: true`) so the host's python3 + torch + pytest work inside. No registry needed.
 *
 * Idempotent: an image with this tag and the current layout version is reused.
 * Also a script: `npx tsx test/helpers/docker-image.ts` builds it (used by .ci/docker-setup.sh).
 */
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Docker from "dockerode";
import { execa } from "execa";
import { hostSystemMountPlan } from "../../src/sandbox/docker/spec.js";

export const TEST_IMAGE = "infradev-test-base:local";
const LAYOUT_VERSION = "1";
const VERSION_LABEL = "infradev.test-image-layout";

const MOUNT_POINTS = ["usr", "etc", "sbin", "tmp", "var/tmp", "run", "proc", "sys", "dev", "workspace", "opt/infradev/python", "root", "home"];

/** Whether an engine answers (DOCKER_HOST or the default socket) within `timeoutMs`. */
export async function engineReachable(timeoutMs = 3000): Promise<boolean> {
  try {
    const docker = new Docker();
    await Promise.race([docker.ping(), new Promise((_, rej) => setTimeout(() => rej(new Error("timeout")), timeoutMs))]);
    return true;
  } catch {
    return false;
  }
}

/** Builds TEST_IMAGE unless an image of the current layout already has the tag; returns its id. */
export async function ensureTestImage(docker = new Docker()): Promise<string> {
  try {
    const info = await docker.getImage(TEST_IMAGE).inspect();
    if (info.Config?.Labels?.[VERSION_LABEL] === LAYOUT_VERSION) return info.Id;
  } catch (err) {
    if ((err as { statusCode?: number }).statusCode !== 404) throw err;
  }
  const root = mkdtempSync(join(tmpdir(), "infradev-rootfs-"));
  try {
    for (const dir of MOUNT_POINTS) mkdirSync(join(root, dir), { recursive: true });
    for (const link of hostSystemMountPlan().symlinks) symlinkSync(link.target, join(root, link.path.slice(1)));
    const tar = execa("tar", ["-C", root, "--numeric-owner", "--owner=0", "--group=0", "-c", "."], { encoding: "buffer", buffer: false });
    const [repo, tag] = TEST_IMAGE.split(":") as [string, string];
    const stream = await docker.importImage(tar.stdout!, {
      repo,
      tag,
      changes: [`LABEL ${VERSION_LABEL}=${LAYOUT_VERSION}`, 'CMD ["/bin/sh"]'],
    } as Record<string, unknown>);
    await new Promise<void>((resolve, reject) =>
      docker.modem.followProgress(stream, (err: Error | null, out: { error?: string }[]) => {
        const failed = out?.find((o) => o.error);
        if (err || failed) reject(err ?? new Error(failed!.error));
        else resolve();
      }),
    );
    await tar;
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
  const info = await docker.getImage(TEST_IMAGE).inspect();
  if (info.Config?.Labels?.[VERSION_LABEL] !== LAYOUT_VERSION) {
    throw new Error(`built ${TEST_IMAGE} but it lacks the ${VERSION_LABEL}=${LAYOUT_VERSION} label`);
  }
  return info.Id;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  ensureTestImage().then(
    (id) => console.log(`${TEST_IMAGE} ${id}`),
    (err: Error) => {
      console.error(`building ${TEST_IMAGE} failed: ${err.message}`);
      process.exit(1);
    },
  );
}

/**
 * How a docker suite should behave here: run when an engine answers; otherwise skip, unless
 * INFRADEV_REQUIRE_DOCKER=1 (CI), in which case run and fail loudly in `beforeAll`.
 */
export async function dockerSuitePlan(): Promise<{ run: boolean; reachable: boolean; whyNot: string }> {
  const reachable = await engineReachable();
  const required = process.env.INFRADEV_REQUIRE_DOCKER === "1";
  const where = process.env.DOCKER_HOST ? `DOCKER_HOST=${process.env.DOCKER_HOST}` : "/var/run/docker.sock";
  return {
    run: reachable || required,
    reachable,
    whyNot: `INFRADEV_REQUIRE_DOCKER=1 but no docker engine answers at ${where}: start dockerd (see .ci/docker-setup.sh)`,
  };
}
