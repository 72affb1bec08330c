/**
 * The pre-check every submission passes before anything is applied: a pure function over the patch
 * bytes. It reads every header that names a path (`diff --git`, `---`/`+++`, `rename`/`copy
 * from/to`) and every mode line, and refuses, as a whole, a patch that
 * - is not a text diff (NUL bytes, not UTF-8) or has no file headers at all;
 * - names a path outside the repo (absolute, or with a `..` component) or inside `.git`;
 * - creates or changes a symlink (mode 120000) — the first half of "plant a link, write through it" —
 *   or a submodule (mode 160000).
 * Writes through a symlink that already exists in the repo are caught in apply.ts, which sees the tree.
 */

export type PatchCheck = { ok: true; paths: string[] } | { ok: false; reason: string };

const DEV_NULL = "/dev/null";

/** Decodes a git C-quoted path ("a/x\\ty") or returns the token as is. */
export function unquoteGitPath(token: string): string {
  if (!(token.startsWith('"') && token.endsWith('"') && token.length >= 2)) return token;
  const body = token.slice(1, -1);
  const bytes: number[] = [];
  const esc: Record<string, number> = { a: 7, b: 8, t: 9, n: 10, v: 11, f: 12, r: 13, '"': 34, "\\": 92 };
  for (let i = 0; i < body.length; i++) {
    const ch = body[i]!;
    if (ch !== "\\") {
      bytes.push(...Buffer.from(ch, "utf8"));
      continue;
    }
    const next = body[i + 1] ?? "";
    if (/[0-7]/.test(next)) {
      bytes.push(parseInt(body.slice(i + 1, i + 4), 8));
      i += 3;
    } else {
      bytes.push(esc[next] ?? next.charCodeAt(0));
      i += 1;
    }
  }
  return Buffer.from(bytes).toString("utf8");
}

/** The two paths of a `diff --git` line; null when unquoted names with spaces make it ambiguous. */
function diffGitPaths(rest: string): string[] | null {
  const quoted = /^("(?:[^"\\]|\\.)*"|\S+) ("(?:[^"\\]|\\.)*"|\S+)$/.exec(rest);
  if (quoted) return [unquoteGitPath(quoted[1]!), unquoteGitPath(quoted[2]!)];
  // "a/x y b/x y": same name on both sides.
  const half = (rest.length - 1) / 2;
  if (Number.isInteger(half) && rest[half] === " ") {
    const [l, r] = [rest.slice(0, half), rest.slice(half + 1)];
    if (l.slice(2) === r.slice(2)) return [l, r];
  }
  return null;
}

/** `--- a/x\t2024-01-01 ...` → `a/x` (a tab ends the name in traditional diffs). */
function headerPath(rest: string): string {
  const t = rest.startsWith('"') ? rest : rest.split("\t")[0]!.trimEnd();
  return unquoteGitPath(t);
}

/** Drops the `a/` / `b/` prefix (`-p1`), as git apply and `patch -p1` do. */
function stripPrefix(p: string): string | null {
  const i = p.indexOf("/");
  return i < 0 ? null : p.slice(i + 1);
}

/** Why a repo-relative path is unsafe, or null. */
export function unsafePathReason(path: string): string | null {
  if (path.includes("\0")) return `path contains NUL: ${JSON.stringify(path)}`;
  if (path.startsWith("/") || /^[A-Za-z]:[\\/]/.test(path)) return `absolute path "${path}" (writes outside the repo)`;
  const parts = path.split(/[\\/]/);
  if (parts.includes("..")) return `path "${path}" climbs out of the repo ("..")`;
  if (parts.some((p) => p.toLowerCase() === ".git")) return `path "${path}" touches the repo's .git folder`;
  if (path === "" || parts.every((p) => p === "" || p === ".")) return `empty path in a header`;
  return null;
}

function looksBinary(bytes: Uint8Array): boolean {
  if (bytes.includes(0)) return true;
  try {
    new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    return false;
  } catch {
    return true;
  }
}

/** What is left of the hunk being read, in old and new lines; both 0 outside a hunk. */
interface HunkLeft {
  old: number;
  new: number;
}

/** Inside a hunk, what `line` is, counted off `left`; null outside one (a line that ends it resets `left`). */
function hunkLine(left: HunkLeft, line: string): "context" | "removed" | "added" | "note" | null {
  if (left.old <= 0 && left.new <= 0) return null;
  const c = line[0];
  if (c === " " || line === "") {
    left.old--;
    left.new--;
    return "context";
  }
  if (c === "-") {
    left.old--;
    return "removed";
  }
  if (c === "+") {
    left.new--;
    return "added";
  }
  if (c === "\\") return "note";
  left.old = 0;
  left.new = 0;
  return null;
}

