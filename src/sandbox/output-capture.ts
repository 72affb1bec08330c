/**
 * Output of one command, shared by every backend: streams it to `onOutput`, writes all of it to a
 * log file, and keeps only a capped head + tail in memory for the result.
 *
 * The cap covers stdout and stderr together: a quiet stream keeps everything and leaves the rest of
 * the budget to the noisy one. Each stream holds at most `maxOutputBytes` of head and of tail while
 * running, so memory stays bounded whatever the command prints.
 */
import { randomBytes } from "node:crypto";
import { closeSync, ftruncateSync, mkdirSync, writeSync } from "node:fs";
import { StringDecoder } from "node:string_decoder";
import { createExclusive } from "../lib/safe-fs.js";

export const DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024;
/** Bytes of output the stored log keeps from the start, and from the end, of a command's output. */
export const DEFAULT_LOG_HEAD_BYTES = 8 * 1024 * 1024;
export const DEFAULT_LOG_TAIL_BYTES = 8 * 1024 * 1024;

export type OutputStreamName = "stdout" | "stderr";

export interface OutputCaptureOptions {
  /** Bytes of stdout + stderr kept in the result (head and tail). Default 64 KiB. */
  maxOutputBytes?: number;
  /**
   * Host folder for the log (`<logDir>/<timestamp>-<id>.log`); created when missing. Omit: no log.
   * It must be a folder the sandbox cannot write (the file is created O_EXCL|O_NOFOLLOW anyway).
   */
  logDir?: string;
  /** The log keeps the first `logHeadBytes` and the last `logTailBytes` of the output (default 8 MiB each). */
  logHeadBytes?: number;
  logTailBytes?: number;
  /** Lines written at the top of the log (what ran, where); each gets a `# ` prefix. */
  logHeader?: string[];
  onOutput?: (chunk: string, stream: OutputStreamName) => void;
}

export interface CapturedOutput {
  stdout: string;
  stderr: string;
  /** True when stdout or stderr was cut. */
  truncated: boolean;
  /** Bytes each stream produced in all. */
  bytes: { stdout: number; stderr: number };
  /** Host path of the log, when one was written without error. */
  logPath?: string;
  /** Bytes of output the log dropped (between its head and its tail); 0 when it holds everything. */
  logTruncatedBytes: number;
  /** Why the log could not be written, if it could not. */
  logError?: string;
}

/** `20251129T084512.123Z-<8 hex>`: sorts by time, unique across concurrent commands. */
export function newExecId(now = new Date()): string {
  const stamp = now.toISOString().replace(/[-:]/g, "");
  return `${stamp}-${randomBytes(4).toString("hex")}`;
}

export function omittedMarker(bytes: number): string {
  return `\n[... ${bytes} bytes omitted ...]\n`;
}

/** The line a capped log carries where it dropped output. */
export function logDroppedMarker(dropped: number, head: number, tail: number): string {
  return `\n[infradev: ${dropped} bytes dropped: the log kept the first ${head} and last ${tail} bytes]\n`;
}

/**
 * The stored log: written as output arrives until it would pass head + tail bytes; from then on only
 * the first `head` bytes stay in the file (it is cut back) and the last `tail` bytes are kept in
 * memory, written after a marker line when the command ends. Disk use is bounded by head + tail
 * whatever the command prints.
 */
class CappedLog {
  private written = 0; // output bytes in the file
  private total = 0;
  private overflow = false;
  private ring: Buffer[] = [];
  private ringLen = 0;
  error?: string;

  private constructor(
    private fd: number | null,
    readonly path: string,
    private readonly base: number,
    private readonly head: number,
    private readonly tail: number,
  ) {}

  static open(dir: string, name: string, header: string[], head: number, tail: number): CappedLog {
    mkdirSync(dir, { recursive: true, mode: 0o755 });
    const { fd, path } = createExclusive(dir, name, 0o644);
    const text = Buffer.from(header.map((l) => `# ${l}\n`).join(""));
    try {
      writeAll(fd, text, 0);
    } catch (e) {
      closeSync(fd);
      throw e;
    }
    return new CappedLog(fd, path, text.length, head, tail);
  }

