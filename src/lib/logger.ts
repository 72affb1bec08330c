import { writeSync } from "node:fs";
import { pino, type Logger } from "pino";

export type { Logger };

const LEVELS: Record<number, string> = { 10: "TRACE", 20: "DEBUG", 30: "INFO", 40: "WARN", 50: "ERROR", 60: "FATAL" };
/** pino's own fields: not repeated among the event's key=value pairs. */
const OWN = new Set(["level", "time", "pid", "hostname", "name", "msg", "v"]);

/**
 * One pino JSON line as one readable line: `12:03:04 WARN infradev-serve: message key=value ...`
 * (values that are not plain words are JSON-quoted; nested objects stay JSON). A line that is not
 * JSON is passed on as it is.
 */
export function prettyLogLine(json: string): string {
  let e: Record<string, unknown>;
  try {
    e = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json.endsWith("\n") ? json : `${json}\n`;
  }
  const time = typeof e.time === "number" ? new Date(e.time).toTimeString().slice(0, 8) : "";
  const level = LEVELS[e.level as number] ?? String(e.level ?? "");
  const fields = Object.entries(e)
    .filter(([k]) => !OWN.has(k))
    .map(([k, v]) => `${k}=${typeof v === "string" && /^[\w./:@+-]+$/.test(v) ? v : JSON.stringify(v)}`);
  return `${[time, level, e.name ? `${String(e.name)}:` : "", typeof e.msg === "string" ? e.msg : "", ...fields].filter(Boolean).join(" ")}\n`;
}

/**
 * Whether log lines on stderr are pretty: INFRADEV_LOG_FORMAT=pretty|json decides, else pretty
 * exactly when stderr is a terminal (a person reads it) and JSON otherwise (a file, a pipe, a client).
 */
export function prettyLogs(env: NodeJS.ProcessEnv = process.env, isTTY = process.stderr.isTTY === true): boolean {
  if (env.INFRADEV_LOG_FORMAT === "pretty") return true;
  if (env.INFRADEV_LOG_FORMAT === "json") return false;
  return isTTY;
}

/**
 * Every log line goes to stderr (fd 2): on the stdio transport stdout belongs to JSON-RPC alone.
 * Level from INFRADEV_LOG_LEVEL (default "info"; "silent" turns logging off); format: prettyLogs.
 * The pretty lines are made here in a few lines rather than with pino-pretty: it would be one more
 * dependency (and a worker thread, or its sync mode) for what prettyLogLine does synchronously.
 */
export function createLogger(name = "infradev", level = process.env.INFRADEV_LOG_LEVEL ?? "info"): Logger {
  if (prettyLogs()) return pino({ name, level }, { write: (line: string) => void writeSync(2, prettyLogLine(line.trimEnd())) });
  return pino({ name, level }, pino.destination({ fd: 2, sync: true }));
}

/** A logger that drops everything, for tests and library callers that do not want logs. */
export function silentLogger(): Logger {
  return pino({ level: "silent" });
}
