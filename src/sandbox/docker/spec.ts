/**
 * Pure builders for the docker backend: the container spec the engine receives, GPU device
 * requests, labels, and the plan for bind-mounting the host's system dirs. No engine calls here, so
 * every one of them is testable without a daemon (and without GPUs).
 */
import { lstatSync, readlinkSync } from "node:fs";
import type Docker from "dockerode";

/** Where things live inside the container. Constant so probes and prompts can name them. */
export const CONTAINER_WORKSPACE = "/workspace";
export const CONTAINER_PYTHON_HELPERS = "/opt/infradev/python";
/** Where the exec logs (a host folder outside the workspace) are mounted read-only. */
export const CONTAINER_LOG_DIR = "/infradev/logs";

/** Label keys on every container we create (`infradev sandbox prune` finds them by these). */
export const LABEL = {
  managed: "infradev.managed",
  session: "infradev.session",
  kind: "infradev.kind",
  pid: "infradev.pid",
  pidStart: "infradev.pid_start",
  host: "infradev.host",
  createdAt: "infradev.created_at",
} as const;

/**
 * The container's main process: idle, except that it sends a signal to any process group named on its
 * stdin (`TERM 123` / `KILL 123`; the sandbox keeps that stdin attached). `kill` is a shell builtin,
 * so this works when a fork bomb has taken every pid and not even `docker exec` can start a process.
 * stdin stays open when the attaching client goes away (StdinOnce false); on EOF anyway, it idles.
 */
export const INIT_LOOP =
  ": infradev-init; while :; do if read -r s g; then case \"$s\" in TERM|KILL) case \"$g\" in ''|*[!0-9]*) ;; *) kill -s \"$s\" -- \"-$g\" 2>/dev/null;; esac;; esac; else sleep 86400; fi; done";

/** `all`, a count, or explicit device ids / UUIDs (as `docker run --gpus`). */
export type GpuRequest = "all" | number | string[];

export interface ReadOnlyMount {
  host: string;
  sandbox: string;
}

/** Limits resolved to concrete numbers (the sandbox fills defaults from the engine's info). */
export interface ResolvedLimits {
  memoryMb?: number;
  pidsLimit?: number;
  cpus?: number;
  shmSizeMb: number;
}

export interface ContainerSpecInput {
  image: string;
  name: string;
  hostRepoDir: string;
  hostPythonHelpersDir: string;
  readOnlyMounts: ReadOnlyMount[];
  /** Host folders mounted read-only at /workspace/<rel> (nested in the workspace mount). */
  overlays?: Array<{ host: string; rel: string }>;
  /**
   * Workspace folders between /workspace and the overlays (rels), bound onto themselves so that they
   * are mount points: a command can neither rename nor remove them, hence cannot move an overlay away.
   */
  overlayParents?: string[];
  /** Host folder of the exec logs, mounted read-only at /infradev/logs. */
  hostLogDir?: string;
  hostSystemMounts: boolean;
  gpus?: GpuRequest;
  limits: ResolvedLimits;
  network: "none" | "bridge";
  readOnlyRootfs: boolean;
  masks: MaskPlan;
  /** `uid:gid` the container's processes run as (default: the host process's own ids). */
  user?: string;
  labels: Record<string, string>;
  env: Record<string, string>;
}

/**
 * GPUs as the engine's `HostConfig.DeviceRequests` — the same shape `docker run --gpus` sends.
 * The driver is left empty so the engine picks the one registered for the `gpu` capability
 * (nvidia-container-toolkit registers "nvidia").
 */
export function gpuDeviceRequests(gpus: GpuRequest | undefined): Docker.DeviceRequest[] {
  if (gpus === undefined) return [];
  const capabilities = [["gpu"]];
  if (gpus === "all") return [{ Driver: "", Count: -1, DeviceIDs: [], Capabilities: capabilities, Options: {} }];
  if (typeof gpus === "number") {
    if (!Number.isInteger(gpus) || gpus < 0) throw new Error(`docker sandbox: gpus must be "all", a count ≥ 0 or device ids (got ${gpus})`);
    if (gpus === 0) return [];
    return [{ Driver: "", Count: gpus, DeviceIDs: [], Capabilities: capabilities, Options: {} }];
  }
  const ids = gpus.map((id) => id.trim()).filter((id) => id.length > 0);
  if (ids.length === 0) return [];
  return [{ Driver: "", Count: 0, DeviceIDs: ids, Capabilities: capabilities, Options: {} }];
}

/** Parses a `--gpus` flag / task.yaml value: `all`, `2`, `0,3`, `device=0,3`, `GPU-uuid`. */
export function parseGpus(value: string | number | string[] | undefined): GpuRequest | undefined {
  if (value === undefined) return undefined;
  if (typeof value === "number" || Array.isArray(value)) return value;
  const v = value.trim();
  if (v === "" || v === "none") return undefined;
  if (v === "all") return "all";
  if (/^\d+$/.test(v)) return Number(v);
  const ids = v.replace(/^"?device=/, "").replace(/"$/, "");
  return ids.split(",").map((s) => s.trim()).filter(Boolean);
}

