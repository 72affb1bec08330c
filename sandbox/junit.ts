/**
 * A small JUnit XML reader for the files the rank launcher writes (and pytest's own --junitxml).
 * Only <testcase> elements and their <failure>/<error>/<skipped> children matter here.
 */

export type CaseOutcome = "passed" | "failed" | "error" | "skipped";

export interface JUnitCase {
  /** pytest node id when the file carries it (name contains "::"), else classname::name. */
  id: string;
  outcome: CaseOutcome;
  timeSec: number;
  message: string;
  text: string;
}

const ENTITIES: Record<string, string> = { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'" };

export function decodeXml(s: string): string {
  return s
    .replace(/<!\[CDATA\[([\s\S]*?)\]\]>/g, (_, body: string) => body)
    .replace(/&(#x[0-9a-fA-F]+|#[0-9]+|[a-z]+);/g, (whole, ent: string) => {
      if (ent.startsWith("#x")) return String.fromCodePoint(parseInt(ent.slice(2), 16));
      if (ent.startsWith("#")) return String.fromCodePoint(parseInt(ent.slice(1), 10));
      return ENTITIES[ent] ?? whole;
    });
}

function attrs(tag: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of tag.matchAll(/([A-Za-z_:][-A-Za-z0-9_:.]*)\s*=\s*("([^"]*)"|'([^']*)')/g)) {
    out[m[1]!] = decodeXml(m[3] ?? m[4] ?? "");
  }
  return out;
}

function caseId(a: Record<string, string>): string {
  const name = a.name ?? "";
  if (name.includes("::")) return name;
  const cls = a.classname ?? "";
  if (!cls) return name;
  // pytest writes classname "tests.test_x.TestC" and name "test_a[p]": turn it back into a node id.
  const parts = cls.split(".");
  let i = parts.length;
  while (i > 0 && /^[A-Z]/.test(parts[i - 1]!)) i--;
  const file = `${parts.slice(0, i).join("/")}.py`;
  return [file, ...parts.slice(i), name].join("::");
}

export function parseJUnit(xml: string): JUnitCase[] {
  const cases: JUnitCase[] = [];
  const re = /<testcase\b([^>]*?)(\/>|>([\s\S]*?)<\/testcase>)/g;
  for (const m of xml.matchAll(re)) {
    const a = attrs(m[1] ?? "");
    const body = m[3] ?? "";
    let outcome: CaseOutcome = "passed";
    let message = "";
    let text = "";
    for (const kind of ["error", "failure", "skipped"] as const) {
      const child = new RegExp(`<${kind}\\b([^>]*?)(\\/>|>([\\s\\S]*?)<\\/${kind}>)`).exec(body);
      if (child) {
        outcome = kind === "failure" ? "failed" : kind;
        message = attrs(child[1] ?? "").message ?? "";
        text = decodeXml(child[3] ?? "");
        break;
      }
    }
    cases.push({ id: caseId(a), outcome, timeSec: Number(a.time ?? 0) || 0, message, text });
  }
  return cases;
}
