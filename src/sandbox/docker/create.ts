/**
 * The `docker` sandbox backend: one container per session, commands through the Engine API.
 *
 *   const sb = await createDockerSandbox({ hostRepoDir, image, sessionId, purpose: "agent", gpus: "all" });
 *   const r = await sb.exec(["bash", "-lc", "pytest -q"], { timeoutSec: 600 });
 *   await sb.close();
 *
 * The workspace is bind-mounted read-write at /workspace, the package's python helpers read-only at
 * /opt/infradev/python, extra read-only mounts (harness, HF cache, shared envs) where asked, and
 * nothing else of the host; hidden paths inside any bound folder are masked. With a remote engine
 * (DOCKER_HOST=tcp://, ssh://) the host paths are paths on the engine's host: the workspace must be on
 * a filesystem both hosts share.
 */
import { statSync } from "node:fs";
import { hostname } from "node:os";
import { resolve } from "node:path";
import type { Duplex } from "node:stream";
import type Docker from "dockerode";
import { silentLogger, type Logger } from "../../lib/logger.js";
import { sandboxPythonDir } from "../../lib/paths.js";
import { DockerSandboxError, connectEngine, engineResources, ensureEngineReachable, ensureImage, explainStartError } from "./engine.js";
import { planDockerMounts } from "./mounts.js";
import { sandboxHiddenPaths } from "../host-secrets.js";
import { OomWatch } from "./oom.js";
import { processStartTime } from "./prune.js";
import { DockerSandbox } from "./sandbox.js";
import { CONTAINER_PYTHON_HELPERS, LABEL, buildContainerSpec, type GpuRequest, type ResolvedLimits } from "./spec.js";
import { DEFAULT_KILL_GRACE_MS, DEFAULT_TIMEOUT_SEC } from "../exec-common.js";
import { checkOverlayRel, nestedOverlay, overlayParents, realpathOrNull, type ReadOnlyMount, type ReadOnlyOverlay } from "../local/mounts.js";
import { prepareLogDir, releaseLogDir } from "../log-dir.js";
import { mkdirInside } from "../../lib/safe-fs.js";
import { DEFAULT_MAX_OUTPUT_BYTES } from "../output-capture.js";

export { DockerSandbox } from "./sandbox.js";
export { DockerSandboxError, type DockerSandboxErrorCode } from "./engine.js";
export { pruneSandboxes, type PruneOptions, type PruneResult, type PrunedContainer } from "./prune.js";
export { buildContainerSpec, gpuDeviceRequests, parseGpus, type GpuRequest } from "./spec.js";

export interface DockerSandboxOptions {
  /** The workspace on the host; bind-mounted read-write at /workspace. */
  hostRepoDir: string;
  /** Image to run (task.yaml `image:`, `--image`). Must already be on the engine unless `pull`. */
  image: string;
  /** Session id; names and labels the container so prune and operators can tell sessions apart. */
  sessionId: string;
  /** Who the container serves: the agent's shell or the grader's fresh run (label infradev.kind). */
  purpose?: "agent" | "grader";
  /** Python interpreter inside the image (default /usr/bin/python3). */
  python?: string;
  /** Extra read-only binds: the harness, a Hugging Face cache, a shared environments dir. */
  readOnlyMounts?: ReadOnlyMount[];
  /** Host folders bound read-only at /workspace/<rel>, nested in the workspace mount (contract C). */
  readOnlyOverlays?: ReadOnlyOverlay[];
  /** Bind the host's /usr, /etc, /lib* read-only (for an image that is an empty root, like the test image). */
  hostSystemMounts?: boolean;
  /**
   * Host paths never readable inside (a task's hidden/, other sessions' runs); the package's own
   * tasks/ and runs/ are always added. A mount inside one is refused; one inside a bound folder is masked.
   */
  hiddenPaths?: string[];
  gpus?: GpuRequest;
  /** Hard memory limit (swap included). Default: 90% of the engine host's memory. */
  memoryMb?: number;
  /** Tasks (processes + threads) in the container. Default 8192. */
  pidsLimit?: number;
  /** CPU quota in cores. Default: no quota. */
  cpus?: number;
  /** /dev/shm size for NCCL / dataloaders. Default 8 GiB, or 1 GiB on engine hosts under 32 GiB. */
  shmSizeMb?: number;
  network?: "none" | "bridge";
  /** Read-only root filesystem with a private tmpfs /tmp (default true, as in the local backend). */
  readOnlyRootfs?: boolean;
  /** `uid:gid` inside the container; default the host process's own, so workspace files stay the user's. */
  user?: string;
  /** Environment of every exec, over the image's and the base (LANG, HOME=/tmp/home, TMPDIR=/tmp). */
  env?: Record<string, string>;
  /** Extra labels (added to the infradev.* ones). */
  labels?: Record<string, string>;
  /**
   * Host folder for the exec logs, outside the workspace (the server: runs/<run-id>/logs); mounted
   * read-only at /infradev/logs. Default: a private temp folder, removed by close().
   */
  logDir?: string;
  /** The stored log keeps the first and the last this many bytes of an exec's output (default 8 MiB each). */
  logHeadBytes?: number;
  logTailBytes?: number;
  /** Default output cap per exec (bytes). Default 64 KiB. */
  maxOutputBytes?: number;
  /** Timeout of an exec that names none. Default 3600 s. */
  defaultTimeoutSec?: number;
  /** SIGTERM → SIGKILL delay when a tree is killed. Default 2000 ms. */
  killGraceMs?: number;
  /** Try `docker pull` once when the image is missing (never implicitly). */
  pull?: boolean;
  pullTimeoutSec?: number;
  /** A client for another engine; default: DOCKER_HOST or the local socket. */
  docker?: Docker;
  logger?: Logger;
}

