/**
 * The `docker` sandbox backend: one container per session, commands through the Engine API.
 *
 *   const sb = await createDockerSandbox({ hostRepoDir, image, sessionId, kind: "agent", gpus: "all" });
 *   const r = await sb.exec(["bash", "-lc", "pytest -q"], { timeoutSec: 600 });
 *   await sb.close();
 *
 * The workspace is bind-mounted read-write at /workspace, the package's python helpers read-only at
 * /opt/infradev/python, extra read-only mounts (harness, HF cache, shared envs) where asked, and
 * nothing else of the host. With a remote engine (DOCKER_HOST=tcp://, ssh://) the host paths are paths
 * on the engine's host: the workspace must be on a filesystem both hosts share.
 */
import { statSync } from "node:fs";
import { hostname } from "node:os";
import type { Duplex } from "node:stream";
import { isAbsolute, join, posix, resolve } from "node:path";
import type Docker from "dockerode";
import { silentLogger, type Logger } from "../lib/logger.js";
import { pythonHelpersDir } from "../lib/paths.js";
import {
  DockerSandboxError,
  connectEngine,
  engineResources,
  ensureEngineReachable,
  ensureImage,
  explainStartError,
} from "./docker-engine.js";
import { execInContainer } from "./docker-exec.js";
import { OomWatch } from "./docker-oom.js";
import { createOutputSink } from "./docker-output.js";
import { processStartTime } from "./docker-prune.js";
import {
  CONTAINER_PYTHON_HELPERS,
  CONTAINER_WORKSPACE,
  LABEL,
  buildContainerSpec,
  checkMountsAgainstDenied,
  type GpuRequest,
  type ReadOnlyMount,
  type ResolvedLimits,
} from "./docker-spec.js";
import type { ExecOptions, ExecResult, Sandbox } from "./types.js";

export { DockerSandboxError } from "./docker-engine.js";
export { pruneSandboxes, type PruneOptions, type PrunedContainer } from "./docker-prune.js";
export { buildContainerSpec, gpuDeviceRequests, parseGpus, type GpuRequest, type ReadOnlyMount } from "./docker-spec.js";

export interface DockerSandboxOptions {
  /** The workspace on the host; bind-mounted read-write at /workspace. */
  hostRepoDir: string;
  /** Image to run (task.yaml `image:`, `--image`). Must already be on the engine unless `pull`. */
  image: string;
  /** Session id; labels the container so prune and operators can tell sessions apart. */
  sessionId: string;
  /** Who the container serves: the agent's shell or the grader's fresh run. */
  kind?: "agent" | "grader";
  /** Python interpreter inside the image (default /usr/bin/python3). */
  python?: string;
  /** Extra read-only binds: the harness, a Hugging Face cache, a shared environments dir. */
  readOnlyMounts?: ReadOnlyMount[];
  /** Bind the host's /usr, /etc, /lib* read-only (for an image that is an empty root). */
  hostSystemMounts?: boolean;
  /** Host paths that must never be mounted (a task's `hidden/`): a mount that exposes one is refused. */
  denyHostPaths?: string[];
  gpus?: GpuRequest;
  /** Hard memory limit (swap included). Default: 90% of the engine host's memory. */
  memoryMb?: number;
  /** Tasks (processes + threads) in the container. Default 8192. */
  pidsLimit?: number;
  /** CPU quota in cores. Default: no quota. */
  cpus?: number;
  /** /dev/shm size for NCCL / dataloaders. Default 8 GiB, or 1 GiB on hosts under 32 GiB. */
  shmSizeMb?: number;
  network?: "none" | "bridge";
  /** Read-only root filesystem with a private tmpfs /tmp (default true, as in the local backend). */
  readOnlyRootfs?: boolean;
  /** `uid:gid` inside the container; default the host process's own, so workspace files stay the user's. */
  user?: string;
  /** Base environment of every exec. */
  env?: Record<string, string>;
  /** Extra labels (added to the infradev.* ones). */
  labels?: Record<string, string>;
  /** Default output cap per exec (bytes). */
  maxOutputBytes?: number;
  /** Try `docker pull` once when the image is missing (never implicitly). */
  pull?: boolean;
  pullTimeoutSec?: number;
  /** A client for another engine; default: DOCKER_HOST or the local socket. */
  docker?: Docker;
  logger?: Logger;
}

