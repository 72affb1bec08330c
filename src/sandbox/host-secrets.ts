import { join, resolve } from "node:path";
import { defaultCalibrationDir, gitCacheDir, packageRoot } from "../lib/paths.js";

/**
 * Host secrets under /etc, masked wherever a backend binds the host's /etc. Commands run as uid 0
 * (without capabilities) in the local sandbox and as the caller's uid in docker; root-owned
 * 0600/0640 files stay readable to their owner without CAP_DAC_OVERRIDE.
 */
export const HOST_SECRETS = ["/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers", "/etc/sudoers.d", "/etc/ssh", "/etc/ssl/private"];

/**
 * Every path a sandbox must never show: the caller's (a task's hidden/, other sessions' runs), the
 * package's own tasks/, runs/ and python/host/ (wherever the package is installed: how the grader
 * renames and disguises tests is not the agent's to read), the caches that hold graded
 * material (gold calibrations name the hidden probes; git mirrors hold the merged PRs), and the host
 * secrets. Paths that are not under a bound folder are not visible anyway; the backends mask the
 * rest (a read-only mount of ~/.cache for model weights must not bring ~/.cache/infradev along).
 */
export function sandboxHiddenPaths(extra: readonly string[] = []): string[] {
  const pkg = packageRoot();
  return [...extra, join(pkg, "tasks"), join(pkg, "runs"), join(pkg, "python", "host"), defaultCalibrationDir(), gitCacheDir(), ...HOST_SECRETS].map((p) => resolve(p));
}
