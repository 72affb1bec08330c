import { execFileSync } from "node:child_process";

/**
 * How a Slurm suite should behave here: run when a cluster answers (`scontrol ping` and a node that
 * `sinfo` shows usable); otherwise skip, unless INFRADEV_REQUIRE_SLURM=1 (CI), in which case run and fail
 * in `beforeAll` with the reason.
 */
export function slurmSuitePlan(): { run: boolean; reachable: boolean; whyNot: string } {
  let why = "";
  try {
    execFileSync("scontrol", ["ping"], { stdio: "pipe", timeout: 10_000 });
    const states = execFileSync("sinfo", ["--noheader", "--format=%t"], { encoding: "utf8", timeout: 10_000 }).split("\n").map((s) => s.trim().replace(/\*$/, ""));
    if (!states.some((s) => s === "idle" || s === "mix" || s === "alloc")) why = `sinfo shows no usable node (states: ${states.filter(Boolean).join(", ") || "none"})`;
  } catch (err) {
    why = `scontrol ping / sinfo failed: ${(err as Error).message.split("\n")[0]}`;
  }
  const reachable = why === "";
  return {
    run: reachable || process.env.INFRADEV_REQUIRE_SLURM === "1",
    reachable,
    whyNot: `INFRADEV_REQUIRE_SLURM=1 but no Slurm cluster answers here (${why}): run .ci/slurm-setup.sh as root`,
  };
}
