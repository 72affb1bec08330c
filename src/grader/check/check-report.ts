import type { CheckReport, Finding, MutantRow, SubmissionRow } from "./types.js";
import { wrapText } from "./demo-table.js";
import { formatTable } from "../../lib/text-table.js";

/** `task check`'s report as text (the terminal) and as one self-contained HTML page. */

const WIDTH = 100;

function yn(b: boolean | null): string {
  return b === null ? "n/a" : b ? "yes" : "no";
}

function cell(s: { resolved: boolean | null; resolved_strict: boolean | null }): string {
  return s.resolved === s.resolved_strict ? yn(s.resolved) : `${yn(s.resolved)} (strict ${yn(s.resolved_strict)})`;
}


const LEVEL_TAG: Record<Finding["level"], string> = { error: "FAIL", warning: "warn", info: "info" };

export function checkText(r: CheckReport): string {
  const out: string[] = [];
  out.push(`task check ${r.task} (${r.task_dir}) — world size(s) ${r.world_sizes.join(", ")}`);
  out.push("");
  if (r.stage === "static") out.push("static checks only (--static): markers, promises, author traps, the golden patch's analysis; gold, the controls and the mutants were not run");
  if (r.gold) out.push(`gold: ${r.gold.runs} runs, ${r.gold.cases} cases (${r.gold.probes} probe cases), ${r.gold.flaky.length} flaky, ${r.gold.skipped_probes.length} skipped probes${r.gold.calibration_cached ? " (cached calibration)" : ""}`);
  out.push("");
  out.push("promise coverage (promise → probes → adversarial patches and mutants its probes catch):");
  for (const c of r.coverage) {
    out.push(`  ${c.id}  (prompt.md:${c.prompt_line}) ${c.probes.length ? "" : "— NO PROBE"}`);
    out.push(...wrapText(c.text, WIDTH, "      "));
    out.push(...wrapText(`probes: ${c.probes.join(", ") || "none"}`, WIDTH, "      "));
    out.push(...wrapText(`caught: ${[...c.adversarial.map((a) => `adversarial/${a}`), ...(c.mutants.length ? [`${c.mutants.length} mutant(s)`] : [])].join(", ") || "—"}`, WIDTH, "      "));
  }
  out.push("");
  out.push("controls and adversaries:");
  out.push(
    ...formatTable(
      ["submission", "status", "Set A", "Set B", "s_p B", "ok"],
      r.submissions.map((s) => [`${s.kind === "adversarial" || s.kind === "alternative" ? `${s.kind}/` : ""}${s.name}`, s.status, cell(s.set_a), cell(s.set_b), s.set_b.score === null ? "n/a" : s.set_b.score.toFixed(3), s.ok ? "ok" : "NO"]),
    )
      .split("\n")
      .map((l) => `  ${l}`),
  );
  const stopped = r.submissions.filter((s) => s.skipped_sessions?.length);
  if (stopped.length) out.push(...wrapText(`stopped once decided (scores cover the sessions run; --full-grades runs all): ${stopped.map((s) => `${s.name} (${s.skipped_sessions!.length} not run)`).join(", ")}`, WIDTH, "  "));
  for (const s of r.submissions.filter((x) => !x.ok)) out.push(...wrapText(`${s.name}: ${s.why}`, WIDTH, "    ! "));
  if (r.mutants) {
    const m = r.mutants;
    out.push("");
    out.push(
      `mutants: ${m.generated} generated (${Object.entries(m.skipped).map(([k, v]) => `${v} ${k}`).join(", ") || "none skipped"} before that), ${m.graded} graded, ${m.reused} reused: ` +
        `${m.killed_official} killed by the official tests, ${m.killed_probes} only by probes, ${m.survived} survived, ${m.equivalent} equivalent, ${m.not_run} not run, ${m.errors} errors`,
    );
    out.push(`mutation score: ${m.score === null ? "n/a" : m.score.toFixed(3)} (threshold ${m.threshold})`);
    if (m.by_operator) {
      out.push(
        ...wrapText(
          `per operator: ${Object.entries(m.by_operator).map(([op, s]) => `${op} ${s.score === null ? "n/a" : s.score.toFixed(2)} (${s.killed}/${s.graded}${s.not_run ? `, ${s.not_run} not run` : ""})`).join("; ")}`,
          WIDTH,
          "  ",
        ),
      );
    }
    const survivors = m.rows.filter((x) => x.verdict === "survived");
    if (survivors.length) {
      out.push("survivors (kill each with a probe of a promise prompt.md states, or mark it equivalent in hidden/mutants.yaml with the reason):");
      for (const s of survivors) {
        out.push(`  ${s.id}  ${s.description}`);
        for (const l of s.diff.split("\n").filter(Boolean).slice(0, 8)) out.push(`      ${l.length > WIDTH - 6 ? `${l.slice(0, WIDTH - 9)}...` : l}`);
      }
    }
    const eq = m.rows.filter((x) => x.verdict === "equivalent");
    if (eq.length) {
      out.push("equivalent (author's reasons):");
      for (const e of eq) out.push(...wrapText(`${e.id}: ${e.detail}`, WIDTH, "  "));
    }
  }
  if (r.contract.length) {
    out.push("");
    out.push(`interface contract (symbols the golden patch adds that tests or probes use): ${[...new Set(r.contract.map((c) => `${c.name}${c.in_prompt ? "" : " (NOT in prompt.md)"}`))].join(", ")}`);
  }
  out.push("");
  const shown = r.findings.filter((f) => f.level !== "info");
  out.push(shown.length ? "findings:" : "findings: none");
  for (const f of shown) out.push(...wrapText(`${LEVEL_TAG[f.level]} [${f.area}] ${f.message}`, WIDTH, "  ").map((l, i) => (i ? `    ${l.trimStart()}` : l)));
  out.push("");
  out.push(`${r.passed ? "PASSED" : "FAILED"}: ${r.findings.filter((f) => f.level === "error").length} error(s), ${r.findings.filter((f) => f.level === "warning").length} warning(s) in ${r.duration_s.toFixed(0)} s`);
  return out.join("\n");
}

