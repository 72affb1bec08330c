/**
 * `infradev view`'s HTML in headless Chromium (playwright-core + Debian's Chromium, as report.test.ts):
 * the fixture campaign (runs table and its filters, one run's trajectory, grade cases and patch, the
 * paired view) and a synthetic run of 10,000 events (time to first render, to filter, to scroll),
 * with no console error and no request. One browser for both.
 */
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { buildView } from "../../src/campaign/view/render.js";
import { loadPrices } from "../../src/campaign/report/prices.js";
import type { GradeResult } from "../../src/grader/grade/types.js";

const FIXTURE = resolve("test/fixtures/campaign");
const CANDIDATES = process.env.INFRADEV_CHROMIUM ? [process.env.INFRADEV_CHROMIUM] : ["/usr/bin/chromium", "/usr/bin/chromium-browser"];
const chromium = CANDIDATES.find((p) => existsSync(p));
const required = process.env.INFRADEV_REQUIRE_BROWSER === "1";
const tmp = mkdtempSync(join(tmpdir(), "infradev-view-browser-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** The fixture campaign plus one run of 10,000 events: tool calls with results, model turns every 4th. */
function bigCampaign(): string {
  const dir = join(tmp, "campaign");
  cpSync(FIXTURE, dir, { recursive: true });
  const id = "tiny-mean--alpha--r9";
  const d = join(dir, "runs", id);
  mkdirSync(d, { recursive: true });
  const lines: string[] = [];
  for (let k = 0; k < 10_000; k++) {
    const cmd = k === 7777 ? "echo needle-7777" : `python -c 'print(${k})'`;
    lines.push(JSON.stringify({ ts: new Date(Date.UTC(2026, 11, 3) + k * 1000).toISOString(), tool: "run_shell", args: { command: cmd }, duration_ms: 100 + (k % 50), is_error: false, exit_code: k % 97 === 0 ? 1 : 0, result_text_bytes: 300, result: `output of step ${k}\n${"x".repeat(200)}` }));
  }
  writeFileSync(join(d, "trace.jsonl"), lines.join("\n") + "\n");
  // One fixture run's failing case as the grader writes a hang (test/grader/grade/grade.test.ts checks it does).
  const gradeFile = join(dir, "runs", "tiny-mean--beta--r1", "grade.json");
  const g = JSON.parse(readFileSync(gradeFile, "utf8")) as GradeResult;
  const message = "hang: x did not finish within 15 s on rank 1; collective hang: rank 0 waits in all_reduce called at ops.py:12 in all_mean; did not arrive: rank 1 (at ops.py:10 in all_mean)";
  g.cases.find((c) => c.outcome !== "passed")!.killed = { reason: "hang", message, stacks: [0, 1].map((rank) => ({ rank, text: `${message}\n\nPython stacks of rank ${rank} when it was killed:\nThread 0x1 (most recent call first):\n  File "ops.py", line ${12 - 2 * rank} in all_mean` })) };
  writeFileSync(gradeFile, JSON.stringify(g));
  writeFileSync(join(d, "run.json"), JSON.stringify({ schema_version: 1, run_id: id, task_id: "tiny-mean", category: "training", type: "feature", agent: "alpha", harness: "codex", harness_version: "0", model: "model-a", skill: true, repeat: 9, started_at: "2026-12-03T00:00:00Z", ended_at: "2026-12-03T03:00:00Z", wall_s: 10_000, time_limit_min: 150, exit_reason: "time_limit", error: null, attempts: 1, recoveries_used: 0, turns: null, tool_calls: 10_000, tools_used: { run_shell: 10_000 }, tokens: { input: 1e6, cached_input: 5e5, output: 1e5, reasoning: null }, patch_bytes: 0, submitted: false, grade: null }));
  return dir;
}

describe("view HTML in headless Chromium", () => {
  if (required && !chromium) {
    it("has a browser to test with (INFRADEV_REQUIRE_BROWSER=1)", () => {
      throw new Error("INFRADEV_REQUIRE_BROWSER=1 but no Chromium");
    });
    return;
  }
  it.skipIf(!chromium)("shows runs, filters, a trajectory, the grade, the patch, a paired view, and stays fast on 10,000 events", async () => {
    const file = join(tmp, "view.html");
    writeFileSync(file, buildView(bigCampaign(), { prices: loadPrices(join(FIXTURE, "prices.yaml")) }));
    const url = pathToFileURL(file).href;
    const { chromium: driver } = await import("playwright-core");
    const browser = await driver.launch({ executablePath: chromium!, headless: true, args: ["--no-sandbox", "--disable-gpu"] });
    try {
      const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
      const errors: string[] = [];
      const requests: string[] = [];
      page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
      page.on("pageerror", (e) => errors.push(String(e)));
      page.on("request", (r) => r.url().split("#")[0] !== url && requests.push(r.url()));
      await page.goto(url);
      await page.waitForSelector("body[data-ready='1']");
      const runIds = () => page.$$eval("#runs-body tr", (trs) => trs.map((tr) => tr.getAttribute("data-run")));
      expect(await runIds()).toHaveLength(10); // 9 fixture runs + the big one
      await page.selectOption("#f-agent", "beta");
      expect(await runIds()).toEqual(["check-mean--beta--r1", "check-mean--beta--r2", "tiny-mean--beta--r1", "tiny-mean--beta--r2", "tiny-mean--beta--r3"]);
      await page.selectOption("#f-verdict", "resolved");
      expect(await runIds()).toEqual(["tiny-mean--beta--r3"]);
      await page.selectOption("#f-agent", "");
      await page.selectOption("#f-task", "check-mean");
      expect(await runIds()).toEqual(["check-mean--alpha--r1"]);
      await page.selectOption("#f-flagged", "flagged");
      expect(await runIds()).toEqual([]);

      // one fixture run: trajectory rows, a tool call's detail, grade cases with labels, the patch as a diff
      await page.goto(`${url}#run=tiny-mean--alpha--r2`);
      await page.waitForSelector("#traj .t-row");
      expect(await page.$$eval("#traj .t-row .t-s", (xs) => xs.map((x) => x.textContent))).toEqual(["get_task", "run_shell ls", "pytest_run [\"tests\"]", "submit"]);
      await page.click("#traj .t-row:nth-child(2)");
      expect(await page.textContent("#detail h4")).toContain("run_shell");
      const cases = await page.$$eval("#cases-table tbody tr", (trs) => trs.map((tr) => [...tr.querySelectorAll("td")].map((td) => td.textContent)));
      expect(cases.find((c) => c[0]!.endsWith("test_one_all_reduce_call"))).toEqual(["infradev_probes/test_probe_mean.py::test_one_all_reduce_call", "probe", "failed", "behavioral-resource"]);
      expect(await page.$$eval("#patch .d-a", (xs) => xs.length)).toBeGreaterThan(0);
      expect(await page.textContent("#run .res")).toContain("cost $0.32");
      // a run with a hang: the launcher's reading and each killed rank's stacks, under the cases
      await page.goto(`${url}#run=tiny-mean--beta--r1`);
      await page.waitForSelector("#killed h4");
      expect(await page.textContent("#killed .killed-msg")).toContain("did not arrive: rank 1 (at ops.py:10 in all_mean)");
      expect(await page.$$eval("#killed details.stacks summary", (xs) => xs.map((x) => x.textContent))).toEqual(["rank 0: Python stacks (every thread) before the kill", "rank 1: Python stacks (every thread) before the kill"]);
      expect(await page.textContent("#killed details.stacks:nth-of-type(2) pre")).toContain('File "ops.py", line 10 in all_mean');
      // the paired view: alpha r2 (adversarial) against beta r3 (golden) on tiny-mean
      await page.goto(`${url}#pair=tiny-mean--alpha--r2,tiny-mean--beta--r3`);
      await page.waitForSelector("#pair-1 .t-row");
      const pair = await page.$$eval("#pair-cases tbody tr", (trs) => trs.map((tr) => [...tr.querySelectorAll("td")].map((td) => td.textContent)));
      expect(pair.find((r) => r[0]!.endsWith("test_one_all_reduce_call"))!.slice(1)).toEqual(["failed (behavioral-resource)", "passed"]);

      // 10,000 events: time to first render, filter, scroll; only the rows in view exist
      const t0 = Date.now();
      await page.goto(`${url}#run=tiny-mean--alpha--r9`);
      await page.waitForSelector("#traj .t-row");
      const firstRender = Date.now() - t0;
      expect(await page.textContent("#traj .t-count")).toBe("10000 of 10000 event(s)"); // 10,000 tool calls, no session lines
      const domRows = await page.$$eval("#traj .t-row", (xs) => xs.length);
      expect(domRows).toBeLessThan(60);
      const t1 = Date.now();
      await page.fill("#traj .t-filter", "needle-7777");
      await page.waitForFunction(() => document.querySelector("#traj .t-count")!.textContent === "1 of 10000 event(s)");
      const filterMs = Date.now() - t1;
      await page.fill("#traj .t-filter", "");
      await page.selectOption("#traj .t-kind", "error");
      expect(await page.textContent("#traj .t-count")).toBe(`${Math.floor(9999 / 97) + 1} of 10000 event(s)`);
      await page.selectOption("#traj .t-kind", "");
      const t2 = Date.now();
      await page.$eval("#traj .t-scroll", (s) => (s.scrollTop = 9_000 * 24));
      await page.waitForSelector("#traj .t-row[data-i='9000']");
      const scrollMs = Date.now() - t2;
      process.stderr.write(`view, 10,000 events: first render ${firstRender} ms, filter ${filterMs} ms, scroll to #9000 ${scrollMs} ms, ${domRows} rows in the DOM\n`);
      expect(firstRender).toBeLessThan(10_000);
      expect(filterMs).toBeLessThan(3_000);
      expect(scrollMs).toBeLessThan(3_000);
      await page.screenshot({ path: join(process.env.INFRADEV_SCREENSHOTS ?? tmp, "view-10000.png") });
      expect(errors).toEqual([]);
      expect(requests).toEqual([]);
    } finally {
      await browser.close();
    }
  }, 180_000);
});
