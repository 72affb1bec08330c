/**
 * Pure readers of the files pytest takes its configuration from, just far enough to tell (a)
 * whether a change touched pytest's part of a file and (b) what `addopts` a config holds:
 *
 * - ini files (`pytest.ini`, `tox.ini`, `setup.cfg`), read as pytest's `iniconfig` reads them: a
 *   section starts at a line whose first character is `[`, a line starting with whitespace continues
 *   the previous value, `#` / `;` lines are comments. Hand-rolled on purpose: general INI libraries
 *   (npm `ini`, configparser-alikes) differ from iniconfig on continuation lines, inline comments and
 *   duplicate keys, and the point here is to see exactly what pytest sees;
 * - TOML (`pyproject.toml`, `pytest.toml`): smol-toml, in test-config.ts;
 * - `shlex.split` / `shlex.quote`, as pytest splits `addopts`.
 *
 * Where a reader cannot make sense of a text it returns null, and callers treat that as "changed".
 */

// ---------------------------------------------------------------- ini

/** Lines of the sections named (case-insensitively) in `names`: header plus non-blank, non-comment lines. */
export function iniSections(text: string, names: readonly string[]): string[] {
  const wanted = new Set(names.map((n) => n.toLowerCase()));
  const out: string[] = [];
  let inWanted = false;
  for (const raw of stripBom(text).split(/\r?\n/)) {
    const line = raw.trimEnd();
    const first = line.trimStart()[0];
    if (!line || first === "#" || first === ";") continue;
    if (line[0] === "[") {
      // iniconfig cuts comments off a header line before looking for the closing bracket.
      const head = line.split("#")[0]!.split(";")[0]!.trimEnd();
      const name = head.endsWith("]") ? head.slice(1, -1) : head.slice(1);
      inWanted = wanted.has(name.trim().toLowerCase());
      if (inWanted) out.push(`[${name.trim().toLowerCase()}]`);
      continue;
    }
    if (inWanted) out.push(line);
  }
  return out;
}

/** The `key` of an ini section as iniconfig builds it (continuation lines joined by newlines); null if absent. */
export function iniValue(sectionLines: readonly string[], key: string): string | null {
  let value: string | null = null;
  let current: string | null = null;
  for (const line of sectionLines) {
    if (line.startsWith("[")) {
      current = null;
      continue;
    }
    if (/^\s/.test(line)) {
      if (current === key && value !== null) value = value ? `${value}\n${line.trim()}` : line.trim();
      continue;
    }
    const eq = line.indexOf("=");
    const colon = line.indexOf(":");
    // iniconfig splits on "=" unless the name part would hold a ":".
    const cut = eq >= 0 && (colon < 0 || colon > eq) ? eq : colon;
    if (cut < 0) {
      current = null;
      continue;
    }
    current = line.slice(0, cut).trim();
    if (current === key) value = line.slice(cut + 1).trim();
  }
  return value;
}

// ---------------------------------------------------------------- shlex

const SHLEX_BLANK = " \t\r\n";

/** Python's `shlex.split(s)` (POSIX mode, no comments); null where shlex raises. */
export function shlexSplit(s: string): string[] | null {
  const out: string[] = [];
  let tok: string | null = null;
  for (let i = 0; i < s.length; i++) {
    const c = s[i]!;
    if (SHLEX_BLANK.includes(c)) {
      if (tok !== null) out.push(tok);
      tok = null;
    } else if (c === "'") {
      const end = s.indexOf("'", i + 1);
      if (end < 0) return null;
      tok = (tok ?? "") + s.slice(i + 1, end);
      i = end;
    } else if (c === '"') {
      tok = tok ?? "";
      let j = i + 1;
      for (; j < s.length && s[j] !== '"'; j++) {
        // Inside double quotes a backslash escapes only a quote or a backslash.
        if (s[j] === "\\" && (s[j + 1] === '"' || s[j + 1] === "\\")) j++;
        tok += s[j];
      }
      if (j >= s.length) return null;
      i = j;
    } else if (c === "\\") {
      if (i + 1 >= s.length) return null;
      tok = (tok ?? "") + s[++i];
    } else tok = (tok ?? "") + c;
  }
  if (tok !== null) out.push(tok);
  return out;
}

/** Python's `shlex.quote`. */
export function shlexQuote(s: string): string {
  if (s !== "" && /^[\w@%+=:,./-]+$/.test(s)) return s;
  return `'${s.replace(/'/g, `'"'"'`)}'`;
}

export function stripBom(text: string): string {
  return text.startsWith("\ufeff") ? text.slice(1) : text;
}