function sanitizeName(s: string): string {
  return s.replace(/[^a-zA-Z0-9_.-]/g, "-").slice(0, 40) || "session";
}

function realDir(path: string, what: string): string {
  const real = realpathOrNull(resolve(path));
  if (real === null || !statSync(real).isDirectory()) {
    throw new DockerSandboxError(`docker sandbox: ${what} ${path} is not an existing folder on this host`, "bad_options");
  }
  return real;
}

function hostUser(): string | undefined {
  return typeof process.getuid === "function" && typeof process.getgid === "function" ? `${process.getuid()}:${process.getgid()}` : undefined;
}

async function resolveLimits(docker: Docker, opts: DockerSandboxOptions): Promise<ResolvedLimits> {
  for (const [k, v] of Object.entries({ memoryMb: opts.memoryMb, pidsLimit: opts.pidsLimit, cpus: opts.cpus, shmSizeMb: opts.shmSizeMb })) {
    if (v !== undefined && !(Number.isFinite(v) && v > 0)) throw new DockerSandboxError(`docker sandbox: ${k} must be a number > 0 (got ${v})`, "bad_options");
  }
  const needInfo = opts.memoryMb === undefined || opts.shmSizeMb === undefined;
  const res = needInfo ? await engineResources(docker) : { memTotalMb: 0, ncpu: 0 };
  return {
    memoryMb: opts.memoryMb ?? (res.memTotalMb > 0 ? Math.floor(res.memTotalMb * 0.9) : undefined),
    pidsLimit: opts.pidsLimit ?? 8192,
    cpus: opts.cpus,
    shmSizeMb: opts.shmSizeMb ?? (res.memTotalMb >= 32 * 1024 ? 8192 : 1024),
  };
}

