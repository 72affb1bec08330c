/**
 * A task's `env.pythonpath` folders (import-only stand-ins for packages the image lacks) in a
 * sandbox: the host copies each folder into a private temp folder, the sandbox binds the copy
 * read-only at a fixed path (/opt/infradev/pythonpath/<i>; `none` uses the copy's host path), and
 * every exec gets those paths first on PYTHONPATH, ahead of whatever PYTHONPATH the exec (or the
 * task's env.vars) sets.
 *
 * Why a copy: the grader and the server hide the task folder inside every sandbox (hidden/ is in
 * it), so it cannot be bound as it is; a copy made by the host, walked without following any link
 * out of the folder the task named, also keeps the task folder's own path out of the sandbox's
 * mountinfo. Why a fixed path: PYTHONPATH names only paths the host chose, never one inside the
 * workspace, which the code under test controls.
 */
import { chmodSync, copyFileSync, lstatSync, mkdirSync, readdirSync, realpathSync, rmSync, statSync } from "node:fs";
import { basename, join, posix } from "node:path";
import { isPathInside } from "../lib/path-validation.js";
import { privateTempDir } from "./log-dir.js";
import type { ExecOptions, Sandbox } from "./types.js";

/** Where the copies appear inside the local and docker sandboxes: <root>/<index>. */
export const SANDBOX_PYTHONPATH_ROOT = "/opt/infradev/pythonpath";

/** A folder to put on PYTHONPATH, and the folder no link inside it may lead out of (the task folder). */
export interface PythonPathFolder {
  host: string;
  /** Default: the folder itself. */
  boundary?: string;
}

export interface PythonPathCopies {
  /** The private temp folder holding every copy (removed by release()). */
  dir: string;
  /** One host folder per entry, in order. */
  copies: string[];
  release(): void;
}

/**
 * Copies each folder into one private temp folder: regular files and folders as they are, a link
 * to a file inside the boundary as that file's content; any other link, or anything that is not a
 * file or a folder, is an error (the task loader refuses those too, this checks again at copy
 * time). `__pycache__` folders are left out. Files end up 0444 and folders 0555: nothing run as the
 * same user (the `none` backend) writes to them by accident.
 */
export function copyPythonPathFolders(folders: PythonPathFolder[]): PythonPathCopies {
  const dir = privateTempDir("infradev-pythonpath-");
  const release = () => {
    makeWritable(dir);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const copies = folders.map((f, i) => {
      const src = realpathSync(f.host);
      const boundary = realpathSync(f.boundary ?? f.host);
      if (!isPathInside(boundary, src)) throw new Error(`pythonpath folder ${f.host} lies outside ${boundary}`);
      if (!statSync(src).isDirectory()) throw new Error(`pythonpath folder ${f.host} is not a folder`);
      const dest = join(dir, `${i}-${basename(src)}`);
      copyTree(src, dest, boundary);
      return dest;
    });
    for (const c of copies) makeReadOnly(c);
    return { dir, copies, release };
  } catch (e) {
    release();
    throw e;
  }
}

function copyTree(src: string, dest: string, boundary: string): void {
  mkdirSync(dest, { mode: 0o755 });
  for (const e of readdirSync(src, { withFileTypes: true })) {
    const from = join(src, e.name);
    const to = join(dest, e.name);
    if (e.isDirectory()) {
      if (e.name !== "__pycache__") copyTree(from, to, boundary);
    } else if (e.isFile()) {
      copyFileSync(from, to);
    } else if (e.isSymbolicLink()) {
      let target: string;
      try {
        target = realpathSync(from);
      } catch {
        throw new Error(`pythonpath: link ${from} leads nowhere`);
      }
      if (!isPathInside(boundary, target)) throw new Error(`pythonpath: link ${from} leads outside ${boundary} (to ${target})`);
      if (!lstatSync(target).isFile()) throw new Error(`pythonpath: link ${from} does not lead to a file`);
      copyFileSync(target, to);
    } else {
      throw new Error(`pythonpath: ${from} is neither a file, a folder nor a link`);
    }
  }
}

function makeReadOnly(p: string): void {
  const st = lstatSync(p);
  if (st.isDirectory()) {
    for (const name of readdirSync(p)) makeReadOnly(join(p, name));
    chmodSync(p, 0o555);
  } else if (st.isFile()) {
    chmodSync(p, 0o444);
  }
}

function makeWritable(p: string): void {
  let st;
  try {
    st = lstatSync(p);
  } catch {
    return;
  }
  if (!st.isDirectory()) return;
  chmodSync(p, 0o755);
  for (const name of readdirSync(p)) makeWritable(join(p, name));
}

/** The sandbox paths of n copies: /opt/infradev/pythonpath/0, /1, ... */
export function sandboxPythonPathDirs(n: number): string[] {
  return Array.from({ length: n }, (_, i) => posix.join(SANDBOX_PYTHONPATH_ROOT, String(i)));
}

/** `first` joined with ':' ahead of `rest` (an existing PYTHONPATH value; empty or unset adds nothing). */
export function prependPythonPath(first: string[], rest: string | undefined): string {
  return [...first, ...(rest ? [rest] : [])].join(":");
}

/**
 * The sandbox with `entries` first on every exec's PYTHONPATH; `fallback` is the PYTHONPATH the
 * exec would otherwise have (the sandbox's base environment's) when the exec's env sets none.
 * close() closes the sandbox, then runs `release` (removes the copies). Everything else is the
 * sandbox's own (a Proxy, so `instanceof` and backend-specific members still work).
 */
export function withPythonPath(sandbox: Sandbox, entries: string[], fallback: string | undefined, release: () => void): Sandbox {
  const exec: Sandbox["exec"] = (argv, opts: ExecOptions = {}) => {
    const env = { ...opts.env, PYTHONPATH: prependPythonPath(entries, opts.env?.PYTHONPATH ?? fallback) };
    return sandbox.exec(argv, { ...opts, env });
  };
  let closing: Promise<void> | null = null;
  const close = () =>
    (closing ??= (async () => {
      try {
        await sandbox.close();
      } finally {
        release();
      }
    })());
  return new Proxy(sandbox, {
    get(target, prop) {
      if (prop === "exec") return exec;
      if (prop === "close") return close;
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}
