/**
 * `infradev run --sandbox docker`: the harness, our MCP server and the workspace together in one
 * container per run, made from the task's image. On the host stay only the public export's source,
 * the run process (egress proxy, stand-in model if any) and the grader with the hidden part.
 *
 * Inside, every host folder the run needs is bound at its own host path, so the harness config that
 * host mode writes (CODEX_HOME / OpenCode dirs, the server's argv with --tasks-dir / --runs-dir)
 * works unchanged: the export (read-only), the server's runs folder (workspace, base, trace;
 * read-write), the private harness folder (read-write), this package's dist/, python/sandbox,
 * node_modules and package.json (read-only; never its tasks/ or test/), node, and the proxy's socket
 * folder. No mount may hold the real task folder. The server runs with `--sandbox none`: the
 * container is the sandbox, and no hidden/ exists in it.
 *
 * Network: `none` (loopback only) plus the egress relay (egress-proxy.ts), the container's main
 * process. Limits as the docker sandbox (memory = swap, pids, no capabilities beyond a few,
 * no-new-privileges). The container is removed at the end, on error and on SIGTERM (run.ts's
 * finally); its labels let `infradev sandbox prune` find it when the run process died hard.
 */
import { isPathInside } from "../../lib/path-validation.js";
import { spawn } from "node:child_process";
import { accessSync, constants, existsSync, realpathSync } from "node:fs";
import { hostname } from "node:os";
import { delimiter, join } from "node:path";
import type Docker from "dockerode";
import { UsageError } from "../../lib/errors.js";
import { packageRoot } from "../../lib/paths.js";
import { connectEngine, engineResources } from "../../sandbox/docker/engine.js";
import { processStartTime } from "../../sandbox/docker/prune.js";
import { LABEL, gpuDeviceRequests, hostSystemMountPlan, type GpuRequest } from "../../sandbox/docker/spec.js";
import type { PreparedHarness } from "../harness/types.js";

/** The relay's port on the container's own loopback (its network namespace is private: no clash). */
export const RELAY_PORT = 18080;

export interface DockerRunOptions {
  image?: string;
  hostSystemMounts?: boolean;
  gpus?: GpuRequest;
  memoryMb?: number;
  pidsLimit?: number;
  cpus?: number;
  shmSizeMb?: number;
}

export interface RunContainer {
  readonly name: string;
  readonly id: string;
  readonly image: string;
  /** The host-mode harness, each attempt run by `docker exec` inside the container. */
  wrap(h: PreparedHarness): PreparedHarness;
  /** Ends every process in the container (the relay too); the container stays, stopped. */
  kill(): Promise<void>;
  /** Starts it again when stopped (the relay is its main process, so it comes back too). */
  ensureRunning(): Promise<void>;
  /** Starts the container again (after kill) and runs argv inside with stdin at EOF. */
  execToEnd(argv: string[], timeoutMs: number): Promise<{ code: number | null; stderr: string }>;
  remove(): Promise<void>;
}

const inside = isPathInside;

/** An absolute path to the docker CLI (attempts run through `docker exec`: a process whose stdout is the harness's). */
export function dockerCli(): string {
  for (const dir of (process.env.PATH ?? "/usr/bin:/bin").split(delimiter)) {
    const p = join(dir, "docker");
    try {
      accessSync(p, constants.X_OK);
      return p;
    } catch {
      // not here
    }
  }
  throw new UsageError("run --sandbox docker: the docker CLI is not on PATH (the harness runs in the container through `docker exec`)");
}

/** Variables the docker CLI itself needs to reach the engine (never passed into the container). */
function clientEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const k of ["DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"]) if (process.env[k]) env[k] = process.env[k]!;
  return env;
}

/** What the container must see of this package, at its host paths. Never the package's tasks/ (bundled hidden parts) or test/. */
export function packageMounts(): string[] {
  const root = packageRoot();
  // skills/: the server serves the infra skill (get_skill) and reads it at start-up.
  return [join(root, "dist"), join(root, "package.json"), join(root, "python", "sandbox"), join(root, "skills"), join(root, "node_modules")];
}

