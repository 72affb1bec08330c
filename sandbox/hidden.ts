import { join, resolve } from "node:path";
import { packageRoot } from "../lib/paths.js";

/**
 * Host secrets under /etc, masked wherever a backend binds the host's /etc. Commands run as uid 0
 * (without capabilities) in the local sandbox and as the caller's uid in docker; root-owned
 * 0600/0640 files stay readable to their owner without CAP_DAC_OVERRIDE.
 */
export const HOST_SECRETS = ["/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers", "/etc/sudoers.d", "/etc/ssh", "/etc/ssl/private"];

/**
 * Every path a sandbox must never show: the caller's (a task's hidden/, other sessions' runs), the
 * package's own tasks/ and runs/ (wherever the package is installed), and the host secrets. Paths
 * that are not under a bound folder are not visible anyway; the backends mask the rest.
 */
export function sandboxHiddenPaths(extra: readonly string[] = []): string[] {
  const pkg = packageRoot();
  return [...extra, join(pkg, "tasks"), join(pkg, "runs"), ...HOST_SECRETS].map((p) => resolve(p));
}
