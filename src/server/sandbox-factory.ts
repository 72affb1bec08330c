/** The MCP server's sandbox factory: one agent sandbox per session, through the one picker. */
import type { DockerSettings } from "../sandbox/picker.js";
import type { SandboxFactory } from "./session.js";

/**
 * The agent's sandboxes: maps the server's request onto the one picker (sandbox/picker.ts); `docker` holds
 * the docker flags (`--image`, `--gpus`, limits), used only when the request is for docker. The
 * backends are imported when a sandbox is made, so `serve` loads the docker client only for docker.
 */
export function makeSandboxFactory(docker: DockerSettings = {}, local: { pidsLimit?: number } = {}): SandboxFactory {
  return async (req) => {
    const { createSandbox } = await import("../sandbox/picker.js");
    // The task's stand-ins reach every backend (none: their host copies on PYTHONPATH).
    const common = { hostRepoDir: req.hostRepoDir, python: req.python, logDir: req.logDir, logger: req.logger, pythonPath: req.pythonPath };
    // `none` sees the host as it is: the picker drops the mounts and hidden paths it cannot honour.
    const isolated = { ...common, readOnlyMounts: req.readOnlyMounts, hiddenPaths: req.hiddenPaths };
    switch (req.kind) {
      case "docker":
        return createSandbox({ kind: "docker", ...isolated, sessionId: req.sessionId, task: req.task, purpose: "agent", ...docker });
      case "local":
        return createSandbox({ kind: "local", ...isolated, ...local });
      case "none":
        return createSandbox({ kind: "none", ...common });
      default: {
        const never: never = req.kind;
        throw new Error(`unknown sandbox kind ${JSON.stringify(never)} (expected local, docker or none)`);
      }
    }
  };
}

/** The factory with no docker flags (the task's image and GPUs, the backend's default limits). */
export const sandboxFactory: SandboxFactory = makeSandboxFactory();

