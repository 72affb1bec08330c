import { InvalidArgumentError, type Command } from "commander";
import { join, resolve } from "node:path";

function parseFormat(v: string): "atif" | "jsonl" {
  if (v !== "atif" && v !== "jsonl") throw new InvalidArgumentError(`expected atif or jsonl (got "${v}")`);
  return v;
}

export function registerExportCommands(program: Command): void {
  program
    .command("export")
    .description("every run's trajectory (model turns, tool calls with arguments and results, tokens) as Harbor's ATIF trajectory.json per run, or our own JSONL")
    .argument("<campaign>", "campaign folder (infradev eval / grade-many / run --out)")
    .requiredOption("--format <atif|jsonl>", "atif: <out>/<run-id>/trajectory.json (ATIF-v1.6); jsonl: <out>/<run-id>.jsonl (a header line, then one line per event)", parseFormat)
    .option("--out <dir>", "where to write (default: <campaign>/export/<format>)")
    .option("--prices <file>", "YAML of USD per million tokens per model (as report --prices): cost per step and per run")
    .action(async (campaign: string, opts: { format: "atif" | "jsonl"; out?: string; prices?: string }) => {
      const { exportCampaign } = await import("../campaign/trajectory/export.js");
      const { loadPrices } = await import("../campaign/report/prices.js");
      const out = resolve(opts.out ?? join(campaign, "export", opts.format));
      const written = exportCampaign(campaign, opts.format, out, opts.prices ? loadPrices(opts.prices) : null);
      process.stdout.write(`export: ${written.length} run(s) as ${opts.format} in ${out}\n`);
    });
}