/** The hunk an `@@ -a,b +c,d @@` line opens: its line counts and the first new line number. */
function hunkHeader(line: string): { left: HunkLeft; newStart: number } | null {
  const m = /^@@ -\d+(?:,(\d+))? \+(\d+)(?:,(\d+))? @@/.exec(line);
  if (!m) return null;
  return { left: { old: m[1] === undefined ? 1 : Number(m[1]), new: m[3] === undefined ? 1 : Number(m[3]) }, newStart: Number(m[2]) };
}

/** One line a patch adds: its file (the `+++` path without `b/`), its number in the new file, its text. */
export interface AddedLine {
  file: string;
  line: number;
  text: string;
}

/**
 * The lines a unified diff adds, read with checkPatch's rules: hunk lengths decide what is inside a
 * hunk (there `+++ x` is an added line, not a header), `+++` names are unquoted and cut at a tab,
 * files deleted (`+++ /dev/null`) add nothing.
 */
export function addedLines(text: string): AddedLine[] {
  const out: AddedLine[] = [];
  let file: string | null = null;
  const left: HunkLeft = { old: 0, new: 0 };
  let newLine = 0;
  for (const raw of text.split("\n")) {
    const line = raw.replace(/\r$/, "");
    const kind = hunkLine(left, line);
    if (kind === "added" && file !== null) out.push({ file, line: newLine, text: line.slice(1) });
    if (kind === "added" || kind === "context") newLine++;
    if (kind !== null) continue;
    const hunk = hunkHeader(line);
    if (hunk) {
      Object.assign(left, hunk.left);
      newLine = hunk.newStart;
      continue;
    }
    const m = /^\+\+\+ (.*)$/.exec(line);
    if (m) {
      const p = headerPath(m[1]!);
      file = p === DEV_NULL ? null : (stripPrefix(p) ?? p);
    }
  }
  return out;
}

/** Default cap on a submission's size: a real PR's diff is kilobytes to a few megabytes. */
export const DEFAULT_MAX_PATCH_BYTES = 16 * 1024 * 1024;

/** The patch size cap in force: INFRADEV_MAX_PATCH_BYTES when set to a positive integer, else the default. */
export function maxPatchBytes(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.INFRADEV_MAX_PATCH_BYTES;
  if (raw === undefined || raw === "") return DEFAULT_MAX_PATCH_BYTES;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n <= 0) throw new Error(`INFRADEV_MAX_PATCH_BYTES: expected a positive integer number of bytes, got ${JSON.stringify(raw)}`);
  return n;
}

export interface CheckPatchOptions {
  /** Larger patches are refused whole (default: maxPatchBytes()). */
  maxBytes?: number;
}

