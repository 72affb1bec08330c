import { stripBom } from "./pytest-config.js";

/**
 * A TOML scanner, pure, for pytest's config files: it knows tables, dotted and quoted keys, the four
 * string forms, arrays and inline tables — enough that a `[tool.pytest...]` inside a multi-line
 * string is not taken for a header and that `[tool]` + `pytest.ini_options.addopts = ...` is seen
 * under tool.pytest — and returns each entry's raw text rather than building values. Texts it
 * cannot read give null (callers treat that as changed).
 */

export interface TomlEntry {
  kind: "table" | "array-table" | "value";
  /** Full dotted key path (table path + key), unquoted. */
  path: string[];
  /** Raw text of the value (values only), as written. */
  raw: string;
}

class TomlSyntax extends Error {}

/** Every table header and key/value of a TOML text, in document order; null when it is not TOML. */
export function tomlEntries(text: string): TomlEntry[] | null {
  try {
    return new TomlScanner(stripBom(text).replace(/\r\n/g, "\n")).document();
  } catch (e) {
    if (e instanceof TomlSyntax) return null;
    throw e;
  }
}

const BARE_KEY = /[A-Za-z0-9_-]/;

class TomlScanner {
  private i = 0;
  constructor(private readonly s: string) {}

  document(): TomlEntry[] {
    const out: TomlEntry[] = [];
    let table: string[] = [];
    for (;;) {
      this.skipBlank(true);
      if (this.i >= this.s.length) return out;
      if (this.s[this.i] === "[") {
        const array = this.s[this.i + 1] === "[";
        this.i += array ? 2 : 1;
        this.skipBlank(false);
        table = this.key();
        this.skipBlank(false);
        this.expect(array ? "]]" : "]");
        out.push({ kind: array ? "array-table" : "table", path: table, raw: "" });
      } else {
        const key = this.key();
        this.skipBlank(false);
        this.expect("=");
        this.skipBlank(false);
        const start = this.i;
        this.value();
        out.push({ kind: "value", path: [...table, ...key], raw: this.s.slice(start, this.i).trim() });
      }
      this.lineEnd();
    }
  }

  private fail(why: string): never {
    throw new TomlSyntax(`${why} at offset ${this.i}`);
  }

  private expect(tok: string): void {
    if (!this.s.startsWith(tok, this.i)) this.fail(`expected ${tok}`);
    this.i += tok.length;
  }

  /** Spaces and tabs; with `newlines`, also newlines and comments. */
  private skipBlank(newlines: boolean): void {
    while (this.i < this.s.length) {
      const c = this.s[this.i]!;
      if (c === " " || c === "\t") this.i++;
      else if (newlines && c === "\n") this.i++;
      else if (newlines && c === "#") this.skipComment();
      else return;
    }
  }

  private skipComment(): void {
    while (this.i < this.s.length && this.s[this.i] !== "\n") this.i++;
  }

  private lineEnd(): void {
    this.skipBlank(false);
    if (this.s[this.i] === "#") this.skipComment();
    if (this.i < this.s.length && this.s[this.i] !== "\n") this.fail("expected the end of the line");
  }

  private key(): string[] {
    const parts: string[] = [];
    for (;;) {
      this.skipBlank(false);
      const c = this.s[this.i];
      if (c === '"' || c === "'") {
        const start = this.i;
        this.string();
        const decoded = decodeTomlString(this.s.slice(start, this.i));
        if (decoded === null) this.fail("bad quoted key");
        parts.push(decoded);
      } else {
        const start = this.i;
        while (this.i < this.s.length && BARE_KEY.test(this.s[this.i]!)) this.i++;
        if (this.i === start) this.fail("expected a key");
        parts.push(this.s.slice(start, this.i));
      }
      this.skipBlank(false);
      if (this.s[this.i] !== ".") return parts;
      this.i++;
    }
  }

