import type { Command } from "commander";
import type { EngineOptions } from "../campaign/engines/types.js";
import { UsageError } from "../lib/errors.js";

/**
 * The Slurm engine's flags, shared by `eval` and `grade-many` (ignored by the local engine, refused
 * with it so a forgotten `--engine slurm` is not silently run here).
 */

export interface SlurmCliFlags {
  engine: string;
  partition?: string;
  account?: string;
  qos?: string;
  sbatchArg: string[];
}

export function addSlurmOptions(cmd: Command): Command {
  return cmd
    .option("--partition <name>", "slurm: the partition (sbatch --partition)")
    .option("--account <name>", "slurm: the account charged (sbatch --account)")
    .option("--qos <name>", "slurm: the quality of service (sbatch --qos)")
    .option("--sbatch-arg <word>", "slurm: one more sbatch word, after ours (repeatable; e.g. --sbatch-arg=--constraint=h100 or --sbatch-arg=--time=30 to override the computed limit)", (v: string, prev: string[]) => [...prev, v], [] as string[]);
}

/** EngineOptions.slurm from the flags; a slurm flag without `--engine slurm` is a usage error. */
export function slurmEngineOptions(flags: SlurmCliFlags, command: string): EngineOptions["slurm"] {
  const given = (["partition", "account", "qos"] as const).filter((k) => flags[k] !== undefined).map((k) => `--${k}`);
  if (flags.sbatchArg.length) given.push("--sbatch-arg");
  if (flags.engine !== "slurm") {
    if (given.length) throw new UsageError(`${command}: ${given.join(", ")} only appl${given.length > 1 ? "y" : "ies"} with --engine slurm (got --engine ${flags.engine})`);
    return undefined;
  }
  for (const k of ["partition", "account", "qos"] as const) {
    const v = flags[k];
    if (v !== undefined && (!v.trim() || v.startsWith("-") || /\s/.test(v))) throw new UsageError(`${command}: --${k} ${JSON.stringify(v)} is not a Slurm ${k} name`);
  }
  for (const w of flags.sbatchArg) if (!w.startsWith("-")) throw new UsageError(`${command}: --sbatch-arg ${JSON.stringify(w)}: expected an sbatch option (starting with '-'), e.g. --sbatch-arg=--exclusive`);
  return { partition: flags.partition, account: flags.account, qos: flags.qos, sbatchArgs: flags.sbatchArg };
}
