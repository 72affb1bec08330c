import { pino, type Logger } from "pino";

export type { Logger };

/**
 * Every log line goes to stderr (fd 2): on the stdio transport stdout belongs to JSON-RPC alone.
 * Level from INFRADEV_LOG_LEVEL (default "info"; "silent" turns logging off).
 */
export function createLogger(name = "infradev", level = process.env.INFRADEV_LOG_LEVEL ?? "info"): Logger {
  return pino({ name, level }, pino.destination({ fd: 2, sync: true }));
}

/** A logger that drops everything, for tests and library callers that do not want logs. */
export function silentLogger(): Logger {
  return pino({ level: "silent" });
}
