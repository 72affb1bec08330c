import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parse as parseYaml } from "yaml";
import { skillsDir } from "../lib/paths.js";
import type { Skill } from "../tools/support/deps.js";

export const INFRA_SKILL = "infra-dev";

export function skillFile(name = INFRA_SKILL, root = skillsDir()): string {
  return join(root, name, "SKILL.md");
}

/** Reads an Agent Skills SKILL.md and checks its frontmatter (name matches the folder, description set). */
export function loadSkill(name = INFRA_SKILL, root = skillsDir()): Skill {
  const file = skillFile(name, root);
  const text = readFileSync(file, "utf8");
  const m = /^---\n([\s\S]*?)\n---\n/.exec(text);
  if (!m) throw new Error(`${file}: missing the YAML frontmatter (--- name / description ---)`);
  const front = parseYaml(m[1]!) as { name?: unknown; description?: unknown };
  if (front.name !== name) throw new Error(`${file}: frontmatter name must be "${name}" (the folder name), got ${JSON.stringify(front.name)}`);
  if (typeof front.description !== "string" || front.description.length === 0 || front.description.length > 1024) {
    throw new Error(`${file}: frontmatter description must be a string of 1-1024 characters`);
  }
  return { name, description: front.description, text };
}
