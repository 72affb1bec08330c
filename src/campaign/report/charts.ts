import type { ReportData } from "./compute.js";

/**
 * The report's figures as inline SVG, rendered on the server by Apache ECharts (SSR,
 * renderToSVGString: no DOM, no browser, no script in the page). Loaded only for --html.
 */

export interface Chart {
  id: string;
  title: string;
  svg: string;
}

type EChartsOption = Record<string, unknown>;

const WIDTH = 720;
const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f"];

async function render(option: EChartsOption, height: number): Promise<string> {
  const echarts = await import("echarts");
  const chart = echarts.init(null, null, { renderer: "svg", ssr: true, width: WIDTH, height });
  try {
    chart.setOption({ animation: false, color: PALETTE, textStyle: { fontFamily: "sans-serif" }, ...option });
    return chart.renderToSVGString();
  } finally {
    chart.dispose();
  }
}

const pctOf = (p: number | null) => (p === null ? 0 : Math.round(1000 * p) / 10);
const withSe = (p: number | null, se: number | null): Bar => ({ value: pctOf(p), se: se === null ? null : pctOf(se) });

/** A bar's value, and its standard error in the same unit when it has one (shown in its label). */
interface Bar { value: number; se?: number | null }

function barOption(categories: string[], series: Array<{ name: string; data: Array<number | Bar>; stack?: string }>, yName: string, horizontal = false): EChartsOption {
  const cat = { type: "category", data: categories, axisLabel: { interval: 0 } };
  const val = { type: "value", name: yName, nameLocation: "middle", nameGap: 36, minInterval: 1 };
  return {
    legend: { top: 0 },
    grid: { left: horizontal ? 170 : 60, right: 30, top: 40, bottom: 50, containLabel: false },
    xAxis: horizontal ? val : cat,
    // A horizontal chart lists its categories top to bottom, in the table's order.
    yAxis: horizontal ? { ...cat, inverse: true } : val,
    series: series.map((s) => ({
      type: "bar",
      name: s.name,
      data: s.data.map((d) => (typeof d === "number" ? { value: d } : d)),
      stack: s.stack,
      label: {
        show: !s.stack,
        position: horizontal ? "right" : "top",
        formatter: (p: { value: number; data: Bar }) => (typeof p.data.se === "number" ? `${p.value} ± ${p.data.se}` : String(p.value)),
      },
    })),
  };
}

export async function renderCharts(d: ReportData): Promise<Chart[]> {
  const agents = d.table2.map((r) => r.agent);
  const charts: Chart[] = [];
  charts.push({
    id: "chart-table2",
    title: "Table 2: % Resolved and % Passed (Set B) per agent; labels: value ± standard error",
    svg: await render(
      barOption(agents, [
        { name: "% Resolved", data: d.table2.map((r) => withSe(r.resolved.p, r.resolved.se)) },
        { name: "% Resolved strict", data: d.table2.map((r) => withSe(r.resolved_strict.p, r.resolved_strict.se)) },
        { name: "% Passed", data: d.table2.map((r) => withSe(r.passed.mean, r.passed.se)) },
      ], "%"),
      320,
    ),
  });
  charts.push({
    id: "chart-figure2",
    title: "Figure 2: % Resolved with the official tests (Set A) and with the probes (Set B); labels: value ± standard error",
    svg: await render(
      barOption(agents, [
        { name: "Set A (official)", data: d.table4.rows.map((r) => withSe(r.set_a.p, r.set_a.se)) },
        { name: "Set B (with probes)", data: d.table4.rows.map((r) => withSe(r.set_b.p, r.set_b.se)) },
      ], "% Resolved"),
      320,
    ),
  });
  const types = Object.values(d.figure4.classes).flat().filter((t) => d.figure4.rows.some((r) => (r.by_type[t] ?? 0) > 0));
  charts.push({
    id: "chart-figure4",
    title: "Figure 4: submissions with each failure type",
    svg: await render(
      barOption(types.length ? types : ["(no failures)"], d.figure4.rows.map((r) => ({ name: r.agent, data: types.length ? types.map((t) => r.by_type[t] ?? 0) : [0] })), "submissions", true),
      Math.max(220, 60 + 34 * Math.max(1, types.length) * Math.max(1, Math.ceil(agents.length / 2))),
    ),
  });
  charts.push({
    id: "chart-figure6",
    title: "Figure 6: classes of the assertions in the agents' own tests (% of each agent's assertions)",
    svg: await render(
      barOption(
        agents,
        d.figure6.classes.map((c) => ({
          name: c.replace("_", " "),
          stack: "share",
          data: d.figure6.rows.map((r) => (r.assertions ? Math.round((1000 * r.counts[c]) / r.assertions) / 10 : 0)),
        })),
        "% of assertions",
      ),
      320,
    ),
  });
  return charts;
}
