/**
 * Lines a submission adds that reach for the grading harness rather than the task: the probe
 * library, infradev's environment or result files, pytest's hooks and internals, or rebinding
 * torch.distributed's functions (which the probes count through). The code under test runs in the
 * same processes as the probes (README, security model: known limit), so such a line can forge a
 * result; the grader cannot judge intent, so these are findings for a reviewer, recorded in
 * meta.json and printed by `grade` — never a change to the score.
 */

import { addedLines } from "../workspace/patch-check.js";

export interface TamperFinding {
  /** Path in the patched tree. */
  file: string;
  /** Line number in the patched file. */
  line: number;
  /** What the line reaches for. */
  what: string;
  /** The added line, trimmed and capped. */
  text: string;
}

const CHECKS: ReadonlyArray<{ what: string; re: RegExp }> = [
  { what: "the probe library or the harness's helpers", re: /\binfradev(_probe|_probes|_launch|_launcher|_outputs|_analysis)\b/ },
  { what: "infradev's environment", re: /\bINFRADEV_[A-Z0-9_]+\b/ },
  { what: "the launcher's result files", re: /\b(results\.jsonl|current\.json|collected\.json|probe\.json|launch\.json|rank\d+\.xml)\b/ },
  { what: "pytest's internals or hooks", re: /\b_pytest\b|\bpytest_(runtest_\w+|collection\w*|report_\w+|terminal_summary|sessionfinish|make_\w+)\b/ },
  { what: "rebinding a torch.distributed function", re: /\b(dist|c10d|distributed_c10d|torch\.distributed)\.(all_reduce|all_gather\w*|reduce_scatter\w*|broadcast|all_to_all\w*|send|recv|isend|irecv|barrier|reduce)\s*=(?!=)/ },
];

const MAX_TEXT = 160;

/** Findings over the added lines of a unified diff (pure). */
export function scanPatchForTampering(patch: string): TamperFinding[] {
  const findings: TamperFinding[] = [];
  for (const added of addedLines(patch)) {
    const check = CHECKS.find((c) => c.re.test(added.text));
    if (!check) continue;
    const t = added.text.trim();
    findings.push({ file: added.file, line: added.line, what: check.what, text: t.length > MAX_TEXT ? `${t.slice(0, MAX_TEXT - 1)}…` : t });
  }
  return findings;
}
