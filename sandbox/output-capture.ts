/**
 * Output of one command, shared by every backend: streams it to `onOutput`, writes all of it to a
 * log file, and keeps only a capped head + tail in memory for the result.
 *
 * The cap covers stdout and stderr together: a quiet stream keeps everything and leaves the rest of
 * the budget to the noisy one. Each stream holds at most `maxOutputBytes` of head and of tail while
 * running, so memory stays bounded whatever the command prints.
 */
import { randomBytes } from "node:crypto";
import { createWriteStream, mkdirSync, type WriteStream } from "node:fs";
import { join } from "node:path";
import { StringDecoder } from "node:string_decoder";

export const DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024;

export type OutputStreamName = "stdout" | "stderr";

export interface OutputCaptureOptions {
  /** Bytes of stdout + stderr kept in the result (head and tail). Default 64 KiB. */
  maxOutputBytes?: number;
  /** Host folder for the full log (`<logDir>/<timestamp>-<id>.log`); created when missing. Omit: no log. */
  logDir?: string;
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
  /** Host path of the full log, when one was written without error. */
  logPath?: string;
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
  /** Host path the full log is being written to (undefined when no logDir was given). */
  readonly logPath?: string;
  private readonly max: number;
  private readonly streams: Record<OutputStreamName, HeadTail>;
  private readonly decoders: Record<OutputStreamName, StringDecoder>;
  private readonly log?: WriteStream;
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
      const path = join(opts.logDir, `${id}.log`);
      try {
        mkdirSync(opts.logDir, { recursive: true });
        this.log = createWriteStream(path, { flags: "wx", mode: 0o644 });
        this.log.on("error", (e) => (this.logError ??= `cannot write ${path}: ${e.message}`));
        this.logPath = path;
        for (const line of opts.logHeader ?? []) this.log.write(`# ${line}\n`);
      } catch (e) {
        this.logError = `cannot write ${path}: ${(e as Error).message}`;
      }
    }
  }

  write(stream: OutputStreamName, chunk: Buffer | string): void {
    if (this.finished) return;
    const buf = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
    if (buf.length === 0) return;
    this.streams[stream].push(buf);
    if (this.log && !this.logError) this.log.write(buf);
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
    if (this.log) {
      const log = this.log;
      if (!this.logError) {
        const lead = footer.length ? "\n" : "";
        for (const [i, line] of footer.entries()) log.write(`${i === 0 ? lead : ""}# ${line}\n`);
      }
      await new Promise<void>((resolve) => {
        if (log.closed) return resolve();
        log.once("close", () => resolve());
        log.end();
      });
    }
    return {
      stdout: out.text,
      stderr: err.text,
      truncated: out.cut || err.cut,
      bytes: { stdout: stdout.total, stderr: stderr.total },
      ...(this.logPath && !this.logError ? { logPath: this.logPath } : {}),
      ...(this.logError ? { logError: this.logError } : {}),
    };
  }
}
