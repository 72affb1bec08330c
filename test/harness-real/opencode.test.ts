/**
 * Issue 12 item 3, with the real OpenCode (devDependency opencode-ai, pinned): the config that
 * `infradev connect opencode` prints is resolved by `opencode debug config`, and the infradev entry
 * must keep its timeout there. OpenCode's default MCP request timeout is 5 s, so a multi-rank
 * pytest_run fails when the timeout is dropped.
 *
 * Why V1 is the default: OpenCode 1.18.33 reads a V2 entry (`mcp.servers.infradev`,
 * `timeout: {startup, request}`) but resolves it with NO timeout at all; the V1 entry (`mcp.infradev`,
 * `enabled`, one `timeout` in ms) keeps it. The second case below shows the drop, so a later OpenCode
 * that honours V2 makes it fail (and the default can be revisited).
 *
 * Offline: HOME and the XDG dirs are temp folders, `--pure` (no external plugins) and the
 * autoupdate / models-fetch / default-plugin switches are off; no model is called. Skipped only
 * when the package is not installed (named in the skip reason); a binary that is installed but does
 * not run fails the test.
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { toolTimeoutSec } from "../../src/campaign/harness/mcp-entry.js";
import { loadPublicTask } from "../../src/task/public/loader.js";
import { ensureBuilt } from "../helpers/backends.js";
import { opencodeBinary } from "../../src/campaign/harness/opencode.js";

const OPENCODE_VERSION = "1.18.33";


const opencode = opencodeBinary();
const why = "opencode-ai is not installed (it is a pinned devDependency: run npm install)";
const suite = opencode ? describe : describe.skip;

const tmp = mkdtempSync(join(tmpdir(), "infradev-opencode-"));
let cli: string;
beforeAll(() => {
  cli = ensureBuilt();
}, 300_000);
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** An isolated HOME / XDG tree and an empty project folder; the config goes into the global config dir. */
function sandboxEnv(name: string): { env: NodeJS.ProcessEnv; configFile: string; project: string } {
  const home = join(tmp, name, "home");
  const project = join(tmp, name, "project");
  mkdirSync(join(home, ".config", "opencode"), { recursive: true });
  mkdirSync(project, { recursive: true });
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: home,
    XDG_CONFIG_HOME: join(home, ".config"),
    XDG_DATA_HOME: join(home, ".local", "share"),
    XDG_CACHE_HOME: join(home, ".cache"),
    XDG_STATE_HOME: join(home, ".local", "state"),
    OPENCODE_DISABLE_AUTOUPDATE: "1",
    OPENCODE_DISABLE_MODELS_FETCH: "1",
    OPENCODE_DISABLE_DEFAULT_PLUGINS: "1",
    OPENCODE_DISABLE_LSP_DOWNLOAD: "1",
  };
  return { env, configFile: join(home, ".config", "opencode", "opencode.json"), project };
}

function connect(args: string[]): string {
  const r = spawnSync(process.execPath, [cli, "connect", "opencode", "--task", "grad-bucketing", "--runs-dir", join(tmp, "runs"), ...args], { encoding: "utf8" });
  expect(r.status, r.stderr).toBe(0);
  return r.stdout;
}

/** What OpenCode resolves from `config` (written as its global opencode.json). */
function resolved(name: string, config: string): Record<string, any> {
  const { env, configFile, project } = sandboxEnv(name);
  writeFileSync(configFile, config);
  const r = spawnSync(opencode!, ["debug", "config", "--pure"], { cwd: project, env, encoding: "utf8", timeout: 30_000 });
  expect(r.error, String(r.error)).toBeUndefined();
  expect(r.status, `opencode debug config failed:\n${r.stderr}`).toBe(0);
  return JSON.parse(r.stdout) as Record<string, any>;
}

const requestMs = () => toolTimeoutSec(loadPublicTask("grad-bucketing").spec.run_timeout_sec) * 1000;

if (!opencode) it.skip(`real OpenCode: ${why}`, () => {});

suite(`real OpenCode ${OPENCODE_VERSION}: the printed config keeps its timeout`, () => {
  it("is the pinned version and runs offline here", () => {
    const { env, project } = sandboxEnv("version");
    const r = spawnSync(opencode!, ["--version"], { cwd: project, env, encoding: "utf8", timeout: 30_000 });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.trim()).toBe(OPENCODE_VERSION);
  });

  it("default (V1 layout), stdio: the infradev entry is enabled and keeps the request timeout", () => {
    const doc = resolved("v1", connect([]));
    expect(doc.mcp?.infradev).toMatchObject({ type: "local", enabled: true, timeout: requestMs() });
    expect(doc.mcp.infradev.command).toEqual(expect.arrayContaining(["serve", "--task", "grad-bucketing"]));
  }, 30_000);

  it("default (V1 layout), --http: the remote entry keeps the timeout and the bearer header", () => {
    const doc = resolved("v1-http", connect(["--http"]));
    expect(doc.mcp?.infradev).toMatchObject({ type: "remote", url: "http://127.0.0.1:8741/mcp", oauth: false, timeout: requestMs() });
    expect(doc.mcp.infradev.headers?.Authorization).toBeTruthy(); // `debug config` prints header values as "***"
  }, 30_000);

  it("--opencode-v2: OpenCode 1.18 reads the server but drops its timeout (why V1 is the default)", () => {
    const printed = JSON.parse(connect(["--opencode-v2"]));
    expect(printed.mcp.servers.infradev.timeout).toEqual({ startup: 60_000, request: requestMs() });
    const doc = resolved("v2", JSON.stringify(printed));
    const entry = doc.mcp?.infradev ?? doc.mcp?.servers?.infradev;
    expect(entry, JSON.stringify(doc.mcp)).toBeDefined();
    expect(entry.command).toEqual(expect.arrayContaining(["serve"]));
    expect(entry.timeout).toBeUndefined();
  }, 30_000);
});
