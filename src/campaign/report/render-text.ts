import { formatTable } from "../../lib/text-table.js";
import type { ReportData } from "./compute.js";
import { sections } from "./format.js";

/** The default output: every table as plain text. */
export function renderText(d: ReportData): string {
  const parts = [`campaign: ${d.campaign}`, `rules: ${d.rules}`];
  for (const s of sections(d)) {
    parts.push("", s.title, ...(s.note ? [`(${s.note})`] : []), formatTable(s.header, s.rows), ...(s.after ?? []));
  }
  return `${parts.join("\n")}\n`;
}
