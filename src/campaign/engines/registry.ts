/** The campaign engines by name (apart from the interface in types.ts, which the engines import: no circle). */
import type { Engine, EngineOptions } from "./types.js";

export type EngineFactory = (opts: EngineOptions) => Promise<Engine>;

/**
 * The engines by name, loaded lazily (the slurm engine adds its line here). A new engine is one
 * entry: nothing else in eval or grade-many names an engine.
 */
export const ENGINES: Record<string, EngineFactory> = {
  local: async (opts) => new (await import("./local.js")).LocalEngine(opts),
  slurm: async (opts) => new (await import("./slurm.js")).SlurmEngine({ ...opts, ...opts.slurm }),
};

export function engineNames(): string[] {
  return Object.keys(ENGINES);
}

export async function engineFor(name: string, opts: EngineOptions = {}): Promise<Engine> {
  const make = ENGINES[name];
  if (!make) throw new Error(`unknown engine "${name}" (known: ${engineNames().join(", ")})`);
  return make(opts);
}