/** HTML escaping of text content and attribute values: the five characters that matter (no library for five replacements). */
function esc(s: string | number | null | undefined): string {
  return String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);
}

function diffHtml(diff: string): string {
  return `<pre class="diff">${diff
    .split("\n")
    .map((l) => `<span class="${l.startsWith("+") ? "add" : l.startsWith("-") ? "del" : ""}">${esc(l)}</span>`)
    .join("\n")}</pre>`;
}

function submissionRow(s: SubmissionRow): string {
  return `<tr class="${s.ok ? "ok" : "bad"}"><td>${esc(s.kind)}</td><td>${esc(s.name)}</td><td>${esc(s.status)}</td><td>${esc(cell(s.set_a))}</td><td>${esc(cell(s.set_b))}</td><td>${esc(s.set_b.score?.toFixed(3) ?? "n/a")}</td><td>${s.ok ? "ok" : `NO: ${esc(s.why)}`}</td><td>${esc([s.note ?? "", s.skipped_sessions?.length ? `stopped once decided: ${s.skipped_sessions.join(", ")} not run` : ""].filter(Boolean).join("; "))}</td></tr>`;
}

function mutantRow(m: MutantRow): string {
  return `<tr class="${m.verdict}"><td><code>${esc(m.id)}</code></td><td>${esc(m.description)}</td><td>${esc(m.verdict.replace("_", " "))}</td><td>${esc(m.detail ?? (m.killed_by ?? []).join(", "))}</td><td>${m.verdict === "survived" || m.verdict === "equivalent" ? diffHtml(m.diff) : `<details><summary>diff</summary>${diffHtml(m.diff)}</details>`}</td></tr>`;
}

