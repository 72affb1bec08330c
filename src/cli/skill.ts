/** `infradev skill show | install`: the install itself is campaign/harness/skills.ts (every harness adapter uses it). */
import { resolve } from "node:path";
import type { Command } from "commander";
import { defaultSkillsRoot, installSkill, type Harness } from "../campaign/harness/skills.js";
import { loadSkill } from "../server/skill.js";
import { UsageError } from "../lib/errors.js";

export function registerSkillCommands(program: Command): void {
  const skill = program.command("skill").description("the infra-dev skill (Agent Skills format)");
  skill
    .command("show")
    .description("print SKILL.md")
    .action(() => {
      process.stdout.write(loadSkill().text);
    });
  skill
    .command("install")
    .description("copy the skill where Codex (~/.agents/skills) or OpenCode (~/.config/opencode/skills) looks for skills")
    .option("--codex", "install for Codex")
    .option("--opencode", "install for OpenCode")
    .option("--dir <dir>", "skills folder to install into instead of the harness's default (the skill goes in <dir>/infra-dev/)")
    .action((opts: { codex?: boolean; opencode?: boolean; dir?: string }) => {
      const harnesses: Harness[] = [...(opts.codex ? (["codex"] as const) : []), ...(opts.opencode ? (["opencode"] as const) : [])];
      if (harnesses.length === 0 && !opts.dir) throw new UsageError("skill install: pass --codex, --opencode (or both), or --dir <skills folder>");
      const roots = opts.dir ? [resolve(opts.dir)] : harnesses.map((h) => defaultSkillsRoot(h));
      for (const root of roots) {
        const { file, changed } = installSkill(root);
        process.stdout.write(`${changed ? "installed" : "up to date"}: ${file}\n`);
      }
    });
}