/**
 * Host system dirs to bind read-only for an image that is an empty root (the locally built test
 * image). Dirs that are symlinks on the host (usrmerge: /bin -> usr/bin) are not bound; the image
 * carries the same symlinks instead (`symlinks`). /sbin is left out of both: the engine puts its
 * init at `/sbin/docker-init`, which a bind (or a symlink into the read-only /usr) would hide; the
 * image keeps a real /sbin and PATH reaches the host's tools through /usr/sbin.
 */
export interface SystemMountPlan {
  binds: string[];
  symlinks: { path: string; target: string }[];
}

const SYSTEM_DIRS = ["/usr", "/etc", "/bin", "/lib", "/lib32", "/lib64", "/libx32"];

export function hostSystemMountPlan(): SystemMountPlan {
  const plan: SystemMountPlan = { binds: [], symlinks: [] };
  for (const dir of SYSTEM_DIRS) {
    let st;
    try {
      st = lstatSync(dir);
    } catch {
      continue;
    }
    if (st.isSymbolicLink()) plan.symlinks.push({ path: dir, target: readlinkSync(dir) });
    else if (st.isDirectory()) plan.binds.push(dir);
  }
  return plan;
}

/** Host paths to hide inside the container: an empty read-only tmpfs over a folder, /dev/null over a file. */
export interface MaskPlan {
  dirs: string[];
  files: string[];
}

/** The full `POST /containers/create` body. */
export function buildContainerSpec(input: ContainerSpecInput): Docker.ContainerCreateOptions {
  const binds: string[] = [
    `${input.hostRepoDir}:${CONTAINER_WORKSPACE}:rw`,
    `${input.hostPythonHelpersDir}:${CONTAINER_PYTHON_HELPERS}:ro`,
    ...(input.overlayParents ?? []).map((rel) => `${input.hostRepoDir}/${rel}:${CONTAINER_WORKSPACE}/${rel}:rw`),
    ...(input.overlays ?? []).map((o) => `${o.host}:${CONTAINER_WORKSPACE}/${o.rel}:ro`),
    ...input.readOnlyMounts.map((m) => `${m.host}:${m.sandbox}:ro`),
    ...(input.hostLogDir ? [`${input.hostLogDir}:${CONTAINER_LOG_DIR}:ro`] : []),
  ];
  if (input.hostSystemMounts) binds.push(...hostSystemMountPlan().binds.map((d) => `${d}:${d}:ro`));
  binds.push(...input.masks.files.map((dest) => `/dev/null:${dest}:ro`));
  const tmpfs: Record<string, string> = input.readOnlyRootfs
    ? { "/tmp": "rw,nosuid,nodev,mode=1777", "/var/tmp": "rw,nosuid,nodev,mode=1777", "/run": "rw,nosuid,nodev,mode=755" }
    : { "/tmp": "rw,nosuid,nodev,mode=1777" };
  for (const dest of input.masks.dirs) tmpfs[dest] = "ro,nosuid,nodev,noexec,size=4k,mode=555";

  const { limits } = input;
  const memoryBytes = limits.memoryMb !== undefined ? Math.round(limits.memoryMb * 1024 * 1024) : undefined;
  const hostConfig: Docker.HostConfig = {
    Binds: binds,
    Init: true,
    NetworkMode: input.network,
    ReadonlyRootfs: input.readOnlyRootfs,
    // /tmp is private and writable in every exec (as in the local backend); /dev/shm is ShmSize.
    Tmpfs: tmpfs,
    ShmSize: Math.round(limits.shmSizeMb * 1024 * 1024),
    CapDrop: ["ALL"],
    // Enough for a process to signal its own children and change its own files; nothing that
    // reaches beyond the container (no SYS_ADMIN, NET_*, SYS_PTRACE, MKNOD).
    CapAdd: ["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"],
    SecurityOpt: ["no-new-privileges"],
    DeviceRequests: gpuDeviceRequests(input.gpus),
    RestartPolicy: { Name: "no" },
  };
  if (memoryBytes !== undefined) {
    hostConfig.Memory = memoryBytes;
    hostConfig.MemorySwap = memoryBytes; // swap = memory: a hard limit, no swapping past it
  }
  if (limits.pidsLimit !== undefined) hostConfig.PidsLimit = limits.pidsLimit;
  if (limits.cpus !== undefined) hostConfig.NanoCpus = Math.round(limits.cpus * 1e9);

  return {
    name: input.name,
    Image: input.image,
    // A long-lived idle process; `Init` puts the engine's tini in front of it to reap zombies.
    Cmd: ["/bin/sh", "-c", INIT_LOOP],
    OpenStdin: true,
    StdinOnce: false,
    Entrypoint: [],
    WorkingDir: CONTAINER_WORKSPACE,
    User: input.user,
    Env: Object.entries(input.env).map(([k, v]) => `${k}=${v}`),
    Labels: input.labels,
    AttachStdin: false,
    AttachStdout: false,
    AttachStderr: false,
    Tty: false,
    HostConfig: hostConfig,
  };
}
