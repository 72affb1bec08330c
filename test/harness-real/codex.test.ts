/**
 * Issue 12 item 7, with the real Codex CLI (devDependency @openai/codex, pinned): Codex waits about a
 * second for its MCP servers before it renders the model's first input, and a server that answered
 * `initialize` only after building its workspace was left out under load ("server not connected").
 * `infradev serve` now answers `initialize` first. The config is what `infradev connect codex --write`
 * writes; `codex debug prompt-input` renders the model-visible input without calling any model, and
 * our server's namespace must be in it — here with both cores kept busy by two spinning processes.
 */
import { TEST_FIXTURES } from "../helpers/paths.js";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureBuilt } from "../helpers/backends.js";
import { codexEntry } from "../../src/campaign/harness/codex.js";

const FIXTURES = join(TEST_FIXTURES, "grader", "tasks");


const codex = codexEntry();

describe.skipIf(codex === null)("the real Codex CLI sees infradev's tools (skipped only when @openai/codex is not installed: run npm install)", () => {
  let cli: string;
  let scratch: string;
  const burners: ChildProcess[] = [];
  beforeAll(() => {
    cli = ensureBuilt();
    scratch = mkdtempSync(join(tmpdir(), "infradev-codex-"));
  }, 300_000);
  afterAll(() => {
    for (const b of burners) b.kill("SIGKILL");
    rmSync(scratch, { recursive: true, force: true });
  });

  it("codex debug prompt-input lists the server's namespace, with the machine loaded", () => {
    const version = spawnSync(process.execPath, [codex!, "--version"], { encoding: "utf8" });
    expect(version.stdout).toContain("0.169.0");
    const home = join(scratch, "codex-home");
    mkdirSync(home);
    const write = spawnSync(process.execPath, [cli, "connect", "codex", "--task", "tiny-mean", "--tasks-dir", FIXTURES, "--runs-dir", join(scratch, "runs"), "--write", join(home, "config.toml")], { encoding: "utf8" });
    expect(write.status, write.stderr).toBe(0);
    // Load: one spinning process per core while Codex starts the server.
    for (let i = 0; i < 2; i++) burners.push(spawn(process.execPath, ["-e", "for (;;) {}"], { stdio: "ignore" }));
    const r = spawnSync(process.execPath, [codex!, "debug", "prompt-input", "hello"], {
      encoding: "utf8",
      cwd: scratch,
      timeout: 120_000,
      env: { ...process.env, CODEX_HOME: home, HOME: scratch },
    });
    for (const b of burners.splice(0)) b.kill("SIGKILL");
    expect(r.status, `${r.stderr}`.slice(-2000)).toBe(0);
    expect(r.stdout).toMatch(/mcp__infradev: InfraDev task server for \\?"tiny-mean\\?"/);
  }, 180_000);
});
