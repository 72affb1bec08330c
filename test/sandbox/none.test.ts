/** The `none` backend: plain host processes with the shared exec semantics, and loud about it. */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSandbox } from "../../src/sandbox/picker.js";
import { NONE_WARNING, NoneSandbox } from "../../src/sandbox/none.js";
import { processesMatching, uniqueSleepSeconds } from "../helpers/sandbox.js";

let base: string;
let workspace: string;
let sb: NoneSandbox;

beforeAll(async () => {
  base = realpathSync(mkdtempSync(join(tmpdir(), "infradev-none-test-")));
  workspace = join(base, "workspace");
  mkdirSync(join(workspace, "sub"), { recursive: true });
  sb = (await createSandbox({ kind: "none", hostRepoDir: workspace, env: { FROM_OPTIONS: "yes" }, killGraceMs: 300 })) as NoneSandbox;
});

afterAll(async () => {
  await sb?.close();
  rmSync(base, { recursive: true, force: true });
});

describe("none sandbox", () => {
  it("runs on the host and marks every result as not isolated, with a warning", async () => {
    const r = await sb.exec(["bash", "-c", 'pwd; echo "$FROM_OPTIONS $INFRADEV_SANDBOX"; exit 4']);
    expect(r.exitCode).toBe(4);
    expect(r.stdout).toBe(`${workspace}\nyes none\n`);
    expect(r.isolated).toBe(false);
    expect(r.warning).toBe(NONE_WARNING);
    expect(r.warning).toMatch(/nothing is isolated/);
    expect(sb.repoDir).toBe(workspace);
    expect(readFileSync(r.logPath!, "utf8")).toContain("nothing is isolated");
    expect(r.sandboxLogPath).toBe(r.logPath);
  });

  it("resolves cwd against the workspace; a missing cwd or program is the command's failure", async () => {
    expect((await sb.exec(["pwd"], { cwd: "sub" })).stdout).toBe(`${join(workspace, "sub")}\n`);
    const noDir = await sb.exec(["pwd"], { cwd: "missing" });
    expect(noDir.exitCode).toBe(1);
    expect(noDir.stderr).toMatch(/cannot cd to/);
    expect(noDir.harnessError).toBeUndefined();
    const noProg = await sb.exec(["no-such-program-xyz"]);
    expect(noProg.exitCode).toBe(127);
    expect(noProg.harnessError).toBeUndefined();
    expect(noProg.isolated).toBe(false);
  });

  it("timeout kills the whole tree (process group and setsid children) and leaves no process", async () => {
    const s = uniqueSleepSeconds();
    const r = await sb.exec(["bash", "-c", `sleep ${s} & setsid sleep ${s} & sleep ${s}`], { timeoutSec: 1 });
    expect(r.timedOut).toBe(true);
    expect(r.harnessError).toBeUndefined();
    expect(r.durationMs).toBeLessThan(4000);
    expect(processesMatching(`sleep ${s}`)).toEqual([]);
  });

  it("an abort cancels; a background child does not outlive the command", async () => {
    const s = uniqueSleepSeconds();
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 300);
    const r = await sb.exec(["sleep", s], { signal: ac.signal });
    expect(r.cancelled).toBe(true);
    expect(processesMatching(`sleep ${s}`)).toEqual([]);

    const s2 = uniqueSleepSeconds();
    const bg = await sb.exec(["bash", "-c", `sleep ${s2} & echo started`]);
    expect(bg.stdout).toBe("started\n");
    expect(bg.durationMs).toBeLessThan(3000);
    expect(processesMatching(`sleep ${s2}`)).toEqual([]);
  });

  it("toHostPath stays inside the workspace, symlinks included", () => {
    expect(sb.toHostPath("sub")).toBe(join(workspace, "sub"));
    expect(() => sb.toHostPath("../x")).toThrow(/outside the root/);
    symlinkSync(base, join(workspace, "up"));
    expect(() => sb.toHostPath("up/x")).toThrow(/symlink/);
  });

  it("does not inherit the server's environment when told not to", async () => {
    process.env.INFRADEV_NONE_TEST = "leaky";
    try {
      const strict = new NoneSandbox({ hostRepoDir: workspace, inheritEnv: false });
      const r = await strict.exec(["bash", "-c", 'echo "${INFRADEV_NONE_TEST:-unset}"']);
      expect(r.stdout).toBe("unset\n");
      await strict.close();
      const loose = new NoneSandbox({ hostRepoDir: workspace });
      expect((await loose.exec(["bash", "-c", 'echo "$INFRADEV_NONE_TEST"'])).stdout).toBe("leaky\n");
      await loose.close();
    } finally {
      delete process.env.INFRADEV_NONE_TEST;
    }
  });

  it("refuses a workspace that does not exist", () => {
    expect(() => new NoneSandbox({ hostRepoDir: join(base, "nope") })).toThrow(/not an existing folder/);
    expect(existsSync(join(base, "nope"))).toBe(false);
  });
});

describe("none sandbox: contracts C and D", () => {
  it("ignores read-only overlays with a warning; keeps logs outside the workspace (a temp folder removed at close)", async () => {
    const lines: string[] = [];
    const { pino } = await import("pino");
    const logger = pino({ level: "warn" }, { write: (l: string) => lines.push(l) });
    const own = (await createSandbox({ kind: "none", hostRepoDir: workspace, logger, readOnlyOverlays: [{ host: base, rel: "probes" }] })) as NoneSandbox;
    expect(lines.join("")).toMatch(/readOnlyOverlays ignored/);
    const r = await own.exec(["echo", "x"]);
    expect(r.logPath!.startsWith(workspace)).toBe(false);
    expect(r.sandboxLogPath).toBe(r.logPath);
    expect(existsSync(join(workspace, "probes"))).toBe(false);
    await own.close();
    expect(existsSync(own.logDir)).toBe(false);
    await expect(createSandbox({ kind: "none", hostRepoDir: workspace, logDir: join(workspace, ".infradev", "logs") })).rejects.toThrow(/inside the workspace/);
  });
});
