/**
 * The host side of python/host/infradev_author.py (the author's `ast` questions: which tests a PR
 * changes, what interface it adds, what its tests import). Run with -I -S: nothing from the
 * environment or a site folder changes what the stdlib-only helper imports.
 */
import { join } from "node:path";
import { execa } from "execa";
import { hostPythonDir } from "../lib/paths.js";

/** The interpreter for host-side helpers: the caller's, else $INFRADEV_HOST_PYTHON, else python3 on PATH. */
export function hostPython(python?: string): string {
  return python ?? process.env.INFRADEV_HOST_PYTHON ?? "python3";
}

export async function runAuthorHelper<T>(python: string | undefined, args: string[]): Promise<T> {
  return runHostScript<T>("infradev_author.py", python, args);
}

/** One command of a stdlib-only helper of python/host (infradev_author.py, infradev_mutate.py), JSON back. */
export async function runHostScript<T>(script: "infradev_author.py" | "infradev_mutate.py", python: string | undefined, args: string[]): Promise<T> {
  const exe = hostPython(python);
  const r = await execa(exe, ["-I", "-S", join(hostPythonDir(), script), ...args], {
    reject: false,
    maxBuffer: 256 * 1024 * 1024,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
    extendEnv: false,
  });
  if ((r as { code?: string }).code === "ENOENT") throw new Error(`cannot run the Python interpreter "${exe}": pass --host-python, or set INFRADEV_HOST_PYTHON to a Python >= 3.9`);
  if (r.exitCode !== 0) throw new Error(`${script} ${args[0]} failed (exit ${r.exitCode ?? r.signal}): ${String(r.stderr).trim() || r.shortMessage}`);
  return JSON.parse(String(r.stdout)) as T;
}

export interface SelectedTests {
  file: string;
  whole: boolean;
  reason: string;
  /** pytest node ids: the module, a class, or single tests. Empty for a deleted module. */
  nodes: string[];
  why?: Record<string, string>;
  /** The tests the selection covers (every test of a module selected whole), with their docstring's first line. */
  tests: Array<{ node: string; doc: string }>;
}

export interface InterfaceSymbol {
  file: string;
  qualname: string;
  kind: "module" | "function" | "class" | "method" | "attribute";
  change: "added" | "signature" | "body";
  signature: string;
  old_signature?: string;
  new_params?: string[];
  doc: string;
  line: number;
  public: boolean;
  referenced: boolean;
}

export interface ImportNeeds {
  visited: number;
  hard: Record<string, string[]>;
  guarded: Record<string, string[]>;
  /** Hard imports no installed distribution provides (null without --have). */
  missing: string[] | null;
}