const DEFAULT_MAX_OUTPUT_BYTES = 256 * 1024;

export class DockerSandbox implements Sandbox {
  readonly kind = "docker" as const;
  readonly repoDir = CONTAINER_WORKSPACE;
  readonly pythonHelpersDir = CONTAINER_PYTHON_HELPERS;
  private closed = false;

  constructor(
    readonly docker: Docker,
    readonly container: Docker.Container,
    readonly containerName: string,
    readonly hostRepoDir: string,
    readonly python: string,
    private readonly maxOutputBytes: number,
    private readonly logger: Logger,
    private readonly oom: OomWatch,
    private readonly initStdin: Duplex,
  ) {}

  get containerId(): string {
    return this.container.id;
  }

  toHostPath(sandboxPath: string): string {
    if (sandboxPath.includes("\0")) throw new Error(`docker sandbox: path contains NUL: ${JSON.stringify(sandboxPath)}`);
    const abs = posix.resolve(this.repoDir, sandboxPath);
    const rel = posix.relative(this.repoDir, abs);
    if (rel.startsWith("..") || posix.isAbsolute(rel)) {
      throw new Error(`docker sandbox: ${sandboxPath} is outside the workspace ${this.repoDir}`);
    }
    return rel === "" ? this.hostRepoDir : join(this.hostRepoDir, ...rel.split("/"));
  }

  async exec(argv: string[], opts: ExecOptions = {}): Promise<ExecResult> {
    if (argv.length === 0 || argv[0] === "") throw new Error("docker sandbox: exec needs a non-empty argv");
    if (this.closed) throw new Error(`docker sandbox: container ${this.containerName} is closed`);
    const workdir = opts.cwd ? posix.resolve(this.repoDir, opts.cwd) : this.repoDir;
    const sink = createOutputSink(join(this.hostRepoDir, ".infradev", "logs"), opts.maxOutputBytes ?? this.maxOutputBytes);
    const result = await execInContainer(this.container, this.docker, {
      ...opts,
      argv,
      workdir,
      sink,
      oom: this.oom,
      killGroup: (pgid) => this.killGroup(pgid),
    });
    if (result.timedOut || result.oomKilled || result.harnessError) {
      this.logger.warn({ container: this.containerName, argv0: argv[0], timedOut: result.timedOut, oomKilled: result.oomKilled, harnessError: result.harnessError }, "docker exec ended abnormally");
    }
    return { ...result, isolated: true };
  }

  /** Hands a process-group kill to the container's init loop (see INIT_LOOP). */
  private killGroup(pgid: number): boolean {
    if (this.initStdin.destroyed || !this.initStdin.writable) return false;
    this.initStdin.write(`${pgid}\n`);
    return true;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.oom.stop();
    this.initStdin.destroy();
    try {
      await this.container.remove({ force: true, v: true });
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode !== 404) throw err;
    }
  }
}

function sanitizeName(s: string): string {
  return s.replace(/[^a-zA-Z0-9_.-]/g, "-").slice(0, 40) || "session";
}

function requireDir(path: string, what: string): void {
  let ok = false;
  try {
    ok = statSync(path).isDirectory();
  } catch {
    ok = false;
  }
  if (!ok) throw new DockerSandboxError(`docker sandbox: ${what} ${path} is not a directory on this host`, "bad_options");
}

function hostUser(): string | undefined {
  return typeof process.getuid === "function" && typeof process.getgid === "function" ? `${process.getuid()}:${process.getgid()}` : undefined;
}