export function checkHtml(r: CheckReport): string {
  const m = r.mutants;
  const findings = r.findings
    .map((f) => `<li class="${f.level}"><b>${esc(LEVEL_TAG[f.level])}</b> [${esc(f.area)}] ${esc(f.message)}</li>`)
    .join("\n");
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>task check ${esc(r.task)}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:2em;max-width:1200px}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.25em .5em;vertical-align:top;text-align:left}
th{background:#f3f3f3}.bad td,.survived td{background:#fde8e8}.ok td{background:#eef8ee}.equivalent td{background:#f6f6e0}
li.error{color:#a00}li.warning{color:#850}li.info{color:#555}pre.diff{margin:0;font-size:12px}.add{color:#070}.del{color:#a00}
.verdict{font-size:1.3em;font-weight:bold}.passed{color:#070}.failed{color:#a00}
</style></head><body>
<h1>task check: ${esc(r.task)}</h1>
<p class="verdict ${r.passed ? "passed" : "failed"}">${r.passed ? "PASSED" : "FAILED"}</p>
<p>${esc(r.task_dir)} — world size(s) ${esc(r.world_sizes.join(", "))} — ${esc(r.started_at)}, ${esc(r.duration_s.toFixed(0))} s</p>
${r.gold ? `<p>gold: ${r.gold.runs} runs, ${r.gold.cases} cases (${r.gold.probes} probe cases), ${r.gold.flaky.length} flaky, ${r.gold.skipped_probes.length} skipped probes</p>` : ""}
<h2>Findings</h2><ul id="findings">${findings || "<li>none</li>"}</ul>
<h2>Promise coverage</h2>
<table id="coverage"><tr><th>promise</th><th>prompt.md</th><th>text</th><th>probes</th><th>adversarial caught</th><th>mutants killed by its probes</th></tr>
${r.coverage.map((c) => `<tr class="${c.probes.length ? "ok" : "bad"}"><td><code>${esc(c.id)}</code></td><td>${c.prompt_line}</td><td>${esc(c.text)}</td><td>${c.probes.map((p) => `<code>${esc(p)}</code>`).join("<br>") || "NONE"}</td><td>${esc(c.adversarial.join(", "))}</td><td>${c.mutants.length}</td></tr>`).join("\n")}
</table>
<h2>Controls and adversaries</h2>
<table id="controls"><tr><th>kind</th><th>name</th><th>status</th><th>Set A</th><th>Set B</th><th>s_p B</th><th>verdict</th><th>note</th></tr>
${r.submissions.map(submissionRow).join("\n")}
</table>
${
  m
    ? `<h2>Mutants</h2>
<p>${m.generated} generated, ${m.graded} graded (${m.reused} reused): ${m.killed_official} killed by the official tests, ${m.killed_probes} only by probes, ${m.survived} survived, ${m.equivalent} equivalent, ${m.not_run} not run, ${m.errors} errors. <b>Mutation score ${m.score === null ? "n/a" : m.score.toFixed(3)}</b> (threshold ${m.threshold}).</p>
<table id="mutants"><tr><th>id</th><th>change</th><th>verdict</th><th>killed by / why</th><th>diff vs golden</th></tr>
${[...m.rows].sort((a, b) => order(a) - order(b)).map(mutantRow).join("\n")}
</table>`
    : ""
}
${r.contract.length ? `<h2>Interface contract</h2><table id="contract"><tr><th>symbol</th><th>kind</th><th>defined at</th><th>referenced at</th><th>in prompt.md</th></tr>${r.contract.map((c) => `<tr class="${c.in_prompt ? "ok" : "bad"}"><td><code>${esc(c.name)}</code></td><td>${esc(c.kind)}</td><td>${esc(c.defined_at)}</td><td>${esc(c.referenced_at.join(", "))}</td><td>${c.in_prompt ? "yes" : "NO"}</td></tr>`).join("")}</table>` : ""}
</body></html>
`;
}

function order(m: MutantRow): number {
  return ["survived", "error", "equivalent", "killed_probes", "killed_official", "not_run"].indexOf(m.verdict);
}
