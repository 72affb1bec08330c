import { createHash } from "node:crypto";
import { loadCampaign, type LoadedCampaign } from "../report/load.js";
import { runCost, type Prices } from "../report/prices.js";
import { scanCampaign, trajectoriesOf } from "../trajectory/campaign.js";
import type { Trajectory } from "../trajectory/types.js";
import type { RunScan } from "../trajectory/scan.js";
import type { JudgeVerdict } from "../report/compute.js";
import type { GradedCase } from "../../grader/grade/types.js";
import { VIEW_CLIENT_JS } from "./client.js";

/**
 * `infradev view CAMPAIGN`: one offline HTML file per campaign. Chosen over a loopback server
 * because the viewer, like the report, should read only the folder and be something one can copy
 * off a cluster, attach to an issue or open years later: no port, no token, no process to keep
 * alive. The page carries its data as one JSON block and one inline script, allowed by its hash in
 * the Content-Security-Policy (default-src 'none'): it makes no request of any kind.
 *
 * What it shows is what the run folder and the grade result already hold: the trace (tool calls with
 * arguments and the results the agent saw, capped), the harness's model turns and tokens, the patch,
 * grade.json's cases (id, suite, outcome, failure label) — never anything of the task's hidden part.
 */

/** A result or turn text in the page: the trace keeps ~3,800 characters; the page keeps this much of it. */
export const VIEW_TEXT_CHARS = 2_000;

export interface ViewRun {
  run_id: string;
  task_id: string;
  agent: string;
  model: string;
  harness: string;
  exit_reason: string;
  status: string;
  resolved: boolean | null;
  score: number | null;
  wall_s: number;
  turns: number | null;
  tool_calls: number;
  tokens: { input: number | null; cached_input: number | null; output: number | null; reasoning: number | null };
  cost_usd: number | null;
  patch_bytes: number;
  patch: string | null;
  cases: Array<{ id: string; suite: string; outcome: string; label?: string; killed?: GradedCase["killed"] }>;
  grade_note: string;
  tamper_evidence: string[];
  flagged: boolean | null;
  findings: RunScan["findings"];
  judge?: JudgeVerdict;
  turns_from: Trajectory["turns_from"];
  n_events: number;
  events: Trajectory["events"];
}

export interface ViewData {
  campaign: string;
  generated_at: string;
  runs: ViewRun[];
}

export function viewData(c: LoadedCampaign, opts: { prices?: Prices | null; scans?: Array<RunScan & { judge?: JudgeVerdict }> | null } = {}): ViewData {
  const trajectories = trajectoriesOf(c, opts.prices ?? null, VIEW_TEXT_CHARS);
  const scans: Array<RunScan & { judge?: JudgeVerdict }> = opts.scans ?? scanCampaign(c, trajectories);
  const scanOf = new Map(scans.map((s) => [s.run_id, s]));
  return {
    campaign: c.dir,
    generated_at: new Date().toISOString(),
    runs: c.runs.map((r) => {
      const rec = r.record;
      const g = r.grade;
      const t = trajectories.get(rec.run_id)!;
      const s = scanOf.get(rec.run_id);
      const price = opts.prices?.[rec.model];
      return {
        run_id: rec.run_id,
        task_id: rec.task_id,
        agent: rec.agent,
        model: rec.model,
        harness: rec.harness,
        exit_reason: rec.exit_reason,
        status: g ? g.status : "not_graded",
        resolved: g ? g.with_probes.resolved === true && g.status === "graded" : null,
        score: g ? (g.status === "graded" ? (g.with_probes.score ?? 0) : g.status === "harness_fault" ? null : 0) : null,
        wall_s: rec.wall_s,
        turns: rec.turns,
        tool_calls: rec.tool_calls,
        tokens: rec.tokens,
        cost_usd: price ? runCost(rec.tokens, price) : null,
        patch_bytes: rec.patch_bytes,
        patch: r.patch,
        cases: g ? g.cases.map((x) => ({ id: x.id, suite: x.suite, outcome: x.outcome, ...(x.label ? { label: x.label } : {}), ...(x.killed ? { killed: x.killed } : {}) })) : [],
        grade_note: g ? `${g.status}: no cases` : r.gradeProblem ?? "not graded (no grade.json)",
        tamper_evidence: g?.tamper_evidence ?? [],
        flagged: s ? s.flagged : null,
        findings: s?.findings ?? [],
        ...(s?.judge ? { judge: s.judge } : {}),
        turns_from: t.turns_from,
        n_events: t.events.length,
        events: t.events,
      };
    }),
  };
}