export async function startRunContainer(o: {
  runId: string;
  image: string;
  docker: DockerRunOptions;
  /** Host paths bound read-only / read-write at the same path. */
  readOnly: string[];
  readWrite: string[];
  /** The real task folder: no mount may contain it (its hidden part would be inside). */
  realTaskDir: string;
  socketDir: string;
  socketPath: string;
  workdir: string;
}): Promise<RunContainer> {
  const engine: Docker = connectEngine();
  try {
    await engine.getImage(o.image).inspect();
  } catch (e) {
    if ((e as { statusCode?: number }).statusCode === 404) throw new UsageError(`run --sandbox docker: image ${o.image} is not on the engine (docker pull ${o.image}, or pass --image)`);
    throw new Error(`run --sandbox docker: the engine did not answer (${(e as Error).message}); start dockerd or set DOCKER_HOST`);
  }
  const binds: string[] = [];
  const seen = new Set<string>();
  const bind = (hostPath: string, mode: "ro" | "rw") => {
    // A link (a worktree's node_modules) is bound at its own path AND at its target's, so paths resolved on the host (the Codex entry) work inside.
    const real = realpathSync(hostPath);
    if (inside(real, o.realTaskDir)) throw new Error(`run --sandbox docker: refusing to mount ${hostPath}: it holds the task folder ${o.realTaskDir} (its hidden part)`);
    for (const dest of new Set([hostPath, real])) {
      if (seen.has(dest)) continue;
      seen.add(dest);
      binds.push(`${real}:${dest}:${mode}`);
    }
  };
  if (o.docker.hostSystemMounts) for (const d of hostSystemMountPlan().binds) binds.push(`${d}:${d}:ro`);
  const system = o.docker.hostSystemMounts ? hostSystemMountPlan().binds : [];
  // node itself: from the image's /usr when the host's is bound, else the binary file.
  if (!system.some((d) => inside(d, realpathSync(process.execPath)))) bind(process.execPath, "ro");
  // An installed package may have no node_modules of its own (dependencies hoisted): not bound, then.
  for (const p of [...packageMounts().filter((m) => existsSync(m)), ...o.readOnly]) bind(p, "ro");
  for (const p of o.readWrite) bind(p, "rw");
  // Read-only is enough: connecting to a unix socket is not a write to its file system.
  bind(o.socketDir, "ro");

  const res = o.docker.memoryMb === undefined || o.docker.shmSizeMb === undefined ? await engineResources(engine) : { memTotalMb: 0, ncpu: 0 };
  const memoryMb = o.docker.memoryMb ?? (res.memTotalMb > 0 ? Math.floor(res.memTotalMb * 0.9) : undefined);
  const shmMb = o.docker.shmSizeMb ?? (res.memTotalMb >= 32 * 1024 ? 8192 : 1024);
  const user = typeof process.getuid === "function" ? `${process.getuid()}:${process.getgid!()}` : undefined;
  const name = `infradev-run-${o.runId.replace(/[^A-Za-z0-9_.-]/g, "-").slice(0, 60)}-${Math.random().toString(36).slice(2, 8)}`;
  const labels: Record<string, string> = {
    [LABEL.managed]: "true",
    [LABEL.session]: o.runId,
    [LABEL.kind]: "run",
    [LABEL.pid]: String(process.pid),
    [LABEL.host]: hostname(),
    [LABEL.createdAt]: String(Math.floor(Date.now() / 1000)),
  };
  const start = processStartTime(process.pid);
  if (start !== undefined) labels[LABEL.pidStart] = start;
  const memoryBytes = memoryMb !== undefined ? memoryMb * 1024 * 1024 : undefined;
  const container = await engine.createContainer({
    name,
    Image: o.image,
    Entrypoint: [],
    Cmd: [process.execPath, join(packageRoot(), "dist", "campaign", "run", "egress-proxy.js"), "relay", o.socketPath, String(RELAY_PORT)],
    WorkingDir: o.workdir,
    User: user,
    Env: [`PATH=${process.env.PATH ?? "/usr/local/bin:/usr/bin:/bin"}`],
    Labels: labels,
    HostConfig: {
      Binds: binds,
      Init: true,
      NetworkMode: "none",
      CapDrop: ["ALL"],
      CapAdd: ["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"],
      SecurityOpt: ["no-new-privileges"],
      // No tmpfs on /tmp: the run's host folders are bound under the host's /tmp at their own paths, and
      // a tmpfs there would have to be mounted before them; /tmp is the container's own writable layer.
      ShmSize: shmMb * 1024 * 1024,
      DeviceRequests: gpuDeviceRequests(o.docker.gpus),
      RestartPolicy: { Name: "no" },
      ...(memoryBytes !== undefined ? { Memory: memoryBytes, MemorySwap: memoryBytes } : {}),
      PidsLimit: o.docker.pidsLimit ?? 8192,
      ...(o.docker.cpus !== undefined ? { NanoCpus: Math.round(o.docker.cpus * 1e9) } : {}),
    },
  });
  let removed = false;
  const remove = async () => {
    if (removed) return;
    removed = true;
    try {
      await container.remove({ force: true, v: true });
    } catch (e) {
      if ((e as { statusCode?: number }).statusCode !== 404) throw e;
    }
  };
  try {
    await container.start();
  } catch (e) {
    await remove();
    throw new Error(`run --sandbox docker: the container of image ${o.image} did not start: ${(e as Error).message.trim()}`);
  }
  const docker = dockerCli();
  const execArgv = (env: string[], cwd: string, argv: string[]) => [docker, "exec", "-w", cwd, ...(user ? ["-u", user] : []), ...env.flatMap((k) => ["-e", k]), name, ...argv];
  const kill = async () => {
    try {
      await container.kill();
    } catch (e) {
      // 409: not running (already ended), 404: removed.
      if (![404, 409].includes((e as { statusCode?: number }).statusCode ?? 0)) throw e;
    }
    await container.wait().catch(() => undefined);
  };
  const ensureRunning = async () => {
    const st = await container.inspect();
    if (!st.State.Running) await container.start();
  };
  return {
    name,
    id: container.id,
    image: o.image,
    wrap: (h) => ({
      ...h,
      // The docker client on the host; `-e NAME` (no value) hands each variable over from the client's
      // environment, so an API key is never on a command line.
      env: { ...h.env, ...clientEnv() },
      argv: (a) => execArgv(Object.keys(h.env), h.cwd, h.argv(a)),
    }),
    kill,
    ensureRunning,
    execToEnd: async (argv, timeoutMs) => {
      await ensureRunning();
      return new Promise((res) => {
        const [cmd, ...args] = execArgv([], o.workdir, argv);
        const child = spawn(cmd!, args, { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env } });
        let stderr = "";
        child.stderr.on("data", (c: Buffer) => (stderr = (stderr + c.toString("utf8")).slice(-4000)));
        const timer = setTimeout(() => void kill(), timeoutMs);
        child.once("error", (e) => {
          clearTimeout(timer);
          res({ code: null, stderr: e.message });
        });
        child.once("close", (code) => {
          clearTimeout(timer);
          res({ code, stderr });
        });
      });
    },
    remove,
  };
}