async function resolveLimits(docker: Docker, opts: DockerSandboxOptions): Promise<ResolvedLimits> {
  const needInfo = opts.memoryMb === undefined || opts.shmSizeMb === undefined;
  const res = needInfo ? await engineResources(docker) : { memTotalMb: 0, ncpu: 0 };
  for (const [k, v] of Object.entries({ memoryMb: opts.memoryMb, pidsLimit: opts.pidsLimit, cpus: opts.cpus, shmSizeMb: opts.shmSizeMb })) {
    if (v !== undefined && !(v > 0)) throw new DockerSandboxError(`docker sandbox: ${k} must be > 0 (got ${v})`, "bad_options");
  }
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
  if (!isAbsolute(opts.hostRepoDir)) throw new DockerSandboxError(`docker sandbox: hostRepoDir must be absolute (got ${opts.hostRepoDir})`, "bad_options");
  const hostRepoDir = resolve(opts.hostRepoDir);
  requireDir(hostRepoDir, "the workspace");
  const helpers = pythonHelpersDir();
  requireDir(helpers, "the python helpers dir");
  const readOnlyMounts = opts.readOnlyMounts ?? [];
  for (const m of readOnlyMounts) {
    if (!isAbsolute(m.host) || !posix.isAbsolute(m.sandbox)) {
      throw new DockerSandboxError(`docker sandbox: read-only mount ${m.host} -> ${m.sandbox}: both paths must be absolute`, "bad_options");
    }
  }
  try {
    checkMountsAgainstDenied([hostRepoDir, helpers, ...readOnlyMounts.map((m) => m.host)], opts.denyHostPaths ?? []);
  } catch (err) {
    throw new DockerSandboxError((err as Error).message, "bad_options");
  }

  const docker = opts.docker ?? connectEngine();
  await ensureEngineReachable(docker);
  await ensureImage(docker, opts.image, { pull: opts.pull, pullTimeoutSec: opts.pullTimeoutSec });
  const limits = await resolveLimits(docker, opts);

  const kind = opts.kind ?? "agent";
  const name = `infradev-${kind}-${sanitizeName(opts.sessionId)}-${Math.random().toString(36).slice(2, 8)}`;
  const labels: Record<string, string> = {
    ...(opts.labels ?? {}),
    [LABEL.managed]: "true",
    [LABEL.session]: opts.sessionId,
    [LABEL.kind]: kind,
    [LABEL.pid]: String(process.pid),
    [LABEL.host]: hostname(),
    [LABEL.createdAt]: String(Math.floor(Date.now() / 1000)),
  };
  const start = processStartTime(process.pid);
  if (start !== undefined) labels[LABEL.pidStart] = start;

  const readOnlyRootfs = opts.readOnlyRootfs ?? true;
  const env: Record<string, string> = {
    INFRADEV_SANDBOX: "docker",
    INFRADEV_PYTHON_HELPERS: CONTAINER_PYTHON_HELPERS,
    ...(readOnlyRootfs ? { HOME: "/tmp", TMPDIR: "/tmp" } : {}),
    ...(opts.env ?? {}),
  };
  const spec = buildContainerSpec({
    image: opts.image,
    name,
    hostRepoDir,
    hostPythonHelpersDir: helpers,
    readOnlyMounts,
    hostSystemMounts: opts.hostSystemMounts ?? false,
    gpus: opts.gpus,
    limits,
    network: opts.network ?? "none",
    readOnlyRootfs,
    user: opts.user ?? hostUser(),
    labels,
    env,
  });

  let container: Docker.Container;
  try {
    container = await docker.createContainer(spec);
  } catch (err) {
    throw new DockerSandboxError(`docker sandbox: the engine refused to create the container: ${(err as Error).message}`, "create_failed", { cause: err });
  }
  try {
    await container.start();
  } catch (err) {
    await container.remove({ force: true }).catch(() => undefined);
    throw explainStartError(err, spec.HostConfig?.DeviceRequests?.length ? true : false);
  }
  const oom = new OomWatch(docker, container);
  let initStdin: Duplex;
  try {
    await oom.start();
    initStdin = (await container.attach({ stream: true, stdin: true, stdout: false, stderr: false, hijack: true })) as Duplex;
    (initStdin as Duplex & { socket?: { unref(): void } }).socket?.unref();
    initStdin.on("error", () => undefined);
  } catch (err) {
    oom.stop();
    await container.remove({ force: true }).catch(() => undefined);
    throw new DockerSandboxError(`docker sandbox: cannot attach to the container: ${(err as Error).message}`, "create_failed", { cause: err });
  }
  logger.info({ container: name, image: opts.image, session: opts.sessionId, limits, gpus: opts.gpus }, "docker sandbox started");
  const python = opts.python ?? "/usr/bin/python3";
  return new DockerSandbox(docker, container, name, hostRepoDir, python, opts.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES, logger, oom, initStdin);
}
