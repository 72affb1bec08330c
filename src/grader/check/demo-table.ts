import type { FailureLabel, GradeResult } from "../grade/types.js";
import { reasonOnce } from "../grade/score.js";
import type { DemoReport, DemoRow } from "./demo-matrix.js";

/**
 * The demo's table (pure): one row per submission with its Set A / Set B verdicts and scores, its
 * failure labels and, for an adversarial patch, the promises it declares to break with the labels
 * that caught them; wrapped to DEMO_WIDTH columns.
 */

function yesNo(b: boolean | null): string {
  return b === null ? "n/a" : b ? "yes" : "no";
}

/** Labels of one result, counted, most frequent first: `numerical×3, state×1`. */
export function labelSummary(result: GradeResult): string {
  const counts = new Map<FailureLabel, number>();
  for (const c of result.cases) if (c.label) counts.set(c.label, (counts.get(c.label) ?? 0) + 1);
  return [...counts.entries()]
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .map(([label, n]) => `${label}×${n}`)
    .join(", ");
}

/** Per promise an adversarial patch declares to break: the labels of the failing probes of that promise. */
export function caughtBy(row: Pick<DemoRow, "breaks" | "result" | "promises">): Array<{ promise: string; labels: FailureLabel[] }> {
  return (row.breaks ?? []).map((promise) => ({
    promise,
    labels: [...new Set(row.result.cases.filter((c) => c.label && c.suite === "probe" && row.promises[c.id] === promise).map((c) => c.label!))].sort(),
  }));
}

function resolvedCell(s: { resolved: boolean | null; resolved_strict: boolean | null }): string {
  if (s.resolved === null) return "n/a";
  return s.resolved === s.resolved_strict ? yesNo(s.resolved) : `${yesNo(s.resolved)} (strict ${yesNo(s.resolved_strict)})`;
}

function pct(x: number | null): string {
  return x === null ? "n/a" : x.toFixed(3);
}

export const DEMO_HEADER = ["submission", "Set A resolved", "Set B resolved", "s_p A", "s_p B", "failure labels (cases gold passes)", "declared promise → caught by"];

/** The demo table's rows (pure; the CLI aligns them). */
export function demoTableRows(report: DemoReport): string[][] {
  const rows = report.rows.map((r) => {
    const res = r.result;
    const labels =
      res.status === "graded"
        ? labelSummary(res) || "—"
        : res.status === "tampered"
          ? `— (TAMPERED: ${(res.tamper_evidence ?? []).slice(0, 2).join("; ")}${(res.tamper_evidence ?? []).length > 2 ? "; …" : ""})`
          : `— (${res.status}${res.reason ? `: ${reasonOnce(res)}` : ""})`;
    const caught = caughtBy(r)
      .map((c) => `${c.promise} → ${c.labels.length ? c.labels.join(", ") : "NOT caught"}`)
      .join("; ");
    // A control graded only until it failed (the base, the hollow patch): its scores count what ran.
    const stopped = res.partial ? ` (stopped at its first failure: ${res.partial.skipped.length} session(s) not run)` : "";
    return [`${r.task}:${r.name}`, resolvedCell(res.official), resolvedCell(res.with_probes), pct(res.official.score), pct(res.with_probes.score), `${labels}${stopped}`, caught];
  });
  for (const n of report.notRunnable) rows.push([`${n.task} (every submission)`, "—", "—", "—", "—", `not run here: ${n.reason}`, ""]);
  return rows;
}

/** The demo table's width: every line of demoTable fits it. */
export const DEMO_WIDTH = 100;

export const DEMO_LEGEND =
  "Set A = official post-PR tests; Set B = official tests + hidden probes. resolved = paper rule (passed ≥ gold's); " +
  "(strict …) shown where the strict rule differs. labels: failure labels of the cases gold passes and this submission " +
  "does not (or why nothing was scored); caught: per promise an adversarial patch declares to break, the labels of its failing probes.";

/** `text` cut at spaces into lines of at most `width` (a word longer than that is cut), each after `indent`. */
export function wrapText(text: string, width: number, indent: string): string[] {
  const room = Math.max(10, width - indent.length);
  const out: string[] = [];
  let line = "";
  for (const word of text.split(/ +/)) {
    let w = word;
    while (w.length > room) {
      if (line) out.push(line);
      line = "";
      out.push(w.slice(0, room));
      w = w.slice(room);
    }
    if (!line) {
      line = w;
    } else if (line.length + 1 + w.length <= room) {
      line += ` ${w}`;
    } else {
      out.push(line);
      line = w;
    }
  }
  if (line) out.push(line);
  return out.map((l) => `${indent}${l}`);
}

/**
 * The demo table in DEMO_WIDTH columns: one row per submission with its Set A / Set B verdicts and
 * scores, then its failure labels and the promises it was caught by on indented lines below (wrapped,
 * nothing cut). A submission name too long for its column stands alone on its line, the figures below.
 */
export function demoTable(report: DemoReport, width = DEMO_WIDTH): string {
  const header = ["submission", "Set A", "Set B", "s_p A", "s_p B"];
  const rows = demoTableRows(report);
  const widths = [1, 2, 3, 4].map((i) => Math.max(header[i]!.length, ...rows.map((r) => r[i]!.length)));
  const rest = widths.reduce((a, b) => a + b + 2, 0);
  const nameWidth = Math.max(header[0]!.length, Math.min(width - rest, Math.max(...rows.map((r) => r[0]!.length), 0)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(i === 0 ? nameWidth : widths[i - 1]!)).join("  ").trimEnd();
  const out = [line(header), line([nameWidth, ...widths].map((w) => "-".repeat(w)))];
  for (const r of rows) {
    const [name, ...figures] = r.slice(0, 5) as [string, ...string[]];
    if (name.length > nameWidth) out.push(...wrapText(name, width, ""), line(["", ...figures]));
    else out.push(line([name, ...figures]));
    if (r[5] && r[5] !== "—") out.push(...wrapText(r[5].startsWith("not run here") ? r[5] : `labels: ${r[5]}`, width, "    "));
    if (r[6]) out.push(...wrapText(`caught: ${r[6]}`, width, "    "));
  }
  return out.join("\n");
}
