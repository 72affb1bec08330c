import type { Command } from "commander";
import { join, resolve } from "node:path";

export function registerViewCommands(program: Command): void {
  program
    .command("view")
    .description(
      "one offline HTML file to read a campaign: the runs (filter by task, agent, verdict, flagged), each run's trajectory (model turns and tool calls with arguments, results, durations, exit codes, tokens and cost), its patch, its grade's cases, the reward-hacking scan, and two runs of a task side by side; no server, no request",
    )
    .argument("<campaign>", "campaign folder (infradev eval / grade-many / run --out, or folders of ATIF trajectory.json files)")
    .option("--out <file>", "the HTML file to write (default: <campaign>/view.html)")
    .option("--prices <file>", "YAML of USD per million tokens per model (as report --prices): cost per run and per model turn")
    .action(async (campaign: string, opts: { out?: string; prices?: string }) => {
      const { buildView } = await import("../campaign/view/render.js");
      const { writeFileAtomic } = await import("../campaign/report/index.js");
      const { loadPrices } = await import("../campaign/report/prices.js");
      const out = resolve(opts.out ?? join(campaign, "view.html"));
      writeFileAtomic(out, buildView(campaign, { prices: opts.prices ? loadPrices(opts.prices) : null }));
      process.stdout.write(`view: wrote ${out} (open it in a browser; it makes no request)\n`);
    });
}
