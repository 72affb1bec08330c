/**
 * PROVISIONAL: output capping for the docker backend until the shared helper of the local backend
 * lands; then this file goes and docker.ts uses that one.
 */
import { createWriteStream, mkdirSync, type WriteStream } from "node:fs";
import { join } from "node:path";
import type { OutputSink } from "./docker-exec.js";

class StreamCap {
  head: Buffer[] = [];
  headLen = 0;
  tail: Buffer = Buffer.alloc(0);
  total = 0;
  constructor(private readonly half: number) {}
  push(chunk: Buffer): void {
    this.total += chunk.length;
    if (this.headLen < this.half) {
      const take = chunk.subarray(0, this.half - this.headLen);
      this.head.push(take);
      this.headLen += take.length;
      chunk = chunk.subarray(take.length);
    }
    if (chunk.length) {
      const t = Buffer.concat([this.tail, chunk]);
      this.tail = t.length > this.half ? t.subarray(t.length - this.half) : t;
    }
  }
  text(): { text: string; cut: boolean } {
    const head = Buffer.concat(this.head);
    const cut = this.total > this.headLen + this.tail.length;
    if (!cut) return { text: Buffer.concat([head, this.tail]).toString("utf8"), cut };
    const dropped = this.total - this.headLen - this.tail.length;
    return { text: `${head.toString("utf8")}\n[... ${dropped} bytes cut; full log on the host ...]\n${this.tail.toString("utf8")}`, cut };
  }
}

export function createOutputSink(logsDir: string, maxOutputBytes: number): OutputSink {
  const half = Math.max(1, Math.floor(maxOutputBytes / 4));
  const caps = { stdout: new StreamCap(half), stderr: new StreamCap(half) };
  const logPath = join(logsDir, `${new Date().toISOString().replace(/[:.]/g, "-")}-${Math.random().toString(36).slice(2, 8)}.log`);
  let log: WriteStream | undefined;
  const pending: Buffer[] = [];
  let total = 0;
  return {
    write(stream, chunk) {
      caps[stream].push(chunk);
      total += chunk.length;
      if (log) log.write(chunk);
      else if (total > maxOutputBytes) {
        mkdirSync(logsDir, { recursive: true });
        log = createWriteStream(logPath);
        for (const p of pending) log.write(p);
        pending.length = 0;
        log.write(chunk);
      } else pending.push(chunk);
    },
    async finish() {
      const out = caps.stdout.text();
      const err = caps.stderr.text();
      if (log) await new Promise<void>((r) => log!.end(r));
      return { stdout: out.text, stderr: err.text, truncated: out.cut || err.cut, ...(log ? { logPath } : {}) };
    },
  };
}