/** Creates and starts the session's container; throws DockerSandboxError (a harness fault) with the fix. */
export async function createDockerSandbox(opts: DockerSandboxOptions): Promise<DockerSandbox> {
  const logger = opts.logger ?? silentLogger();
  const hostRepoDir = realDir(opts.hostRepoDir, "the workspace");
  const helpers = realDir(sandboxPythonDir(), "the python helpers folder");
  const hidden = sandboxHiddenPaths(opts.hiddenPaths);
  const hostSystemMounts = opts.hostSystemMounts ?? false;
  const overlays = opts.readOnlyOverlays ?? [];
  let mounts;
  try {
    for (const o of overlays) {
      const bad = checkOverlayRel(o.rel);
      if (bad) throw new Error(`docker sandbox: read-only overlay ${o.host}: ${bad}`);
    }
    const nested = nestedOverlay(overlays);
    if (nested) throw new Error(`docker sandbox: ${nested}`);
    mounts = planDockerMounts({ workspace: hostRepoDir, helpers, readOnlyMounts: opts.readOnlyMounts ?? [], overlays, hostSystemMounts, hidden });
  } catch (err) {
    throw new DockerSandboxError((err as Error).message, "bad_options");
  }

  const docker = opts.docker ?? connectEngine();
  await ensureEngineReachable(docker);
  await ensureImage(docker, opts.image, { pull: opts.pull, pullTimeoutSec: opts.pullTimeoutSec });
  const limits = await resolveLimits(docker, opts);
  let logDir;
  try {
    // The overlays' mount points, made by the host one checked component at a time (never through a link).
    for (const o of mounts.overlays) mkdirInside(hostRepoDir, o.rel);
    logDir = prepareLogDir(opts.logDir, hostRepoDir, "docker");
  } catch (err) {
    throw new DockerSandboxError((err as Error).message, "bad_options");
  }

  const purpose = opts.purpose ?? "agent";
  const name = `infradev-${purpose}-${sanitizeName(opts.sessionId)}-${Math.random().toString(36).slice(2, 8)}`;
  const labels: Record<string, string> = {
    ...(opts.labels ?? {}),
    [LABEL.managed]: "true",
    [LABEL.session]: opts.sessionId,
    [LABEL.kind]: purpose,
    [LABEL.pid]: String(process.pid),
    [LABEL.host]: hostname(),
    [LABEL.createdAt]: String(Math.floor(Date.now() / 1000)),
  };
  const start = processStartTime(process.pid);
  if (start !== undefined) labels[LABEL.pidStart] = start;

  const readOnlyRootfs = opts.readOnlyRootfs ?? true;
  const env: Record<string, string> = {
    LANG: "C.UTF-8",
    HOME: "/tmp/home",
    TMPDIR: "/tmp",
    INFRADEV_SANDBOX: "docker",
    INFRADEV_PYTHON_HELPERS: CONTAINER_PYTHON_HELPERS,
    ...(opts.env ?? {}),
  };
  const spec = buildContainerSpec({
    image: opts.image,
    name,
    hostRepoDir,
    hostPythonHelpersDir: helpers,
    readOnlyMounts: mounts.readOnlyMounts,
    overlays: mounts.overlays,
    overlayParents: overlayParents(mounts.overlays),
    hostLogDir: logDir.hostDir,
    hostSystemMounts,
    gpus: opts.gpus,
    limits,
    network: opts.network ?? "none",
    readOnlyRootfs,
    masks: mounts.masks,
    user: opts.user ?? hostUser(),
    labels,
    env,
  });

  let container: Docker.Container;
  try {
    container = await docker.createContainer(spec);
  } catch (err) {
    releaseLogDir(logDir);
    throw new DockerSandboxError(`docker sandbox: the engine refused to create the container: ${(err as Error).message}`, "create_failed", { cause: err });
  }
  const oom = new OomWatch(docker, container);
  let initStdin: Duplex;
  try {
    try {
      await container.start();
    } catch (err) {
      throw explainStartError(err, (spec.HostConfig?.DeviceRequests?.length ?? 0) > 0);
    }
    await oom.start();
    initStdin = (await container.attach({ stream: true, stdin: true, stdout: false, stderr: false, hijack: true })) as Duplex;
    (initStdin as Duplex & { socket?: { unref(): void } }).socket?.unref();
    initStdin.on("error", () => undefined);
  } catch (err) {
    oom.stop();
    await container.remove({ force: true }).catch(() => undefined);
    releaseLogDir(logDir);
    if (err instanceof DockerSandboxError) throw err;
    throw new DockerSandboxError(`docker sandbox: cannot attach to container ${name}: ${(err as Error).message}`, "create_failed", { cause: err });
  }
  logger.info({ container: name, image: opts.image, session: opts.sessionId, limits, gpus: opts.gpus }, "docker sandbox started");
  return new DockerSandbox({
    docker,
    container,
    containerName: name,
    hostRepoDir,
    python: opts.python ?? "/usr/bin/python3",
    logDir,
    logHeadBytes: opts.logHeadBytes,
    logTailBytes: opts.logTailBytes,
    maxOutputBytes: opts.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES,
    defaultTimeoutSec: opts.defaultTimeoutSec ?? DEFAULT_TIMEOUT_SEC,
    killGraceMs: opts.killGraceMs ?? DEFAULT_KILL_GRACE_MS,
    logger,
    oom,
    initStdin,
  });
}

/** What `createSandbox({ kind: "docker", ... })` accepts: image, GPUs and session id may come from the request's task. */
export type DockerRequestOptions = Omit<DockerSandboxOptions, "image" | "sessionId"> & {
  image?: string;
  sessionId?: string;
  /** The task (public or grader view); its `spec.image` and `spec.gpus` are the defaults. */
  task?: unknown;
};

/** The factory's docker case: fills image / GPUs from the task (`image:`, `gpus:` in task.yaml) unless given. */
export function createDockerSandboxFromRequest(req: DockerRequestOptions): Promise<DockerSandbox> {
  const { task, image, gpus, sessionId, ...rest } = req;
  const spec = (task as { spec?: { image?: string; gpus?: GpuRequest; id?: string }; id?: string } | undefined)?.spec;
  const chosen = image ?? spec?.image;
  if (!chosen) {
    const which = (task as { id?: string } | undefined)?.id;
    return Promise.reject(
      new DockerSandboxError(
        `docker sandbox: no image to run${which ? ` for task ${which}` : ""}: set \`image:\` in task.yaml or pass --image <image>`,
        "bad_options",
      ),
    );
  }
  return createDockerSandbox({
    ...rest,
    image: chosen,
    gpus: gpus ?? spec?.gpus,
    sessionId: sessionId ?? `session-${process.pid}-${Date.now()}`,
  });
}
