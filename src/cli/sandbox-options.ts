/**
 * The docker flags every command that starts a sandbox takes (`serve`, `grade`, `calibrate`, `demo`),
 * declared once: `addDockerOptions(cmd)` adds them, `dockerOptionsFromFlags(opts)` turns the parsed
 * values into the factory's docker options. Unset flags stay unset, so the task's `image:` / `gpus:`
 * and the backend's defaults apply.
 */
import { InvalidArgumentError, Option, type Command } from "commander";
// docker-spec.ts, not docker.ts: the flags are declared by every command, dockerode loads only when a docker sandbox starts.
import { parseGpus, type GpuRequest } from "../sandbox/docker/spec.js";
import type { DockerSettings } from "../sandbox/picker.js";

/** What the flags can set on a docker sandbox. */
export type DockerCliOptions = DockerSettings;

/** The flags as commander stores them. */
export interface DockerFlags {
  sandbox?: string;
  image?: string;
  gpus?: GpuRequest;
  memoryMb?: number;
  pidsLimit?: number;
  cpus?: number;
  shmMb?: number;
  network?: "none" | "bridge";
  hostSystemMounts?: boolean;
}

const FLAG_NAMES: Record<Exclude<keyof DockerFlags, "sandbox">, string> = {
  image: "--image",
  gpus: "--gpus",
  memoryMb: "--memory-mb",
  pidsLimit: "--pids-limit",
  cpus: "--cpus",
  shmMb: "--shm-mb",
  network: "--network",
  hostSystemMounts: "--host-system-mounts",
};

function wholePositive(v: string): number {
  const n = Number(v);
  if (!/^\d+$/.test(v.trim()) || !Number.isSafeInteger(n) || n <= 0) throw new InvalidArgumentError("expected a whole number > 0");
  return n;
}

function positive(v: string): number {
  const n = Number(v);
  if (v.trim() === "" || !Number.isFinite(n) || n <= 0) throw new InvalidArgumentError("expected a number > 0 (e.g. 2 or 0.5)");
  return n;
}

/** `all`, a count, device ids or UUIDs (`0,3`, `device=0,3`, `GPU-…`); `none` or `0` for no GPU. */
export function gpusFlag(v: string): GpuRequest {
  const t = v.trim();
  if (t === "") throw new InvalidArgumentError('expected "all", a count, or device ids such as 0,3');
  if (t === "none") return 0;
  const g = parseGpus(t);
  if (g === undefined || (Array.isArray(g) && g.length === 0)) throw new InvalidArgumentError('expected "all", a count, or device ids such as 0,3');
  return g;
}

/**
 * Adds the docker flags to `cmd`, and refuses them with another backend (they would do nothing).
 * With `localPidsLimit`, --pids-limit also applies to --sandbox local (the command passes it on:
 * localOptionsFromFlags).
 */
export function addDockerOptions(cmd: Command, opts: { localPidsLimit?: boolean } = {}): Command {
  const localFlags: Array<keyof DockerFlags> = opts.localPidsLimit ? ["pidsLimit"] : [];
  return cmd
    .option("--image <image>", "docker: image to run (default: the task's `image:`); must be on the engine already (`docker pull <image>`)")
    .option("--gpus <spec>", "docker: GPUs as `docker run --gpus`: all | N | device ids (0,3) | none (default: the task's `gpus:`)", gpusFlag)
    .option("--memory-mb <mb>", "docker: hard memory limit, swap included (default: 90% of the engine host's memory)", wholePositive)
    .option(
      "--pids-limit <n>",
      opts.localPidsLimit
        ? "max processes + threads: docker, in the container (default 8192); local, per command (a pids cgroup, default 4096)"
        : "docker: max processes + threads in the container (default 8192)",
      wholePositive,
    )
    .option("--cpus <n>", "docker: CPU quota in cores (default: none)", positive)
    .option("--shm-mb <mb>", "docker: /dev/shm size for NCCL and data loaders (default 8192, 1024 on hosts under 32 GiB)", wholePositive)
    .addOption(new Option("--network <mode>", "docker: container network (default none: no network but loopback)").choices(["none", "bridge"]))
    .option("--host-system-mounts", "docker: bind the host's /usr, /etc, /lib* read-only (for an image that is an empty root, like the test image)")
    .hook("preAction", (_root, action) => {
      const opts = action.opts<DockerFlags>();
      const allowed = opts.sandbox === "local" ? localFlags : [];
      const given = (Object.keys(FLAG_NAMES) as (keyof typeof FLAG_NAMES)[]).filter((k) => opts[k] !== undefined && !allowed.includes(k));
      if (given.length && opts.sandbox !== "docker") {
        action.error(`error: ${given.map((k) => FLAG_NAMES[k]).join(", ")} ${given.length > 1 ? "apply" : "applies"} only to --sandbox docker (got --sandbox ${opts.sandbox ?? "?"})`);
      }
    });
}

/** What the flags can set on a local sandbox (with addDockerOptions(cmd, { localPidsLimit: true })). */
export function localOptionsFromFlags(flags: DockerFlags): { pidsLimit?: number } {
  return flags.pidsLimit !== undefined ? { pidsLimit: flags.pidsLimit } : {};
}

/** The parsed flags as the docker factory's options; only what was given. */
export function dockerOptionsFromFlags(flags: DockerFlags): DockerCliOptions {
  const out: DockerCliOptions = {};
  if (flags.image !== undefined) out.image = flags.image;
  if (flags.gpus !== undefined) out.gpus = flags.gpus;
  if (flags.memoryMb !== undefined) out.memoryMb = flags.memoryMb;
  if (flags.pidsLimit !== undefined) out.pidsLimit = flags.pidsLimit;
  if (flags.cpus !== undefined) out.cpus = flags.cpus;
  if (flags.shmMb !== undefined) out.shmSizeMb = flags.shmMb;
  if (flags.network !== undefined) out.network = flags.network;
  if (flags.hostSystemMounts) out.hostSystemMounts = true;
  return out;
}
