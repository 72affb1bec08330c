import { InvalidArgumentError, type Command } from "commander";
import { UsageError } from "../lib/errors.js";

// The report modules (and the chart library, only for --html) are imported in the action handler.

interface ReportCliOptions {
  html?: string;
  md?: string | true;
  json?: string | true;
  prices?: string;
  compare?: [string, string];
  hostPython?: string;
  scan?: boolean;
  judgeUrl?: string;
  judgeModel?: string;
  judgeKeyEnv?: string;
}

function parseCompare(v: string): [string, string] {
  const parts = v.split(",").map((s) => s.trim());
  if (parts.length !== 2 || !parts[0] || !parts[1] || parts[0] === parts[1]) throw new InvalidArgumentError(`expected two different agent names as A,B (got "${v}")`);
  return [parts[0], parts[1]];
}

export function registerReportCommands(program: Command): void {
  program
    .command("report")
    .description(
      "the paper's tables and figures from a campaign folder (infradev eval / grade-many / run --out): Table 2 per agent (% Resolved, strict, % Passed with standard errors, time, tokens, steps, tool calls, cost with --prices), Table 3 per category, Table 4 / Figure 2 Set A vs Set B and the share the probes reject, Figure 4 failure classes, Figure 6 the agents' own assertions; text on stdout unless --md or --json goes there",
    )
    .argument("<campaign>", "campaign folder (holds runs/<run-id>/run.json, grade.json, patch.diff, trace.jsonl)")
    .option("--html <file>", "write one offline HTML file: the tables and the figures as inline SVG")
    .option("--md [file]", "Markdown: the same tables (to the file, or to stdout when no file is given)")
    .option("--json [file]", "every number the tables show, as JSON (to the file, or to stdout)")
    .option("--prices <file>", "YAML of USD per million tokens per model: models: { <model>: { input, output, cached_input?, reasoning? } }; adds cost to Table 2")
    .option("--compare <A,B>", "paired comparison of two agents on the tasks both ran: fixed / broken / both / neither, both rates with SE", parseCompare)
    .option("--host-python <path>", "Python for Figure 6's assertion classifier (stdlib only; default $INFRADEV_HOST_PYTHON, else python3)")
    .option("--no-scan", "leave out the reward-hacking scan (rules over every run's trace and patch: the flagged column and its section)")
    .option("--judge-url <url>", "an OpenAI-compatible endpoint (…/v1) whose model reads each flagged run and gives its verdict beside the rules' (never a score change)")
    .option("--judge-model <name>", "the judge's model name (default: judge)")
    .option("--judge-key-env <VAR>", "environment variable holding the judge endpoint's API key")
    .action(async (campaign: string, opts: ReportCliOptions) => {
      if (!opts.judgeUrl && (opts.judgeModel || opts.judgeKeyEnv)) throw new UsageError("report: --judge-model / --judge-key-env need --judge-url");
      if (opts.judgeUrl && opts.scan === false) throw new UsageError("report: --judge-url reads the runs the scan flags: it cannot go with --no-scan");
      if (opts.judgeKeyEnv && !process.env[opts.judgeKeyEnv]) throw new UsageError(`report: --judge-key-env ${opts.judgeKeyEnv}: that variable is not set`);
      const judge = opts.judgeUrl ? { url: opts.judgeUrl, model: opts.judgeModel ?? "judge", key: opts.judgeKeyEnv ? process.env[opts.judgeKeyEnv]! : null } : null;
      if (opts.md === true && opts.json === true) throw new UsageError("report: --md and --json cannot both go to stdout: give one of them a file (--md report.md)");
      const report = await import("../campaign/report/index.js");
      const prices = opts.prices ? report.loadPrices(opts.prices) : null;
      const data = await report.buildReport(campaign, { prices, compare: opts.compare ?? null, hostPython: opts.hostPython, scan: opts.scan !== false, judge });
      if (opts.compare) {
        for (const a of opts.compare) if (!data.agents.includes(a)) throw new UsageError(`report: --compare: no agent "${a}" in ${campaign} (agents: ${data.agents.join(", ") || "none"})`);
      }
      const written: string[] = [];
      let stdout: string | null = null;
      if (opts.html) {
        const { renderHtml } = await import("../campaign/report/render-html.js");
        report.writeFileAtomic(opts.html, await renderHtml(data));
        written.push(opts.html);
      }
      if (opts.md !== undefined) {
        const md = report.renderMarkdown(data);
        if (opts.md === true) stdout = md;
        else (report.writeFileAtomic(opts.md, md), written.push(opts.md));
      }
      if (opts.json !== undefined) {
        const json = `${JSON.stringify(data, null, 2)}\n`;
        if (opts.json === true) stdout = json;
        else (report.writeFileAtomic(opts.json, json), written.push(opts.json));
      }
      process.stdout.write(stdout ?? report.renderText(data));
      for (const f of written) process.stderr.write(`report: wrote ${f}\n`);
    });
}
