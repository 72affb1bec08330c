import type { ReportData } from "./compute.js";
import { sections } from "./format.js";

/** Markdown: the same tables and numbers (the figures' numbers are their tables). */
function cell(s: string): string {
  return s.replace(/\\/g, "\\\\").replace(/\|/g, "\\|").replace(/\n/g, " ");
}

export function renderMarkdown(d: ReportData): string {
  const parts = [`# InfraDev campaign report`, "", `Campaign: \`${d.campaign}\``, "", `Rules: ${d.rules}.`];
  for (const s of sections(d)) {
    parts.push("", `## ${s.title}`, "");
    if (s.note) parts.push(`_${cell(s.note)}_`, "");
    parts.push(`| ${s.header.map(cell).join(" | ")} |`, `| ${s.header.map(() => "---").join(" | ")} |`, ...s.rows.map((r) => `| ${r.map(cell).join(" | ")} |`));
    if (s.after?.length) parts.push("", ...s.after.map((a) => `- ${cell(a)}`));
  }
  return `${parts.join("\n")}\n`;
}
