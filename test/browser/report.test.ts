/**
 * The report's HTML in a real headless browser (Debian's Chromium, driven by playwright-core): the
 * tables have the expected rows, every chart's SVG has a non-zero box and drawn marks (bars), the
 * page logs no console error and makes no network request (it must work offline).
 *
 * Chromium: $INFRADEV_CHROMIUM (only it, when set), else /usr/bin/chromium or /usr/bin/chromium-browser
 * (`apt-get install -y chromium`). Without it the test is skipped with that reason, unless
 * INFRADEV_REQUIRE_BROWSER=1 (CI), where a missing browser fails it.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { buildReport, loadPrices } from "../../src/campaign/report/index.js";
import { renderHtml } from "../../src/campaign/report/render-html.js";

const FIXTURE = resolve("test/fixtures/campaign");
// $INFRADEV_CHROMIUM, when set, is the only candidate (so the missing-browser paths can be tried).
const CANDIDATES = process.env.INFRADEV_CHROMIUM ? [process.env.INFRADEV_CHROMIUM] : ["/usr/bin/chromium", "/usr/bin/chromium-browser"];
const chromium = CANDIDATES.find((p) => existsSync(p));
const required = process.env.INFRADEV_REQUIRE_BROWSER === "1";
const skipReason = chromium ? null : `no Chromium at ${CANDIDATES.join(", ")} (apt-get install -y chromium, or set INFRADEV_CHROMIUM)`;

const tmp = mkdtempSync(join(tmpdir(), "infradev-report-browser-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe("report HTML in headless Chromium", () => {
  if (required && !chromium) {
    it("has a browser to test with (INFRADEV_REQUIRE_BROWSER=1)", () => {
      throw new Error(`INFRADEV_REQUIRE_BROWSER=1 but ${skipReason}`);
    });
    return;
  }
  it.skipIf(!chromium)(`renders its tables and charts offline${skipReason ? ` — skipped: ${skipReason}` : ""}`, async () => {
    const data = await buildReport(FIXTURE, { prices: loadPrices(join(FIXTURE, "prices.yaml")), compare: ["alpha", "beta"], hostPython: "/usr/bin/python3" });
    const file = join(tmp, "report.html");
    writeFileSync(file, await renderHtml(data));
    const url = pathToFileURL(file).href;

    const { chromium: driver } = await import("playwright-core");
    // --no-sandbox: CI runs as root, where Chromium's own sandbox refuses to start.
    const browser = await driver.launch({ executablePath: chromium!, headless: true, args: ["--no-sandbox", "--disable-gpu"] });
    try {
      const page = await browser.newPage();
      const consoleErrors: string[] = [];
      const requests: string[] = [];
      page.on("console", (m) => {
        if (m.type() === "error") consoleErrors.push(m.text());
      });
      page.on("pageerror", (e) => consoleErrors.push(String(e)));
      page.on("request", (r) => {
        if (r.url() !== url) requests.push(r.url());
      });
      await page.goto(url, { waitUntil: "load" });

      const rows = (id: string) => page.$$eval(`#${id}-table tbody tr`, (trs) => trs.map((tr) => (tr.querySelector("td")?.textContent ?? "").trim()));
      expect(await rows("table2")).toEqual(["alpha", "beta"]);
      expect(await rows("table3")).toEqual(["alpha", "beta"]);
      expect(await rows("table4")).toEqual(["alpha", "beta", "all"]);
      expect(await rows("figure6")).toEqual(["alpha", "beta"]);
      expect(await rows("compare")).toEqual(["alpha resolved", "alpha not resolved"]);
      // one row per run folder that has a run.json: 4 of alpha, 5 of beta
      expect((await rows("runs")).length).toBe(9);
      expect(await page.$eval("#table4-table tbody tr:last-child", (tr) => tr.textContent)).toContain("40.0 ± 21.9 (2/5)");

      const charts = await page.$$eval("figure.chart", (figs) =>
        figs.map((f) => {
          const svg = f.querySelector("svg")!;
          const box = svg.getBoundingClientRect();
          // Data marks (bars) are the chart library's "chart" elements with a data index; axes, grid and legend are not.
          const marks = [...svg.querySelectorAll("path[ecmeta_ssr_type=chart][ecmeta_data_index], rect[ecmeta_ssr_type=chart][ecmeta_data_index]")].filter((el) => {
            const b = (el as SVGGraphicsElement).getBoundingClientRect();
            return b.width > 0 && b.height > 0;
          });
          return { id: f.id, width: box.width, height: box.height, marks: marks.length, text: svg.textContent ?? "" };
        }),
      );
      expect(charts.map((c) => c.id)).toEqual(["chart-table2", "chart-figure2", "chart-figure4", "chart-figure6"]);
      for (const c of charts) {
        expect(c.width, c.id).toBeGreaterThan(100);
        expect(c.height, c.id).toBeGreaterThan(100);
        expect(c.text, c.id).toContain(c.id === "chart-figure4" ? "numerical" : "alpha");
      }
      // Bars with a non-zero value, from the fixture's facts: Table 2 three rates × two agents (all > 0);
      // Figure 2 Set A and Set B × two agents; Figure 4 five failure types, each met by one agent only;
      // Figure 6 alpha's assertions fall in all five classes, beta's in three.
      expect(Object.fromEntries(charts.map((c) => [c.id, c.marks]))).toEqual({ "chart-table2": 6, "chart-figure2": 4, "chart-figure4": 5, "chart-figure6": 8 });
      // Figure 2's labels carry the SE: alpha's Set A is 3 of 4, sqrt(0.75 · 0.25 / 4) = 21.7 points.
      expect(charts.find((c) => c.id === "chart-figure2")!.text).toContain("75 ± 21.7");
      // In a 2,000 px window Table 2 needs no horizontal scrollbar: its last column (cost total) is on screen.
      await page.setViewportSize({ width: 2000, height: 1000 });
      const fit = await page.$eval("#table2-table", (t) => {
        const scroller = t.parentElement!;
        const header = [...t.querySelectorAll("thead th")];
        const last = header[header.length - 1]!.getBoundingClientRect();
        return { last: header[header.length - 1]!.textContent, right: last.right, window: window.innerWidth, overflow: scroller.scrollWidth - scroller.clientWidth };
      });
      expect(fit.last).toBe("cost total");
      expect(fit.overflow, JSON.stringify(fit)).toBeLessThanOrEqual(0);
      expect(fit.right, JSON.stringify(fit)).toBeLessThanOrEqual(fit.window);
      await page.screenshot({ path: join(process.env.INFRADEV_SCREENSHOTS ?? tmp, "report-2000px.png"), fullPage: false });
      expect(consoleErrors).toEqual([]);
      expect(requests).toEqual([]);
    } finally {
      await browser.close();
    }
  }, 120_000);
});
