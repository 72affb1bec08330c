import { cpSync, existsSync, mkdirSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import type { Command } from "commander";
import { skillsDir } from "../lib/paths.js";
import { INFRA_SKILL, loadSkill, skillFile } from "../server/skill.js";
import { UsageError } from "../lib/errors.js";

export type Harness = "codex" | "opencode";

/** Where each harness looks for user-level skills (Agent Skills format: <root>/<name>/SKILL.md). */
export function defaultSkillsRoot(harness: Harness, env: NodeJS.ProcessEnv = process.env): string {
  if (harness === "codex") return join(env.HOME ?? homedir(), ".agents", "skills");
  return join(env.XDG_CONFIG_HOME ?? join(env.HOME ?? homedir(), ".config"), "opencode", "skills");
}

/** Copies skills/<name>/ to <root>/<name>/; returns the installed SKILL.md and whether it changed. */
export function installSkill(root: string, name = INFRA_SKILL): { file: string; changed: boolean } {
  loadSkill(name); // refuse to install a skill whose frontmatter is broken
  const src = dirname(skillFile(name, skillsDir()));
  const dest = join(resolve(root), name);
  const file = join(dest, "SKILL.md");
  const before = existsSync(file) ? readFileSync(file, "utf8") : null;
  mkdirSync(dest, { recursive: true });
  cpSync(src, dest, { recursive: true, force: true, dereference: true });
  return { file, changed: before !== readFileSync(file, "utf8") };
}

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
