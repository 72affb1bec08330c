import type { Progress, ProgressKind } from "../lib/progress.js";

/**
 * How the long commands (demo, grade, calibrate, task check) show their progress on stderr. On a
 * terminal: one live status line, rewritten in place (`\r` + erase to the end of the line), cut to
 * the terminal's width so it never wraps, with the time since the start; `result` messages are
 * printed as lines of their own above it. In a log (stderr not a terminal, or TERM=dumb): plain
 * lines for steps and results, ticks (test counters) left out. Hand-rolled rather than a progress-bar
 * library: a dozen lines of ANSI, and the CLI's start-up time stays where it is.
 */

export interface ProgressStream {
  write(chunk: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

export interface ProgressLineOptions {
  /** Before every message, e.g. `demo` gives `[demo 1:23] …`. */
  label: string;
  /** Default: stream.isTTY and TERM is not `dumb`. */
  live?: boolean;
  /** Test hook: the clock (ms). */
  now?: () => number;
  /** Redraw the status line this often on a terminal, so its clock moves (ms; 0: never). */
  tickMs?: number;
}

/** m:ss, or h:mm:ss past an hour. */
export function clock(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  const two = (n: number) => String(n).padStart(2, "0");
  return s >= 3600 ? `${Math.floor(s / 3600)}:${two(Math.floor(s / 60) % 60)}:${two(s % 60)}` : `${Math.floor(s / 60)}:${two(s % 60)}`;
}

export class ProgressLine {
  private readonly started: number;
  private readonly now: () => number;
  private readonly live: boolean;
  private status = "";
  private shown = false;
  private timer: ReturnType<typeof setInterval> | undefined;

  constructor(
    private readonly stream: ProgressStream,
    private readonly opts: ProgressLineOptions,
  ) {
    this.now = opts.now ?? Date.now;
    this.started = this.now();
    this.live = opts.live ?? (stream.isTTY === true && process.env.TERM !== "dumb");
    const every = opts.tickMs ?? 1000;
    if (this.live && every > 0) {
      this.timer = setInterval(() => this.shown && this.draw(), every);
      this.timer.unref?.();
    }
  }

  /** Whether a live status line is in use (a terminal). */
  get isLive(): boolean {
    return this.live;
  }

  /** The callback the grader takes. */
  get progress(): Progress {
    return (msg, kind) => this.report(msg, kind);
  }

  report(msg: string, kind: ProgressKind = "step"): void {
    const text = msg.replace(/[\r\n]+/g, " ");
    if (!this.live) {
      if (kind !== "tick") this.stream.write(`${this.head()}${text}\n`);
      return;
    }
    if (kind === "result") {
      this.clear();
      this.stream.write(`${this.head()}${text}\n`);
      this.draw();
      return;
    }
    this.status = text;
    this.draw();
  }

  /** Prints a line of its own (above the status line on a terminal). */
  line(text: string): void {
    this.report(text, "result");
  }

  /** Removes the status line (call before printing the command's output). */
  done(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.clear();
    this.status = "";
  }

  private head(): string {
    return `[${this.opts.label} ${clock(this.now() - this.started)}] `;
  }

  private clear(): void {
    if (this.live && this.shown) this.stream.write("\r\x1b[K");
    this.shown = false;
  }

  private draw(): void {
    if (!this.live || !this.status) return;
    const width = Math.max(20, (this.stream.columns ?? 80) - 1);
    let text = `${this.head()}${this.status}`;
    if (text.length > width) text = `${text.slice(0, width - 1)}…`;
    this.stream.write(`\r${text}\x1b[K`);
    this.shown = true;
  }
}
