/**
 * Telling an out-of-memory kill apart from any other SIGKILL or crash, per exec.
 *
 * Sources, cheapest first: the memory cgroup's `oom_kill` counter read from the host's /sys/fs/cgroup
 * (exact and free, when the engine runs on this host); the engine's `oom` events for the container
 * (one stream per sandbox; usually in before the exec's end, not always under load); and the same
 * counter read inside the container with an exec (exact, for remote engines, but it costs a process,
 * so only when the exit code says a signal was involved or an event was seen). The engine's
 * `State.OOMKilled` flag is no use here: it is set only when the container's main process dies.
 */
import { existsSync, readFileSync } from "node:fs";
import type { IncomingMessage } from "node:http";
import type Docker from "dockerode";
import { execSimple } from "./exec.js";

/** Where the engine's cgroup drivers put a container's memory cgroup on the host (v1, v2). */
function hostCounterFile(id: string): string | undefined {
  const candidates = [
    `/sys/fs/cgroup/memory/docker/${id}/memory.oom_control`,
    `/sys/fs/cgroup/memory/system.slice/docker-${id}.scope/memory.oom_control`,
    `/sys/fs/cgroup/system.slice/docker-${id}.scope/memory.events`,
    `/sys/fs/cgroup/docker/${id}/memory.events`,
  ];
  return candidates.find((f) => existsSync(f));
}

function parseCounter(text: string): number | undefined {
  const m = /^oom_kill (\d+)$/m.exec(text);
  return m ? Number(m[1]) : undefined;
}

const COUNTER_CMD = ["/bin/sh", "-c", "cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null; exit 0"];

export class OomWatch {
  private events = 0;
  private counterSeen = 0;
  private stream: IncomingMessage | undefined;
  private hostFile: string | undefined;

  constructor(
    private readonly docker: Docker,
    private readonly container: Docker.Container,
  ) {}

  /** Subscribes to the container's `oom` events; never keeps the process alive on its own. */
  async start(): Promise<void> {
    this.hostFile = hostCounterFile(this.container.id);
    const stream = (await this.docker.getEvents({
      filters: { container: [this.container.id], event: ["oom"] },
    } as Record<string, unknown>)) as unknown as IncomingMessage;
    stream.socket?.unref();
    let partial = "";
    stream.on("data", (chunk: Buffer) => {
      const lines = (partial + chunk.toString("utf8")).split("\n");
      partial = lines.pop() ?? "";
      for (const line of lines) if (line.includes('"oom"')) this.events++;
    });
    stream.on("error", () => undefined);
    this.stream = stream;
  }

  /** A token to pass back to `killedDuring` when the exec ends. */
  mark(): number {
    return this.events;
  }

  /** Whether the memory limit killed something while the exec (begun at `mark`) ran. */
  async killedDuring(mark: number, exitCode: number | null): Promise<boolean> {
    const eventSeen = this.events > mark;
    let n: number | undefined;
    if (this.hostFile) {
      try {
        n = parseCounter(readFileSync(this.hostFile, "utf8"));
      } catch {
        n = undefined;
      }
    }
    if (n === undefined && (eventSeen || (exitCode !== null && exitCode >= 128))) {
      const r = await execSimple(this.container, this.docker, COUNTER_CMD).catch(() => undefined);
      n = r ? parseCounter(r.stdout) : undefined;
    }
    if (n === undefined) return eventSeen;
    const fresh = n > this.counterSeen;
    this.counterSeen = n;
    return fresh || eventSeen;
  }

  stop(): void {
    this.stream?.destroy();
    this.stream = undefined;
  }
}

/** Where the engine put a container's pids cgroup on the host (v1, v2): its `pids.events` counts refused forks. */
function hostPidsEventsFile(id: string): string | undefined {
  const candidates = [
    `/sys/fs/cgroup/pids/docker/${id}/pids.events`,
    `/sys/fs/cgroup/pids/system.slice/docker-${id}.scope/pids.events`,
    `/sys/fs/cgroup/system.slice/docker-${id}.scope/pids.events`,
    `/sys/fs/cgroup/docker/${id}/pids.events`,
  ];
  return candidates.find((f) => existsSync(f));
}

/**
 * Whether an exec ran into the container's process limit: the pids cgroup's `max` counter (forks
 * refused at the limit) read on the host before and after the exec. Only where the engine runs on
 * this host; elsewhere it says nothing (never a false "hit").
 */
export class PidsWatch {
  private readonly file: string | undefined;

  constructor(container: Docker.Container) {
    this.file = hostPidsEventsFile(container.id);
  }

  /** The counter now (null when it cannot be read). */
  read(): number | null {
    if (!this.file) return null;
    try {
      const m = /^max (\d+)$/m.exec(readFileSync(this.file, "utf8"));
      return m ? Number(m[1]) : null;
    } catch {
      return null;
    }
  }
}
