import { execa } from "execa";
import { join } from "node:path";
import { hostPythonDir } from "../../lib/paths.js";

/**
 * Figure 6: the assertions in the test files each submission adds or changes, classified by
 * python/host/infradev_assertions.py with Python's `ast` (host-side, on text: the agent's code is
 * parsed, never imported). The interpreter: $INFRADEV_HOST_PYTHON, else /usr/bin/python3's PATH name.
 */
export const ASSERTION_CLASSES = ["functional", "structure", "numerical", "error_path", "resource"] as const;
export type AssertionClass = (typeof ASSERTION_CLASSES)[number];

export interface ClassifiedAssertion {
  line: number;
  class: AssertionClass;
  why: string | null;
  code: string;
}

export interface ClassifiedFile {
  path: string;
  status: "added" | "changed";
  assertions: ClassifiedAssertion[];
  unparsed_added_lines: number;
}

export interface PatchAssertions {
  id: string;
  files: ClassifiedFile[];
  counts: Record<AssertionClass, number>;
  errors: string[];
}

export async function classifyAssertions(patches: Array<{ id: string; patch: string }>, python = process.env.INFRADEV_HOST_PYTHON ?? "python3"): Promise<PatchAssertions[]> {
  if (patches.length === 0) return [];
  const script = join(hostPythonDir(), "infradev_assertions.py");
  const r = await execa(python, ["-I", "-S", script], {
    input: JSON.stringify({ patches }),
    reject: false,
    maxBuffer: 256 * 1024 * 1024,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
    extendEnv: false,
  });
  if ((r as { code?: string }).code === "ENOENT") throw new Error(`report: cannot run the Python interpreter "${python}" for Figure 6; set INFRADEV_HOST_PYTHON to a Python >= 3.8`);
  if (r.exitCode !== 0) throw new Error(`report: infradev_assertions.py failed (exit ${r.exitCode ?? r.signal}): ${String(r.stderr).trim() || r.shortMessage}`);
  return (JSON.parse(String(r.stdout)) as { patches: PatchAssertions[] }).patches;
}
