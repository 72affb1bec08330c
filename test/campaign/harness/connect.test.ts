/**
 * `infradev connect --write`: the harness config is merged into the user's file instead of being
 * appended by hand (twice appended, Codex refuses a duplicate [mcp_servers.infradev] key).
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse as parseToml } from "smol-toml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { codexConfig, mergeCodexConfig } from "../../../src/campaign/harness/codex.js";
import { mergeOpencodeConfig, opencodeConfig } from "../../../src/campaign/harness/opencode.js";
import { ensureBuilt } from "../../helpers/backends.js";

const tmp = mkdtempSync(join(tmpdir(), "infradev-connect-"));
let cli: string;
beforeAll(() => {
  cli = ensureBuilt();
}, 300_000);
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const o = { task: "grad-bucketing", sandbox: "local", runsDir: "/r/runs", node: "/usr/bin/node", cli: "/pkg/dist/cli/main.js" };

describe("merging the harness config", () => {
  it("codex: replaces our table and its sub-tables, keeps the rest byte for byte, parses as TOML", () => {
    const user = [
      "# my settings",
      'model = "gpt-5"',
      "",
      "[mcp_servers.other]",
      'command = "other"',
      "",
      '[mcp_servers."infradev"]',
      'command = "stale"',
      "[mcp_servers.infradev.env]",
      'A = "1"',
      "",
      "[profiles.fast] # trailing comment",
      'model = "x"',
      "",
    ].join("\n");
    const table = codexConfig(o, 600);
    const once = mergeCodexConfig(user, table);
    const twice = mergeCodexConfig(once, table);
    expect(twice).toBe(once);
    const doc = parseToml(once) as Record<string, any>;
    expect(doc.model).toBe("gpt-5");
    expect(doc.mcp_servers.other).toEqual({ command: "other" });
    expect(doc.mcp_servers.infradev).toMatchObject({ command: "/usr/bin/node", required: true, default_tools_approval_mode: "approve", tool_timeout_sec: 1500 });
    expect(doc.mcp_servers.infradev.env).toBeUndefined();
    expect(doc.profiles.fast).toEqual({ model: "x" });
    expect(once).toContain("# my settings\n");
    expect(once).not.toContain("stale");
  });

  it("opencode: one entry in the layout asked for, other servers kept; comments are refused with a clear error", () => {
    const user = JSON.stringify({ $schema: "https://opencode.ai/config.json", mcp: { other: { type: "local", command: ["x"] }, servers: { infradev: { old: true } } } });
    const merged = JSON.parse(mergeOpencodeConfig(user, opencodeConfig(o, 600)));
    expect(merged.mcp.other).toEqual({ type: "local", command: ["x"] });
    expect(merged.mcp.infradev).toMatchObject({ type: "local", enabled: true, timeout: 1_500_000 });
    expect(merged.mcp.servers.infradev).toBeUndefined();
    expect(() => mergeOpencodeConfig('{ // comment\n}', opencodeConfig(o, 600))).toThrow(/not plain JSON/);
  });

  it("the CLI writes the merged file, keeps a backup, and a second run changes nothing", () => {
    const file = join(tmp, "config.toml");
    writeFileSync(file, '# keep me\nmodel = "m"\n');
    const run = () => spawnSync(process.execPath, [cli, "connect", "codex", "--task", "grad-bucketing", "--write", file, "--runs-dir", join(tmp, "runs")], { encoding: "utf8" });
    const first = run();
    expect(first.status, first.stderr).toBe(0);
    expect(first.stdout).toBe("");
    expect(first.stderr).toContain(`wrote the infradev entry into ${file}`);
    expect(readFileSync(`${file}.bak`, "utf8")).toBe('# keep me\nmodel = "m"\n');
    const after = readFileSync(file, "utf8");
    expect(run().status).toBe(0);
    expect(readFileSync(file, "utf8")).toBe(after);
    const doc = parseToml(after) as Record<string, any>;
    expect(doc.model).toBe("m");
    expect(doc.mcp_servers.infradev.args).toContain("serve");
    expect(existsSync(join(tmp, "runs"))).toBe(false); // connect starts nothing
  });
});
