import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { UsageError } from "../../lib/errors.js";
import { RUN_ID_PART, type AgentConfig } from "../types.js";

/**
 * The agents of an `eval`: repeated `--agent NAME=HARNESS:MODEL` flags and/or an `--agents F.yaml`
 * list of AgentConfig fields, with the command line's settings as defaults. Checked before anything
 * runs: names must make run folders, a real model needs an endpoint and its key variable set, and
 * the scripted stand-in (`standin:…`) takes none.
 */

export interface AgentDefaults {
  skill: boolean;
  recoveries: number;
  time_limit_min: number;
  provider_url: string | null;
  provider_key_env: string | null;
}

/** `infradev run`'s own defaults (cli/run.ts): a campaign without flags runs what a bare `run` would. */
export const RUN_DEFAULTS: AgentDefaults = { skill: true, recoveries: 3, time_limit_min: 150, provider_url: null, provider_key_env: null };

const HARNESSES = ["codex", "opencode"] as const;

const AgentFileEntry = z.strictObject({
  name: z.string().optional(),
  harness: z.enum(HARNESSES),
  model: z.string().min(1),
  provider_url: z.string().nullable().optional(),
  provider_key_env: z.string().nullable().optional(),
  skill: z.boolean().optional(),
  recoveries: z.number().int().min(0).optional(),
  time_limit_min: z.number().positive().optional(),
});

/** `NAME=HARNESS:MODEL` or `HARNESS:MODEL` (name = harness). The model may itself hold ':' (`standin:golden`). */
export function parseAgentFlag(v: string, d: AgentDefaults): AgentConfig {
  const m = /^(?:([^=]+)=)?([a-z]+):(.+)$/.exec(v);
  if (!m) throw new UsageError(`--agent "${v}": expected NAME=HARNESS:MODEL (e.g. gold=codex:standin:golden, or codex:gpt-5 to name it codex)`);
  const harness = m[2]!;
  if (!(HARNESSES as readonly string[]).includes(harness)) throw new UsageError(`--agent "${v}": harness "${harness}" is not one of ${HARNESSES.join(", ")}`);
  return finishAgent({ name: m[1] ?? harness, harness: harness as AgentConfig["harness"], model: m[3]! }, d, `--agent "${v}"`);
}

function finishAgent(a: z.infer<typeof AgentFileEntry>, d: AgentDefaults, where: string): AgentConfig {
  const name = a.name ?? a.harness;
  if (!RUN_ID_PART.test(name) || name.includes("--")) throw new UsageError(`${where}: agent name "${name}" cannot name a run folder: use letters, digits, '.', '_' and single '-'`);
  const standin = a.model.startsWith("standin:");
  const provider_url = standin ? null : (a.provider_url ?? d.provider_url);
  const provider_key_env = standin ? null : (a.provider_key_env ?? d.provider_key_env);
  if (standin && (a.provider_url || a.provider_key_env)) throw new UsageError(`${where}: the stand-in model (${a.model}) takes no provider_url / provider_key_env`);
  if (!standin) {
    if (!provider_url) throw new UsageError(`${where}: model "${a.model}" needs an endpoint: --provider-url URL (or provider_url in the agents file)`);
    if (!/^https?:\/\//.test(provider_url)) throw new UsageError(`${where}: provider_url must be an http(s) URL, got "${provider_url}"`);
    if (!provider_key_env) throw new UsageError(`${where}: model "${a.model}" needs --provider-key-env VAR (or provider_key_env in the agents file): the variable holding the API key`);
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(provider_key_env)) throw new UsageError(`${where}: provider_key_env must be a variable name, got "${provider_key_env}"`);
    if (!process.env[provider_key_env]) throw new UsageError(`${where}: ${provider_key_env} (the API key's variable) is not set`);
  }
  return {
    name,
    harness: a.harness,
    model: a.model,
    provider_url,
    provider_key_env,
    skill: a.skill ?? d.skill,
    recoveries: a.recoveries ?? d.recoveries,
    time_limit_min: a.time_limit_min ?? d.time_limit_min,
  };
}

/** `--agents F.yaml`: a YAML (or JSON) list of AgentConfig fields; `name` defaults to the harness. */
export function readAgentsFile(file: string, d: AgentDefaults): AgentConfig[] {
  let raw: unknown;
  try {
    raw = parseYaml(readFileSync(file, "utf8"));
  } catch (e) {
    throw new UsageError(`--agents ${file}: ${(e as NodeJS.ErrnoException).code === "ENOENT" ? "no such file" : `not valid YAML: ${(e as Error).message.split("\n")[0]}`}`);
  }
  if (!Array.isArray(raw) || raw.length === 0) throw new UsageError(`--agents ${file}: expected a non-empty list of agents ({harness, model, name?, provider_url?, provider_key_env?, skill?, recoveries?, time_limit_min?})`);
  return raw.map((entry, i) => {
    const r = AgentFileEntry.safeParse(entry);
    if (!r.success) {
      const issue = r.error.issues[0]!;
      throw new UsageError(`--agents ${file}: [${i}]${issue.path.length ? `.${issue.path.join(".")}` : ""}: ${issue.message}`);
    }
    return finishAgent(r.data, d, `--agents ${file}: [${i}]`);
  });
}

/** Every agent has its own name (it names run folders). */
export function checkAgentNames(agents: AgentConfig[]): void {
  if (!agents.length) throw new UsageError("eval: no agent: give --agent NAME=HARNESS:MODEL (repeatable) or --agents F.yaml");
  const seen = new Set<string>();
  for (const a of agents) {
    if (seen.has(a.name)) throw new UsageError(`eval: two agents are named "${a.name}": name them apart (--agent NAME=HARNESS:MODEL)`);
    seen.add(a.name);
  }
}
