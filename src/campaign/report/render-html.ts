import type { ReportData } from "./compute.js";
import { renderCharts } from "./charts.js";
import { sections } from "./format.js";

/**
 * One offline HTML file: the tables, and the figures as inline SVG from the chart library. No
 * script, no external resource; the page's Content-Security-Policy forbids loading any, so a
 * reader's browser makes no request when it opens the file.
 */
export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);
}

/**
 * Table 2 has up to 18 columns: the page takes the window's width (no fixed max), header cells wrap
 * onto several lines and cells are compact, so at 1,600 px and wider every column, the cost ones
 * included, is on screen without a horizontal scrollbar (test/browser/report.test.ts measures it).
 */
const CSS = `body{font-family:sans-serif;margin:1.5em;color:#222}
.scroll{overflow-x:auto}
table{border-collapse:collapse;margin:.5em 0 1em;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left}
td{white-space:nowrap}
th{background:#f3f3f3;white-space:normal;vertical-align:bottom;max-width:9em}
p.note{color:#555;font-size:13px;margin:.2em 0;max-width:80em}
figure{margin:1em 0;max-width:1200px}
figcaption{font-size:13px;color:#444}`;

export async function renderHtml(d: ReportData): Promise<string> {
  const charts = await renderCharts(d);
  const chartFor: Record<string, string[]> = { table2: ["chart-table2"], table4: ["chart-figure2"], figure4: ["chart-figure4"], figure6: ["chart-figure6"] };
  const body: string[] = [`<h1>InfraDev campaign report</h1>`, `<p class="note">Campaign: <code>${escapeHtml(d.campaign)}</code></p>`, `<p class="note">Rules: ${escapeHtml(d.rules)}.</p>`];
  for (const s of sections(d)) {
    body.push(`<section id="${s.id}"><h2>${escapeHtml(s.title)}</h2>`);
    if (s.note) body.push(`<p class="note">${escapeHtml(s.note)}</p>`);
    body.push(
      `<div class="scroll"><table id="${s.id}-table"><thead><tr>${s.header.map((h) => `<th>${escapeHtml(h)}</th>`).join("")}</tr></thead><tbody>`,
      ...s.rows.map((r) => `<tr>${r.map((c) => `<td>${escapeHtml(c)}</td>`).join("")}</tr>`),
      `</tbody></table></div>`,
    );
    for (const a of s.after ?? []) body.push(`<p class="note">${escapeHtml(a)}</p>`);
    for (const id of chartFor[s.id] ?? []) {
      const c = charts.find((x) => x.id === id)!;
      body.push(`<figure class="chart" id="${c.id}">${c.svg}<figcaption>${escapeHtml(c.title)}</figcaption></figure>`);
    }
    body.push(`</section>`);
  }
  return [
    "<!DOCTYPE html>",
    `<html lang="en"><head><meta charset="utf-8">`,
    `<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">`,
    `<title>InfraDev campaign report</title><style>${CSS}</style></head><body>`,
    ...body,
    "</body></html>",
    "",
  ].join("\n");
}
