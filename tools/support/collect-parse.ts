/** Parses the output of `pytest --collect-only -q` (pytest 6+; `-q` prints one node id per line). */

export interface CollectionError {
  file: string;
  message: string;
}

export interface CollectReport {
  collected: number;
  nodeIds: string[];
  errors: CollectionError[];
  /** pytest's own last summary line ("12 tests collected in 0.09s"), when there was one. */
  summary: string | null;
}

const SECTION = /^_{3,} ERROR collecting (.+?) _{3,}$/;
const SUMMARY = /^(?:(\d+)|no) tests? collected(?:, (\d+) errors?)?(?: in [\d.]+s)?/;
const SUMMARY_ERRORS_ONLY = /^(\d+) errors? in [\d.]+s/;
const NOT_FOUND = /^ERROR: (file or directory not found|not found): (.+)$/;
const SHORT_ERROR = /^ERROR (\S+)(?: - (.*))?$/;

/** The most telling line of a collection traceback: pytest's `E   ` lines, else the last line. */
function messageOf(lines: string[]): string {
  const eLines = lines.filter((l) => l.startsWith("E ")).map((l) => l.replace(/^E\s+/, "").trimEnd());
  if (eLines.length > 0) {
    // A SyntaxError spans several E lines (file, code, caret, message); the last one names the error.
    const last = eLines[eLines.length - 1]!;
    const where = eLines.find((l) => /^File ".*", line \d+/.test(l));
    return where && where !== last ? `${last} (${where.replace(/^File "([^"]*)", /, "$1, ")})` : last;
  }
  const nonEmpty = lines.map((l) => l.trim()).filter(Boolean);
  return nonEmpty[nonEmpty.length - 1] ?? "collection error (no message)";
}

export function parseCollectOutput(stdout: string, stderr = ""): CollectReport {
  const lines = stdout.split(/\r?\n/);
  const nodeIds: string[] = [];
  const errors = new Map<string, string>();
  let summary: string | null = null;
  let collected: number | null = null;
  let section: { file: string; lines: string[] } | null = null;
  let inErrors = false;
  const closeSection = () => {
    if (section) errors.set(section.file, messageOf(section.lines));
    section = null;
  };
  for (const raw of lines) {
    const line = raw.trimEnd();
    const sec = SECTION.exec(line);
    if (sec) {
      closeSection();
      section = { file: sec[1]!, lines: [] };
      inErrors = true;
      continue;
    }
    if (/^={3,} .* ={3,}$/.test(line) || /^!{3,} .* !{3,}$/.test(line)) {
      closeSection();
      inErrors = /ERRORS/.test(line);
      continue;
    }
    if (section) {
      section.lines.push(line);
      continue;
    }
    const sum = SUMMARY.exec(line) ?? SUMMARY_ERRORS_ONLY.exec(line);
    if (sum && !line.includes("::")) {
      summary = line;
      collected = SUMMARY_ERRORS_ONLY.test(line) && !/collected/.test(line) ? 0 : Number(sum[1] ?? 0);
      continue;
    }
    const short = SHORT_ERROR.exec(line);
    if (short && !inErrors) {
      const file = short[1]!;
      if (!errors.has(file) || short[2]) errors.set(file, short[2] ?? errors.get(file) ?? "collection error");
      continue;
    }
    if (!inErrors && line.includes("::") && !line.startsWith(" ")) nodeIds.push(line.trim());
  }
  closeSection();
  for (const raw of `${stdout}\n${stderr}`.split(/\r?\n/)) {
    const nf = NOT_FOUND.exec(raw.trim());
    if (nf) errors.set(nf[2]!, nf[1]!);
  }
  return {
    collected: collected ?? nodeIds.length,
    nodeIds,
    errors: [...errors.entries()].map(([file, message]) => ({ file, message })),
    summary,
  };
}
