import { TaskError } from "../../task/public/errors.js";
import type { TaskSpec } from "../../task/public/schema.js";
import type { Canary, InstallMap } from "../workspace/test-renaming.js";

/**
 * task.yaml's `official_tests` turned into the official sessions' arguments, in this run's installed
 * (random) names: the selected test modules, plus the official canary modules (they must run), and
 * a `--deselect` per left-out case. The canaries that can run are those of the selected modules and
 * the canary modules themselves: a twin appended to a module that is not selected never runs, and
 * must not then read as a missing canary.
 */
export interface OfficialSelection {
  paths: string[];
  options: string[];
  canaries: (c: Canary) => boolean;
}

const splitParams = (part: string): [string, string] => {
  const i = part.indexOf("[");
  return i < 0 ? [part, ""] : [part.slice(0, i), part.slice(i)];
};

/** The installed id of a real official case id (`file.py::name[params]` or `file.py::Class::method[params]`), or null. */
export function installedIdOf(map: InstallMap, real: string): string | null {
  const parts = real.split("::");
  const entry = Object.entries(map.files).find(([, f]) => f.suite === "official" && f.real === parts[0]);
  if (!entry) return null;
  const [installedFile, f] = entry;
  const inverse = (names: Record<string, string>, name: string) => Object.entries(names).find(([, r]) => r === name)?.[0] ?? name;
  const out = [installedFile];
  if (parts.length > 1) {
    const [top, topParams] = splitParams(parts[1]!);
    const instTop = inverse(f.names, top);
    out.push(`${instTop}${parts.length === 2 ? topParams : ""}`);
    if (parts.length > 2) {
      const [method, params] = splitParams(parts[2]!);
      out.push(`${inverse(f.methods[instTop] ?? {}, method)}${parts.length === 3 ? params : ""}`, ...parts.slice(3));
    }
  }
  return out.join("::");
}

export function officialSelection(spec: Pick<TaskSpec, "official_tests" | "pass_to_pass" | "id">, map: InstallMap): OfficialSelection | null {
  const sel = spec.official_tests;
  if (!sel) return null;
  const fileOf = (real: string) => Object.entries(map.files).find(([, f]) => f.suite === "official" && f.real === real)?.[0];
  const installed = (field: string, list: readonly string[]) =>
    list.map((p) => {
      const inst = fileOf(p);
      if (!inst) throw new TaskError(`task ${spec.id}: task.yaml: ${field}: "${p}" is not a test module of the post-PR tests`);
      return inst;
    });
  const deselected = (field: string, list: ReadonlyArray<{ id: string }>) =>
    list.map((d) => {
      const inst = installedIdOf(map, d.id);
      if (!inst) throw new TaskError(`task ${spec.id}: task.yaml: ${field}: "${d.id}" names no module of the post-PR tests`);
      return `--deselect=${inst}`;
    });
  // The pass-to-pass modules run in the same sessions as the PR's own (their cases are told apart by
  // their real module afterwards: sessions.ts mapSession): one launcher start-up, not two.
  const p2p = spec.pass_to_pass;
  const paths: string[] | null = sel.paths ? [...installed("official_tests.paths", sel.paths), ...installed("pass_to_pass.paths", p2p?.paths ?? [])] : null;
  const options = [...deselected("official_tests.deselect", sel.deselect), ...deselected("pass_to_pass.deselect", p2p?.deselect ?? [])];
  if (paths === null) return { paths: [], options, canaries: () => true };
  const canaryFiles = Object.entries(map.files)
    .filter(([, f]) => f.suite === "canary" && !f.real.includes("/probe/"))
    .map(([k]) => k);
  const runs = new Set([...paths, ...canaryFiles]);
  return { paths: [...paths, ...canaryFiles], options, canaries: (c) => runs.has(c.installed.split("::")[0]!) };
}
