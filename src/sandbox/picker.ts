/**
 * The one sandbox picker: a backend by name. The server's agent sandboxes (server/sandbox-factory.ts)
 * and the grader's (grader/grade/sandbox-factory.ts) both come through here. `none` is never a
 * fallback: a backend that cannot work here throws SandboxUnavailableError, and the caller decides.
 * Backends are imported when one is made, so a process that never asks for docker never loads the
 * docker client.
 */
import type { Logger } from "../lib/logger.js";
import type { DockerRequestOptions } from "./docker/create.js";
import type { LocalSandboxOptions, ReadOnlyMount, ReadOnlyOverlay } from "./local/sandbox.js";
import type { NoneSandboxOptions } from "./none.js";
import type { PythonPathFolder } from "./task-pythonpath.js";
import type { Sandbox } from "./types.js";

/** What any caller may pass whatever the backend; a backend ignores what it has no use for. */
export interface SandboxRequestCommon {
  /** The workspace on the host. */
  hostRepoDir: string;
  python?: string;
  env?: Record<string, string>;
  /** Extra read-only binds (ignored by `none`, which sees the host as it is). */
  readOnlyMounts?: ReadOnlyMount[];
  /**
   * A task's env.pythonpath folders: copied by the host, read-only at /opt/infradev/pythonpath/<i>
   * (`none`: the copies' host paths) and first on every exec's PYTHONPATH (sandbox/task-pythonpath.ts).
   */
  pythonPath?: PythonPathFolder[];
  /** Host paths never readable inside (ignored by `none`, which cannot hide anything). */
  hiddenPaths?: string[];
  /**
   * Host folders bound READ-ONLY at `<repoDir>/<rel>` (contract C): `rel` relative, normalised, no
   * `..`. The host makes the mount point (every component a real folder, never a link). Ignored by
   * `none` (with a warning: nothing is read-only there).
   */
  readOnlyOverlays?: ReadOnlyOverlay[];
  /**
   * Host folder for exec logs, OUTSIDE the workspace (contract D): read-only at /infradev/logs inside
   * (none: its host path). Default: a private temp folder per sandbox, removed at close.
   */
  logDir?: string;
  /** Stored logs keep the first / last this many bytes of an exec's output (default 8 MiB each). */
  logHeadBytes?: number;
  logTailBytes?: number;
  maxOutputBytes?: number;
  logger?: Logger;
  /** Names the session (docker: container name and labels). */
  sessionId?: string;
  /** The public task (docker: image, GPUs). */
  task?: unknown;
  purpose?: "agent" | "grader";
}

/** What a command line can set on a docker sandbox (`--image`, `--gpus`, limits); unset = the task's and the backend's defaults. */
export type DockerSettings = Pick<DockerRequestOptions, "image" | "gpus" | "memoryMb" | "pidsLimit" | "cpus" | "shmSizeMb" | "network" | "hostSystemMounts">;

export type CreateSandboxOptions =
  | ({ kind: "local" } & SandboxRequestCommon & LocalSandboxOptions)
  | ({ kind: "none" } & SandboxRequestCommon & NoneSandboxOptions)
  | ({ kind: "docker" } & SandboxRequestCommon & DockerRequestOptions);

export async function createSandbox(opts: CreateSandboxOptions): Promise<Sandbox> {
  if (!opts.pythonPath?.length) return createBackend(opts);
  const { pythonPath, ...rest } = opts;
  const { copyPythonPathFolders, sandboxPythonPathDirs, withPythonPath } = await import("./task-pythonpath.js");
  const copies = copyPythonPathFolders(pythonPath);
  try {
    // local / docker: each copy bound read-only at a fixed path; none: the copies where they are.
    const inside = rest.kind === "none" ? copies.copies : sandboxPythonPathDirs(copies.copies.length);
    const mounts = rest.kind === "none" ? [] : copies.copies.map((host, i) => ({ host, sandbox: inside[i]! }));
    const sandbox = await createBackend({ ...rest, readOnlyMounts: [...(rest.readOnlyMounts ?? []), ...mounts] } as CreateSandboxOptions);
    // What an exec's PYTHONPATH would be without ours: the request's env, else (none, which starts
    // from the host's environment) the host's. A docker image's own PYTHONPATH is not seen here.
    const fallback = rest.env?.PYTHONPATH ?? (rest.kind === "none" && (rest as NoneSandboxOptions).inheritEnv !== false ? process.env.PYTHONPATH : undefined);
    return withPythonPath(sandbox, inside, fallback, copies.release);
  } catch (e) {
    copies.release();
    throw e;
  }
}

async function createBackend(opts: CreateSandboxOptions): Promise<Sandbox> {
  switch (opts.kind) {
    case "local": {
      const { kind: _kind, sessionId: _s, task: _t, purpose: _p, ...local } = opts;
      const { createLocalSandbox } = await import("./local/sandbox.js");
      return createLocalSandbox(local);
    }
    case "none": {
      const { kind: _kind, sessionId: _s, task: _t, purpose: _p, readOnlyMounts: _r, hiddenPaths: _h, readOnlyOverlays, ...none } = opts;
      if (readOnlyOverlays?.length) {
        opts.logger?.warn(
          { overlays: readOnlyOverlays.map((o) => o.rel) },
          "sandbox 'none': readOnlyOverlays ignored: nothing is mounted or read-only, commands see the host as it is",
        );
      }
      const { createNoneSandbox } = await import("./none.js");
      return createNoneSandbox(none);
    }
    case "docker": {
      const { kind: _kind, ...docker } = opts;
      const { createDockerSandboxFromRequest } = await import("./docker/create.js");
      return createDockerSandboxFromRequest(docker);
    }
    default: {
      const never: never = opts;
      throw new Error(`unknown sandbox kind ${JSON.stringify((never as { kind?: unknown }).kind)} (expected local, docker or none)`);
    }
  }
}

export type { ExecOptions, ExecResult, Sandbox, SandboxKind } from "./types.js";
