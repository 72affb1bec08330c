/**
 * Where each harness looks for user-level skills, and installing the infra skill there: part of
 * every harness adapter's set-up (a run installs it into the harness's private home), and of
 * `infradev skill install`.
 */
import { cpSync, existsSync, mkdirSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { skillsDir } from "../../lib/paths.js";
import { INFRA_SKILL, loadSkill, skillFile } from "../../server/skill.js";

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

