/**
 * scripts/setup.mjs (the README's first step): a second run with no TypeScript source changed does
 * not build again. `npm test` has just run it, so the stamp is current here.
 */
import { REPO_ROOT } from "../helpers/paths.js";
import { spawnSync } from "node:child_process";
import { statSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ensureBuilt } from "../helpers/backends.js";

const ROOT = REPO_ROOT;

describe("setup", () => {
  it("skips the TypeScript build when no source changed since the last one", () => {
    ensureBuilt();
    const first = spawnSync(process.execPath, [join(ROOT, "scripts", "setup.mjs")], { encoding: "utf8", timeout: 300_000, env: { ...process.env, INFRADEV_NO_APT: "1" } });
    expect(first.status, first.stderr).toBe(0);
    const main = join(ROOT, "dist", "cli", "main.js");
    const before = statSync(main).mtimeMs;
    const second = spawnSync(process.execPath, [join(ROOT, "scripts", "setup.mjs")], { encoding: "utf8", timeout: 300_000, env: { ...process.env, INFRADEV_NO_APT: "1" } });
    expect(second.status, second.stderr).toBe(0);
    expect(second.stderr).toContain("build up to date");
    expect(second.stderr).not.toContain("npm run --silent build");
    expect(statSync(main).mtimeMs).toBe(before);
    // The README's CLI reference uses `npx infradev`: set-up provides the command in this folder.
    const npx = spawnSync("npx", ["--no-install", "infradev", "--version"], { encoding: "utf8", cwd: ROOT, timeout: 60_000 });
    expect(npx.status, npx.stderr).toBe(0);
    expect(npx.stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/);
  }, 600_000);
});
