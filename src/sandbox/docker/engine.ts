/**
 * Talking to the container engine before any container exists: connect (DOCKER_HOST honoured by
 * docker-modem), check the engine answers, check the image is there (pull only when asked), and turn
 * each failure into a message that says what to run.
 */
import Docker from "dockerode";
import { SandboxUnavailableError } from "../exec-common.js";

export type DockerSandboxErrorCode = "engine_unreachable" | "image_missing" | "gpu_unavailable" | "create_failed" | "bad_options";

/**
 * The docker sandbox could not be set up: a harness fault, never the agent's or the submission's.
 * A SandboxUnavailableError (kind "docker"), so callers handle every backend's set-up failure alike;
 * `code` says which fix applies.
 */
export class DockerSandboxError extends SandboxUnavailableError {
  readonly harnessFault = true;
  constructor(
    message: string,
    readonly code: DockerSandboxErrorCode,
    options?: { cause?: unknown },
  ) {
    super("docker", message);
    this.name = "DockerSandboxError";
    if (options?.cause !== undefined) (this as { cause?: unknown }).cause = options.cause;
  }
}

/** Human description of where the client will connect (for error messages). */
export function describeEngineEndpoint(env: NodeJS.ProcessEnv = process.env): string {
  return env.DOCKER_HOST ? `DOCKER_HOST=${env.DOCKER_HOST}` : "the default socket /var/run/docker.sock (DOCKER_HOST unset)";
}

/** A dockerode client for DOCKER_HOST (or the default socket); a malformed DOCKER_HOST is a clear error. */
export function connectEngine(): Docker {
  try {
    return new Docker();
  } catch (err) {
    throw new DockerSandboxError(
      `docker sandbox: cannot use ${describeEngineEndpoint()}: ${(err as Error).message}`,
      "engine_unreachable",
      { cause: err },
    );
  }
}

export async function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function errnoOf(err: unknown): string | undefined {
  const e = err as { code?: unknown; errno?: unknown };
  return typeof e?.code === "string" ? e.code : undefined;
}

/** Throws `engine_unreachable` with the fix when the engine does not answer `GET /_ping`. */
export async function ensureEngineReachable(docker: Docker, timeoutMs = 5000): Promise<void> {
  try {
    await withTimeout(docker.ping(), timeoutMs, "the docker engine");
  } catch (err) {
    const code = errnoOf(err);
    const where = describeEngineEndpoint();
    let hint: string;
    if (code === "EACCES" || code === "EPERM") {
      hint = "permission denied on the socket: add this user to the `docker` group (then log in again) or run as root";
    } else if (code === "ENOENT" || code === "ECONNREFUSED") {
      hint = "no engine is listening: start it (`sudo systemctl start docker`, or `dockerd >/tmp/dockerd.log 2>&1 &`) or point DOCKER_HOST at a running engine";
    } else {
      hint = "start dockerd, check DOCKER_HOST, and check permissions on /var/run/docker.sock";
    }
    throw new DockerSandboxError(
      `docker sandbox: the docker engine is unreachable at ${where} (${(err as Error).message}): ${hint}`,
      "engine_unreachable",
      { cause: err },
    );
  }
}

export interface EnsureImageOptions {
  /** Try `docker pull` once when the image is missing (off by default: engines are often offline). */
  pull?: boolean;
  pullTimeoutSec?: number;
}

function statusOf(err: unknown): number | undefined {
  const s = (err as { statusCode?: unknown })?.statusCode;
  return typeof s === "number" ? s : undefined;
}

/** Throws `image_missing` with the fix unless the engine has `image` (or pulls it when asked). */
export async function ensureImage(docker: Docker, image: string, opts: EnsureImageOptions = {}): Promise<void> {
  try {
    await docker.getImage(image).inspect();
    return;
  } catch (err) {
    if (statusOf(err) !== 404) {
      throw new DockerSandboxError(`docker sandbox: cannot inspect image ${image}: ${(err as Error).message}`, "create_failed", { cause: err });
    }
  }
  const fix =
    `run \`docker pull ${image}\` on the engine's host (or \`docker load\` / \`docker build -t ${image} ...\` when it is offline), ` +
    "or choose another image with --image / `image:` in task.yaml";
  if (!opts.pull) {
    throw new DockerSandboxError(`docker sandbox: image ${image} is not on the engine (no implicit pull): ${fix}`, "image_missing");
  }
  const timeoutMs = (opts.pullTimeoutSec ?? 120) * 1000;
  try {
    await withTimeout(pullImage(docker, image), timeoutMs, `docker pull ${image}`);
  } catch (err) {
    throw new DockerSandboxError(
      `docker sandbox: image ${image} is not on the engine and pulling it failed (${(err as Error).message}): ${fix}`,
      "image_missing",
      { cause: err },
    );
  }
}

async function pullImage(docker: Docker, image: string): Promise<void> {
  const stream = await docker.pull(image);
  await new Promise<void>((resolve, reject) => {
    docker.modem.followProgress(stream, (err: Error | null) => (err ? reject(err) : resolve()));
  });
}

/** Total memory and CPUs of the engine's host, for default limits. */
export async function engineResources(docker: Docker): Promise<{ memTotalMb: number; ncpu: number }> {
  const info = (await docker.info()) as { MemTotal?: number; NCPU?: number };
  return { memTotalMb: Math.floor((info.MemTotal ?? 0) / (1024 * 1024)), ncpu: info.NCPU ?? 1 };
}

/** Turns the engine's refusal to start a container with GPUs into the fix. */
export function explainStartError(err: unknown, wantedGpus: boolean): DockerSandboxError {
  const msg = (err as Error).message ?? String(err);
  if (wantedGpus && /device driver|capabilities: \[\[gpu\]\]|nvidia/i.test(msg)) {
    return new DockerSandboxError(
      `docker sandbox: the engine cannot give this container GPUs (${msg.trim()}): install nvidia-container-toolkit on the engine's host, ` +
        "run `nvidia-ctk runtime configure --runtime=docker` and restart dockerd; or run without --gpus",
      "gpu_unavailable",
      { cause: err },
    );
  }
  return new DockerSandboxError(`docker sandbox: the engine could not start the container: ${msg.trim()}`, "create_failed", { cause: err });
}
