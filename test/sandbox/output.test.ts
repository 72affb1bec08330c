/** The shared output capture: head + tail under one budget for both streams, full log, streaming. */
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { OutputCapture, newExecId, splitBudget } from "../../src/sandbox/output-capture.js";

const dir = mkdtempSync(join(tmpdir(), "infradev-output-test-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("splitBudget", () => {
  it("gives a quiet stream all it needs and the rest to the other", () => {
    expect(splitBudget(100, 30, 40)).toEqual([30, 40]);
    expect(splitBudget(100, 10, 500)).toEqual([10, 90]);
    expect(splitBudget(100, 500, 20)).toEqual([80, 20]);
    expect(splitBudget(100, 500, 500)).toEqual([50, 50]);
    expect(splitBudget(0, 5, 5)).toEqual([0, 0]);
  });
});

describe("OutputCapture", () => {
  it("keeps everything under the cap, and writes header, output and footer to the log", async () => {
    const cap = new OutputCapture({ maxOutputBytes: 1000, logDir: join(dir, "a"), logHeader: ["argv: x"] });
    cap.write("stdout", "hello ");
    cap.write("stderr", Buffer.from("warn\n"));
    cap.write("stdout", "world\n");
    const out = await cap.finish(["exited: 0"]);
    expect(out).toMatchObject({ stdout: "hello world\n", stderr: "warn\n", truncated: false, bytes: { stdout: 12, stderr: 5 } });
    expect(readFileSync(out.logPath!, "utf8")).toBe("# argv: x\nhello warn\nworld\n\n# exited: 0\n");
  });

  it("cuts head + tail with a byte count, on line boundaries when it can", async () => {
    const cap = new OutputCapture({ maxOutputBytes: 200, logDir: join(dir, "b") });
    const lines = Array.from({ length: 1000 }, (_, i) => `line ${i}\n`);
    for (const l of lines) cap.write("stdout", l);
    const out = await cap.finish();
    const total = lines.join("").length;
    expect(out.truncated).toBe(true);
    expect(out.stdout.startsWith("line 0\nline 1\n")).toBe(true);
    expect(out.stdout.endsWith("line 998\nline 999\n")).toBe(true);
    const m = /\n\[\.\.\. (\d+) bytes omitted \.\.\.\]\n/.exec(out.stdout)!;
    const kept = Buffer.byteLength(out.stdout) - m[0].length;
    expect(Number(m[1]) + kept).toBe(total);
    expect(kept).toBeLessThanOrEqual(200);
    const [head, tail] = out.stdout.split(m[0]) as [string, string];
    expect(head.endsWith("\n")).toBe(true);
    expect(/^line \d+\n/.test(tail)).toBe(true);
    expect(readFileSync(out.logPath!, "utf8")).toBe(lines.join(""));
  });

  it("never splits a UTF-8 character, and streams whole characters to onOutput", async () => {
    const chunks: string[] = [];
    const cap = new OutputCapture({ maxOutputBytes: 51, onOutput: (c) => chunks.push(c) });
    const text = "é".repeat(500);
    const buf = Buffer.from(text);
    for (let i = 0; i < buf.length; i += 7) cap.write("stderr", buf.subarray(i, i + 7));
    const out = await cap.finish();
    expect(out.stderr).not.toContain("\uFFFD");
    expect(out.stderr).toMatch(/^é+\n\[\.\.\. \d+ bytes omitted \.\.\.\]\né+$/);
    expect(chunks.join("")).toBe(text);
    expect(out.logPath).toBeUndefined();
  });

  it("shares one budget between the streams", async () => {
    const cap = new OutputCapture({ maxOutputBytes: 100 });
    cap.write("stdout", "x".repeat(1000));
    cap.write("stderr", "short error\n");
    const out = await cap.finish();
    expect(out.stderr).toBe("short error\n");
    expect(out.stdout).toMatch(/^x+\n\[\.\.\. 912 bytes omitted \.\.\.\]\nx+$/);
  });

  it("caps the stored log: head + marker line + tail, the dropped count reported; small output is kept whole", async () => {
    const cap = new OutputCapture({ maxOutputBytes: 100, logDir: join(dir, "capped"), logHeader: ["h"], logHeadBytes: 10, logTailBytes: 6 });
    cap.write("stdout", "0123456");
    cap.write("stderr", "789abcdef");
    cap.write("stdout", "ghijklmnop");
    cap.write("stdout", "qrstuvwxyz");
    const out = await cap.finish(["end"]);
    const total = 7 + 9 + 10 + 10;
    expect(out.logTruncatedBytes).toBe(total - 16);
    expect(readFileSync(out.logPath!, "utf8")).toBe(
      `# h\n0123456789\n[infradev: ${total - 16} bytes dropped: the log kept the first 10 and last 6 bytes]\nuvwxyz\n# end\n`,
    );
    const small = new OutputCapture({ logDir: join(dir, "capped"), logHeadBytes: 10, logTailBytes: 6 });
    small.write("stdout", "0123456789abcdef");
    const whole = await small.finish();
    expect(whole.logTruncatedBytes).toBe(0);
    expect(readFileSync(whole.logPath!, "utf8")).toBe("0123456789abcdef");
  });

  it("names logs by time and a random id, so concurrent commands never collide", () => {
    const ids = new Set(Array.from({ length: 50 }, () => newExecId(new Date("2025-01-02T03:04:05.678Z"))));
    expect(ids.size).toBe(50);
    expect([...ids][0]).toMatch(/^20250102T030405\.678Z-[0-9a-f]{8}$/);
    expect(readdirSync(dir).length).toBeGreaterThan(0);
  });
});