  private value(): void {
    const c = this.s[this.i];
    if (c === '"' || c === "'") return this.string();
    if (c === "[") {
      this.array();
      return;
    }
    if (c === "{") {
      this.i++;
      for (;;) {
        // TOML 1.1 allows newlines in inline tables; accepting them here only widens what is read.
        this.skipBlank(true);
        if (this.s[this.i] === "}") break;
        this.key();
        this.skipBlank(false);
        this.expect("=");
        this.skipBlank(false);
        this.value();
        this.skipBlank(true);
        if (this.s[this.i] === ",") this.i++;
        else if (this.s[this.i] !== "}") this.fail("expected , or } in an inline table");
      }
      this.i++;
      return;
    }
    // Numbers, booleans, dates (which may hold one space): up to a delimiter.
    const start = this.i;
    while (this.i < this.s.length && !",]}#\n".includes(this.s[this.i]!)) this.i++;
    while (this.i > start && /[ \t]/.test(this.s[this.i - 1]!)) this.i--;
    if (this.i === start) this.fail("expected a value");
  }

  /** Moves past an array; returns the raw text of its items. */
  private array(): string[] {
    const items: string[] = [];
    this.expect("[");
    for (;;) {
      this.skipBlank(true);
      if (this.s[this.i] === "]") break;
      const start = this.i;
      this.value();
      items.push(this.s.slice(start, this.i));
      this.skipBlank(true);
      if (this.s[this.i] === ",") this.i++;
      else if (this.s[this.i] !== "]") this.fail("expected , or ] in an array");
    }
    this.i++;
    return items;
  }

  /** The whole text is one array: its items' raw text. */
  arrayItems(): string[] {
    const items = this.array();
    this.skipBlank(true);
    if (this.i < this.s.length) this.fail("text after the array");
    return items;
  }

  /** Moves past one string of any of the four kinds. */
  private string(): void {
    const q = this.s[this.i]!;
    const multi = this.s.startsWith(q.repeat(3), this.i);
    this.i += multi ? 3 : 1;
    while (this.i < this.s.length) {
      const c = this.s[this.i]!;
      if (q === '"' && c === "\\") {
        this.i += 2;
        continue;
      }
      if (!multi && c === "\n") this.fail("newline in a single-line string");
      if (c === q && (!multi || this.s.startsWith(q.repeat(3), this.i))) {
        if (!multi) {
          this.i++;
          return;
        }
        // Up to two quotes may sit right before the closing three ("""a"""" is `a"`).
        let n = 3;
        while (n < 5 && this.s[this.i + n] === q) n++;
        this.i += n;
        return;
      }
      this.i++;
    }
    this.fail("unterminated string");
  }
}

/** The value of one TOML string literal (any of the four kinds); null when it is not one. */
export function decodeTomlString(raw: string): string | null {
  const q = raw[0];
  if (q !== '"' && q !== "'") return null;
  const multi = raw.startsWith(q.repeat(3)) && raw.length >= 6;
  let body = multi ? raw.slice(3, -3) : raw.slice(1, -1);
  if (multi && body.startsWith("\n")) body = body.slice(1);
  if (q === "'") return body;
  let out = "";
  for (let i = 0; i < body.length; i++) {
    const c = body[i]!;
    if (c !== "\\") {
      out += c;
      continue;
    }
    const n = body[i + 1];
    const simple: Record<string, string> = { b: "\b", t: "\t", n: "\n", f: "\f", r: "\r", e: "\x1b", '"': '"', "\\": "\\" };
    if (n !== undefined && simple[n] !== undefined) {
      out += simple[n];
      i++;
    } else if (n === "u" || n === "U") {
      const len = n === "u" ? 4 : 8;
      const hex = body.slice(i + 2, i + 2 + len);
      if (!/^[0-9A-Fa-f]+$/.test(hex) || hex.length !== len) return null;
      out += String.fromCodePoint(parseInt(hex, 16));
      i += 1 + len;
    } else if (multi && n !== undefined && /[ \t\n]/.test(n)) {
      // Line-ending backslash: drop it and all whitespace up to the next non-blank.
      let j = i + 1;
      while (j < body.length && /[ \t\n]/.test(body[j]!)) j++;
      i = j - 1;
    } else return null;
  }
  return out;
}

/** A TOML array of strings as a list, or one string; null for anything else. */
export function decodeTomlStrings(raw: string): string[] | string | null {
  if (!raw.startsWith("[")) return decodeTomlString(raw);
  let items: string[];
  try {
    items = new TomlScanner(raw.replace(/\r\n/g, "\n")).arrayItems();
  } catch (e) {
    if (e instanceof TomlSyntax) return null;
    throw e;
  }
  const out: string[] = [];
  for (const item of items) {
    const v = decodeTomlString(item);
    if (v === null) return null;
    out.push(v);
  }
  return out;
}