const CSS = `body{font-family:sans-serif;margin:1em 1.5em;color:#222;font-size:14px}
table{border-collapse:collapse;margin:.4em 0 1em;font-size:13px}th,td{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.ok{color:#060}td.bad{color:#a00}td.flag{color:#a00;font-weight:bold}
.filters select{margin-right:.5em}#run{border-top:2px solid #888;margin-top:1em;padding-top:.5em}
.split{display:flex;gap:1em}.split>#traj{flex:3;min-width:0}.detail{flex:2;min-width:0;max-height:640px;overflow:auto;border:1px solid #ddd;padding:.4em}
.t-bar{margin:.3em 0}.t-bar input{width:20em;margin:0 .5em}.t-scroll{height:600px;overflow:auto;border:1px solid #ccc;position:relative}
.t-spacer{position:relative}.t-row{position:absolute;left:0;right:0;height:24px;line-height:24px;white-space:nowrap;overflow:hidden;cursor:pointer;border-bottom:1px solid #eee;font-size:12px}
.t-row:hover{background:#eef}.t-row span{margin-right:.6em}.t-i{color:#888;display:inline-block;width:4em;text-align:right}.t-k{display:inline-block;width:3.5em;color:#555}
.k-turn .t-k{color:#06c}.err .t-s{color:#a00}.t-m{color:#777}
pre{white-space:pre-wrap;word-break:break-all;background:#fafafa;border:1px solid #eee;padding:.4em;font-size:12px;max-height:30em;overflow:auto}
.diff .d-a{color:#060;background:#efe}.diff .d-r{color:#a00;background:#fee}.diff .d-h{font-weight:bold}.diff .d-at{color:#06c}
.pair{display:flex;gap:1em}.pair-col{flex:1;min-width:0}.lbl{color:#555;font-size:12px;margin-top:.4em}.res{color:#444}`;

/** JSON inside a script element: no `<` may end it early. */
const scriptJson = (v: unknown) => JSON.stringify(v).replace(/</g, "\\u003c").replace(/\u2028/g, "\\u2028").replace(/\u2029/g, "\\u2029");
const esc = (s: string) => s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);

export function renderView(d: ViewData): string {
  const hash = createHash("sha256").update(VIEW_CLIENT_JS).digest("base64");
  return [
    "<!DOCTYPE html>",
    `<html lang="en"><head><meta charset="utf-8">`,
    `<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-${hash}'">`,
    `<title>InfraDev campaign viewer</title><style>${CSS}</style></head><body>`,
    `<h1>InfraDev campaign viewer</h1><p>Campaign: <code>${esc(d.campaign)}</code> · ${d.runs.length} run(s) · made ${esc(d.generated_at)}</p>`,
    `<div class="filters">task <select id="f-task"><option value="">all</option></select> agent <select id="f-agent"><option value="">all</option></select> verdict <select id="f-verdict"><option value="">all</option></select> scan <select id="f-flagged"><option value="">all</option><option value="flagged">flagged</option><option value="clean">not flagged</option></select> <span id="runs-count"></span></div>`,
    `<table id="runs-table"><thead><tr><th>run</th><th>task</th><th>agent</th><th>model</th><th>verdict (Set B)</th><th>s_p</th><th>flagged</th><th>events</th><th>time</th><th>cost</th></tr></thead><tbody id="runs-body"></tbody></table>`,
    `<div id="run" hidden></div>`,
    `<script type="application/json" id="view-data">${scriptJson(d)}</script>`,
    `<script>${VIEW_CLIENT_JS}</script>`,
    "</body></html>",
    "",
  ].join("\n");
}

export function buildView(dir: string, opts: { prices?: Prices | null } = {}): string {
  return renderView(viewData(loadCampaign(dir), opts));
}