export function checkPatch(bytes: Uint8Array, opts: CheckPatchOptions = {}): PatchCheck {
  const cap = opts.maxBytes ?? maxPatchBytes();
  if (bytes.length > cap) return { ok: false, reason: `patch is ${bytes.length} bytes, over the limit of ${cap} bytes (INFRADEV_MAX_PATCH_BYTES / --max-patch-bytes)` };
  if (looksBinary(bytes)) return { ok: false, reason: "patch file is binary (NUL bytes or not UTF-8), not a text diff" };
  const text = Buffer.from(bytes).toString("utf8");
  const paths = new Set<string>();
  let headers = 0;
  const fail = (lineNo: number, why: string): PatchCheck => ({ ok: false, reason: `line ${lineNo}: ${why}` });
  const lines = text.split("\n");
  // Whether we are inside a hunk (where "--- x" is a removed line, not a header).
  const hunkLeft: HunkLeft = { old: 0, new: 0 };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.replace(/\r$/, "");
    const n = i + 1;
    if (hunkLine(hunkLeft, line) !== null) continue;
    const hunk = hunkHeader(line);
    if (hunk) {
      Object.assign(hunkLeft, hunk.left);
      continue;
    }
    const named: string[] = [];
    let m: RegExpExecArray | null;
    if ((m = /^diff --git (.*)$/.exec(line))) {
      headers++;
      const two = diffGitPaths(m[1]!);
      if (two) named.push(...two.map((p) => stripPrefix(p) ?? p));
      else {
        // Ambiguous names with spaces: check every space-separated piece; rename/---/+++ lines give the real names.
        for (const piece of m[1]!.split(" ")) {
          const why = unsafePathReason(stripPrefix(piece) ?? piece);
          if (why && !why.startsWith("empty")) return fail(n, why);
        }
      }
    } else if ((m = /^(---|\+\+\+) (.*)$/.exec(line))) {
      headers++;
      const p = headerPath(m[2]!);
      if (p !== DEV_NULL) {
        if (p.startsWith("/")) return fail(n, unsafePathReason(p)!);
        named.push(stripPrefix(p) ?? p);
      }
    } else if ((m = /^Index: (.*)$/.exec(line))) {
      // GNU patch may take the file name from an Index: line: both its raw and its -p1 form must be safe.
      const p = headerPath(m[1]!);
      const why = unsafePathReason(p);
      if (why) return fail(n, why);
      named.push(stripPrefix(p) ?? p);
    } else if ((m = /^(rename|copy) (from|to) (.*)$/.exec(line))) {
      named.push(unquoteGitPath(m[3]!));
    } else if ((m = /^(new file mode|new mode|old mode|deleted file mode) (\d+)$/.exec(line))) {
      const mode = m[2]!;
      if (mode.startsWith("120") && m[1] !== "deleted file mode") return fail(n, `creates or changes a symlink (mode ${mode}); symlinks are refused in submissions`);
      if (mode.startsWith("160")) return fail(n, `adds or changes a submodule (mode ${mode}); refused in submissions`);
    } else if ((m = /^index [0-9a-f]+\.\.[0-9a-f]+ (\d+)$/.exec(line))) {
      if (m[1]!.startsWith("120")) return fail(n, "changes a symlink's target; symlinks are refused in submissions");
      if (m[1]!.startsWith("160")) return fail(n, "changes a submodule; refused in submissions");
    }
    for (const p of named) {
      const why = unsafePathReason(p);
      if (why) return fail(n, why);
      paths.add(p);
    }
  }
  if (headers === 0) return { ok: false, reason: "not a patch: no file headers (`diff --git` or `---`/`+++`) found" };
  return { ok: true, paths: [...paths].sort() };
}

/** What one `diff --git` section of a patch promises about its file, for the check after applying. */
export interface PatchSection {
  /** The path after the change (`b/` side), or the old path when the file is deleted. */
  path: string;
  created: boolean;
  deleted: boolean;
  /** A `GIT binary patch` section. */
  binary: boolean;
  /** The post-image blob id of the `index` line (full for binary sections, usually abbreviated for text). */
  newBlob: string | null;
  /** Number of text hunks. */
  hunks: number;
}

/**
 * The `diff --git` sections of a patch (sections of a plain unified diff without `diff --git` are
 * not listed: they carry no blob ids and `patch` reports their failures itself).
 */
export function patchSections(text: string): PatchSection[] {
  const out: PatchSection[] = [];
  let cur: PatchSection | null = null;
  const left: HunkLeft = { old: 0, new: 0 };
  for (const raw of text.split("\n")) {
    const line = raw.replace(/\r$/, "");
    if (hunkLine(left, line) !== null) continue;
    const hunk = hunkHeader(line);
    if (hunk) {
      Object.assign(left, hunk.left);
      if (cur) cur.hunks++;
      continue;
    }
    let m: RegExpExecArray | null;
    if ((m = /^diff --git (.*)$/.exec(line))) {
      const two = diffGitPaths(m[1]!);
      cur = { path: two ? (stripPrefix(two[1]!) ?? two[1]!) : "", created: false, deleted: false, binary: false, newBlob: null, hunks: 0 };
      out.push(cur);
      continue;
    }
    if (!cur) continue;
    if ((m = /^\+\+\+ (.*)$/.exec(line))) {
      const p = headerPath(m[1]!);
      if (p !== DEV_NULL) cur.path = stripPrefix(p) ?? p;
    } else if ((m = /^--- (.*)$/.exec(line)) && !cur.path) {
      const p = headerPath(m[1]!);
      if (p !== DEV_NULL) cur.path = stripPrefix(p) ?? p;
    } else if ((m = /^rename to (.*)$/.exec(line))) cur.path = unquoteGitPath(m[1]!);
    else if (/^new file mode /.test(line)) cur.created = true;
    else if (/^deleted file mode /.test(line)) cur.deleted = true;
    else if ((m = /^index ([0-9a-f]+)\.\.([0-9a-f]+)/.exec(line))) cur.newBlob = m[2]!;
    else if (line === "GIT binary patch") cur.binary = true;
  }
  return out;
}
