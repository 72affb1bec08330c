/**
 * `curate`'s text output: one row per candidate (a mark per filter column), then, indented under
 * it, every column's reason, the test files, the run's counts and the commands to check it.
 */
import { formatTable } from "../lib/text-table.js";
import type { Candidate } from "./curate.js";

const mark = (c: { ok: boolean } | undefined) => (c === undefined ? "-" : c.ok ? "yes" : "NO");

export function curateText(res: { core: string; scanned: number; candidates: Candidate[] }, repoLabel: string): string {
  const header = ["#", "commit", "PR", "date", "merged", "size", "tests", "infra", "built on", "imports", "run", "verdict"];
  const rows = res.candidates.map((c) => [
    String(c.rank),
    c.sha.slice(0, 10),
    c.pr === null ? "-" : `#${c.pr}`,
    c.date.slice(0, 10),
    mark(c.columns.merged),
    `${c.columns.size.ok ? "" : "NO "}${c.size.code_lines}/${c.size.code_files}f`,
    mark(c.columns.tests),
    mark(c.columns.infra),
    mark(c.columns.built_on),
    mark(c.columns.imports),
    c.run ? (c.run.verdict === "not-run" ? "not run" : `${c.run.fail_to_pass.length} f→p, ${c.run.pass_to_pass.length} p→p, ${c.run.needs_more_gpus.length} >1gpu`) : "-",
    c.verdict === "candidate" ? (c.run ? c.run.verdict : "candidate") : "rejected",
  ]);
  const lines = [`${repoLabel}: ${res.scanned} main-line change(s) read; core package ${res.core || "(the whole repository)"}; ${res.candidates.length} shown`, "", formatTable(header, rows), ""];
  for (const c of res.candidates) {
    lines.push(`#${c.rank} ${c.sha.slice(0, 12)} ${c.subject}`);
    for (const [k, col] of Object.entries(c.columns)) if (col) lines.push(`    ${k.padEnd(8)} ${col.ok ? "ok " : "no "} ${col.reason}`);
    lines.push(`    verdict  ${c.verdict}: ${c.why}`);
    if (c.test_files.length) lines.push(`    tests    ${c.test_files.join(", ")}`);
    if (c.run) {
      lines.push(`    run      ${c.run.verdict}: ${c.run.why} (base ${c.run.base.status} ${c.run.base.wall_s} s, merge ${c.run.merge.status} ${c.run.merge.wall_s} s)`);
      for (const n of c.run.needs_more_gpus.slice(0, 3)) lines.push(`             needs more GPUs: ${n.id}: ${n.message}`);
      for (const n of c.run.merge_failures.slice(0, 3)) lines.push(`             fails at merge: ${n.id}: ${n.message}`);
      for (const n of c.run.pass_to_fail.slice(0, 3)) lines.push(`             pass→fail: ${n.id}: ${n.message}`);
    }
    for (const cmd of c.commands) lines.push(`    $ ${cmd}`);
  }
  return `${lines.join("\n")}\n`;
}