  write(buf: Buffer): void {
    if (this.fd === null) return;
    this.total += buf.length;
    try {
      if (this.tail > 0) {
        this.ring.push(buf);
        this.ringLen += buf.length;
        while (this.ring.length > 1 && this.ringLen - this.ring[0]!.length >= this.tail) this.ringLen -= this.ring.shift()!.length;
      }
      if (this.overflow) return;
      if (this.written + buf.length <= this.head + this.tail) {
        writeAll(this.fd, buf, this.base + this.written);
        this.written += buf.length;
        return;
      }
      this.overflow = true;
      if (this.written > this.head) ftruncateSync(this.fd, this.base + this.head);
      else writeAll(this.fd, buf.subarray(0, this.head - this.written), this.base + this.written);
      this.written = this.head;
    } catch (e) {
      this.fail(e);
    }
  }

  /** Bytes dropped between the head and the tail. */
  get dropped(): number {
    return this.overflow ? this.total - this.head - Math.min(this.tail, this.total - this.head) : 0;
  }

  close(footer: string[]): void {
    if (this.fd === null) return;
    try {
      let pos = this.base + this.written;
      if (this.overflow) {
        const all = Buffer.concat(this.ring);
        const tail = all.subarray(Math.max(0, all.length - Math.min(this.tail, this.total - this.head)));
        pos = writeAll(this.fd, Buffer.from(logDroppedMarker(this.dropped, this.head, tail.length)), pos);
        pos = writeAll(this.fd, tail, pos);
      }
      if (footer.length) writeAll(this.fd, Buffer.from(`\n${footer.map((l) => `# ${l}\n`).join("")}`), pos);
    } catch (e) {
      this.fail(e);
    } finally {
      this.ring = [];
      if (this.fd !== null) closeSync(this.fd);
      this.fd = null;
    }
  }

  private fail(e: unknown): void {
    this.error ??= `cannot write ${this.path}: ${(e as Error).message}`;
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
    this.ring = [];
  }
}

/** Writes all of `buf` at file offset `pos` (positional: a truncation never leaves a hole); returns the new offset. */
function writeAll(fd: number, buf: Buffer, pos: number): number {
  let off = 0;
  while (off < buf.length) off += writeSync(fd, buf, off, buf.length - off, pos + off);
  return pos + buf.length;
}

/** Head and tail of one stream, each at most `capacity` bytes. */
class HeadTail {
  private readonly head: Buffer[] = [];
  private headLen = 0;
  private tail: Buffer[] = [];
  private tailLen = 0;
  total = 0;

  constructor(private readonly capacity: number) {}

  push(chunk: Buffer): void {
    this.total += chunk.length;
    if (this.headLen < this.capacity) {
      const take = chunk.subarray(0, this.capacity - this.headLen);
      this.head.push(take);
      this.headLen += take.length;
    }
    // The tail sees every byte (it may overlap the head; render() sorts that out).
    this.tail.push(chunk);
    this.tailLen += chunk.length;
    while (this.tail.length > 1 && this.tailLen - this.tail[0]!.length >= this.capacity) {
      this.tailLen -= this.tail.shift()!.length;
    }
  }

  /** The stream cut to `budget` bytes: head + marker + tail, on UTF-8 (and where cheap, line) boundaries. */
  render(budget: number): { text: string; cut: boolean } {
    if (this.total <= budget && this.total <= this.capacity) {
      return { text: Buffer.concat(this.head).toString("utf8"), cut: false };
    }
    const head = Buffer.concat(this.head);
    const tailAll = Buffer.concat(this.tail);
    const tail = tailAll.subarray(Math.max(0, tailAll.length - this.capacity));
    const headWant = Math.floor(budget / 2);
    const tailWant = budget - headWant;
    const headEnd = cutHeadAt(head, Math.min(headWant, head.length));
    const tailStart = cutTailAt(tail, Math.max(0, tail.length - tailWant));
    const kept = headEnd + (tail.length - tailStart);
    return {
      text: head.subarray(0, headEnd).toString("utf8") + omittedMarker(this.total - kept) + tail.subarray(tailStart).toString("utf8"),
      cut: true,
    };
  }
}

const isContinuation = (b: number | undefined): boolean => b !== undefined && (b & 0xc0) === 0x80;

/** End of the head: after the last newline in the final quarter if there is one, never inside a character. */
function cutHeadAt(buf: Buffer, end: number): number {
  if (end <= 0) return 0;
  const nl = buf.lastIndexOf(0x0a, end - 1);
  if (nl >= 0 && nl + 1 >= end - Math.floor(end / 4)) return nl + 1;
  while (end > 0 && isContinuation(buf[end])) end--;
  return end;
}

/** Start of the tail: after the first newline in its first quarter if there is one, never inside a character. */
function cutTailAt(buf: Buffer, start: number): number {
  const span = buf.length - start;
  const nl = buf.indexOf(0x0a, start);
  if (nl >= 0 && nl + 1 - start <= Math.floor(span / 4) && nl + 1 < buf.length) return nl + 1;
  while (start < buf.length && isContinuation(buf[start])) start++;
  return start;
}

/**
 * Splits a byte budget between two streams: one that needs less than half keeps all of it and the
 * other gets the rest.
 */
export function splitBudget(max: number, a: number, b: number): [number, number] {
  if (a + b <= max) return [a, b];
  const half = Math.floor(max / 2);
  if (a <= half) return [a, max - a];
  if (b <= half) return [max - b, b];
  return [max - half, half];
}

export class OutputCapture {
  /** Host path the log is being written to (undefined when no logDir was given). */
  readonly logPath?: string;
  private readonly max: number;
  private readonly streams: Record<OutputStreamName, HeadTail>;
  private readonly decoders: Record<OutputStreamName, StringDecoder>;
  private readonly log?: CappedLog;
  private logError?: string;
  private finished = false;

  constructor(
    private readonly opts: OutputCaptureOptions = {},
    readonly id: string = newExecId(),
  ) {
    this.max = Math.max(0, Math.floor(opts.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES));
    const capacity = Math.max(this.max, 1);
    this.streams = { stdout: new HeadTail(capacity), stderr: new HeadTail(capacity) };
    this.decoders = { stdout: new StringDecoder("utf8"), stderr: new StringDecoder("utf8") };
    if (opts.logDir) {
      const head = Math.max(0, Math.floor(opts.logHeadBytes ?? DEFAULT_LOG_HEAD_BYTES));
      const tail = Math.max(0, Math.floor(opts.logTailBytes ?? DEFAULT_LOG_TAIL_BYTES));
      try {
        this.log = CappedLog.open(opts.logDir, `${id}.log`, opts.logHeader ?? [], head, tail);
        this.logPath = this.log.path;
      } catch (e) {
        this.logError = `cannot write a log in ${opts.logDir}: ${(e as Error).message}`;
      }
    }
  }

  write(stream: OutputStreamName, chunk: Buffer | string): void {
    if (this.finished) return;
    const buf = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
    if (buf.length === 0) return;
    this.streams[stream].push(buf);
    this.log?.write(buf);
    if (this.opts.onOutput) {
      const text = this.decoders[stream].write(buf);
      if (text) this.opts.onOutput(text, stream);
    }
  }

  /** Closes the log (after `footer` lines, each prefixed `# `) and renders the capped output. */
  async finish(footer: string[] = []): Promise<CapturedOutput> {
    this.finished = true;
    if (this.opts.onOutput) {
      for (const s of ["stdout", "stderr"] as const) {
        const rest = this.decoders[s].end();
        if (rest) this.opts.onOutput(rest, s);
      }
    }
    const { stdout, stderr } = this.streams;
    const [outBudget, errBudget] = splitBudget(this.max, stdout.total, stderr.total);
    const out = stdout.render(outBudget);
    const err = stderr.render(errBudget);
    const logTruncatedBytes = this.log?.dropped ?? 0;
    if (this.log) {
      this.log.close(footer);
      this.logError ??= this.log.error;
    }
    return {
      stdout: out.text,
      stderr: err.text,
      truncated: out.cut || err.cut,
      bytes: { stdout: stdout.total, stderr: stderr.total },
      logTruncatedBytes,
      ...(this.logPath && !this.logError ? { logPath: this.logPath } : {}),
      ...(this.logError ? { logError: this.logError } : {}),
    };
  }
}
